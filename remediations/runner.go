package remediations

import (
	"cmp"
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations/failpoint"
)

// Progress is what one Advance did.
type Progress struct {
	// Finished is true when every step has succeeded.
	Finished bool
	// Failure is set when the playbook failed; the journal is already updated.
	Failure *Failure
	// Transition describes a step state change, for an Event; empty when none.
	Transition string
	// Started is true when the transition started a step.
	Started bool
	// RequeueAfter is when to advance again; zero with Finished false means now.
	RequeueAfter time.Duration
	// Stop is the gate's answer when it did not let a step start or act and the
	// caller must hold, abort or wait (Gate); a breached floor is a Failure. The
	// journal is unchanged, but for the pause a held running step records
	// (PausedSince).
	Stop *Stop
	// Note is the gate's note on a step it let start, for the step and an Event.
	Note string
}

// Advance moves the request's journal (status.steps) by at most one transition:
// it starts the next step (journaling StartedAt before anything is done), or checks
// and runs the running one. A step already done in the cluster, for instance by a
// process that crashed before writing status, is recorded without acting again.
func Advance(ctx context.Context, r *Execution) (Progress, error) {
	steps := r.RR.Status.Steps
	for i := range steps {
		st := &steps[i]
		switch st.State {
		case v1alpha1.StepSucceeded, v1alpha1.StepSkipped:
			continue
		case v1alpha1.StepFailed:
			return Progress{Failure: &Failure{Reason: v1alpha1.ReasonStepFailed, Message: st.Message}}, nil
		case v1alpha1.StepPending, "":
			stop, note := r.gate(st.Name, true)
			if stop != nil {
				return Progress{Stop: stop}, nil
			}
			now := metav1.NewTime(r.Now)
			st.State = v1alpha1.StepRunning
			st.StartedAt = &now
			st.Message = cmp.Or(note, "Started")
			return Progress{Started: true, Transition: fmt.Sprintf("Step %d/%d %s started", i+1, len(steps), st.Name), Note: note}, nil
		}

		// A pause freezes a running step where it is: it neither checks, acts nor
		// times out, and the time it is held does not count against its timeout.
		if stop := pauseHold(r.Paused); stop != nil {
			holdStep(st, r.Now)
			return Progress{Stop: stop}, nil
		}
		resumeStep(st, r.Now)

		step, ok := library[st.Name]
		if !ok {
			return failStep(steps, i, r.Now, &Failure{Reason: v1alpha1.ReasonStepFailed, Message: fmt.Sprintf("unknown step %q", st.Name)}), nil
		}
		// A destructive step acts only on fresh facts: gather them before Done, so
		// that an effect that happened in between (the Lease released by Trident) is
		// seen as done rather than as a breached invariant.
		if destructive[st.Name] {
			if _, _, err := r.fresh(ctx); err != nil {
				// A step that cannot re-read its facts does not act, and does not wait
				// past its timeout either: the request fails and restores.
				return stepError(steps, i, step, r, fmt.Errorf("the facts could not be re-read: %w", err))
			}
		}
		out, err := step.Done(ctx, r)
		if err == nil && !out.Done {
			if t := step.Timeout(r); timedOut(st, t, r.Now) {
				msg := fmt.Sprintf("step %s timed out after %s: %s", st.Name, timeoutText(st, t), st.Message)
				return failStep(steps, i, r.Now, &Failure{Reason: v1alpha1.ReasonTimeout, Message: msg}), nil
			}
			if destructive[st.Name] {
				switch stop, _ := r.gate(st.Name, false); {
				case stop == nil:
				case stop.Action == ActionFail:
					return failStep(steps, i, r.Now, &Failure{Reason: stop.Violation.Invariant.Reason(), Message: stop.Message}), nil
				default:
					return Progress{Stop: stop}, nil
				}
			}
			failpoint.Inject(failpoint.Name(st.Name, failpoint.BeforeCall))
			out, err = step.Run(ctx, r)
			failpoint.Inject(failpoint.Name(st.Name, failpoint.AfterCall))
		}
		if err != nil {
			return stepError(steps, i, step, r, err)
		}
		st.Message = out.Message
		if !out.Done {
			return Progress{RequeueAfter: pollAfter(out.RequeueAfter, st, r.Now)}, nil
		}
		now := metav1.NewTime(r.Now)
		st.State = v1alpha1.StepSucceeded
		st.CompletedAt = &now
		st.Object, st.ObjectUID, st.ObjectResourceVersion = out.Object, out.UID, out.ResourceVersion
		// The last step's success is the playbook's: say so in the same journal write
		// rather than in a reconcile of its own.
		return Progress{Transition: fmt.Sprintf("Step %d/%d %s succeeded: %s", i+1, len(steps), st.Name, out.Message),
			Finished: i == len(steps)-1}, nil
	}
	return Progress{Finished: true}, nil
}

