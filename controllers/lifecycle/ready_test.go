package lifecycle

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/requests"
)

// TestReadiness: the Ready condition of every phase, as kubectl wait and kstatus read
// it, and Stalled where kstatus must report a failure rather than progress.
func TestReadiness(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: 3}
	}
	const (
		yes     = metav1.ConditionTrue
		no      = metav1.ConditionFalse
		unknown = metav1.ConditionUnknown
	)
	accepted := cond(v1alpha1.ConditionAccepted, yes, "NodeShutdown", "the holder is shut down")
	decision := &v1alpha1.Decision{Message: "the decision's message"}
	cases := []struct {
		name        string
		phase       v1alpha1.Phase
		conditions  []metav1.Condition
		currentStep string
		decision    *v1alpha1.Decision

		want        metav1.ConditionStatus
		wantReason  string
		wantMessage string
		wantStalled bool
	}{
		{name: "new, nothing decided", phase: "",
			want: no, wantReason: v1alpha1.ReasonPending, wantMessage: "The controller has not decided the request yet"},
		{name: "Pending, not decided", phase: v1alpha1.PhasePending,
			want: no, wantReason: v1alpha1.ReasonPending, wantMessage: "The controller has not decided the request yet"},
		{name: "Pending, a decided DryRun did all it was asked", phase: v1alpha1.PhasePending,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, no, v1alpha1.ReasonDryRun, "DryRun: playbook node-shutdown would run deleteLease; nothing was changed.")},
			want:       yes, wantReason: v1alpha1.ReasonDryRun, wantMessage: "DryRun: playbook node-shutdown would run deleteLease; nothing was changed."},
		{name: "Waiting on a conflict", phase: v1alpha1.PhaseWaiting, decision: decision,
			conditions: []metav1.Condition{cond(v1alpha1.ConditionAccepted, unknown, "ConcurrentRemediation", "another request"), cond(v1alpha1.ConditionProgressing, yes, v1alpha1.ReasonWaiting, "another request runs on the node")},
			want:       no, wantReason: v1alpha1.ReasonWaiting, wantMessage: "another request runs on the node"},
		{name: "Waiting for the maintenance window", phase: v1alpha1.PhaseWaiting, currentStep: "1/5 cordon",
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, yes, v1alpha1.ReasonWaitingForWindow, "waits for the window")},
			want:       no, wantReason: v1alpha1.ReasonWaitingForWindow, wantMessage: "waits for the window"},
		{name: "Waiting for a slot of the cap", phase: v1alpha1.PhaseWaiting,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, yes, v1alpha1.ReasonWaitingForSlot, "waits in line")},
			want:       no, wantReason: v1alpha1.ReasonWaitingForSlot, wantMessage: "waits in line"},
		{name: "Waiting, granted a slot", phase: v1alpha1.PhaseWaiting,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, yes, v1alpha1.ReasonAdmitted, "granted a slot")},
			want:       no, wantReason: v1alpha1.ReasonAdmitted, wantMessage: "granted a slot"},
		{name: "Waiting after the window closed mid-playbook", phase: v1alpha1.PhaseWaiting,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, yes, v1alpha1.ReasonWindowClosed, "the window closed")},
			want:       no, wantReason: v1alpha1.ReasonWindowClosed, wantMessage: "the window closed"},
		{name: "Waiting, held by a pause (any Progressing reason carries over)", phase: v1alpha1.PhaseWaiting,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, yes, "Paused", "paused by on-call")},
			want:       no, wantReason: "Paused", wantMessage: "paused by on-call"},
		{name: "Waiting without a Progressing condition", phase: v1alpha1.PhaseWaiting, decision: decision,
			want: no, wantReason: v1alpha1.ReasonWaiting, wantMessage: "the decision's message"},
		{name: "Running, with the step", phase: v1alpha1.PhaseRunning, currentStep: "2/5 deleteAffectedPods",
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, yes, v1alpha1.ReasonPlaybookRunning, "Running playbook healthy-move-workload: cordon -> deleteAffectedPods")},
			want:       no, wantReason: v1alpha1.ReasonPlaybookRunning, wantMessage: "Running playbook healthy-move-workload: cordon -> deleteAffectedPods; at step 2/5 deleteAffectedPods"},
		{name: "Running, a stale Progressing=False is not taken", phase: v1alpha1.PhaseRunning,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, no, v1alpha1.ReasonRejected, "an older rejection")},
			want:       no, wantReason: v1alpha1.ReasonPlaybookRunning, wantMessage: "Running the playbook"},
		{name: "Succeeded", phase: v1alpha1.PhaseSucceeded,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, no, v1alpha1.ReasonPlaybookCompleted, "Playbook node-shutdown completed"), cond(v1alpha1.ConditionSucceeded, yes, v1alpha1.ReasonPlaybookCompleted, "Playbook node-shutdown completed")},
			want:       yes, wantReason: v1alpha1.ReasonPlaybookCompleted, wantMessage: "Playbook node-shutdown completed"},
		{name: "Succeeded without its condition", phase: v1alpha1.PhaseSucceeded,
			want: yes, wantReason: v1alpha1.ReasonPlaybookCompleted, wantMessage: "The playbook completed"},
		{name: "Rejected by a rule", phase: v1alpha1.PhaseRejected, decision: decision,
			conditions: []metav1.Condition{cond(v1alpha1.ConditionAccepted, no, "UnreachableNotFenced", "The holder is unreachable and nobody fenced it."), cond(v1alpha1.ConditionProgressing, no, v1alpha1.ReasonRejected, "Rejected by policy rule unreachable-not-fenced")},
			want:       no, wantReason: "UnreachableNotFenced", wantMessage: "Rejected: The holder is unreachable and nobody fenced it.", wantStalled: true},
		{name: "Rejected without an Accepted condition", phase: v1alpha1.PhaseRejected, decision: decision,
			want: no, wantReason: v1alpha1.ReasonRejected, wantMessage: "Rejected: the decision's message", wantStalled: true},
		{name: "Failed in a step", phase: v1alpha1.PhaseFailed,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionProgressing, no, v1alpha1.ReasonFailed, "eviction refused"), cond(v1alpha1.ConditionSucceeded, no, v1alpha1.ReasonStepFailed, "eviction refused")},
			want:       no, wantReason: v1alpha1.ReasonStepFailed, wantMessage: "Failed: eviction refused", wantStalled: true},
		{name: "Failed by an abort", phase: v1alpha1.PhaseFailed,
			conditions: []metav1.Condition{accepted, cond(v1alpha1.ConditionSucceeded, no, v1alpha1.ReasonAborted, "Aborted before the next destructive step")},
			want:       no, wantReason: v1alpha1.ReasonAborted, wantMessage: "Failed: Aborted before the next destructive step", wantStalled: true},
		{name: "Failed without a Succeeded condition", phase: v1alpha1.PhaseFailed,
			want: no, wantReason: v1alpha1.ReasonFailed, wantMessage: "Failed: The playbook failed", wantStalled: true},
		{name: "a phase from a newer controller", phase: "Exploded",
			want: unknown, wantReason: reasonUnknownPhase, wantMessage: "Unknown phase Exploded; this controller knows Pending, Waiting, Running, Succeeded, Rejected and Failed"},
	}
	seen := map[v1alpha1.Phase]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seen[tc.phase] = true
			rr := &v1alpha1.RemediationRequest{
				ObjectMeta: metav1.ObjectMeta{Generation: 4},
				Status: v1alpha1.RemediationRequestStatus{ObservedGeneration: 3, Phase: tc.phase, Conditions: tc.conditions,
					CurrentStep: tc.currentStep, Decision: tc.decision},
			}
			SetReadiness(rr)
			ready := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady)
			require.NotNil(t, ready, "no Ready condition: %+v", rr.Status.Conditions)
			assert.Equal(t, tc.want, ready.Status, "Ready status")
			assert.Equal(t, tc.wantReason, ready.Reason, "Ready reason")
			assert.Equal(t, tc.wantMessage, ready.Message, "Ready message")
			assert.Equal(t, int64(3), ready.ObservedGeneration, "Ready carries status.observedGeneration, the generation the status describes")
			assert.False(t, ready.LastTransitionTime.IsZero(), "Ready has a transition time")

			stalledCond := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionStalled)
			if !tc.wantStalled {
				assert.Nil(t, stalledCond, "Stalled is abnormal-true: absent unless Rejected or Failed")
				return
			}
			require.NotNil(t, stalledCond, "no Stalled condition: %+v", rr.Status.Conditions)
			assert.Equal(t, metav1.ConditionTrue, stalledCond.Status)
			assert.Equal(t, ready.Reason, stalledCond.Reason)
			assert.Equal(t, ready.Message, stalledCond.Message)
			assert.Equal(t, ready.ObservedGeneration, stalledCond.ObservedGeneration)
		})
	}
	for _, p := range []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseRejected, v1alpha1.PhaseWaiting, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed} {
		assert.True(t, seen[p], "phase %q has no case", p)
	}
}

