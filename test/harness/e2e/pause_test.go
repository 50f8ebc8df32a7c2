//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/remediator/remediator/api/v1alpha1"
)

// remediatorCLI runs bin/remediator with args as an operator would, and returns its
// output.
func remediatorCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "bin", "remediator"), append(args, "--kubeconfig", kubeconfig)...).CombinedOutput()
	require.NoError(t, err, "remediator %v:\n%s", args, out)
	return string(out)
}

// TestPauseHoldsAnEvictionAndResumeFinishes: the stop button on the local cluster.
// A disruptive playbook waits for an eviction a PodDisruptionBudget refuses; paused
// with `remediator pause` (kubectl remediator pause), it holds at that boundary: the
// budget lifted, the eviction still does not happen, the node stays cordoned. A
// request filed meanwhile waits with reason Paused. `remediator resume` lets both
// finish.
func TestPauseHoldsAnEvictionAndResumeFinishes(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-pause-system")
	pauseCM := system + "/remediator-pause"
	startController(t, "--pause-configmap", pauseCM)
	h := heldAfterCordon(t, "e2e-pause", "kwok-node-0", "retained Lease on the db volume, paused mid-run")

	out := remediatorCLI(t, "pause", "--reason", "INC-4711: storage array firmware upgrade", "--pause-configmap", pauseCM)
	assert.Contains(t, out, "Paused by ")
	isPaused := func(rr *v1alpha1.RemediationRequest) bool {
		c := condition(rr, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.ReasonPaused
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rr := &v1alpha1.RemediationRequest{}
		require.NoError(c, k8s.Get(ctx, h.key, rr))
		assert.True(c, isPaused(rr), "held: %s", describe(rr))
	}, 60*time.Second, poll, "the running playbook held")
	// The budget no longer refuses; a playbook that was not held would evict now
	// (it retries every 5 s).
	require.NoError(t, k8s.Delete(ctx, h.pdb))
	time.Sleep(8 * time.Second)
	rr := &v1alpha1.RemediationRequest{}
	require.NoError(t, k8s.Get(ctx, h.key, rr))
	assert.Equal(t, v1alpha1.PhaseRunning, rr.Status.Phase, describe(rr))
	assert.True(t, isPaused(rr), describe(rr))
	assert.True(t, leaseExists(t, h.pv), "the Lease is kept while paused")
	node := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: "kwok-node-0"}, node))
	assert.True(t, node.Spec.Unschedulable, "a held playbook keeps its cordon")
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(ctx, pods))
	for _, p := range pods.Items {
		if p.Namespace == h.ns {
			assert.Nil(t, p.DeletionTimestamp, "pod %s/%s evicted while paused", p.Namespace, p.Name)
		}
	}

	down := extraNode(t, "e2e-pause-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	ns := namespace(t, "e2e-pause-new")
	pv, _ := luksVolume(t, ns, down, 25*time.Minute, 2)
	next := request(t, ns, v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target: v1alpha1.Target{PersistentVolume: pv}, Reason: "holder shut down while Remediator is paused"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &v1alpha1.RemediationRequest{}
		require.NoError(c, k8s.Get(ctx, next, got))
		assert.Equal(c, v1alpha1.PhaseWaiting, got.Status.Phase, describe(got))
		assert.True(c, isPaused(got), describe(got))
	}, 60*time.Second, poll, "the new request waits, Paused")
	assert.True(t, leaseExists(t, pv), "nothing starts while paused")

	remediatorCLI(t, "resume", "--reason", "firmware done", "--pause-configmap", pauseCM)
	for _, key := range []types.NamespacedName{h.key, next} {
		got := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
		require.Equal(t, v1alpha1.PhaseSucceeded, got.Status.Phase, describe(got))
	}
	assert.False(t, leaseExists(t, h.pv))
	assert.False(t, leaseExists(t, pv))
}

// TestExcludedNodeIsRejected: remediator.io/exclude=true on a node keeps every
// playbook off it; the request says so, and the Lease stays.
func TestExcludedNodeIsRejected(t *testing.T) {
	startController(t)
	down := extraNode(t, "e2e-excluded", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	ctx := context.Background()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: down}, node); err != nil {
			return err
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[v1alpha1.LabelExclude] = "true"
		return k8s.Update(ctx, node)
	}))
	ns := namespace(t, "e2e-excluded")
	pv, _ := luksVolume(t, ns, down, 25*time.Minute, 2)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target: v1alpha1.Target{PersistentVolume: pv}, Reason: "holder shut down, but the node is kept out"})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	c := condition(rr, v1alpha1.ConditionAccepted)
	require.NotNil(t, c, describe(rr))
	assert.Equal(t, "NodeExcluded", c.Reason, describe(rr))
	assert.True(t, leaseExists(t, pv))
}
