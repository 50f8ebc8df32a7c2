package chart_test

// This file owns the ClusterRoles the chart makes for people and CI rather than for
// the controller: remediator-view and remediator-edit, aggregated into Kubernetes'
// view, edit and admin roles, and remediator-plan for the pull-request check.

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
)

func requestRules(verbs ...string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{"remediator.io"}, Resources: []string{"remediationrequests"}, Verbs: verbs}}
}

func TestAggregatedClusterRoles(t *testing.T) {
	const aggregate = "rbac.authorization.k8s.io/aggregate-to-"
	objs := render(t, nil)
	view := typed[rbacv1.ClusterRole](t, find(objs, "ClusterRole", "", release+"-view"))
	assert.Equal(t, requestRules("get", "list", "watch"), view.Rules, "remediator-view rules")
	assert.Equal(t, "true", view.Labels[aggregate+"view"], "remediator-view aggregates into view")
	assert.NotContains(t, view.Labels, aggregate+"edit")
	assert.NotContains(t, view.Labels, aggregate+"admin")

	// Git is the only writer (admissionPolicy): edit and admin do not write requests
	// unless asked for.
	edit := typed[rbacv1.ClusterRole](t, find(objs, "ClusterRole", "", release+"-edit"))
	assert.Equal(t, requestRules("get", "list", "watch", "create", "update", "patch", "delete"), edit.Rules, "remediator-edit rules")
	for k := range edit.Labels {
		assert.NotContains(t, k, aggregate, "remediator-edit aggregates by default")
	}
	aggregated := typed[rbacv1.ClusterRole](t, find(render(t, map[string]any{"rbac": map[string]any{"aggregateToEdit": true}}), "ClusterRole", "", release+"-edit"))
	assert.Equal(t, "true", aggregated.Labels[aggregate+"edit"], "aggregateToEdit: remediator-edit aggregates into edit")
	assert.Equal(t, "true", aggregated.Labels[aggregate+"admin"], "aggregateToEdit: remediator-edit aggregates into admin")
	assert.NotContains(t, aggregated.Labels, aggregate+"view")

	// Not even edit may write what only the controller writes.
	for _, r := range append(view.Rules, edit.Rules...) {
		assert.NotContains(t, r.Resources, "remediationrequests/status")
		assert.NotContains(t, r.Resources, "remediationrequests/finalizers")
	}

	t.Run("aggregation off", func(t *testing.T) {
		objs := render(t, map[string]any{"rbac": map[string]any{"aggregateToView": false, "aggregateToEdit": false}})
		for _, name := range []string{release + "-view", release + "-edit"} {
			cr := typed[rbacv1.ClusterRole](t, find(objs, "ClusterRole", "", name))
			for k := range cr.Labels {
				assert.NotContains(t, k, aggregate, "%s: aggregation is off", name)
			}
		}
	})
}

// TestPlanClusterRole: exactly the reads `remediator plan` and `scan` make on live
// facts (plan --help lists them) and the get of the settings ConfigMap, by name,
// nothing that writes or watches.
func TestPlanClusterRole(t *testing.T) {
	cr := typed[rbacv1.ClusterRole](t, find(render(t, nil), "ClusterRole", "", release+"-plan"))
	read := []string{"get", "list"}
	assert.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{release + "-settings"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"events", "nodes", "persistentvolumeclaims", "persistentvolumes", "pods"}, Verbs: read},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: read},
		// A decision on a healthy holder reads its Trident node pod's log: get only.
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{"remediator.io"}, Resources: []string{"remediationrequests"}, Verbs: read},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: read},
		// The volume evidence reads the PV's CSIDriver and its VolumeAttachment on the
		// holder by name: get only.
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers", "volumeattachments"}, Verbs: []string{"get"}},
	}, cr.Rules)
	for k := range cr.Labels {
		assert.NotContains(t, k, "aggregate-to", "the CI role is bound explicitly, never aggregated")
	}
	// The chart binds it to nobody: the CI job's identity is not the chart's to know.
	for _, o := range render(t, nil) {
		if o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "RoleBinding" {
			require.NotEqual(t, release+"-plan", o.GetName(), "%s binds the plan role", ref(o))
		}
	}
	assert.Nil(t, find(render(t, map[string]any{"rbac": map[string]any{"planRole": false}}), "ClusterRole", "", release+"-plan"), "rbac.planRole: false")
}