// timedOut reports whether a step started at st.StartedAt has run past t by now,
// not counting the time a pause held it (RanFor).
func timedOut(st *v1alpha1.StepStatus, t time.Duration, now time.Time) bool {
	return st.StartedAt != nil && RanFor(st, now) > t
}

// timeoutText is the bound a step timed out after, with the paused time it did not
// count, for the failure's message.
func timeoutText(st *v1alpha1.StepStatus, t time.Duration) string {
	if st.PausedFor == nil || st.PausedFor.Duration == 0 {
		return t.String()
	}
	return fmt.Sprintf("%s (not counting %s paused)", t, st.PausedFor.Duration)
}

// RanFor is how long a step has run by now: from its StartedAt, less the time
// pauses held it, the ended ones (PausedFor) and the one going on (PausedSince).
// The journal keeps both, written once per pause and resume, so the count survives
// a controller restart; a clock that reads earlier than a recorded time counts
// nothing rather than a negative time.
func RanFor(st *v1alpha1.StepStatus, now time.Time) time.Duration {
	if st.StartedAt == nil {
		return 0
	}
	end := now
	if st.PausedSince != nil && st.PausedSince.Time.Before(end) {
		end = st.PausedSince.Time
	}
	ran := end.Sub(st.StartedAt.Time)
	if st.PausedFor != nil {
		ran -= st.PausedFor.Duration
	}
	return max(ran, 0)
}

// holdStep journals that a pause holds the running step: PausedSince is written at
// the first paused reconcile and kept through the others.
func holdStep(st *v1alpha1.StepStatus, now time.Time) {
	if st.PausedSince == nil {
		since := metav1.NewTime(now)
		st.PausedSince = &since
	}
}

// resumeStep ends the pause that held the running step, if one did: the time it
// lasted is added to PausedFor, and the step goes on with the time it had left.
func resumeStep(st *v1alpha1.StepStatus, now time.Time) {
	if st.PausedSince == nil {
		return
	}
	held := max(now.Sub(st.PausedSince.Time), 0)
	if st.PausedFor != nil {
		held += st.PausedFor.Duration
	}
	st.PausedFor = &metav1.Duration{Duration: held}
	st.PausedSince = nil
}

// stepError judges an error of step i's Done or Run: a Failure (a refusal for good
// among them) fails the playbook at once; any other error is retried until the
// step's timeout, counted from its start like every wait, and then fails it with
// the error's text. While it is retried, the journal says why.
func stepError(steps []v1alpha1.StepStatus, i int, step Step, r *Execution, err error) (Progress, error) {
	st := &steps[i]
	if f, ok := IsFailure(err); ok {
		return failStep(steps, i, r.Now, f), nil
	}
	if t := step.Timeout(r); timedOut(st, t, r.Now) {
		msg := fmt.Sprintf("step %s timed out after %s: %v", st.Name, timeoutText(st, t), err)
		return failStep(steps, i, r.Now, &Failure{Reason: v1alpha1.ReasonTimeout, Message: msg, cause: err}), nil
	}
	st.Message = "Retrying after an error: " + err.Error()
	return Progress{}, fmt.Errorf("step %s: %w", st.Name, err)
}

// Polling bounds for a step that waits on the cluster.
const (
	minPoll = 100 * time.Millisecond
	maxPoll = 2 * time.Second
)

// pollAfter is when to check a waiting step again. A step may ask for a time of its
// own (a refused eviction retries in 5 s); otherwise the interval grows with how long
// the step has waited, from minPoll to at most the step's own interval: pods and
// registrations usually settle within moments, and a long wait need not be watched
// closely.
func pollAfter(asked time.Duration, st *v1alpha1.StepStatus, now time.Time) time.Duration {
	limit := cmp.Or(asked, maxPoll)
	if asked > maxPoll {
		return asked
	}
	return min(max(RanFor(st, now)/2, minPoll), limit)
}

// failStep marks step i Failed and every later step Skipped.
func failStep(steps []v1alpha1.StepStatus, i int, at time.Time, f *Failure) Progress {
	now := metav1.NewTime(at)
	steps[i].State = v1alpha1.StepFailed
	steps[i].CompletedAt = &now
	steps[i].Message = f.Message
	for j := i + 1; j < len(steps); j++ {
		steps[j].State = v1alpha1.StepSkipped
		steps[j].Message = "Skipped: step " + steps[i].Name + " failed"
	}
	return Progress{Failure: f, Transition: fmt.Sprintf("Step %s failed: %s", steps[i].Name, f.Message)}
}

