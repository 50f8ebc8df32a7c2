package lifecycle_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/decisiontest"
)

// state is where a request is: its phase and what it waits for.
type state struct {
	Phase   v1alpha1.Phase
	Waiting v1alpha1.WaitingFor
}

func (s state) String() string {
	if s.Waiting == "" {
		return string(s.Phase)
	}
	return fmt.Sprintf("%s{%s}", s.Phase, s.Waiting)
}

// TestTransitions: every transition of a request's state machine, one row each, from
// the state it leaves to the state it reaches, with the Progressing reason and
// Ready that are written from it and whether the reconciler decides it again next.
// Every state a request can reach is the end of some row (see the end of the test).
func TestTransitions(t *testing.T) {
	policy, playbooks := decisiontest.Deciders(t)
	cases := map[string]decisiontest.Case{}
	for _, c := range decisiontest.Cases() {
		cases[c.Name] = c
	}
	now := decisiontest.Now

	// decide decides the table's case name for rr, with the pause's message and a
	// granted slot as given.
	decide := func(name, paused string, admitted bool) func(*testing.T, *v1alpha1.RemediationRequest) {
		return func(t *testing.T, rr *v1alpha1.RemediationRequest) {
			c, ok := cases[name]
			require.True(t, ok, "no decision case %q", name)
			rr.Spec = c.Request.Spec
			in := lifecycle.DecisionInput{Request: rr, Facts: c.Facts, Others: c.Others, MaxConcurrent: c.MaxConcurrent,
				Paused: paused, Admitted: admitted, Now: now}
			lifecycle.Decide(policy, playbooks, in).Apply(rr, c.Facts)
		}
	}
	do := func(f func(*v1alpha1.RemediationRequest)) func(*testing.T, *v1alpha1.RemediationRequest) {
		return func(_ *testing.T, rr *v1alpha1.RemediationRequest) { f(rr) }
	}
	at := metav1.NewTime(now)
	var (
		grant    = do(func(rr *v1alpha1.RemediationRequest) { lifecycle.Grant(rr, at, "granted") })
		giveBack = do(func(rr *v1alpha1.RemediationRequest) { lifecycle.GiveBack(rr, at, "given back") })
		hold     = do(func(rr *v1alpha1.RemediationRequest) { lifecycle.Hold(rr, "paused") })
		resume   = do(lifecycle.Resume)
		gather   = do(func(rr *v1alpha1.RemediationRequest) { lifecycle.GatherFailed(rr, "forbidden") })
		finish   = do(func(rr *v1alpha1.RemediationRequest) { lifecycle.Finish(rr, now, 0) })
		fail     = do(func(rr *v1alpha1.RemediationRequest) {
			lifecycle.Fail(rr, v1alpha1.ReasonStepFailed, v1alpha1.ReasonFailed, "cordon failed")
		})
		abort = do(func(rr *v1alpha1.RemediationRequest) {
			lifecycle.Abort(rr, v1alpha1.ReasonAborted, "the spec changed", "")
		})
		gaveUp = do(func(rr *v1alpha1.RemediationRequest) {
			lifecycle.RestoreGaveUp(rr, remediations.ReasonRestoreFailed, "aborted", "node kwok-node-2 stays cordoned")
		})
		deleted = do(func(rr *v1alpha1.RemediationRequest) {
			lifecycle.Deleted(rr, v1alpha1.ReasonAborted, "nothing to restore")
		})
		closed = do(func(rr *v1alpha1.RemediationRequest) {
			lifecycle.WindowClosed(rr, now.Add(time.Hour), "the window closed", "restored: the cordon")
		})
	)

	var (
		fresh      = state{}
		pending    = state{v1alpha1.PhasePending, ""}
		rejected   = state{v1alpha1.PhaseRejected, ""}
		running    = state{v1alpha1.PhaseRunning, ""}
		succeeded  = state{v1alpha1.PhaseSucceeded, ""}
		failed     = state{v1alpha1.PhaseFailed, ""}
		onPolicy   = state{v1alpha1.PhaseWaiting, v1alpha1.WaitingForPolicy}
		onWindow   = state{v1alpha1.PhaseWaiting, v1alpha1.WaitingForWindow}
		onPause    = state{v1alpha1.PhaseWaiting, v1alpha1.WaitingForPause}
		inLine     = state{v1alpha1.PhaseWaiting, v1alpha1.WaitingForSlot}
		granted    = state{v1alpha1.PhaseWaiting, v1alpha1.WaitingForStart}
		givenBack  = state{v1alpha1.PhaseWaiting, v1alpha1.WaitingForRedecision}
		held       = state{v1alpha1.PhaseRunning, v1alpha1.WaitingForPause}
		noFacts    = state{v1alpha1.PhasePending, v1alpha1.WaitingForFacts}
		rejNoFacts = state{v1alpha1.PhaseRejected, v1alpha1.WaitingForFacts}
	)

	const (
		disruptive = "healthy, Lease stuck"
		release    = "shut-down holder"
	)
	rows := []struct {
		from   state
		via    string
		do     func(*testing.T, *v1alpha1.RemediationRequest)
		to     state
		reason string
		ready  metav1.ConditionStatus
		decide bool // NeedsDecision of the state reached
	}{
		// Decided, from a new request.
		{fresh, "Decide: a Lease release for a holder shut down", decide(release, "", false), running, v1alpha1.ReasonPlaybookRunning, metav1.ConditionFalse, false},
		{fresh, "Decide: dry run", decide("shut-down holder, dry run", "", false), pending, v1alpha1.ReasonDryRun, metav1.ConditionTrue, false},
		{fresh, "Decide: rejected by the policy", decide("unreachable, not fenced", "", false), rejected, v1alpha1.ReasonRejected, metav1.ConditionFalse, false},
		{fresh, "Decide: another request runs on the Lease", decide("another request runs on the Lease", "", false), onPolicy, v1alpha1.ReasonWaiting, metav1.ConditionFalse, true},
		{fresh, "Decide: outside the maintenance window", decide("window closed", "", false), onWindow, v1alpha1.ReasonWaitingForWindow, metav1.ConditionFalse, false},
		{fresh, "Decide: paused", decide(release, "Remediator is paused", false), onPause, v1alpha1.ReasonPaused, metav1.ConditionFalse, true},
		{fresh, "Decide: disruptive, no slot", decide(disruptive, "", false), inLine, v1alpha1.ReasonWaitingForSlot, metav1.ConditionFalse, false},
		{fresh, "GatherFailed", gather, noFacts, v1alpha1.ReasonGatherFailed, metav1.ConditionFalse, true},
		// The slot's line.
		{inLine, "Grant", grant, granted, v1alpha1.ReasonAdmitted, metav1.ConditionFalse, true},
		{granted, "Decide: admitted", decide(disruptive, "", true), running, v1alpha1.ReasonPlaybookRunning, metav1.ConditionFalse, false},
		{granted, "GiveBack", giveBack, givenBack, v1alpha1.ReasonSlotExpired, metav1.ConditionFalse, true},
		{givenBack, "Decide: back in line", decide(disruptive, "", false), inLine, v1alpha1.ReasonWaitingForSlot, metav1.ConditionFalse, false},
		// Waits that are decided again.
		{onPolicy, "Decide: the conflict cleared", decide(release, "", false), running, v1alpha1.ReasonPlaybookRunning, metav1.ConditionFalse, false},
		{onPause, "Decide: resumed", decide(release, "", false), running, v1alpha1.ReasonPlaybookRunning, metav1.ConditionFalse, false},
		{onWindow, "Decide: the window opened", decide(release, "", false), running, v1alpha1.ReasonPlaybookRunning, metav1.ConditionFalse, false},
		{noFacts, "Decide: the facts read", decide(release, "", false), running, v1alpha1.ReasonPlaybookRunning, metav1.ConditionFalse, false},
		{rejected, "GatherFailed at the recheck", gather, rejNoFacts, v1alpha1.ReasonGatherFailed, metav1.ConditionFalse, true},
		{rejNoFacts, "Decide: rejected again", decide("unreachable, not fenced", "", false), rejected, v1alpha1.ReasonRejected, metav1.ConditionFalse, false},
		// A running playbook.
		{running, "Hold", hold, held, v1alpha1.ReasonPaused, metav1.ConditionFalse, false},
		{held, "Resume", resume, running, v1alpha1.ReasonPlaybookRunning, metav1.ConditionFalse, false},
		{running, "Finish", finish, succeeded, v1alpha1.ReasonPlaybookCompleted, metav1.ConditionTrue, false},
		{running, "Fail", fail, failed, v1alpha1.ReasonFailed, metav1.ConditionFalse, false},
		{held, "Abort", abort, failed, v1alpha1.ReasonAborted, metav1.ConditionFalse, false},
		{running, "RestoreGaveUp", gaveUp, failed, v1alpha1.ReasonFailed, metav1.ConditionFalse, false},
		{running, "Deleted", deleted, failed, v1alpha1.ReasonAborted, metav1.ConditionFalse, false},
		{running, "WindowClosed", closed, onWindow, v1alpha1.ReasonWindowClosed, metav1.ConditionFalse, false},
	}

	// in builds a request in state s, as the machine leaves it: each row's start is
	// reached by the rows before it, so it is built by replaying them.
	reached := map[state]*v1alpha1.RemediationRequest{fresh: {}}
	for _, row := range rows {
		name := fmt.Sprintf("%s --%s--> %s", row.from, row.via, row.to)
		from, ok := reached[row.from]
		require.True(t, ok, "%s: no earlier row reaches %s", name, row.from)
		rr := from.DeepCopy()
		rr.Name, rr.Namespace, rr.Generation, rr.UID = "r", "remediator", 1, "uid-request"
		rr.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
		before := rr.DeepCopy()
		row.do(t, rr)
		rr.Status.ObservedGeneration = rr.Generation
		lifecycle.Derive(before, rr, now)

		got := state{rr.Status.Phase, rr.Status.WaitingFor}
		assert.Equal(t, row.to, got, "%s: state", name)
		assert.Equal(t, row.to.Waiting, lifecycle.WaitingOf(rr), "%s: WaitingOf", name)
		if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing); assert.NotNil(t, c, name) {
			assert.Equal(t, row.reason, c.Reason, "%s: Progressing reason", name)
		}
		if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady); assert.NotNil(t, c, name) {
			assert.Equal(t, row.ready, c.Status, "%s: Ready", name)
		}
		assert.Equal(t, row.decide, lifecycle.NeedsDecision(rr, now), "%s: NeedsDecision", name)
		if _, seen := reached[row.to]; !seen {
			reached[row.to] = rr
		}
	}

	// Every phase, and every waiting sub-state the CRD allows, is reached.
	var phases []v1alpha1.Phase
	var waits []v1alpha1.WaitingFor
	for s := range reached {
		phases, waits = append(phases, s.Phase), append(waits, s.Waiting)
	}
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseRejected, v1alpha1.PhaseWaiting,
		v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed} {
		assert.Contains(t, phases, p, "no row reaches phase %s", p)
	}
	for _, w := range []v1alpha1.WaitingFor{v1alpha1.WaitingForPolicy, v1alpha1.WaitingForWindow, v1alpha1.WaitingForPause,
		v1alpha1.WaitingForSlot, v1alpha1.WaitingForStart, v1alpha1.WaitingForRedecision, v1alpha1.WaitingForFacts} {
		assert.True(t, slices.Contains(waits, w), "no row reaches a wait for %s", w)
	}
}

