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

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/gitsync"
	"github.com/remediator/remediator/test/gitrepo"
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
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting remediator sync: %v", err)
	}
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
	if rr.Status.Phase != v1alpha1.PhaseSucceeded || rr.Status.Decision.Playbook != "node-shutdown" {
		t.Fatalf("phase %s decision %+v, want Succeeded by node-shutdown", rr.Status.Phase, rr.Status.Decision)
	}
	if got := rr.Annotations[gitsync.AnnotationGitCommit]; got != added {
		t.Errorf("annotation %s = %q, want the commit that added the request %s", gitsync.AnnotationGitCommit, got, added)
	}
	if leaseExists(t, pv) {
		t.Error("the Lease still exists after the request Succeeded")
	}
	if !logLine(logs(), `"Applied"`, `request="`+ns+`/release-lease-shutdown"`, `commit="`+added+`"`) {
		t.Errorf("the sync log does not record the apply at %s", added)
	}

	// The incident is over: removing the request from Git prunes it.
	repo.Remove("requests/release-lease-shutdown.yaml")
	removed := repo.Commit("INC-5120 closed")
	eventually(t, 60*time.Second, "the request pruned", func() (bool, string) {
		err := k8s.Get(ctx, key, &v1alpha1.RemediationRequest{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	if !logLine(logs(), `"Pruned"`, `request="`+ns+`/release-lease-shutdown"`, `commit="`+removed+`"`) {
		t.Errorf("the sync log does not record the prune at %s", removed)
	}

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
	eventually(t, 30*time.Second, "the running sync refusing "+refused, func() (bool, string) {
		l := logs()
		return strings.Contains(l, "commit "+refused[:12]+" refused, nothing applied") &&
			strings.Contains(l, `ClusterRole \"e2e-sync-escalate\" is not a RemediationRequest`), "log tail: " + tail(l, 600)
	})
	once := exec.Command(filepath.Join(root, "bin", "remediator"), syncArgs(repo, ns, t.TempDir())...)
	out, err := once.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Errorf("one-off sync of the refused commit: err=%v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(string(out), "requests/escalate.yaml (document 1): ClusterRole") {
		t.Errorf("one-off sync output does not name the offending file:\n%s", out)
	}
	err = k8s.Get(ctx, client.ObjectKey{Name: "e2e-sync-escalate"}, &rbacv1.ClusterRole{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole e2e-sync-escalate: %v, want NotFound", err)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "smuggled"}, &v1alpha1.RemediationRequest{}); !apierrors.IsNotFound(err) {
		t.Errorf("the request committed with the ClusterRole: %v, want NotFound", err)
	}
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