// NeedsRestore reports whether a playbook with these steps changes something that
// Restore undoes (today, a cordon). Only such a playbook needs the request's
// finalizer: deleting a request whose playbook restores nothing can wait for nothing.
func NeedsRestore(steps []v1alpha1.StepStatus) bool {
	for _, st := range steps {
		if st.Name == v1alpha1.StepCordon {
			return true
		}
	}
	return false
}

// Restore undoes what a playbook changed and that the playbook will no longer undo
// itself: today, the cordon. It is safe to call at any time: it only uncordons a node
// this request cordoned. The restore is journaled on the playbook's uncordon step.
//
// A restore is bounded like a step: an error is returned to be retried, with the
// first attempt's time journaled on the uncordon step (its StartedAt), until the
// step timeout has passed since then; a refusal for good, or an error past that
// bound, gives up with a *RestoreFailure naming the node, and the uncordon step is
// journaled Failed. The caller then ends the request.
func Restore(ctx context.Context, r *Execution, why string) (string, error) {
	// The restore works on the node the playbook cordoned, as the journal records it,
	// not on whichever node the fresh facts name now (the Lease may have passed to
	// another holder). It only ever undoes a cordon carrying this request's mark.
	decided := *r
	decided.freshFacts, decided.freshConflicts = nil, nil
	r = &decided
	node, err := workNode(r)
	if err != nil {
		return "", nil
	}
	if !NeedsRestore(r.RR.Status.Steps) {
		return "", nil
	}
	failpoint.Inject(failpoint.Name(failpoint.Restore, failpoint.BeforeCall))
	out, err := uncordon{}.Run(ctx, r)
	failpoint.Inject(failpoint.Name(failpoint.Restore, failpoint.AfterCall))
	st := restoreStep(r.RR.Status.Steps)
	if err != nil {
		return "", restoreFailed(r, st, node, why, err)
	}
	now := metav1.NewTime(r.Now)
	if st != nil && st.State != v1alpha1.StepSucceeded {
		st.State = v1alpha1.StepSucceeded
		if st.StartedAt == nil {
			st.StartedAt = &now
		}
		st.CompletedAt = &now
		st.Message = "Restore after " + why + ": " + out.Message
		st.Object, st.ObjectUID, st.ObjectResourceVersion = out.Object, out.UID, out.ResourceVersion
	}
	return out.Message, nil
}

// restoreStep is the journal entry the restore is recorded on: the uncordon step.
func restoreStep(steps []v1alpha1.StepStatus) *v1alpha1.StepStatus {
	for i := range steps {
		if steps[i].Name == v1alpha1.StepUncordon {
			return &steps[i]
		}
	}
	return nil
}

// restoreFailed judges a failed restore attempt: retried (an error) within the step
// timeout since the first attempt, given up (a *RestoreFailure) on a refusal for
// good or past that bound. A journal without an uncordon step has nowhere to record
// the first attempt, so it gives up at once rather than retry without a bound.
func restoreFailed(r *Execution, st *v1alpha1.StepStatus, node, why string, err error) error {
	now := metav1.NewTime(r.Now)
	if st != nil && st.StartedAt == nil {
		st.StartedAt = &now
	}
	bound := r.Timeouts.step()
	_, refused := IsFailure(err)
	if !refused && st != nil && !timedOut(st, bound, r.Now) {
		until := r.Now.Add(bound - RanFor(st, r.Now))
		st.Message = fmt.Sprintf("Restore after %s failed, retried until %s: %v", why, until.UTC().Format(time.RFC3339), err)
		return fmt.Errorf("restoring node %s: %w", node, err)
	}
	tried := "was refused"
	if !refused {
		tried = fmt.Sprintf("kept failing for %s", bound)
	}
	msg := fmt.Sprintf("the restore could not uncordon node %s: it %s (%v); node %s stays cordoned with this request's %s mark: the sweeper uncordons it once the API server allows it, or uncordon it by hand (kubectl uncordon %s)",
		node, tried, err, node, CordonedByAnnotation, node)
	if st != nil {
		st.State = v1alpha1.StepFailed
		st.CompletedAt = &now
		st.Message = "Restore after " + why + " failed: " + msg
	}
	return &RestoreFailure{Node: node, Message: msg}
}
