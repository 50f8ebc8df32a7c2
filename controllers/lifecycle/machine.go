package lifecycle

// A request's life as one state machine. Its state is status.phase and, while it
// waits, status.waitingFor; every change of state is one of the functions below, each
// pure (the request's status in, the next status out, plus the Event to record), and
// each writes the Progressing condition together with waitingFor, so that the two
// never disagree. The reconciler, admission and `remediator plan` change a request's
// state only through them; docs/architecture.md draws the machine.
//
//	(new) ──Decide──> Pending (DryRun) | Rejected | Waiting{...} | Running
//	Waiting{Policy, MaintenanceWindow, Pause, Redecision, Facts} ──Decide──> any of the above
//	Waiting{Slot} ──Grant──> Waiting{Start} ──Decide (admitted)──> Running
//	Waiting{Start} ──GiveBack──> Waiting{Redecision}
//	Running ──Hold──> Running{Pause} ──Resume──> Running
//	Running ──Finish──> Succeeded (FixHeld Unknown while verified);  ──Fail / Abort / RestoreGaveUp / Deleted──> Failed
//	Running ──WindowClosed──> Waiting{MaintenanceWindow}
//	any not ended ──GatherFailed──> (same phase, Pending if none){Facts}
//	Rejected ──Decide at decision.recheckAt──> any

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Event is an Event to record about the request once its status is written.
type Event struct {
	Type, Reason, Message string
}

// EventsOfWrite are the Events one status write records, of the events its changes
// queued, in order. An Event reports what happened, once: the write that accepts a
// playbook and journals a step's start before acting records none for them (the
// conditions and status.steps say so; the step's end follows within the write that
// records it), and the other Normal ones are merged into one, with the last one's
// reason and every message in order. Warnings are each recorded: few, and each
// reason is what someone alerts on (BreakGlass, FixNotHeld). So a Lease release
// records one Event, when it ends, and the Events of a storm stay one per request:
// client-go's recorder drops the Events its queue cannot hold, and each costs the API
// server a write.
func EventsOfWrite(events []Event) []Event {
	var out []Event
	normal := -1 // the index in out of the one Normal Event, once there is one
	for _, e := range events {
		switch {
		case e.Type != corev1.EventTypeNormal:
			out = append(out, e)
		case e.Reason == v1alpha1.EventAccepted || e.Reason == v1alpha1.EventStepStarted:
		case normal < 0:
			normal = len(out)
			out = append(out, e)
		default:
			out[normal].Reason, out[normal].Message = e.Reason, out[normal].Message+"; "+e.Message
		}
	}
	return out
}

// WaitingOf is what rr waits for. A status written before status.waitingFor existed
// carries only the Progressing reason, which is then read instead, so that an upgrade
// does not lose a request's place in line or its grant.
func WaitingOf(rr *v1alpha1.RemediationRequest) v1alpha1.WaitingFor {
	if rr.Status.WaitingFor != "" {
		return rr.Status.WaitingFor
	}
	return legacyWaiting[ProgressingReason(rr)]
}

// legacyWaiting maps the Progressing reasons of waiting states to the state, for
// statuses written without waitingFor.
var legacyWaiting = map[string]v1alpha1.WaitingFor{
	v1alpha1.ReasonWaiting:          v1alpha1.WaitingForPolicy,
	v1alpha1.ReasonWaitingForWindow: v1alpha1.WaitingForWindow,
	v1alpha1.ReasonWindowClosed:     v1alpha1.WaitingForWindow,
	v1alpha1.ReasonPaused:           v1alpha1.WaitingForPause,
	v1alpha1.ReasonWaitingForSlot:   v1alpha1.WaitingForSlot,
	v1alpha1.ReasonAdmitted:         v1alpha1.WaitingForStart,
	v1alpha1.ReasonSlotExpired:      v1alpha1.WaitingForRedecision,
	v1alpha1.ReasonGatherFailed:     v1alpha1.WaitingForFacts,
}

// Waits reports whether rr is in phase Waiting, waiting for w.
func Waits(rr *v1alpha1.RemediationRequest, w v1alpha1.WaitingFor) bool {
	return rr.Status.Phase == v1alpha1.PhaseWaiting && WaitingOf(rr) == w
}

