package chart_test

// This file owns the settings ConfigMap (<fullname>-settings): the controller's
// settings that `remediator plan` reads too, and how the Deployment takes them from it.

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/remediator/remediator/test/harness/helmchart"
)

// settingFlags are the controller flags plan must agree on; each is set by a value,
// but pause-configmap, which is the release namespace's remediator-pause.
var settingFlags = map[string]string{
	"allowed-trident-namespaces":  "trident.allowedNamespaces",
	"pause-configmap":             "",
	"trident-namespace":           "trident.namespace",
	"driver-name":                 "trident.driverName",
	"node-plugin-selector":        "trident.nodePluginSelector",
	"node-lease-grace-period":     "nodeLeaseGracePeriod",
	"max-concurrent-remediations": "maxConcurrentRemediations",
	"floor-unreachable-lease-age": "safetyFloor.unreachableLeaseAge",
	"floor-healthy-lease-age":     "safetyFloor.healthyLeaseAge",
}

func settingsConfigMap(t *testing.T, objs []*unstructured.Unstructured) *corev1.ConfigMap {
	t.Helper()
	return typed[corev1.ConfigMap](t, find(objs, "ConfigMap", namespace, release+"-settings"))
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// controllerArgs are the controller container's arguments as the kubelet passes them:
// each $(VAR) of a variable taken from a ConfigMap of the release is replaced by that
// ConfigMap's value (the pod's own fields, such as POD_NAMESPACE, stay as they are).
func controllerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	c := deployment(t, objs).Spec.Template.Spec.Containers[0]
	values := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		cm := typed[corev1.ConfigMap](t, find(objs, "ConfigMap", namespace, ref.Name))
		v, ok := cm.Data[ref.Key]
		require.True(t, ok, "env %s: ConfigMap %s has no key %s", e.Name, ref.Name, ref.Key)
		values[e.Name] = v
	}
	out := make([]string, 0, len(c.Args))
	for _, a := range c.Args {
		out = append(out, envRef.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := values[envRef.FindStringSubmatch(m)[1]]; ok {
				return v
			}
			return m
		}))
	}
	return out
}

// TestSettingsConfigMap: the ConfigMap holds exactly the settings plan reads, and the
// controller runs with exactly its values: each flag is a $(VAR) of a variable taken
// from it, never a literal the two could disagree on.
func TestSettingsConfigMap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   map[string]string
	}{{
		name: "defaults",
		want: map[string]string{
			"trident-namespace": "trident", "driver-name": "csi.trident.netapp.io",
			"node-plugin-selector": "app=node.csi.trident.netapp.io", "node-lease-grace-period": "50s",
			"max-concurrent-remediations": "2", "floor-unreachable-lease-age": "5m", "floor-healthy-lease-age": "10m",
			"allowed-trident-namespaces": "", "pause-configmap": namespace + "/remediator-pause",
		},
	}, {
		name: "values",
		values: map[string]any{
			"trident": map[string]any{"namespace": "netapp-trident", "driverName": "csi.example.com",
				"nodePluginSelector": "app in (trident-node, trident-node-linux)", "allowedNamespaces": []any{"netapp-b"}},
			"nodeLeaseGracePeriod": "40s", "maxConcurrentRemediations": 1,
			"safetyFloor": map[string]any{"unreachableLeaseAge": "30s", "healthyLeaseAge": "1m", "belowRunbook": true},
		},
		want: map[string]string{
			"trident-namespace": "netapp-trident", "driver-name": "csi.example.com",
			"node-plugin-selector": "app in (trident-node, trident-node-linux)", "node-lease-grace-period": "40s",
			"max-concurrent-remediations": "1", "floor-unreachable-lease-age": "30s", "floor-healthy-lease-age": "1m",
			"allowed-trident-namespaces": "netapp-b", "pause-configmap": namespace + "/remediator-pause",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.values)
			cm := settingsConfigMap(t, objs)
			assert.Equal(t, tc.want, cm.Data, "the settings ConfigMap's data")
			c := deployment(t, objs).Spec.Template.Spec.Containers[0]
			for flag := range settingFlags {
				env := "SETTING_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
				assert.Contains(t, c.Args, "--"+flag+"=$("+env+")", "--%s must come from the ConfigMap", flag)
				assert.Contains(t, c.Env, corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: release + "-settings"}, Key: flag}}}, "env %s", env)
				assert.Contains(t, controllerArgs(t, objs), "--"+flag+"="+tc.want[flag], "the controller's --%s", flag)
			}
		})
	}
}

