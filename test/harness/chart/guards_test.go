package chart_test

// The chart's guards cannot be stepped around by values: extraArgs cannot override
// a flag the chart's bindings, Roles and admission policies are rendered from, the
// settings render only within the bounds the settings-floor admission policy keeps
// in the ConfigMap, and every Trident namespace a request may name gets the
// controller's Role. What the policies decide on a real API server is in
// admission_test.go and pause_test.go.

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/remediator/remediator/test/harness/helmchart"
)

// TestExtraArgsCannotStepAroundTheGuards: a flag given in extraArgs wins over the
// chart's (the last one wins), so each flag a guard is rendered from is refused
// there, with the value to set instead; the rest pass.
func TestExtraArgsCannotStepAroundTheGuards(t *testing.T) {
	for _, tc := range []struct {
		arg, flag string
		want      string // what the refusal names
	}{
		{"--request-namespaces=team-c", "request-namespaces", "set requestNamespaces (or watchAllNamespaces) instead"},
		{"--request-namespaces", "request-namespaces", "admission binding " + release + "-git-writers"},
		{"--watch-all-namespaces", "watch-all-namespaces", "set requestNamespaces (or watchAllNamespaces) instead"},
		{"--pause-configmap=default/my-pause", "pause-configmap", "the pause ConfigMap is " + namespace + "/remediator-pause"},
		{"--leader-elect=false", "leader-elect", "the chart always elects a leader"},
		{"--leader-elect", "leader-elect", "set replicaCount instead"},
		{"-leader-elect=false", "leader-elect", "set replicaCount instead"},
		{"--leader-election-namespace=default", "leader-election-namespace", "Role " + release + "-leader-election"},
		{"--leader-elect-lease-duration=1s", "leader-elect-lease-duration", "the chart always elects a leader"},
		{"--allowed-trident-namespaces=tenant-a", "allowed-trident-namespaces", "set the value trident.allowedNamespaces instead"},
		{"--policies-dir=/tmp", "policies-dir", "set policies, policiesConfigMap or sync.policies.enabled instead"},
		{"--metrics-secure=false", "metrics-secure", "set metrics.enabled, metrics.port and metrics.secure instead"},
		{"--metrics-bind-address=:9999", "metrics-bind-address", "ClusterRole " + release + "-metrics-reader"},
		{"--as=system:serviceaccount:" + namespace + ":" + release + "-sync", "as", "ServiceAccount " + release + ","},
		{"--kubeconfig=/tmp/admin.conf", "kubeconfig", "set serviceAccount.name"},
		{"--token=abc", "token", "set serviceAccount.name"},
		{"-s=https://192.0.2.1:6443", "s", "KUBERNETES_SERVICE_HOST"},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			_, err := helmchart.Render(release, namespace, map[string]any{"extraArgs": []any{"--pprof-bind-address=:6060", tc.arg}})
			if assert.Error(t, err, "extraArgs %q rendered", tc.arg) {
				assert.ErrorContains(t, err, "extraArgs: \""+tc.arg+"\" sets --"+tc.flag)
				assert.ErrorContains(t, err, tc.want)
			}
		})
	}
	args := deployment(t, render(t, map[string]any{"extraArgs": []any{"--pprof-bind-address=:6060", "--step-timeout=1m", "leader-elect"}})).Spec.Template.Spec.Containers[0].Args
	assert.Equal(t, []string{"--pprof-bind-address=:6060", "--step-timeout=1m", "leader-elect"}, args[len(args)-3:], "other extraArgs pass, last")
}

