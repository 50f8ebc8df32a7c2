package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/testenv"
)

// freeAddr is a 127.0.0.1 address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// probe GETs http://addr/path and returns the status code and body; 0 when nothing
// answers yet.
func probe(addr, path string) (int, string) {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestControllerStartsOnABrokenPolicy: policies from the ConfigMap that Argo CD or
// the sync agent writes from Git can be broken when the controller (re)starts. It
// starts anyway instead of crash-looping: it decides nothing, every request it
// would decide waits with condition Accepted=Unknown, reason PolicyInvalid and the
// load error; /readyz fails and says why (/healthz stays OK, a restart fixes
// nothing). When a policy that loads arrives, the reloader swaps it in and the
// request is decided with it.
func TestControllerStartsOnABrokenPolicy(t *testing.T) {
	env := testenv.StartT(t)
	ctx := context.Background()
	const ns = "brokenpolicy"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.cue"), []byte("package policies\n#Policy: {input: _, decision: \n"), 0o644))

	probeAddr := freeAddr(t)
	cmd := NewCommand("test")
	cmd.SetArgs([]string{"--kubeconfig", cmdtest.WriteKubeconfig(t, env.Config), "--policies-dir", dir, "--policy-reload-interval", "1s",
		"--request-namespaces", ns, "--health-probe-bind-address", probeAddr, "--metrics-bind-address", "0", "--detect-interval", "0"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	runCtx, stop := context.WithCancel(ctx)
	var exitErr error
	exited := make(chan struct{})
	go func() { exitErr = cmd.ExecuteContext(runCtx); close(exited) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-exited:
			assert.NoError(t, exitErr, "the controller's exit")
		case <-time.After(30 * time.Second):
			t.Error("the controller did not stop")
		}
	})

	// Alive, not ready, and /readyz/policy says why.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		select {
		case <-exited:
			assert.Fail(c, "the controller exited", "%v", exitErr)
			return
		default:
		}
		code, body := probe(probeAddr, "/healthz")
		assert.Equal(c, http.StatusOK, code, "/healthz: %s", body)
		code, body = probe(probeAddr, "/readyz/policy")
		assert.Equal(c, http.StatusInternalServerError, code, "/readyz/policy: %s", body)
		assert.Contains(c, body, "No policy is in use")
		assert.Contains(c, body, "p.cue:2:")
	}, 60*time.Second, 200*time.Millisecond)

	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "release-while-broken"},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target: v1alpha1.Target{PersistentVolume: "pvc-brokenpolicy"}, Reason: "Pods stuck behind a retained Lease (INC-4711)."},
	}
	require.NoError(t, env.Client.Create(ctx, rr))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &v1alpha1.RemediationRequest{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(rr), got))
		cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAccepted)
		require.NotNil(c, cond, "no Accepted condition: %+v", got.Status)
		assert.Equal(c, metav1.ConditionUnknown, cond.Status)
		assert.Equal(c, lifecycle.ReasonPolicyInvalid, cond.Reason)
		assert.Contains(c, cond.Message, "p.cue:2:")
		assert.LessOrEqual(c, len(cond.Message), 32768)
		assert.Equal(c, v1alpha1.PhaseWaiting, got.Status.Phase, "a request nothing decided must not be final")
		// The status write's field manager is the controller's own name, not the
		// (test) binary's.
		var managers []string
		for _, mf := range got.ManagedFields {
			if mf.Subresource == "status" {
				managers = append(managers, mf.Manager)
			}
		}
		assert.Equal(c, []string{remediations.FieldManager}, managers, "the status entries' managers")
	}, 60*time.Second, 200*time.Millisecond)

	// A policy that loads: the shipped rules.
	require.NoError(t, os.Remove(filepath.Join(dir, "p.cue")))
	for _, f := range []string{"release_luks_lease.cue", "reregister_csi_driver.cue"} {
		data, err := os.ReadFile(filepath.Join(testenv.Root(), "policies", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o644))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := probe(probeAddr, "/readyz")
		assert.Equal(c, http.StatusOK, code, "/readyz: %s", body)
		got := &v1alpha1.RemediationRequest{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(rr), got))
		cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAccepted)
		require.NotNil(c, cond)
		assert.NotEqual(c, lifecycle.ReasonPolicyInvalid, cond.Reason, "still %s: %s", cond.Reason, cond.Message)
		if assert.NotNil(c, got.Status.Decision) {
			assert.Contains(c, got.Status.Decision.PolicyDigest, "sha256:", "decided by the policy that loaded")
		}
	}, 60*time.Second, 500*time.Millisecond, fmt.Sprintf("the request is decided once %s loads", dir))
}