// TestSettingsChecksumRollsThePods: the controller reads its settings once, at
// start-up, so a helm upgrade that changes one must change the pod template.
func TestSettingsChecksumRollsThePods(t *testing.T) {
	checksum := func(values map[string]any) string {
		t.Helper()
		a := deployment(t, render(t, values)).Spec.Template.Annotations["checksum/settings"]
		require.NotEmpty(t, a, "no checksum/settings annotation on the pod template")
		return a
	}
	base := checksum(nil)
	assert.Equal(t, base, checksum(map[string]any{"logLevel": 2}), "a value that is no setting changed the checksum")
	for _, values := range []map[string]any{
		{"trident": map[string]any{"namespace": "netapp-trident"}},
		{"maxConcurrentRemediations": 3},
		{"safetyFloor": map[string]any{"healthyLeaseAge": "20m"}},
	} {
		assert.NotEqual(t, base, checksum(values), "values %v: the pods would not restart", values)
	}
	// podAnnotations still reach the pods beside it.
	a := deployment(t, render(t, map[string]any{"podAnnotations": map[string]any{"example.com/team": "storage"}})).Spec.Template.Annotations
	assert.Equal(t, "storage", a["example.com/team"], "podAnnotations")
	assert.Equal(t, base, a["checksum/settings"], "checksum beside podAnnotations")
}

// TestExtraArgsCannotSetSettings: a setting passed in extraArgs would win over the
// ConfigMap's (the last flag wins) and plan would decide on another value; the chart
// refuses it and names the value to set. Other flags pass. (pause-configmap has no
// value: TestExtraArgsCannotStepAroundTheGuards.)
func TestExtraArgsCannotSetSettings(t *testing.T) {
	for flag, value := range settingFlags {
		if value == "" {
			continue
		}
		for _, arg := range []string{"--" + flag + "=1m", "--" + flag, "-" + flag + "=x"} {
			_, err := helmchart.Render(release, namespace, map[string]any{"extraArgs": []any{arg}})
			if assert.Error(t, err, "extraArgs %q rendered", arg) {
				assert.ErrorContains(t, err, "extraArgs: \""+arg+"\" sets --"+flag+", one of the settings the controller takes from the ConfigMap "+release+"-settings")
				assert.ErrorContains(t, err, "set the value "+value+" instead")
			}
		}
	}
	args := deployment(t, render(t, map[string]any{"extraArgs": []any{"--pprof-bind-address=:6060", "--trident-namespace-is-not-a-flag", "trident-namespace"}})).Spec.Template.Spec.Containers[0].Args
	assert.Equal(t, []string{"--pprof-bind-address=:6060", "--trident-namespace-is-not-a-flag", "trident-namespace"}, args[len(args)-3:], "other extraArgs pass, last")
}

// TestSettingsValuesNameEveryFlag: the chart's table of settings (the ConfigMap's
// keys) is this test's; a setting added to one and not the other fails here.
func TestSettingsValuesNameEveryFlag(t *testing.T) {
	cm := settingsConfigMap(t, render(t, nil))
	var keys, flags []string
	for k := range cm.Data {
		keys = append(keys, k)
	}
	for f := range settingFlags {
		flags = append(flags, f)
	}
	slices.Sort(keys)
	slices.Sort(flags)
	assert.Equal(t, flags, keys)
}

// TestSafetyFloorBelowTheRunbookIsRefused: the chart renders no minimum below the
// runbook's 5m and 10m unless safetyFloor.belowRunbook says so (a test cluster), and
// then the admission policy leaves out the runbook's minimums, which would refuse
// its own ConfigMap, and keeps the structural bounds (admission_test.go).
func TestSafetyFloorBelowTheRunbookIsRefused(t *testing.T) {
	for _, floor := range []map[string]any{{"unreachableLeaseAge": "4m59s"}, {"healthyLeaseAge": "9m"}} {
		_, err := helmchart.Render(release, namespace, map[string]any{"safetyFloor": floor})
		assert.ErrorContains(t, err, "below the runbook's", "%v", floor)
	}
	minimums := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) (n int) {
		for _, v := range p.Spec.Validations {
			if strings.Contains(v.Message, "may not be below") {
				n++
			}
		}
		return n
	}
	lab := policy(t, render(t, map[string]any{"safetyFloor": map[string]any{"unreachableLeaseAge": "30s", "belowRunbook": true}}), release+"-settings-floor")
	assert.Zero(t, minimums(lab), "belowRunbook: no runbook minimums")
	assert.NotEmpty(t, lab.Spec.Validations, "belowRunbook: the structural bounds stay")
	assert.Equal(t, 3, minimums(policy(t, render(t, nil), release+"-settings-floor")), "by default: the two Lease ages and the grace")
}
