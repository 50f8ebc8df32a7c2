//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/gitsync"
	"github.com/remediator/remediator/test/gitrepo"
	"github.com/remediator/remediator/test/harness/helmchart"
)

// syncArgs are the `remediator sync` arguments for repo into namespace ns.
func syncArgs(repo *gitrepo.Repo, ns, workDir string, extra ...string) []string {
	return append([]string{"sync", "--kubeconfig", kubeconfig, "--repo", repo.Bare, "--revision", "main",
		"--path", "requests", "--namespaces", ns, "--work-dir", workDir}, extra...)
}

// startSync runs `remediator sync --interval` in the background, as a deployment of
// the agent would, and returns a func that reads its log so far.
func startSync(t *testing.T, args []string) func() string {
	t.Helper()
	var log bytes.Buffer
	lw := &lockedWriter{w: &log}
	cmd := exec.Command(filepath.Join(root, "bin", "remediator"), args...)
	cmd.Stdout, cmd.Stderr = lw, lw
	require.NoError(t, cmd.Start(), "starting remediator sync")
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("sync log:\n%s", lw.String())
		}
	})
	return lw.String
}

func TestSyncFromGit(t *testing.T) {
	startController(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-sync")
	node := extraNode(t, "e2e-sync-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, ns, node, 20*time.Minute, 1)

	repo := gitrepo.New(t)
	repo.Write("requests/release-lease-shutdown.yaml", fmt.Sprintf(`# Reviewed in PR #42.
apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: release-lease-shutdown
  namespace: %s
spec:
  remediation: release-luks-lease
  target:
    persistentVolume: %s
  reason: >-
    %s was powered off after a kernel panic during cryptsetup luksOpen; its Lease
    blocks the failover pods (INC-5120).
`, ns, pv, node))
	added := repo.Commit("Release the stuck Lease of " + pv)
	logs := startSync(t, syncArgs(repo, ns, t.TempDir(), "--interval", "1s"))

	key := types.NamespacedName{Namespace: ns, Name: "release-lease-shutdown"}
	rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "want Succeeded by node-shutdown: %s", describe(rr))
	require.Equal(t, "node-shutdown", string(decision(t, rr).Playbook), "want Succeeded by node-shutdown: %s", describe(rr))
	assert.Equal(t, added, rr.Annotations[gitsync.AnnotationGitCommit], "annotation %s: want the commit that added the request", gitsync.AnnotationGitCommit)
	assert.False(t, leaseExists(t, pv), "the Lease still exists after the request Succeeded")
	assert.True(t, logLine(logs(), `"Applied"`, `request="`+ns+`/release-lease-shutdown"`, `commit="`+added+`"`),
		"the sync log does not record the apply at %s", added)

	// The incident is over: removing the request from Git prunes it.
	repo.Remove("requests/release-lease-shutdown.yaml")
	removed := repo.Commit("INC-5120 closed")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8s.Get(ctx, key, &v1alpha1.RemediationRequest{})
		assert.True(c, apierrors.IsNotFound(err), "get: %v", err)
	}, 60*time.Second, poll, "the request pruned")
	assert.True(t, logLine(logs(), `"Pruned"`, `request="`+ns+`/release-lease-shutdown"`, `commit="`+removed+`"`),
		"the sync log does not record the prune at %s", removed)

	// Git is not a back door: a commit with a ClusterRole is refused whole, by the
	// running agent and by a one-off sync (non-zero exit), and nothing of it lands.
	repo.Write("requests/escalate.yaml", fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-sync-escalate
rules:
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["*"]
---
apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: smuggled
  namespace: %s
spec:
  remediation: reregister-csi-driver
  target: {node: kwok-node-0}
  reason: Rides along with the ClusterRole in the same commit.
`, ns))
	refused := repo.Commit("Sneak in a ClusterRole")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l := logs()
		assert.True(c, strings.Contains(l, "commit "+refused[:12]+" refused, nothing applied") &&
			strings.Contains(l, `ClusterRole \"e2e-sync-escalate\" is not a RemediationRequest`), "log tail: %s", tail(l, 600))
	}, 30*time.Second, poll, "the running sync refusing %s", refused)
	once := exec.Command(filepath.Join(root, "bin", "remediator"), syncArgs(repo, ns, t.TempDir())...)
	out, err := once.CombinedOutput()
	var ee *exec.ExitError
	if assert.ErrorAs(t, err, &ee, "one-off sync of the refused commit: want a non-zero exit\n%s", out) {
		assert.NotZero(t, ee.ExitCode(), "one-off sync of the refused commit: want a non-zero exit\n%s", out)
	}
	assert.Contains(t, string(out), "requests/escalate.yaml (document 1): ClusterRole", "one-off sync output does not name the offending file")
	err = k8s.Get(ctx, client.ObjectKey{Name: "e2e-sync-escalate"}, &rbacv1.ClusterRole{})
	assert.True(t, apierrors.IsNotFound(err), "ClusterRole e2e-sync-escalate: %v, want NotFound", err)
	err = k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "smuggled"}, &v1alpha1.RemediationRequest{})
	assert.True(t, apierrors.IsNotFound(err), "the request committed with the ClusterRole: %v, want NotFound", err)
}