// TestReadinessFollowsTheRequest: Ready and Stalled move with the phase (a rejection
// fixed by a new spec runs and succeeds), keep their transition time while their
// status holds, and a second computation on an unchanged status changes nothing, so
// that patchStatus still skips a reconcile that changed nothing else.
func TestReadinessFollowsTheRequest(t *testing.T) {
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	rr.Status.ObservedGeneration = 1
	rr.Status.Phase = v1alpha1.PhaseRejected
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse,
		Reason: "FencingNamesAnotherNode", Message: "spec.fencing.node names another node", ObservedGeneration: 1})
	SetReadiness(rr)
	require.True(t, meta.IsStatusConditionTrue(rr.Status.Conditions, v1alpha1.ConditionStalled), "rejected: %+v", rr.Status.Conditions)
	require.True(t, meta.IsStatusConditionFalse(rr.Status.Conditions, v1alpha1.ConditionReady), "rejected: %+v", rr.Status.Conditions)

	// The same status again: nothing changes, the transition time included.
	before := rr.DeepCopy()
	SetReadiness(rr)
	assert.True(t, apiequality.Semantic.DeepEqual(before.Status, rr.Status), "a second computation changed the status:\n%+v\n%+v", before.Status, rr.Status)

	// The fencing fixed (generation 2): decided again, running. Ready stays False
	// (its transition time with it), Stalled goes.
	since := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady).LastTransitionTime
	rr.Generation, rr.Status.ObservedGeneration, rr.Status.Phase = 2, 2, v1alpha1.PhaseRunning
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonPlaybookRunning, Message: "Running playbook fenced-unreachable: deleteLease", ObservedGeneration: 2})
	SetReadiness(rr)
	assert.Nil(t, meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionStalled), "running: %+v", rr.Status.Conditions)
	ready := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, v1alpha1.ReasonPlaybookRunning, ready.Reason)
	assert.Equal(t, int64(2), ready.ObservedGeneration)
	assert.Equal(t, since, ready.LastTransitionTime, "Ready stayed False: its transition time holds")

	// Succeeded.
	rr.Status.Phase = v1alpha1.PhaseSucceeded
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonPlaybookCompleted, Message: "Playbook fenced-unreachable completed", ObservedGeneration: 2})
	SetReadiness(rr)
	assert.True(t, meta.IsStatusConditionTrue(rr.Status.Conditions, v1alpha1.ConditionReady), "succeeded: %+v", rr.Status.Conditions)
	assert.Nil(t, meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionStalled), "succeeded: %+v", rr.Status.Conditions)
}

// TestReadinessMessageFitsACondition: a message at a condition's limit, with the
// Rejected prefix, is cut at a character boundary by the status write's bound, not
// refused by the API server.
func TestReadinessMessageFitsACondition(t *testing.T) {
	long := strings.Repeat("é", requests.MaxConditionMessage/2)
	rr := &v1alpha1.RemediationRequest{Status: v1alpha1.RemediationRequestStatus{Phase: v1alpha1.PhaseRejected, Conditions: []metav1.Condition{{
		Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: "Rule", Message: long, LastTransitionTime: metav1.NewTime(time.Now())}}}}
	SetReadiness(rr)
	requests.BoundStatus(&rr.Status)
	ready := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady)
	require.NotNil(t, ready)
	assert.LessOrEqual(t, len(ready.Message), requests.MaxConditionMessage)
	assert.True(t, strings.HasPrefix(ready.Message, "Rejected: é"))
	assert.True(t, utf8.ValidString(ready.Message), "cut inside a character")
	assert.Regexp(t, `é… \(\d+ bytes cut\)$`, ready.Message)
}
