package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestFinishedPlaybookReleasesFinalizer: the restore finalizer guards a playbook
// while it runs; once it Succeeded there is nothing to restore, and a finished
// request must not keep it (found by make chaos: every healthy-move-workload and
// restart-node-plugin request ended Succeeded with remediator.io/restore still on
// it, so deleting it waited for a controller, forever after an uninstall). Seen
// failing before the fix: the finalizer was still there after Succeeded.
func TestFinishedPlaybookReleasesFinalizer(t *testing.T) {
	ensureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	clock := clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	startManager(t, withClock(clock))

	pod := healthyHolder(t, "envtest-fin", clock.Now())
	key := newRequest(t, "fin", "pvc-envtest-fin", nil)
	running := waitFor(t, key, 20*time.Second, "holding at waitPodsGone with the finalizer", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning && controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer)
	})
	require.True(t, controllerutil.ContainsFinalizer(running, v1alpha1.Finalizer), "a running cordoning playbook carries the finalizer")
	finishTermination(t, pod)
	got := waitFor(t, key, 20*time.Second, "Succeeded without the finalizer", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseSucceeded && !controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer)
	})
	assert.Empty(t, got.Finalizers)
	assert.False(t, nodeCordoned(t, "envtest-fin"), "the node must be uncordoned")

	// Deleting the finished request does not wait for anything.
	require.NoError(t, env.Client.Delete(context.Background(), got))
}

// TestEditAfterTheEndIsSeenNotActedOn: Succeeded is final. A spec edit afterwards is
// recorded as seen (observedGeneration, Ready for that generation, an Event saying
// to create a new request) and nothing runs again. Seen failing before: the early
// return for a finished request left observedGeneration at 1, so kubectl wait and
// kstatus waited for ever.
func TestEditAfterTheEndIsSeenNotActedOn(t *testing.T) {
	ctx := context.Background()
	ensureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	startManager(t)
	shutdownHolder(t, "envtest-edited", time.Now())
	key := newRequest(t, "edited", "pvc-envtest-edited", nil)
	done := waitFor(t, key, 20*time.Second, "Succeeded", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseSucceeded })
	steps := done.Status.Steps
	done.Spec.Reason = "edited after the end: the Lease was already released (INC-4711)"
	require.NoError(t, env.Client.Update(ctx, done))
	got := waitFor(t, key, 20*time.Second, "generation 2 observed", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Generation == 2 && rr.Status.ObservedGeneration == 2
	})
	assert.Equal(t, v1alpha1.PhaseSucceeded, got.Status.Phase)
	assert.Equal(t, steps, got.Status.Steps, "nothing ran again")
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.EqualValues(t, 2, ready.ObservedGeneration)
}