// HeldByPause reports whether the request waits, or its running playbook holds,
// because of the pause.
func HeldByPause(rr *v1alpha1.RemediationRequest) bool {
	return WaitingOf(rr) == v1alpha1.WaitingForPause
}

// NeedsDecision reports whether rr is decided on this reconcile: a new request, a
// changed spec (unless a playbook is under way or over), a request waiting on the
// policy (reconciled when a conflict may have cleared), on the pause or on its facts,
// one granted a slot, or a rejection or wait whose recheck time has come. Otherwise a
// decision stands: a request in line for a slot is decided again when granted one.
func NeedsDecision(rr *v1alpha1.RemediationRequest, now time.Time) bool {
	switch rr.Status.Phase {
	case v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		return false
	}
	d := rr.Status.Decision
	if d == nil || rr.Status.ObservedGeneration != rr.Generation {
		return true
	}
	switch WaitingOf(rr) {
	case v1alpha1.WaitingForPause, v1alpha1.WaitingForFacts:
		return true
	case v1alpha1.WaitingForPolicy, v1alpha1.WaitingForStart:
		if rr.Status.Phase == v1alpha1.PhaseWaiting {
			return true
		}
	}
	return d.RecheckAt != nil && !now.Before(d.RecheckAt.Time)
}

// Apply writes decision o, made on facts f, into rr's status: the transition out of
// every state that is decided (see NeedsDecision).
func (o Transition) Apply(rr *v1alpha1.RemediationRequest, f *v1alpha1.Facts) Event {
	st, dec := &rr.Status, o.Decision
	st.Facts, st.Decision, st.Steps, st.Phase = f, &dec, o.Steps, o.Phase
	setCondition(rr, v1alpha1.ConditionAccepted, o.Accepted.Status, o.Accepted.Reason, o.Accepted.Message)
	progress(rr, o.WaitingFor, o.Progressing.Status, o.Progressing.Reason, o.Progressing.Message)
	if o.Steps != nil {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionSucceeded)
	}
	return Event{o.EventType, o.EventReason, o.EventMessage}
}

// Grant gives rr, in line, a slot of the cap at now: it is decided again on fresh
// facts before its playbook starts in it.
func Grant(rr *v1alpha1.RemediationRequest, now metav1.Time, msg string) {
	rr.Status.AdmittedAt = &now
	progressAt(rr, v1alpha1.WaitingForStart, metav1.ConditionTrue, v1alpha1.ReasonAdmitted, msg, now)
}

// GiveBack takes back the slot of a request that did not start its first step in
// time: it goes back to Waiting, to be decided again at once.
func GiveBack(rr *v1alpha1.RemediationRequest, now metav1.Time, msg string) {
	rr.Status.Phase, rr.Status.AdmittedAt = v1alpha1.PhaseWaiting, nil
	if d := rr.Status.Decision; d != nil {
		d.RecheckAt = &now
	}
	progressAt(rr, v1alpha1.WaitingForRedecision, metav1.ConditionTrue, v1alpha1.ReasonSlotExpired, msg, now)
}

// Hold keeps a running playbook where it is while Remediator is paused, and reports
// whether it was not held already (the caller then announces it).
func Hold(rr *v1alpha1.RemediationRequest, msg string) (started bool) {
	started = !HeldByPause(rr)
	progress(rr, v1alpha1.WaitingForPause, metav1.ConditionTrue, v1alpha1.ReasonPaused, msg)
	return started
}

// Resume lets a playbook the pause held go on; a playbook that was not held is left
// as it is.
func Resume(rr *v1alpha1.RemediationRequest) {
	if HeldByPause(rr) {
		progress(rr, "", metav1.ConditionTrue, v1alpha1.ReasonPlaybookRunning,
			fmt.Sprintf("Running playbook %s (resumed)", DecidedPlaybook(rr)))
	}
}

