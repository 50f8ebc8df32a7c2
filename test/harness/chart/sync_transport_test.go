package chart_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/remediator/remediator/test/harness/helmchart"
)

// TestSyncInsecureTransportIsOptIn: the sync agent refuses an http:// or git:// repo
// unless sync.allowInsecureTransport renders --allow-insecure-transport; by default it
// is not rendered, and the schema takes only a boolean.
func TestSyncInsecureTransportIsOptIn(t *testing.T) {
	args := func(t *testing.T, values map[string]any) []string {
		t.Helper()
		d := typed[appsv1.Deployment](t, find(render(t, values), "Deployment", namespace, release+"-sync"))
		require.Len(t, d.Spec.Template.Spec.Containers, 1)
		return d.Spec.Template.Spec.Containers[0].Args
	}
	assert.NotContains(t, args(t, syncValues()), "--allow-insecure-transport", "rendered by default")

	values := syncValues()
	values["sync"].(map[string]any)["repo"] = "http://git.internal:3000/platform/remediation.git"
	values["sync"].(map[string]any)["allowInsecureTransport"] = true
	got := args(t, values)
	i := slices.Index(got, "--allow-insecure-transport")
	require.NotEqual(t, -1, i, "sync.allowInsecureTransport: true rendered no --allow-insecure-transport: %q", got)
	assert.Equal(t, "--repo=http://git.internal:3000/platform/remediation.git", got[i-1], "the flag follows --repo")

	values["sync"].(map[string]any)["allowInsecureTransport"] = "yes"
	_, err := helmchart.Render(release, namespace, values)
	require.Error(t, err, "a non-boolean allowInsecureTransport rendered")
	assert.ErrorContains(t, err, "allowInsecureTransport")
}
