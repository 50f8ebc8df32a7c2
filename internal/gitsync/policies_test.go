package gitsync_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/internal/gitsync"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/test/gitrepo"
)

// writeShippedPolicies puts the controller's own policies (not their test cases)
// under policies/ in the repository, as the template's copy.
func writeShippedPolicies(t *testing.T, r *gitrepo.Repo) map[string]string {
	t.Helper()
	names, err := filepath.Glob("../../policies/*.cue")
	require.NoError(t, err)
	out := map[string]string{}
	for _, n := range names {
		// The schema is the controller's own: a policy directory holds the rules only.
		if filepath.Base(n) == "schema.cue" {
			continue
		}
		if strings.HasSuffix(n, "_test.cue") {
			continue
		}
		data, err := os.ReadFile(n)
		require.NoError(t, err)
		r.Write("policies/"+filepath.Base(n), string(data))
		out[filepath.Base(n)] = string(data)
	}
	require.NotEmpty(t, out)
	return out
}

// planDigest is the digest `remediator plan --policies-dir` prints for the files.
func planDigest(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, d := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte(d), 0o600))
	}
	e, err := policies.FromDir(dir)
	require.NoError(t, err)
	return e.Digest()
}

// TestSyncWritesThePolicies: the repository's policies/ become the ConfigMap the
// controller loads, with the digest plan computes from the same files; a change of a
// rule in Git changes it, and a policy that does not load refuses the whole revision.
func TestSyncWritesThePolicies(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	r := gitrepo.New(t)
	files := writeShippedPolicies(t, r)
	r.Write("policies/release_luks_lease_test.cue", "package policies\n// a cue vet case, not a policy\n")
	r.Write("policies/README.md", "# policies\n")
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	first := r.Commit("Requests and the policies that judge them")
	key := types.NamespacedName{Namespace: ns, Name: "remediator-policies"}
	s := newSyncer(t, gitsync.Options{Repo: r.Bare, Revision: "main", Path: "requests", Namespaces: []string{ns}, Prune: true,
		PoliciesPath: "policies", PoliciesConfigMap: key})

	res, err := sync(t, s)
	require.NoError(t, err)
	want := planDigest(t, files)
	assert.Equal(t, want, res.PolicyDigest, "the synced digest is plan's")
	cm := &corev1.ConfigMap{}
	require.NoError(t, env.Client.Get(ctx, key, cm))
	assert.Equal(t, files, cm.Data, "the ConfigMap holds the policies, not the test cases or the README")
	assert.Equal(t, want, cm.Annotations[gitsync.AnnotationPolicyDigest])
	assert.Equal(t, first, cm.Annotations[gitsync.AnnotationGitCommit])

	// A reviewed change of one rule's message.
	name := "release_luks_lease.cue"
	changed := strings.Replace(files[name], "the Lease is deleted", "the Lease is deleted (reviewed in PR #51)", 1)
	require.NotEqual(t, files[name], changed, "the rule text to change is in the policy")
	files[name] = changed
	r.Write("policies/"+name, changed)
	r.Commit("Say which PR approved the release")
	res, err = sync(t, s)
	require.NoError(t, err)
	assert.NotEqual(t, want, res.PolicyDigest)
	assert.Equal(t, planDigest(t, files), res.PolicyDigest)
	require.NoError(t, env.Client.Get(ctx, key, cm))
	assert.Equal(t, changed, cm.Data[name])

	// A policy that does not compile: refused whole, the last good policies stay.
	good := res.PolicyDigest
	r.Write("policies/broken.cue", "package policies\n#Policy: {decision: \n")
	r.Write("requests/b.yaml", request(ns, "release-b", "pvc-b"))
	r.Commit("A typo")
	_, err = sync(t, s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nothing applied")
	assert.Contains(t, err.Error(), "do not load")
	require.NoError(t, env.Client.Get(ctx, key, cm))
	assert.Equal(t, good, cm.Annotations[gitsync.AnnotationPolicyDigest], "the last good policies stay")
	_, ok := getRR(t, ns, "release-b")
	assert.False(t, ok, "a request of the refused revision was applied")
}