// GatherFailed records that rr's facts could not be read (msg says why): it is not
// decided, and is decided again on its next reconcile. It reports whether the
// answer is new, so that the caller announces each different answer once.
func GatherFailed(rr *v1alpha1.RemediationRequest, msg string) (changed bool) {
	if rr.Status.Phase == "" {
		rr.Status.Phase = v1alpha1.PhasePending
	}
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	changed = c == nil || c.Reason != v1alpha1.ReasonGatherFailed || c.Message != msg
	progress(rr, v1alpha1.WaitingForFacts, metav1.ConditionFalse, v1alpha1.ReasonGatherFailed, msg)
	// The status describes this generation: it says why it is not decided yet.
	rr.Status.ObservedGeneration = rr.Generation
	return changed
}

// Finish ends a running playbook Succeeded at now, and opens its fix window of
// fixWindow (zero: fixes are not verified).
func Finish(rr *v1alpha1.RemediationRequest, now time.Time, fixWindow time.Duration) Event {
	rr.Status.Phase = v1alpha1.PhaseSucceeded
	msg := fmt.Sprintf("Playbook %s completed", DecidedPlaybook(rr))
	setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, v1alpha1.ReasonPlaybookCompleted, msg)
	progress(rr, "", metav1.ConditionFalse, v1alpha1.ReasonPlaybookCompleted, msg)
	openFixWindow(rr, now, fixWindow)
	return Event{corev1.EventTypeNormal, v1alpha1.EventDone, msg}
}

// Fail ends a running playbook Failed: Succeeded False with reason (the step's
// failure, Aborted, RestoreFailed), Progressing False with progressing.
func Fail(rr *v1alpha1.RemediationRequest, reason, progressing, msg string) Event {
	rr.Status.Phase = v1alpha1.PhaseFailed
	setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, reason, msg)
	progress(rr, "", metav1.ConditionFalse, progressing, msg)
	return Event{corev1.EventTypeWarning, v1alpha1.EventFailed, msg}
}

// Abort fails a running playbook before its next destructive step because why;
// restored says what was restored (reason Aborted), or why the restore gave up
// (reason RestoreFailed). The steps not done are skipped.
func Abort(rr *v1alpha1.RemediationRequest, reason, why, restored string) Event {
	skip(rr, "Skipped: aborted because "+why, v1alpha1.StepPending, v1alpha1.StepRunning)
	msg := fmt.Sprintf("Aborted before the next destructive step because %s; %s", why, cmp.Or(restored, "nothing needed restoring"))
	return Fail(rr, reason, v1alpha1.ReasonAborted, msg)
}

// RestoreGaveUp fails a running playbook whose restore gave up (what stopped it,
// then the restore's message naming the node left cordoned).
func RestoreGaveUp(rr *v1alpha1.RemediationRequest, reason, what, restore string) Event {
	skip(rr, "Skipped: the restore failed", v1alpha1.StepPending, v1alpha1.StepRunning)
	return Fail(rr, reason, v1alpha1.ReasonFailed, what+"; "+restore)
}

// Deleted fails a request deleted mid-run: reason is Aborted, or the restore's
// failure, and restored says what the restore did.
func Deleted(rr *v1alpha1.RemediationRequest, reason, restored string) Event {
	skip(rr, "Skipped: the request was deleted", v1alpha1.StepPending, v1alpha1.StepRunning)
	rr.Status.Phase = v1alpha1.PhaseFailed
	setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, reason, "The request was deleted mid-run; "+restored)
	progress(rr, "", metav1.ConditionFalse, v1alpha1.ReasonAborted, "Aborted")
	return Event{corev1.EventTypeWarning, v1alpha1.EventFailed, "Aborted: the request was deleted mid-run; " + restored}
}

// WindowClosed sends a running playbook whose maintenance window closed before its
// next destructive step back to Waiting, restored (what says what), to be decided
// again on fresh facts when the next window opens.
func WindowClosed(rr *v1alpha1.RemediationRequest, opens time.Time, stopped, what string) Event {
	skip(rr, "Skipped: the maintenance window closed before it started", v1alpha1.StepPending)
	at := metav1.NewTime(opens)
	rr.Status.Decision.RecheckAt = &at
	rr.Status.Phase = v1alpha1.PhaseWaiting
	msg := fmt.Sprintf("%s; %s. The request is decided again when the next window opens at %s.",
		stopped, what, Stamp(opens))
	progress(rr, v1alpha1.WaitingForWindow, metav1.ConditionTrue, v1alpha1.ReasonWindowClosed, msg)
	return Event{corev1.EventTypeWarning, v1alpha1.ReasonWindowClosed, msg}
}

