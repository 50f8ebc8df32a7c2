package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// invalidRequests are the refusals admission makes (api/v1alpha1's
// TestAdmissionRefusesBadInput), each with the field it must name. The live test
// checks that the API server refuses every one of them too.
var invalidRequests = []struct {
	name string
	edit func(obj map[string]any, spec map[string]any)
	want []string
}{
	{"missing reason", func(_, s map[string]any) { delete(s, "reason") }, []string{"spec.reason: Required value"}},
	{"too-short reason", func(_, s map[string]any) { s["reason"] = "fix it" }, []string{`spec.reason: Invalid value: "fix it": spec.reason in body should be at least 10 chars long`}},
	{"no target", func(_, s map[string]any) { delete(s, "target") }, []string{"spec.target: Required value"}},
	{"empty target", func(_, s map[string]any) { s["target"] = map[string]any{} }, []string{"spec.target", "exactly one of"}},
	{"two targets", func(_, s map[string]any) {
		s["target"] = map[string]any{"persistentVolume": "pv-1", "pod": map[string]any{"namespace": "app", "name": "web-0"}}
	}, []string{"spec.target", "exactly one of"}},
	{"empty-string target", func(_, s map[string]any) { s["target"] = map[string]any{"persistentVolume": ""} }, []string{"spec.target.persistentVolume"}},
	{"csi remediation on a PV", func(_, s map[string]any) { s["remediation"] = "reregister-csi-driver" }, []string{"spec.target", "reregister-csi-driver needs spec.target.node"}},
	{"lease remediation on a node", func(_, s map[string]any) { s["target"] = map[string]any{"node": "kwok-node-0"} }, []string{"spec.target", "release-luks-lease needs"}},
	{"unknown remediation", func(_, s map[string]any) { s["remediation"] = "delete-everything" }, []string{`spec.remediation: Unsupported value: "delete-everything"`}},
	{"missing remediation", func(_, s map[string]any) { delete(s, "remediation") }, []string{"spec.remediation: Required value"}},
	{"unknown mode", func(_, s map[string]any) { s["mode"] = "Force" }, []string{`spec.mode: Unsupported value: "Force"`}},
	{"malformed window duration", func(_, s map[string]any) {
		s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "two hours"}
	}, []string{`spec.maintenanceWindow.duration: Invalid value: "two hours"`}},
	{"window without schedule", func(_, s map[string]any) { s["maintenanceWindow"] = map[string]any{"duration": "2h"} },
		[]string{"spec.maintenanceWindow.schedule: Required value"}},
	{"fencing confirmed without method", func(_, s map[string]any) { s["fencing"] = map[string]any{"confirmed": true} },
		[]string{"spec.fencing", "spec.fencing.method is required"}},
	{"unknown fencing method", func(_, s map[string]any) { s["fencing"] = map[string]any{"confirmed": true, "method": "Hope"} },
		[]string{`spec.fencing.method: Unsupported value: "Hope"`}},
	{"pvc target without namespace", func(_, s map[string]any) {
		s["target"] = map[string]any{"persistentVolumeClaim": map[string]any{"name": "data"}}
	}, []string{"spec.target.persistentVolumeClaim.namespace: Required value"}},
	{"bad trident namespace", func(_, s map[string]any) { s["tridentNamespace"] = "Trident_NS" }, []string{`spec.tridentNamespace: Invalid value: "Trident_NS"`}},
	{"reason of the wrong type", func(_, s map[string]any) { s["reason"] = int64(42) }, []string{"spec.reason", "must be of type string"}},
	{"bad name", func(o, _ map[string]any) { o["metadata"].(map[string]any)["name"] = "Release_Lease" }, []string{`metadata.name: Invalid value: "Release_Lease"`}},
	// Metadata beyond name and namespace, which plan once did not check (found by
	// TestPlanAgreesWithAdmissionOnTheCorpus).
	{"bad label key", func(o, _ map[string]any) { o["metadata"].(map[string]any)["labels"] = map[string]any{"not a key": "x"} },
		[]string{`metadata.labels: Invalid value: "not a key"`}},
	{"bad label value", func(o, _ map[string]any) {
		o["metadata"].(map[string]any)["labels"] = map[string]any{"team": "not a value!"}
	},
		[]string{`metadata.labels: Invalid value: "not a value!"`}},
	{"bad annotation key", func(o, _ map[string]any) {
		o["metadata"].(map[string]any)["annotations"] = map[string]any{"/ticket": "INC-4711"}
	},
		[]string{`metadata.annotations: Invalid value: "/ticket"`}},
	{"bad finalizer", func(o, _ map[string]any) { o["metadata"].(map[string]any)["finalizers"] = []any{"not a finalizer!"} },
		[]string{`metadata.finalizers: Invalid value: "not a finalizer!"`}},
}

func validRequest(name string) (map[string]any, map[string]any) {
	spec := map[string]any{
		"remediation": "release-luks-lease",
		"target":      map[string]any{"persistentVolume": "pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30"},
		"reason":      "Lease held by a dead node for 40 minutes",
	}
	return map[string]any{
		"apiVersion": "remediator.io/v1alpha1", "kind": "RemediationRequest",
		"metadata": map[string]any{"name": name, "namespace": "remediator"},
		"spec":     spec,
	}, spec
}

func writeYAML(t *testing.T, dir, name string, obj any) string {
	t.Helper()
	data, err := yaml.Marshal(obj)
	require.NoError(t, err)
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// TestPlanRefusesWhatAdmissionRefuses: each refusal names its field and fails the
// plan (exit 1) before any facts are needed.
func TestPlanRefusesWhatAdmissionRefuses(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range invalidRequests {
		t.Run(tc.name, func(t *testing.T) {
			obj, spec := validRequest(fmt.Sprintf("bad-%d", i))
			tc.edit(obj, spec)
			p := writeYAML(t, dir, fmt.Sprintf("bad-%d.yaml", i), obj)
			out, code, _ := runPlanCommand(t, "", "-f", p, "--facts", planTestdata+"facts/shutdown.yaml")
			assert.Equal(t, 1, code, "exit code")
			assert.Contains(t, out, "is invalid (the API server would refuse it):", "output does not say the request is invalid")
			for _, w := range tc.want {
				assert.Contains(t, out, w)
			}
		})
	}
	// And the valid base passes, so that the refusals above are the edits' doing.
	obj, _ := validRequest("good")
	out, code, _ := runPlanCommand(t, "", "-f", writeYAML(t, dir, "good.yaml", obj), "--facts", planTestdata+"facts/shutdown.yaml")
	assert.Equal(t, 0, code, "valid request: exit code; output:\n%s", out)
}
