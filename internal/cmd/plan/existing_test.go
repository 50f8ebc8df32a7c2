package plan

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/test/testenv"
)

// TestPlanRequestInTheCluster: planning a request that is already in the cluster
// reports what the controller does with the applied file (existing.go). A
// finished request is never run again, so it is not planned on today's facts (its
// Lease is gone: planned, it would be rejected as no-lease and fail every later pull
// request that touches it); a rejected one is decided again only when its spec
// changes.
func TestPlanRequestInTheCluster(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := cmdtest.WriteKubeconfig(t, env.Config)
	ctx := context.Background()
	w := &cmdtest.World{T: t, C: env.Client}
	for _, ns := range []string{"trident", "app", "remediator"} {
		w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	// kwok-node-3 was shut down and its request released the Lease: no Lease any more.
	w.Node("kwok-node-3", corev1.ConditionUnknown, []string{v1alpha1.TaintOutOfService, v1alpha1.TaintUnreachable}, -1)
	w.Volume("pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30", "app", "archive", "kwok-node-3", 0)
	require.NoError(t, env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30"}}))

	src, err := os.ReadFile(planTestdata + "shutdown.yaml")
	require.NoError(t, err)
	// inCluster creates the request of the file with the given status, as the
	// controller leaves it.
	inCluster := func(t *testing.T, phase v1alpha1.Phase, rule string) {
		t.Helper()
		rr := &v1alpha1.RemediationRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "release-lease-shutdown-kwok-node-3"},
			Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, Mode: v1alpha1.ModeApply,
				Target: v1alpha1.Target{PersistentVolume: "pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30"},
				Reason: "kwok-node-3 was powered off after a kernel panic (INC-4790); pods of app/archive hang in ContainerCreating on other nodes because its Lease is still held."},
		}
		require.NoError(t, env.Client.Create(ctx, rr))
		t.Cleanup(func() { _ = env.Client.Delete(ctx, rr) })
		rr.Status = v1alpha1.RemediationRequestStatus{Phase: phase, Decision: &v1alpha1.Decision{Rule: rule, DecidedAt: metav1.Now()}}
		require.NoError(t, env.Client.Status().Update(ctx, rr))
	}
	plan := func(t *testing.T, file string) (string, int) {
		t.Helper()
		out, code, err := runPlanCommand(t, "", "-f", file, "--kubeconfig", kubeconfig)
		t.Logf("exit code %d (err %v), output:\n%s", code, err, out)
		return out, code
	}

	t.Run("never applied: planned on live facts", func(t *testing.T) {
		out, code := plan(t, planTestdata+"shutdown.yaml")
		assert.Equal(t, 3, code, "exit code")
		assert.Contains(t, out, "REJECTED by rule no-lease")
	})
	for _, phase := range []v1alpha1.Phase{v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed} {
		t.Run(string(phase)+": already ran, not planned", func(t *testing.T) {
			inCluster(t, phase, "holder-shutdown")
			out, code := plan(t, planTestdata+"shutdown.yaml")
			assert.Equal(t, 0, code, "exit code")
			assert.Contains(t, out, "decision:  ALREADY RAN: "+string(phase)+"; not planned on today's facts\n")
			assert.Contains(t, out, "RemediationRequest remediator/release-lease-shutdown-kwok-node-3 already ran: "+string(phase)+"; the controller will not run it again, whatever this file changes.")
			assert.Contains(t, out, "Summary: 0 allowed, 0 rejected, 0 would wait, 0 failed, 1 already decided; exit code 0")
			assert.NotContains(t, out, "no-lease", "planned on today's facts")
		})
	}
	t.Run("Rejected, spec unchanged: the rejection stands", func(t *testing.T) {
		inCluster(t, v1alpha1.PhaseRejected, "no-lease")
		out, code := plan(t, planTestdata+"shutdown.yaml")
		assert.Equal(t, 0, code, "exit code")
		assert.Contains(t, out, "decision:  ALREADY DECIDED: Rejected; not planned on today's facts\n")
		assert.Contains(t, out, "is already Rejected (rule no-lease) and this file does not change its spec: the controller does not decide it again.")
	})
	t.Run("Rejected, spec changed: decided again, so planned", func(t *testing.T) {
		inCluster(t, v1alpha1.PhaseRejected, "no-lease")
		changed := strings.Replace(string(src), "(INC-4790)", "(INC-4790, reopened)", 1)
		require.NotEqual(t, string(src), changed)
		p := filepath.Join(t.TempDir(), "shutdown.yaml")
		require.NoError(t, os.WriteFile(p, []byte(changed), 0o644))
		out, code := plan(t, p)
		assert.Equal(t, 3, code, "exit code")
		assert.Contains(t, out, "REJECTED by rule no-lease")
		assert.Contains(t, out, "already exists and is Rejected: the controller decides it again on fresh facts when its spec changes")
	})
}
