package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
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