// logLine reports whether one line of log holds all parts.
func logLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// lockedWriter lets the test read a process's output while the process writes it.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// TestChartSyncAgentRunsAsItsServiceAccount: the chart's sync agent (sync.enabled),
// with the arguments and the ServiceAccount the chart gives it and no git binary (as
// in the distroless image), syncs a private repository served over smart HTTP and
// prunes from it, and the real API server's RBAC lets it do nothing else.
func TestChartSyncAgentRunsAsItsServiceAccount(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-chartsync-system")
	ns := namespace(t, "e2e-chartsync")
	values := map[string]any{
		"requestNamespaces": []any{ns},
		"requestNamespace":  map[string]any{"create": false},
		// The test's Git server speaks plain HTTP on 127.0.0.1, which the agent refuses
		// without allowInsecureTransport.
		"sync": map[string]any{"enabled": true, "repo": "https://git.example.com/platform/remediation.git", "revision": "main",
			"allowInsecureTransport": true,
			"credentials":            map[string]any{"secretName": "remediation-repo", "type": "https", "username": "sync-bot"}},
	}

	// A holder that was powered off: the request committed to Git runs to Succeeded.
	startController(t, "--request-namespaces", ns)
	down := extraNode(t, "e2e-chartsync-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, ns, down, 20*time.Minute, 1)
	repo := gitrepo.New(t)
	repo.Write("requests/README.md", "# requests\n")
	repo.Write("requests/release-lease-shutdown.yaml", shutdownRequestYAML(ns, pv, down, "INC-5121"))
	repo.Commit("Release the stuck Lease of " + pv)
	const password = "glpat-e2e-4711"
	url := repo.ServeSmartHTTP(t, "sync-bot", password)
	passwordFile := filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(passwordFile, []byte(password), 0o600))
	// The chart's arguments, but for where the repository, the mounted Secret and the
	// mirror are here, once instead of every interval.
	once, sa := chartSyncAgent(t, "rsync", system, values, url, map[string]string{"--git-password-file": passwordFile})
	require.Contains(t, once, "--git-username=sync-bot")
	require.Contains(t, once, "--allow-insecure-transport")
	run := func() string {
		cmd := exec.Command(filepath.Join(root, "bin", "remediator"), once...)
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir()) // no git, as in the image
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "remediator %s\n%s", strings.Join(once, " "), out)
		assert.NotContains(t, string(out), password, "the sync output shows the password")
		return string(out)
	}
	out := run()
	assert.Contains(t, out, "apply", "sync output")
	key := types.NamespacedName{Namespace: ns, Name: "release-lease-shutdown"}
	rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "the request synced by the chart's agent: %s", describe(rr))
	assert.False(t, leaseExists(t, pv), "the Lease still exists after the request Succeeded")

	repo.Remove("requests/release-lease-shutdown.yaml")
	repo.Commit("Done")
	run()
	err := k8s.Get(ctx, key, &v1alpha1.RemediationRequest{})
	assert.True(t, apierrors.IsNotFound(err), "the request removed from Git is pruned, the directory kept by its README: %v", err)

	// The ServiceAccount may not write anywhere else.
	other := namespace(t, "e2e-chartsync-other")
	sar, err := clientset(t).AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + system + ":" + sa,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: other, Verb: "create", Group: "remediator.io", Resource: "remediationrequests"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.False(t, sar.Status.Allowed, "the sync ServiceAccount may create requests in %s", other)
}

// chartSyncAgent creates the sync agent's objects the chart renders for values in
// system (all but its Deployment: kwok would only pretend to run it; the test runs the
// binary) and returns that Deployment's `remediator sync` arguments made to run once
// here: repo instead of the chart's URL, the values of replace, a fresh mirror, no
// --interval, and the agent's ServiceAccount's kubeconfig; and that ServiceAccount.
func chartSyncAgent(t *testing.T, release, system string, values map[string]any, repo string, replace map[string]string) (args []string, sa string) {
	t.Helper()
	ctx := context.Background()
	objs, err := helmchart.Render(release, system, values)
	require.NoError(t, err)
	for _, o := range objs {
		if !strings.Contains(o.GetName(), "-sync") {
			continue
		}
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
			args = d.Spec.Template.Spec.Containers[0].Args
			continue
		case "ServiceAccount":
			sa = o.GetName()
		}
		obj := o.DeepCopy()
		require.NoError(t, k8s.Create(ctx, obj), "applying rendered %s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), &unstructured.Unstructured{Object: obj.Object}) })
	}
	require.NotEmpty(t, sa, "the chart rendered no sync ServiceAccount")
	require.NotEmpty(t, args, "the chart rendered no sync Deployment")
	saKubeconfig, _ := serviceAccountKubeconfig(t, system, sa)
	replace["--repo"] = repo
	replace["--work-dir"] = t.TempDir()
	var once []string
	for _, a := range args {
		flag, _, _ := strings.Cut(a, "=")
		if flag == "--interval" {
			continue
		}
		if v, ok := replace[flag]; ok {
			a = flag + "=" + v
		}
		once = append(once, a)
	}
	return append(once, "--kubeconfig", saKubeconfig), sa
}

// shutdownRequestYAML is the request file an operator commits to release the Lease of pv
// that node held when it was powered off.
func shutdownRequestYAML(ns, pv, node, incident string) string {
	return fmt.Sprintf(`apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: release-lease-shutdown
  namespace: %s
spec:
  remediation: release-luks-lease
  target:
    persistentVolume: %s
  reason: %s was powered off after a kernel panic during cryptsetup luksOpen (%s).
`, ns, pv, node, incident)
}
