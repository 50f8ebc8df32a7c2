//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestPauseFreezesAHeldEvictionsTimeout: a pause freezes a running step's clock on
// the local cluster. A healthy holder's eviction is refused by a
// PodDisruptionBudget; paused during it for longer than the eviction timeout (the
// controller's, shortened to pauseEvictionTimeout), the request stays Running with
// the node cordoned and the pod in place, even when the held request is reconciled
// after the timeout passed (pausing again with a new reason wakes it). Before, the
// step's timeout was checked before the pause, so the request failed and its
// restore uncordoned the node. Resumed, the eviction goes on with the time it had
// left, the journal says how long it was paused, and once the budget is lifted the
// request succeeds.
func TestPauseFreezesAHeldEvictionsTimeout(t *testing.T) {
	ctx := context.Background()
	const pauseEvictionTimeout = 30 * time.Second
	system := namespace(t, "e2e-pause-pdb-system")
	pauseCM := system + "/remediator-pause"
	startController(t, "--pause-configmap", pauseCM, "--eviction-timeout", pauseEvictionTimeout.String())
	const node = "kwok-node-0"
	h := heldAfterCordon(t, "e2e-pause-pdb", node, "retained Lease on the db volume, paused while a budget holds the eviction")

	remediatorCLI(t, "pause", "--reason", "INC-4713: array firmware", "--pause-configmap", pauseCM)
	eviction := func(rr *v1alpha1.RemediationRequest) v1alpha1.StepStatus {
		i := slices.IndexFunc(rr.Status.Steps, func(st v1alpha1.StepStatus) bool { return st.Name == v1alpha1.StepDeleteAffectedPods })
		if i < 0 {
			return v1alpha1.StepStatus{}
		}
		return rr.Status.Steps[i]
	}
	progressing := func(rr *v1alpha1.RemediationRequest) (reason, message string) {
		if c := condition(rr, v1alpha1.ConditionProgressing); c != nil {
			return c.Reason, c.Message
		}
		return "", ""
	}
	rr := &v1alpha1.RemediationRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(ctx, h.key, rr))
		reason, _ := progressing(rr)
		assert.Equal(c, v1alpha1.ReasonPaused, reason, describe(rr))
		assert.NotNil(c, eviction(rr).PausedSince, "the pause is journaled on the running eviction: %+v", rr.Status.Steps)
	}, 30*time.Second, poll, "the eviction held by the pause")
	started, pausedSince := eviction(rr).StartedAt, eviction(rr).PausedSince
	require.NotNil(t, started, describe(rr))

	// Let the eviction timeout pass on the wall clock while paused, then wake the held
	// request: it must read the pause again after the timeout, not only before it.
	// Counted from when the controller journaled the pause, which on a loaded machine
	// comes seconds after the step started: the pause itself then lasts longer than
	// the timeout too.
	time.Sleep(time.Until(pausedSince.Add(pauseEvictionTimeout + 5*time.Second)))
	require.True(t, time.Now().After(started.Add(pauseEvictionTimeout)), "the eviction timeout passed on the wall clock")
	remediatorCLI(t, "pause", "--reason", "INC-4713: array firmware, second pass", "--pause-configmap", pauseCM)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(ctx, h.key, rr))
		_, msg := progressing(rr)
		assert.True(c, strings.Contains(msg, "second pass") || rr.Status.Phase != v1alpha1.PhaseRunning, describe(rr))
	}, 30*time.Second, poll, "the held request reconciled after the eviction timeout")
	require.Equal(t, v1alpha1.PhaseRunning, rr.Status.Phase, "a paused eviction must not time out: %s", describe(rr))
	assert.Equal(t, v1alpha1.StepRunning, eviction(rr).State, "%+v", rr.Status.Steps)
	n := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n))
	assert.True(t, n.Spec.Unschedulable, "a held playbook keeps its cordon")
	assert.True(t, leaseExists(t, h.pv), "the Lease is kept while paused")
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(ctx, pods))
	for _, p := range pods.Items {
		if p.Namespace == h.ns {
			assert.Nil(t, p.DeletionTimestamp, "pod %s/%s evicted while paused", p.Namespace, p.Name)
		}
	}

	// Resumed: the eviction goes on with the time it had left, the pause journaled.
	remediatorCLI(t, "resume", "--reason", "firmware done", "--pause-configmap", pauseCM)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(ctx, h.key, rr))
		reason, _ := progressing(rr)
		assert.NotEqual(c, v1alpha1.ReasonPaused, reason, describe(rr))
	}, 30*time.Second, poll, "the playbook resumed")
	require.Equal(t, v1alpha1.PhaseRunning, rr.Status.Phase, "resumed with time left, the eviction goes on: %s", describe(rr))
	st := eviction(rr)
	assert.Nil(t, st.PausedSince, "%+v", st)
	if assert.NotNil(t, st.PausedFor, "%+v", st) {
		assert.GreaterOrEqual(t, st.PausedFor.Duration, pauseEvictionTimeout, "the pause lasted longer than the timeout: %+v", st)
	}

	// The budget lifted, the eviction happens and the playbook finishes.
	require.NoError(t, k8s.Delete(ctx, h.pdb))
	got := waitPhase(t, h.key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseSucceeded, got.Status.Phase, describe(got))
	assert.False(t, leaseExists(t, h.pv))
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n))
	assert.False(t, n.Spec.Unschedulable, "the playbook uncordoned %s", node)
}
