package remediationrequest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/admission"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/test/testenv"
)

// TestFinishedPlaybookReleasesFinalizer: the restore finalizer guards a playbook
// while it runs; once it Succeeded there is nothing to restore, and a finished
// request must not keep it (found by make chaos: every healthy-move-workload and
// restart-node-plugin request ended Succeeded with remediator.io/restore still on
// it, so deleting it waited for a controller, forever after an uninstall). Seen
// failing before the fix: the finalizer was still there after Succeeded.
func TestFinishedPlaybookReleasesFinalizer(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
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
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
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

// TestDeletedMidRunWithoutRestoreEnds: a request deleted mid-run whose playbook has
// nothing to restore (restart-node-plugin: no cordon, so no restore finalizer), kept
// by another owner's finalizer, is ended Failed (Aborted) with its unfinished steps
// skipped, and the slot of the cap it held goes to the next request in line. Before,
// nothing wrote it again: it stayed Running, holding its slot for as long as the
// other finalizer stayed.
func TestDeletedMidRunWithoutRestoreEnds(t *testing.T) {
	const ns = "deleted-mid-run"
	ctx := context.Background()
	admissionNamespace(t, ns)
	key := admissionRequest(t, ns, "a-running", "example.com/keep")
	rr := &v1alpha1.RemediationRequest{}
	require.NoError(t, env.Client.Get(ctx, key, rr))
	rr.Status.Phase, rr.Status.ObservedGeneration = v1alpha1.PhaseRunning, rr.Generation
	rr.Status.Decision = &v1alpha1.Decision{Allowed: true, Playbook: v1alpha1.PlaybookRestartNodePlugin, DecidedAt: metav1.Now(), Generation: rr.Generation}
	rr.Status.Steps = []v1alpha1.StepStatus{
		{Name: v1alpha1.StepDeletePluginPod, State: v1alpha1.StepSucceeded},
		{Name: v1alpha1.StepWaitPluginPodReady, State: v1alpha1.StepRunning},
		{Name: v1alpha1.StepWaitDriverRegistered, State: v1alpha1.StepPending},
	}
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlaybookRunning, Message: "running"})
	require.NoError(t, env.Client.Status().Update(ctx, rr))
	require.NoError(t, env.Client.Delete(ctx, rr))
	next := admissionRequest(t, ns, "b-in-line")
	joinLine(t, next)

	startManager(t, func(r *remediationrequest.Reconciler) {
		r.MaxConcurrent, r.Namespaces = 1, []string{ns}
	})
	got := waitFor(t, key, 20*time.Second, "Failed", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseFailed })
	succeeded := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSucceeded)
	require.NotNil(t, succeeded)
	assert.Equal(t, v1alpha1.ReasonAborted, succeeded.Reason)
	assert.Equal(t, "The request was deleted mid-run; nothing needed restoring", succeeded.Message)
	assert.Equal(t, []v1alpha1.StepState{v1alpha1.StepSucceeded, v1alpha1.StepSkipped, v1alpha1.StepSkipped},
		[]v1alpha1.StepState{got.Status.Steps[0].State, got.Status.Steps[1].State, got.Status.Steps[2].State})
	assert.Equal(t, []string{"example.com/keep"}, got.Finalizers, "another owner's finalizer is theirs")
	testenv.Eventually(t, "b-in-line granted the slot", func() (bool, string) {
		events := &corev1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			seen = append(seen, e.InvolvedObject.Name+"/"+e.Reason)
		}
		return slices.Contains(seen, next.Name+"/"+admission.EventAdmitted), fmt.Sprint(seen)
	})
}
