//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/gitsync"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/test/gitrepo"
)

// TestPoliciesFromGitReachTheController: with sync.policies, the chart's sync agent
// writes the repository's policies/ into the ConfigMap the controller loads, so the
// digest a decision records is the one `plan --policies-dir policies/` computes in
// the pull request, and a policy commit changes the next decision's digest.
func TestPoliciesFromGitReachTheController(t *testing.T) {
	system := namespace(t, "e2e-gitpolicies-system")
	ns := namespace(t, "e2e-gitpolicies")
	values := map[string]any{
		"requestNamespaces": []any{ns},
		"requestNamespace":  map[string]any{"create": false},
		"sync": map[string]any{"enabled": true, "repo": "https://git.example.com/platform/remediation.git", "revision": "main",
			"policies": map[string]any{"enabled": true}},
	}

	repo := gitrepo.New(t)
	shipped, err := filepath.Glob(filepath.Join(root, "policies", "*.cue"))
	require.NoError(t, err)
	for _, f := range shipped {
		// The schema is the controller's own: a policy directory holds the rules only.
		if filepath.Base(f) == "schema.cue" {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		repo.Write("policies/"+filepath.Base(f), string(data)) // the *_test.cue cases too, as in the template
	}
	repo.Write("requests/README.md", "# requests\n")
	dryRun := func(name, node string) string {
		return fmt.Sprintf(`apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: %s
  namespace: %s
spec:
  mode: DryRun
  remediation: reregister-csi-driver
  target: {node: %s}
  reason: CSINode %s lost csi.trident.netapp.io after the DaemonSet was recreated.
`, name, ns, node, node)
	}
	repo.Write("requests/a.yaml", dryRun("check-a", "kwok-node-0"))
	repo.Commit("The policies and a first request")

	once, _ := chartSyncAgent(t, "rpol", system, values, repo.Bare, map[string]string{})
	var key types.NamespacedName
	for _, a := range once {
		if v, ok := strings.CutPrefix(a, "--policies-configmap="); ok {
			key.Namespace, key.Name, _ = strings.Cut(v, "/")
		}
	}
	require.Equal(t, system, key.Namespace, "the policies ConfigMap is the controller's, in the release namespace")
	// What the kubelet does with the ConfigMap volume: project its data as files.
	policiesDir := t.TempDir()
	syncAndProject := func() string {
		out, err := exec.Command(filepath.Join(root, "bin", "remediator"), once...).CombinedOutput()
		require.NoError(t, err, "remediator %s\n%s", strings.Join(once, " "), out)
		return projectConfigMap(t, key, policiesDir).Annotations[gitsync.AnnotationPolicyDigest]
	}
	// plan --policies-dir policies/ in the pull request's checkout.
	planDigest := func() string {
		e, err := policies.FromDir(filepath.Join(repo.Work, "policies"))
		require.NoError(t, err)
		return e.Digest()
	}

	first := syncAndProject()
	assert.Equal(t, planDigest(), first, "the synced policies are the ones plan checks")
	startController(t, "--policies-dir", policiesDir, "--policy-reload-interval", "1s", "--request-namespaces", ns)
	assert.Equal(t, first, decidedDigest(t, types.NamespacedName{Namespace: ns, Name: "check-a"}), "the decision was made with the policies from Git")

	// A reviewed policy change, and a request after it.
	name := filepath.Join(repo.Work, "policies", "reregister_csi_driver.cue")
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	changed := strings.Replace(string(data), "package policies", "package policies\n\n// Reviewed in PR #52.", 1)
	repo.Write("policies/reregister_csi_driver.cue", changed)
	repo.Commit("A reviewed policy change")
	second := syncAndProject()
	require.NotEqual(t, first, second, "a policy commit changes the digest")
	assert.Equal(t, planDigest(), second)
	// The controller re-reads --policies-dir every second.
	time.Sleep(3 * time.Second)
	repo.Write("requests/b.yaml", dryRun("check-b", "kwok-node-1"))
	repo.Commit("A request after the policy change")
	assert.Equal(t, second, syncAndProject())
	assert.Equal(t, second, decidedDigest(t, types.NamespacedName{Namespace: ns, Name: "check-b"}), "the next decision carries the new digest")
}

// projectConfigMap does what the kubelet does with a ConfigMap volume: it writes the
// ConfigMap's data as the files of dir, replacing the .cue files there.
func projectConfigMap(t *testing.T, key types.NamespacedName, dir string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, k8s.Get(context.Background(), key, cm))
	old, _ := filepath.Glob(filepath.Join(dir, "*.cue"))
	for _, f := range old {
		require.NoError(t, os.Remove(f))
	}
	for name, data := range cm.Data {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600))
	}
	return cm
}

// decidedDigest waits for the request's decision and returns its policy digest.
func decidedDigest(t *testing.T, key types.NamespacedName) string {
	t.Helper()
	var digest string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rr := &v1alpha1.RemediationRequest{}
		require.NoError(c, k8s.Get(context.Background(), key, rr))
		require.NotNil(c, rr.Status.Decision, "decided")
		digest = rr.Status.Decision.PolicyDigest
	}, 60*time.Second, poll, "%s decided", key)
	return digest
}