// TestWaitingOfAStatusWithoutTheField: a status written before status.waitingFor
// existed is read from its Progressing reason, so an upgrade keeps a request's place
// in line, its grant and its pause.
func TestWaitingOfAStatusWithoutTheField(t *testing.T) {
	for reason, want := range map[string]v1alpha1.WaitingFor{
		v1alpha1.ReasonWaiting: v1alpha1.WaitingForPolicy, v1alpha1.ReasonWaitingForSlot: v1alpha1.WaitingForSlot,
		v1alpha1.ReasonAdmitted: v1alpha1.WaitingForStart, v1alpha1.ReasonSlotExpired: v1alpha1.WaitingForRedecision,
		v1alpha1.ReasonPaused: v1alpha1.WaitingForPause, v1alpha1.ReasonGatherFailed: v1alpha1.WaitingForFacts,
		v1alpha1.ReasonWaitingForWindow: v1alpha1.WaitingForWindow, v1alpha1.ReasonPlaybookRunning: "",
	} {
		rr := &v1alpha1.RemediationRequest{}
		rr.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason}}
		assert.Equal(t, want, lifecycle.WaitingOf(rr), reason)
	}
}

func TestEventsOfWrite(t *testing.T) {
	normal := func(reason, msg string) lifecycle.Event {
		return lifecycle.Event{Type: corev1.EventTypeNormal, Reason: reason, Message: msg}
	}
	warning := func(reason, msg string) lifecycle.Event {
		return lifecycle.Event{Type: corev1.EventTypeWarning, Reason: reason, Message: msg}
	}
	for name, tc := range map[string]struct {
		queued, want []lifecycle.Event
	}{
		"none": {},
		"a release's first write: accepted, the delete journaled": {
			queued: []lifecycle.Event{normal(v1alpha1.EventAccepted, "Accepted: node-shutdown"), normal(v1alpha1.EventStepStarted, "Started deleteLease")},
		},
		"a release's last write: the step done and the outcome, one Event": {
			queued: []lifecycle.Event{normal(v1alpha1.EventStepSucceeded, "Deleted Lease trident/pvc-1 held by n1"), normal(v1alpha1.EventDone, "Playbook node-shutdown completed")},
			want:   []lifecycle.Event{normal(v1alpha1.EventDone, "Deleted Lease trident/pvc-1 held by n1; Playbook node-shutdown completed")},
		},
		"a warning is kept apart from the normal ones": {
			queued: []lifecycle.Event{normal(v1alpha1.EventStepSucceeded, "Evicted"), warning("WindowClosedAfterEviction", "closed"), normal(v1alpha1.EventDone, "completed")},
			want:   []lifecycle.Event{normal(v1alpha1.EventDone, "Evicted; completed"), warning("WindowClosedAfterEviction", "closed")},
		},
		"each warning is its own Event": {
			queued: []lifecycle.Event{warning("BreakGlass", "written by break glass"), warning(v1alpha1.EventRejected, "Rejected: holder-healthy")},
			want:   []lifecycle.Event{warning("BreakGlass", "written by break glass"), warning(v1alpha1.EventRejected, "Rejected: holder-healthy")},
		},
		"a rejection is an outcome": {
			queued: []lifecycle.Event{warning(v1alpha1.EventRejected, "Rejected: holder-healthy")},
			want:   []lifecycle.Event{warning(v1alpha1.EventRejected, "Rejected: holder-healthy")},
		},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, lifecycle.EventsOfWrite(tc.queued))
		})
	}
}