// TestSettingsOutOfBoundsDoNotRender: what the settings-floor admission policy
// refuses in the ConfigMap, the chart does not render into it either; the runbook's
// minimums give way to safetyFloor.belowRunbook, the structural bounds never do.
func TestSettingsOutOfBoundsDoNotRender(t *testing.T) {
	below := map[string]any{"belowRunbook": true}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"grace below the node Lease", map[string]any{"nodeLeaseGracePeriod": "39s"}, "nodeLeaseGracePeriod 39s is below 40s, the kubelet's default node Lease duration"},
		{"grace of a millisecond", map[string]any{"nodeLeaseGracePeriod": "1ms"}, "nodeLeaseGracePeriod 1ms is below 40s"},
		{"grace zero, below the runbook", map[string]any{"nodeLeaseGracePeriod": "0s", "safetyFloor": below}, `nodeLeaseGracePeriod "0s" is not a positive Go duration`},
		{"floor zero, below the runbook", map[string]any{"safetyFloor": map[string]any{"belowRunbook": true, "unreachableLeaseAge": "0s"}}, `safetyFloor.unreachableLeaseAge "0s" is not a positive Go duration`},
		{"no cap", map[string]any{"maxConcurrentRemediations": 0}, "maxConcurrentRemediations"},
		{"an empty driver", map[string]any{"trident": map[string]any{"driverName": " "}}, "driverName"},
		{"an empty selector", map[string]any{"trident": map[string]any{"nodePluginSelector": ""}}, "nodePluginSelector"},
		{"a Trident namespace that is no namespace", map[string]any{"trident": map[string]any{"namespace": "Trident_NS"}}, "namespace"},
		{"allowed namespaces that are no namespaces", map[string]any{"trident": map[string]any{"allowedNamespaces": []any{"team-a,team-b"}}}, "allowedNamespaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmchart.Render(release, namespace, tc.values)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	cm := settingsConfigMap(t, render(t, map[string]any{"nodeLeaseGracePeriod": "10s", "safetyFloor": below}))
	assert.Equal(t, "10s", cm.Data["node-lease-grace-period"], "belowRunbook lowers the grace")
	cm = settingsConfigMap(t, render(t, map[string]any{"nodeLeaseGracePeriod": "40s"}))
	assert.Equal(t, "40s", cm.Data["node-lease-grace-period"], "the kubelet's node Lease duration is enough")
}

// TestAllowedTridentNamespaces: the further Trident namespaces a request may name
// reach the controller through the settings ConfigMap, and each gets the Role the
// controller has in trident.namespace.
func TestAllowedTridentNamespaces(t *testing.T) {
	objs := render(t, nil)
	assert.Equal(t, "", settingsConfigMap(t, objs).Data["allowed-trident-namespaces"], "none by default")
	assert.Contains(t, controllerArgs(t, objs), "--allowed-trident-namespaces=")

	objs = render(t, map[string]any{"trident": map[string]any{"allowedNamespaces": []any{"netapp-b", "trident", "netapp-c"}}})
	assert.Equal(t, "netapp-b,trident,netapp-c", settingsConfigMap(t, objs).Data["allowed-trident-namespaces"])
	assert.Contains(t, controllerArgs(t, objs), "--allowed-trident-namespaces=netapp-b,trident,netapp-c")
	want := typed[rbacv1.Role](t, find(objs, "Role", "trident", release)).Rules
	for _, ns := range []string{"netapp-b", "netapp-c"} {
		role := find(objs, "Role", ns, release)
		if assert.NotNil(t, role, "no Role in the allowed Trident namespace %s", ns) {
			assert.Equal(t, want, typed[rbacv1.Role](t, role).Rules, "the Role in %s", ns)
		}
		rb := find(objs, "RoleBinding", ns, release)
		if assert.NotNil(t, rb, "no RoleBinding in the allowed Trident namespace %s", ns) {
			assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: release, Namespace: namespace}}, typed[rbacv1.RoleBinding](t, rb).Subjects)
		}
	}
	n := 0
	for _, o := range objs {
		if o.GetKind() == "Role" && o.GetNamespace() == "trident" {
			n++
		}
	}
	assert.Equal(t, 1, n, "trident.namespace listed again gets one Role")
}

// TestSettingsPublishThePauseConfigMap: the settings ConfigMap names the pause
// ConfigMap the controller watches (and the pause policy guards), under the label
// `kubectl remediator pause` finds it by; the label is the command's.
func TestSettingsPublishThePauseConfigMap(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "internal", "cmd", "pause", "pause.go"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^const settingsLabel = "([^"]+)"`).FindSubmatch(src)
	require.NotNil(t, m, "internal/cmd/pause/pause.go: no const settingsLabel; update this test and templates/_helpers.tpl's remediator.settingsLabel together")
	label := string(m[1])

	objs := render(t, nil)
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		if o.GetName() == release+"-settings" {
			assert.Equal(t, "true", o.GetLabels()[label], "the settings ConfigMap's label %s", label)
			cm := typed[corev1.ConfigMap](t, o)
			assert.Equal(t, namespace+"/remediator-pause", cm.Data["pause-configmap"])
			continue
		}
		assert.NotContains(t, o.GetLabels(), label, "%s carries the settings label", ref(o))
	}
	c := deployment(t, objs).Spec.Template.Spec.Containers[0]
	assert.Contains(t, c.Args, "--pause-configmap=$(SETTING_PAUSE_CONFIGMAP)", "the controller watches the pause ConfigMap the settings publish")
}
