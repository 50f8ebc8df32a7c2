package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/test/testenv"
)

const planTestdata = "testdata/plan/"

// runPlanCommand runs `remediator plan args...` in-process and returns its stdout and
// the exit code main would give it.
func runPlanCommand(t *testing.T, stdin string, args ...string) (string, int, error) {
	t.Helper()
	cmd := newPlanCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), planExitOf(err), err
}

// planExitOf is main's mapping of plan's error to an exit code.
func planExitOf(err error) int {
	if err == nil {
		return 0
	}
	if code, ok := planExitCode(err); ok {
		return code
	}
	return 1
}

func embeddedDigest(t *testing.T) string {
	t.Helper()
	e, err := policies.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return e.Digest()
}

// TestPlanSavedFacts covers each outcome on saved facts, with the exit code and the
// lines a reviewer reads.
func TestPlanSavedFacts(t *testing.T) {
	digest := embeddedDigest(t)
	facts := []string{"--facts", planTestdata + "facts/shutdown.yaml", "--facts", planTestdata + "facts/unreachable.json", "--facts", planTestdata + "facts/rr-healthy.yaml"}
	cases := []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  []string
		deny  []string
	}{{
		name: "shutdown holder is allowed: node-shutdown deletes the Lease",
		args: []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
		code: 0,
		want: []string{
			"== RemediationRequest remediator/release-lease-shutdown-kwok-node-3 from testdata/plan/shutdown.yaml (document 1)",
			"decision:  ALLOWED by rule holder-shutdown: playbook node-shutdown (phase Running)",
			"- holder node kwok-node-3 is shut down: Ready=Unknown for 35m0s; taints node.kubernetes.io/out-of-service,node.kubernetes.io/unreachable",
			"steps:     1. deleteLease\n",
			"policy:    " + digest + " (embedded)",
			"exit code: 0",
			"Summary: 1 allowed, 0 rejected, 0 would wait, 0 failed; exit code 0 (every request would be allowed)",
		},
		deny: []string{"2. "},
	}, {
		name: "unreachable holder without fencing is rejected and told what to do",
		args: []string{"-f", planTestdata + "unreachable-not-fenced.yaml", "--facts", planTestdata + "facts/unreachable.json"},
		code: ExitPlanRejected,
		want: []string{
			"decision:  REJECTED by rule unreachable-not-fenced (phase Rejected)",
			"- spec.fencing.confirmed is not true",
			"Shut the node down (preferred;",
			"set spec.fencing.confirmed: true, spec.fencing.method and spec.fencing.node: kwok-node-2",
			"steps:     none",
			"exit code: 2",
		},
	}, {
		name: "fenced holder outside its maintenance window would wait",
		args: []string{"-f", planTestdata + "fenced-window.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-19T12:00:00Z"},
		code: ExitPlanWaiting,
		want: []string{
			"decision:  WOULD WAIT by rule unreachable-fenced: playbook fenced-unreachable (phase Waiting)",
			"- fencing of kwok-node-2 confirmed (NodeShutdown)",
			"steps:     1. deleteLease",
			"which is closed at 2026-11-19T12:00:00Z and opens at 2026-11-20T02:00:00Z",
			"Summary: 0 allowed, 0 rejected, 1 would wait, 0 failed; exit code 4 (a request would wait)",
		},
	}, {
		name: "fenced holder inside its maintenance window is allowed",
		args: []string{"-f", planTestdata + "fenced-window.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-20T03:30:00Z"},
		code: 0,
		want: []string{
			"decision:  ALLOWED by rule unreachable-fenced: playbook fenced-unreachable (phase Running)",
			"The maintenance window (0 2 * * * for 2h0m0s) is open at 2026-11-20T03:30:00Z",
		},
	}, {
		name: "dry run with a whole request's status.facts: allowed, changes nothing",
		args: []string{"-f", planTestdata + "dryrun.yaml", "--facts", planTestdata + "facts/rr-healthy.yaml"},
		code: 0,
		want: []string{
			"facts:     testdata/plan/facts/rr-healthy.yaml (document 1), RemediationRequest remediator/release-lease-app-data, gathered at 2026-11-19T06:30:00Z",
			"pod       app/web-0 Running on kwok-node-1",
			"decision:  ALLOWED by rule healthy-lease-stuck: playbook healthy-move-workload (phase Pending)",
			"steps:     1. cordon\n             2. deleteAffectedPods\n             3. waitPodsGone\n             4. deleteLease\n             5. uncordon\n",
			"note:      spec.mode is DryRun",
		},
	}, {
		name: "several requests: worst exit code wins, output sorted by name",
		args: append([]string{"-f", planTestdata + "multi.yaml"}, facts...),
		code: ExitPlanRejected,
		want: []string{
			"remediator/release-lease-kwok-node-2 from testdata/plan/multi.yaml (document 2)",
			"remediator/release-lease-shutdown-kwok-node-3 from testdata/plan/multi.yaml (document 3)",
			"Summary: 1 allowed, 1 rejected, 0 would wait, 0 failed; exit code 2",
		},
	}, {
		name: "a rejection and a wait: 2 beats 4",
		args: append([]string{"-f", planTestdata + "fenced-window.yaml", "-f", planTestdata + "unreachable-not-fenced.yaml", "--at", "2026-11-19T12:00:00Z"}, facts...),
		code: ExitPlanRejected,
		want: []string{"Summary: 0 allowed, 1 rejected, 1 would wait, 0 failed; exit code 2"},
	}, {
		name: "an invalid request beats a rejection; the others are still planned",
		args: append([]string{"-f", planTestdata + "unreachable-not-fenced.yaml", "-f", planTestdata + "malformed.yaml", "-f", planTestdata + "shutdown.yaml"}, facts...),
		code: 1,
		want: []string{
			"REJECTED by rule unreachable-not-fenced",
			"ALLOWED by rule holder-shutdown",
			"error:     testdata/plan/malformed.yaml (document 1): malformed YAML: yaml: line 8",
			"Summary: 1 allowed, 1 rejected, 0 would wait, 1 failed; exit code 1 (a request could not be planned)",
		},
	}, {
		name:  "request from stdin",
		args:  []string{"-f", "-", "--facts", planTestdata + "facts/shutdown.yaml"},
		stdin: mustRead(t, planTestdata+"shutdown.yaml"),
		code:  0,
		want:  []string{"remediator/release-lease-shutdown-kwok-node-3 from - (document 1)", "ALLOWED by rule holder-shutdown"},
	}, {
		name:  "facts from stdin",
		args:  []string{"-f", planTestdata + "unreachable-not-fenced.yaml", "--facts", "-"},
		stdin: mustRead(t, planTestdata+"facts/unreachable.json"),
		code:  ExitPlanRejected,
		want:  []string{"facts:     - (document 1), gathered at 2026-11-19T06:30:00Z", "REJECTED by rule unreachable-not-fenced"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code, _ := runPlanCommand(t, tc.stdin, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, d := range tc.deny {
				if strings.Contains(out, d) {
					t.Errorf("output has %q", d)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// TestPlanErrors: plan itself fails (exit 1) with a message naming the file or flag.
func TestPlanErrors(t *testing.T) {
	emptyDir := t.TempDir()
	cases := []struct {
		name string
		args []string
		// inOutput is looked for in the report (per-request problems); inErr in the
		// returned error (problems that stop the whole plan).
		inOutput, inErr string
	}{
		{"malformed YAML", []string{"-f", planTestdata + "malformed.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			"testdata/plan/malformed.yaml (document 1): malformed YAML", ""},
		{"no document", []string{"-f", planTestdata + "empty.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			"testdata/plan/empty.yaml holds no YAML document", ""},
		{"wrong kind", []string{"-f", planTestdata + "wrong-kind.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			`testdata/plan/wrong-kind.yaml (document 1): v1 ConfigMap named "release-lease" is not a remediator.io/v1alpha1 RemediationRequest`, ""},
		{"unknown field", []string{"-f", planTestdata + "unknown-field.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			"testdata/plan/unknown-field.yaml (document 1): RemediationRequest remediator/release-lease-typo is invalid (the API server would refuse it):\n             unknown field \"spec.fencing.confirmedBy\"", ""},
		{"unreadable request file", []string{"-f", planTestdata + "missing.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			"reading -f testdata/plan/missing.yaml: open testdata/plan/missing.yaml: no such file or directory", ""},
		{"no saved facts for the target", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/unreachable.json"},
			"no saved facts for PersistentVolume pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30: the --facts given are for PersistentVolume pvc-3f1c2a9e-5b7d-4c1e-9a0f-2d6b8e4c7a15", ""},
		{"missing facts file", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/missing.yaml"},
			"", "reading --facts testdata/plan/facts/missing.yaml: open testdata/plan/facts/missing.yaml: no such file or directory"},
		{"facts with an unknown field", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/typo.yaml"},
			"", `--facts testdata/plan/facts/typo.yaml: testdata/plan/facts/typo.yaml (document 1): decoding facts: unknown field "target.fund"`},
		{"facts from a request without status.facts", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "shutdown.yaml"},
			"", `--facts testdata/plan/shutdown.yaml: testdata/plan/shutdown.yaml (document 1): RemediationRequest remediator/release-lease-shutdown-kwok-node-3 has no status.facts`},
		{"facts that are not facts", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "wrong-kind.yaml"},
			"", `v1 ConfigMap named "release-lease" is neither a Facts document nor a RemediationRequest with status.facts`},
		{"policies that do not compile", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--policies-dir", planTestdata + "bad-policies"},
			"", "loading policies from testdata/plan/bad-policies: loading policies:"},
		{"policies dir without policies", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--policies-dir", emptyDir},
			"", "no .cue policy files found"},
		{"bad --at", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--at", "tonight"},
			"", `parsing --at "tonight"`},
		{"unknown output", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "-o", "yaml"},
			"", `unknown --output "yaml"`},
		{"no -f", []string{"--facts", planTestdata + "facts/shutdown.yaml"}, "", `required flag(s) "filename" not set`},
		{"--facts and --kubeconfig", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--kubeconfig", "k"},
			"", "none of the others can be"},
		{"stdin twice", []string{"-f", "-", "--facts", "-"}, "", "stdin (-) can be read only once"},
		{"an invalid request needs no cluster", []string{"-f", planTestdata + "unknown-field.yaml", "--kubeconfig", filepath.Join(emptyDir, "kubeconfig")},
			`unknown field "spec.fencing.confirmedBy"`, ""},
		{"API unreachable", []string{"-f", planTestdata + "shutdown.yaml", "--kubeconfig", filepath.Join(emptyDir, "kubeconfig")},
			"", "loading kubeconfig"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code, err := runPlanCommand(t, "", tc.args...)
			if code != 1 {
				t.Fatalf("exit code %d, want 1 (err %v); output:\n%s", code, err, out)
			}
			if tc.inOutput != "" && !strings.Contains(out, tc.inOutput) {
				t.Errorf("output lacks %q:\n%s", tc.inOutput, out)
			}
			if tc.inErr != "" && (err == nil || !strings.Contains(err.Error(), tc.inErr)) {
				t.Errorf("error %v lacks %q", err, tc.inErr)
			}
		})
	}
}

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
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
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
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if !strings.Contains(out, "is invalid (the API server would refuse it):") {
				t.Errorf("output does not say the request is invalid:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	// And the valid base passes, so that the refusals above are the edits' doing.
	obj, _ := validRequest("good")
	out, code, _ := runPlanCommand(t, "", "-f", writeYAML(t, dir, "good.yaml", obj), "--facts", planTestdata+"facts/shutdown.yaml")
	if code != 0 {
		t.Errorf("valid request: exit code %d, want 0:\n%s", code, out)
	}
}

// TestPlanPoliciesDir: an override directory is what decides. The override makes
// fenced Leases wait an hour instead of 5 minutes, so the 40-minute-old Lease that
// the embedded policies release is rejected.
func TestPlanPoliciesDir(t *testing.T) {
	dir := t.TempDir()
	srcs, err := filepath.Glob("../../policies/*.cue")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no policies found (%v)", err)
	}
	for _, src := range srcs {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.Replace(data, []byte("#UnreachableMinLeaseAgeSeconds: 300"), []byte("#UnreachableMinLeaseAgeSeconds: 3600"), 1)
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-f", planTestdata + "fenced-window.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-20T03:00:00Z"}
	if out, code, _ := runPlanCommand(t, "", args...); code != 0 || !strings.Contains(out, "ALLOWED by rule unreachable-fenced") {
		t.Fatalf("embedded policies: exit code %d, want 0:\n%s", code, out)
	}
	out, code, _ := runPlanCommand(t, "", append(args, "--policies-dir", dir)...)
	if code != ExitPlanRejected {
		t.Errorf("override: exit code %d, want 2", code)
	}
	for _, w := range []string{
		"REJECTED by rule unreachable-lease-too-young",
		"the request becomes eligible in 1200s",
		"(the controller decides again after 1200s, on fresh facts)",
		"(" + dir + ")",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, embeddedDigest(t)) {
		t.Errorf("the override's digest is the embedded one")
	}
}

// TestPlanJSON pins the machine-readable shape and that it is deterministic.
func TestPlanJSON(t *testing.T) {
	args := []string{"-o", "json", "-f", planTestdata + "multi.yaml", "-f", planTestdata + "wrong-kind.yaml",
		"--facts", planTestdata + "facts/shutdown.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-19T12:00:00Z"}
	out, code, _ := runPlanCommand(t, "", args...)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	again, _, _ := runPlanCommand(t, "", args...)
	if again != out {
		t.Errorf("output differs between two runs")
	}

	var r planReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("decoding: %v\n%s", err, out)
	}
	if r.ExitCode != 1 || r.FactsSource != "saved" || r.At != "2026-11-19T12:00:00Z" ||
		r.Policy.Source != "embedded" || r.Policy.Digest != embeddedDigest(t) {
		t.Errorf("report header = %+v", r)
	}
	if r.Summary != (planSummary{Allowed: 1, Rejected: 1, Failed: 1}) {
		t.Errorf("summary = %+v", r.Summary)
	}
	if len(r.Requests) != 3 {
		t.Fatalf("want 3 results, got %d", len(r.Requests))
	}
	// Sorted: the unnamed wrong-kind document first, then by name.
	bad, unreach, shut := r.Requests[0], r.Requests[1], r.Requests[2]
	if bad.ExitCode != 1 || bad.Decision != nil || len(bad.Errors) != 1 || bad.Request.Source != planTestdata+"wrong-kind.yaml" {
		t.Errorf("wrong-kind result = %+v", bad)
	}
	if unreach.Request.Name != "release-lease-kwok-node-2" || unreach.Request.Document != 2 || unreach.ExitCode != 2 ||
		unreach.Decision.Outcome != "rejected" || unreach.Decision.Rule != "unreachable-not-fenced" || unreach.Decision.Phase != v1alpha1.PhaseRejected ||
		len(unreach.Steps) != 0 || unreach.Facts.Node.State != v1alpha1.NodeUnreachable || unreach.Request.Spec.Mode != v1alpha1.ModeApply {
		t.Errorf("unreachable result = %+v", unreach)
	}
	if shut.Request.Name != "release-lease-shutdown-kwok-node-3" || shut.ExitCode != 0 || shut.Decision.Outcome != "allowed" ||
		shut.Decision.Playbook != "node-shutdown" || shut.Decision.PolicyDigest != r.Policy.Digest ||
		strings.Join(shut.Steps, ",") != "deleteLease" || shut.FactsFrom != planTestdata+"facts/shutdown.yaml (document 1)" {
		t.Errorf("shutdown result = %+v", shut)
	}

	// The field names tools rely on.
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	first := raw["requests"].([]any)[2].(map[string]any)
	for _, k := range []string{"request", "factsFrom", "facts", "conflicts", "decision", "steps", "notes", "exitCode"} {
		if _, ok := first[k]; !ok {
			t.Errorf("result has no %q field: %v", k, first)
		}
	}
	decision := first["decision"].(map[string]any)
	for _, k := range []string{"outcome", "phase", "allowed", "wait", "rule", "playbook", "reasons", "message", "policyDigest"} {
		if _, ok := decision[k]; !ok {
			t.Errorf("decision has no %q field: %v", k, decision)
		}
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// writeKubeconfig writes a kubeconfig for an envtest rest.Config, as an operator's
// read-only kubeconfig would be passed to plan.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// liveWorld creates cluster objects the way kubelet, kube-controller-manager and
// Trident would leave them; envtest runs no controllers, so status is written directly.
type liveWorld struct {
	t *testing.T
	c client.Client
}

func (w *liveWorld) create(obj client.Object) {
	w.t.Helper()
	ctx := context.Background()
	var status func()
	switch o := obj.(type) {
	case *corev1.Node:
		s := o.Status
		status = func() { o.Status = s }
	case *corev1.Pod:
		s := o.Status
		status = func() { o.Status = s }
	}
	if err := w.c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		w.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	if status != nil {
		status()
		if err := w.c.Status().Update(ctx, obj); err != nil {
			w.t.Fatalf("updating status of %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

func (w *liveWorld) node(name string, ready corev1.ConditionStatus, taints []string, renewedAgo time.Duration) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoExecute})
	}
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(time.Now().Add(-30 * time.Minute)),
	}}
	w.create(n)
	if renewedAgo >= 0 {
		w.create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-renewedAgo)))},
		})
	}
}

// volume creates a bound LUKS PV and PVC and the Lease Trident retained on it.
func (w *liveWorld) volume(pv, ns, pvc, holder string, retained int) {
	w.create(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:    &corev1.ObjectReference{Namespace: ns, Name: pvc},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "csi.trident.netapp.io", VolumeHandle: pv, VolumeAttributes: map[string]string{"luksEncryption": "true"},
			}},
		},
	})
	w.create(&corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pvc},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
			VolumeName:  pv,
		},
	})
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder),
			AcquireTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-40 * time.Minute)))},
	}
	w.create(l)
	for i := range retained {
		w.create(&corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: fmt.Sprintf("%s.retained-%d", pv, i)},
			InvolvedObject: corev1.ObjectReference{
				APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: "trident", Name: pv, UID: l.UID,
			},
			Reason: "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1,
			Message:        fmt.Sprintf("Retaining lease after failed LUKS operation on %s: cryptsetup luksOpen exited with status 5 (attempt %d)", holder, i+1),
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
			Source: corev1.EventSource{Component: "trident-node", Host: holder},
		})
	}
}

