package plan

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/test/testenv"
)

// chartObject returns one object of a render of the chart (chartRender).
func chartObject(t *testing.T, fixture, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range cmdtest.ChartRender(t, fixture) {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	require.FailNow(t, "the chart renders no "+kind+" "+name)
	return nil
}

// TestPlanFollowsTheChartSettings: plan on live facts decides with the settings the
// chart's controller runs with, read from the settings ConfigMap the chart renders,
// as the CI identity the chart's remediator-plan ClusterRole is bound to; a flag
// given on the command line wins, and the output says where each came from.
func TestPlanFollowsTheChartSettings(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := cmdtest.WriteKubeconfig(t, env.Config)
	ctx := context.Background()
	w := &cmdtest.World{T: t, C: env.Client}
	for _, ns := range []string{"trident", "netapp-trident", "app", "remediator", "remediator-system"} {
		w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	// The shutdown holder's Lease is in namespace trident, where Trident runs here.
	w.Node("kwok-node-3", corev1.ConditionUnknown, []string{v1alpha1.TaintOutOfService, v1alpha1.TaintUnreachable}, -1)
	w.Volume("pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30", "app", "archive", "kwok-node-3", 0)

	// The CI job's identity holds the chart's plan ClusterRole, and nothing else.
	role := chartObject(t, "defaults", "ClusterRole", "remediator-plan")
	require.NoError(t, env.Client.Create(ctx, role.DeepCopy()))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "remediator-plan-ci"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "remediator-plan"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "ci"}},
	}))

	plan := func(t *testing.T, args ...string) (string, int, error) {
		t.Helper()
		out, code, err := runPlanCommand(t, "", append([]string{"-f", planTestdata + "shutdown.yaml", "--kubeconfig", kubeconfig, "--as", "ci"}, args...)...)
		t.Logf("exit code %d (err %v), output:\n%s", code, err, out)
		return out, code, err
	}
	const from = "(configmap remediator-system/remediator-settings)"

	t.Run("no ConfigMap: a warning, and plan's defaults", func(t *testing.T) {
		out, code, _ := plan(t)
		assert.Equal(t, 0, code, "exit code")
		assert.Contains(t, out, "warning: the controller's settings ConfigMap remediator-system/remediator-settings does not exist: plan uses its own defaults")
		assert.Contains(t, out, "settings:  trident-namespace=trident (plan's default)\n")
	})

	// The chart installed with Trident in netapp-trident (and nodeLeaseGracePeriod 40s):
	// the controller looks for the Lease there, so plan does, and finds none.
	cm := chartObject(t, "netapp-trident", "ConfigMap", "remediator-settings")
	require.NoError(t, env.Client.Create(ctx, cm.DeepCopy()))
	t.Run("plan follows the ConfigMap", func(t *testing.T) {
		out, code, _ := plan(t)
		assert.Equal(t, 3, code, "exit code")
		for _, want := range []string{
			"settings:  trident-namespace=netapp-trident " + from + "\n",
			"           node-lease-grace-period=40s " + from + "\n",
			"           max-concurrent-remediations=2 " + from + "\n",
			"           floor-unreachable-lease-age=5m0s " + from + "\n",
			"lease     netapp-trident/pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30 does not exist",
		} {
			assert.Contains(t, out, want)
		}
		assert.NotContains(t, out, "warning:")
	})
	t.Run("a flag given wins over the ConfigMap", func(t *testing.T) {
		out, code, _ := plan(t, "--trident-namespace", "trident")
		assert.Equal(t, 0, code, "exit code")
		assert.Contains(t, out, "settings:  trident-namespace=trident (--trident-namespace)\n")
		assert.Contains(t, out, "           node-lease-grace-period=40s "+from+"\n")
		assert.Contains(t, out, "ALLOWED by rule holder-shutdown")
	})

	// A helm upgrade moves the Trident namespace back: plan follows, and finds the Lease.
	upgraded := &corev1.ConfigMap{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(chartObject(t, "defaults", "ConfigMap", "remediator-settings").Object, upgraded))
	live := &corev1.ConfigMap{}
	require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Namespace: "remediator-system", Name: "remediator-settings"}, live))
	live.Data = upgraded.Data
	require.NoError(t, env.Client.Update(ctx, live))
	t.Run("plan follows a changed ConfigMap", func(t *testing.T) {
		out, code, _ := plan(t, "-o", "json")
		assert.Equal(t, 0, code, "exit code")
		var r planReport
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		assert.Contains(t, r.Settings, cmdutil.Setting{Name: "trident-namespace", Value: "trident", From: "configmap remediator-system/remediator-settings"})
		assert.Contains(t, r.Settings, cmdutil.Setting{Name: "node-lease-grace-period", Value: "50s", From: "configmap remediator-system/remediator-settings"})
		if assert.Len(t, r.Requests, 1) && assert.NotNil(t, r.Requests[0].Facts) && assert.NotNil(t, r.Requests[0].Facts.Lease) {
			assert.True(t, r.Requests[0].Facts.Lease.Exists, "the Lease in trident")
			assert.Equal(t, "trident", r.Requests[0].Facts.Lease.Namespace)
		}
	})
	t.Run("--settings-configmap= reads none", func(t *testing.T) {
		out, code, _ := plan(t, "--settings-configmap=", "--trident-namespace=netapp-trident")
		assert.Equal(t, 3, code, "exit code")
		assert.Contains(t, out, "settings:  trident-namespace=netapp-trident (--trident-namespace)\n")
		assert.Contains(t, out, "           node-lease-grace-period=50s (plan's default)\n")
	})
	t.Run("an identity that may not read it fails, saying what to grant", func(t *testing.T) {
		_, code, err := plan(t, "--as", "someone-else")
		assert.Equal(t, 1, code, "exit code")
		require.Error(t, err)
		assert.Contains(t, err.Error(), `reading the controller's settings from ConfigMap remediator-system/remediator-settings: `)
		assert.Contains(t, err.Error(), `grant get on configmaps named "remediator-settings" in namespace "remediator-system" (the chart's remediator-plan ClusterRole has it`)
	})
	t.Run("a value the controller would refuse fails", func(t *testing.T) {
		require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Namespace: "remediator-system", Name: "remediator-settings"}, live))
		live.Data["floor-healthy-lease-age"] = "soon"
		require.NoError(t, env.Client.Update(ctx, live))
		_, code, err := plan(t)
		assert.Equal(t, 1, code, "exit code")
		assert.ErrorContains(t, err, "the settings ConfigMap remediator-system/remediator-settings: floor-healthy-lease-age: ")
	})
}