// skip marks the steps in one of states as skipped, with msg.
func skip(rr *v1alpha1.RemediationRequest, msg string, states ...v1alpha1.StepState) {
	for i := range rr.Status.Steps {
		if st := &rr.Status.Steps[i]; slices.Contains(states, st.State) {
			st.State, st.Message = v1alpha1.StepSkipped, msg
		}
	}
}

// progress sets the Progressing condition and, with it, status.waitingFor: the one
// place both are written.
func progress(rr *v1alpha1.RemediationRequest, w v1alpha1.WaitingFor, status metav1.ConditionStatus, reason, msg string) {
	progressAt(rr, w, status, reason, msg, metav1.Time{})
}

// progressAt is progress with the condition's transition time (zero: now, or kept
// when the status does not change).
func progressAt(rr *v1alpha1.RemediationRequest, w v1alpha1.WaitingFor, status metav1.ConditionStatus, reason, msg string, at metav1.Time) {
	rr.Status.WaitingFor = w
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: rr.Generation, LastTransitionTime: at})
}

func setCondition(rr *v1alpha1.RemediationRequest, t string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{
		Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: rr.Generation,
	})
}

// CurrentStep is status.currentStep: the running step, else the next pending one
// while the request runs or waits, as "position/count name".
func CurrentStep(st v1alpha1.RemediationRequestStatus) string {
	at := slices.IndexFunc(st.Steps, func(s v1alpha1.StepStatus) bool { return s.State == v1alpha1.StepRunning })
	if at < 0 && (st.Phase == v1alpha1.PhaseRunning || st.Phase == v1alpha1.PhaseWaiting) {
		at = slices.IndexFunc(st.Steps, func(s v1alpha1.StepStatus) bool { return s.State == v1alpha1.StepPending || s.State == "" })
	}
	if at < 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d %s", at+1, len(st.Steps), st.Steps[at].Name)
}

// Derive computes what the status write of after, read as before, derives rather
// than decides: the current step, Ready and Stalled, and the outcome record.
func Derive(before, after *v1alpha1.RemediationRequest, now time.Time) {
	after.Status.CurrentStep = CurrentStep(after.Status)
	SetReadiness(after)
	setOutcome(before, after, now)
}

// setOutcome updates status.outcome of after, whose status was read as before, at
// now: a new record when this write ends the request (its phase becomes terminal, or
// a rejection is decided again) with a result, reason or generation the record does
// not hold yet; none while the request is not in a terminal phase. It reads Ready's
// reason, so SetReadiness runs first.
func setOutcome(before, after *v1alpha1.RemediationRequest, now time.Time) {
	st := &after.Status
	if !st.Phase.Terminal() {
		st.Outcome = nil
		return
	}
	if st.Phase == before.Status.Phase && !NewDecision(before, after) {
		// Not this write's outcome: one that ended before records (this feature
		// included) would get a finishedAt that is only the time it was seen.
		return
	}
	reason := ""
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c != nil {
		reason = c.Reason
	}
	gen := st.ObservedGeneration
	if o := st.Outcome; o != nil && o.Result == st.Phase && o.Reason == reason && o.Generation == gen {
		return
	}
	st.Outcome = &v1alpha1.Outcome{
		Result: st.Phase, Reason: reason, Generation: gen,
		FinishedAt: metav1.NewTime(now.Truncate(time.Second)),
		Commit:     after.Annotations[v1alpha1.AnnotationGitCommit],
	}
}

// NewDecision reports whether after carries a decision that before did not, so a
// rejection that was re-checked and rejected again counts again.
func NewDecision(before, after *v1alpha1.RemediationRequest) bool {
	a, b := after.Status.Decision, before.Status.Decision
	return a != nil && (b == nil || !a.DecidedAt.Equal(&b.DecidedAt) || a.Generation != b.Generation)
}