// TestPlanLiveFacts runs plan against a real API server (envtest) with a kubeconfig,
// as a PR check with read-only credentials would. It starts its own control plane so
// that the offline tests of this package need none.
func TestPlanLiveFacts(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := writeKubeconfig(t, env.Config)
	ctx := context.Background()
	w := &liveWorld{t: t, c: env.Client}
	for _, ns := range []string{"trident", "app", "remediator"} {
		w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	// The demo's incident A: kwok-node-3 powered off, kwok-node-2 cut off, kwok-node-1
	// healthy with a workload on the stuck volume.
	w.node("kwok-node-3", corev1.ConditionUnknown, []string{v1alpha1.TaintOutOfService, v1alpha1.TaintUnreachable}, -1)
	w.volume("pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30", "app", "archive", "kwok-node-3", 0)
	w.node("kwok-node-2", corev1.ConditionUnknown, []string{v1alpha1.TaintUnreachable}, 3*time.Minute)
	w.volume("pvc-3f1c2a9e-5b7d-4c1e-9a0f-2d6b8e4c7a15", "app", "reports", "kwok-node-2", 0)
	w.node("kwok-node-1", corev1.ConditionTrue, nil, time.Second)
	w.volume("pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", "app", "data", "kwok-node-1", 3)
	w.create(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-0"},
		Spec: corev1.PodSpec{NodeName: "kwok-node-1", Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1.4"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	})

	live := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		out, code, err := runPlanCommand(t, "", append(args, "--kubeconfig", kubeconfig)...)
		t.Logf("exit code %d (err %v), output:\n%s", code, err, out)
		return out, code
	}
	expect := func(t *testing.T, out string, want ...string) {
		t.Helper()
		for _, s := range want {
			if !strings.Contains(out, s) {
				t.Errorf("output lacks %q", s)
			}
		}
	}

	t.Run("shutdown holder allowed", func(t *testing.T) {
		out, code := live(t, "-f", planTestdata+"shutdown.yaml")
		if code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
		expect(t, out, "facts:     live, gathered at",
			"node      kwok-node-3 Shutdown (Ready=Unknown for 30m",
			"taints node.kubernetes.io/out-of-service,node.kubernetes.io/unreachable; no node Lease in kube-node-lease)",
			"ALLOWED by rule holder-shutdown: playbook node-shutdown (phase Running)", "steps:     1. deleteLease")
	})
	t.Run("unreachable holder rejected", func(t *testing.T) {
		out, code := live(t, "-f", planTestdata+"unreachable-not-fenced.yaml")
		if code != ExitPlanRejected {
			t.Errorf("exit code %d, want 2", code)
		}
		expect(t, out, "node      kwok-node-2 Unreachable", "REJECTED by rule unreachable-not-fenced", "set spec.fencing.confirmed: true")
	})
	t.Run("healthy holder allowed, then waits for a running request on the same Lease", func(t *testing.T) {
		out, code := live(t, "-o", "json", "-f", planTestdata+"dryrun.yaml")
		if code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
		var r planReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		res := r.Requests[0]
		if r.FactsSource != "live" || res.FactsFrom != "live" || res.Decision.Rule != "healthy-lease-stuck" ||
			len(res.Facts.AffectedPods) != 1 || res.Facts.AffectedPods[0].Name != "web-0" || res.Facts.Lease.RetainedEvents != 3 || len(res.Steps) != 5 {
			t.Errorf("result = %+v", res)
		}

		// Another request on the same Lease is Running, as the controller records it.
		running := &v1alpha1.RemediationRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "release-lease-pvc-75a6fd7f"},
			Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
				Target: v1alpha1.Target{PersistentVolume: "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"}, Reason: "Pods of app/db are stuck in ContainerCreating"},
		}
		if err := env.Client.Create(ctx, running); err != nil {
			t.Fatal(err)
		}
		running.Status = v1alpha1.RemediationRequestStatus{Phase: v1alpha1.PhaseRunning, Facts: res.Facts}
		if err := env.Client.Status().Update(ctx, running); err != nil {
			t.Fatal(err)
		}
		out, code = live(t, "-f", planTestdata+"dryrun.yaml")
		if code != ExitPlanWaiting {
			t.Errorf("exit code %d, want 4", code)
		}
		expect(t, out, "conflict  remediator/release-lease-pvc-75a6fd7f (Running, on Lease trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e)",
			"WOULD WAIT by rule one-remediation-at-a-time (phase Waiting)")

		// Planning the running request itself: not its own conflict, and the reviewer
		// is told that a change to it would not be decided again.
		obj, spec := validRequest("release-lease-pvc-75a6fd7f")
		spec["target"] = map[string]any{"persistentVolume": "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"}
		out, code = live(t, "-f", writeYAML(t, t.TempDir(), "self.yaml", obj))
		if code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
		expect(t, out, "ALLOWED by rule healthy-lease-stuck", "already exists and is Running: applying this file changes its spec but it is not decided again")
	})
	t.Run("API unreachable", func(t *testing.T) {
		cfg := rest.CopyConfig(env.Config)
		cfg.Host = "https://127.0.0.1:1"
		_, code, err := runPlanCommand(t, "", "-f", planTestdata+"shutdown.yaml", "--kubeconfig", writeKubeconfig(t, cfg))
		if code != 1 {
			t.Errorf("exit code %d, want 1 (err %v)", code, err)
		}
	})

	// plan's field checks and the API server's admission agree on every refusal.
	t.Run("admission agrees", func(t *testing.T) {
		for i, tc := range invalidRequests {
			obj, spec := validRequest(fmt.Sprintf("admission-%d", i))
			tc.edit(obj, spec)
			err := env.Client.Create(ctx, &unstructured.Unstructured{Object: obj}, client.DryRunAll)
			if err == nil {
				t.Errorf("%s: the API server accepted it", tc.name)
				continue
			}
			for _, w := range tc.want[:1] {
				field := strings.SplitN(w, ":", 2)[0]
				if !strings.Contains(err.Error(), field) {
					t.Errorf("%s: API server error %q does not name %s", tc.name, err, field)
				}
			}
		}
		obj, _ := validRequest("admission-ok")
		if err := env.Client.Create(ctx, &unstructured.Unstructured{Object: obj}, client.DryRunAll); err != nil {
			t.Errorf("valid request refused: %v", err)
		}
	})
}
