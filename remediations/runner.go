package remediations

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations/failpoint"
)

// Progress is what one Advance did.
type Progress struct {
	// Finished: every step has succeeded.
	Finished bool
	// Failure is set when the playbook failed; the journal is already updated.
	Failure *Failure
	// Transition describes a step state change for an Event; Started if it started one.
	Transition string
	Started    bool
	// RequeueAfter is when to advance again; zero with Finished false means now.
	RequeueAfter time.Duration
	// Halt is the gate's answer when it kept a step from starting or acting and the
	// caller must hold, abort or wait; a breached floor is a Failure. The journal is
	// unchanged but for a held running step's PausedSince.
	Halt *Halt
	// Note is the gate's note on a step it let start, for the step and an Event.
	Note string
}

// Advance moves the journal (status.steps) by at most one transition: it starts the
// next step (journaling StartedAt before anything is done), or checks and runs the
// running one. A step already done in the cluster (by a process that crashed before
// writing status) is recorded without acting again.
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
			halt, note := Gate(r, st.Name, true)
			if halt != nil {
				return Progress{Halt: halt}, nil
			}
			now := metav1.NewTime(r.Now)
			st.State = v1alpha1.StepRunning
			st.StartedAt = &now
			st.Message = cmp.Or(note, "Started")
			return Progress{Started: true, Transition: fmt.Sprintf("Step %d/%d %s started", i+1, len(steps), st.Name), Note: note}, nil
		}

		// A pause freezes a running step; the time held does not count against its timeout.
		if halt := pauseHold(r.Paused); halt != nil {
			holdStep(st, r.Now)
			return Progress{Halt: halt}, nil
		}
		resumeStep(st, r.Now)

		step, ok := library[st.Name]
		if !ok {
			return failStep(steps, i, r.Now, &Failure{Reason: v1alpha1.ReasonStepFailed, Message: fmt.Sprintf("unknown step %q", st.Name)}), nil
		}
		// A destructive step acts only on fresh facts, read before Done so that an
		// effect that happened in between (the Lease released by Trident) counts as
		// done rather than as a breached invariant. Without them it does not act.
		if destructive[st.Name] {
			if _, _, err := r.readFresh(ctx); err != nil {
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
				switch halt, _ := Gate(r, st.Name, false); {
				case halt == nil:
				case halt.Action == ActionFail:
					return failStep(steps, i, r.Now, &Failure{Reason: halt.Violation.Invariant.Reason(), Message: halt.Message}), nil
				default:
					return Progress{Halt: halt}, nil
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
		// The last step's success is the playbook's, in the same journal write.
		return Progress{Transition: fmt.Sprintf("Step %d/%d %s succeeded: %s", i+1, len(steps), st.Name, out.Message),
			Finished: i == len(steps)-1}, nil
	}
	return Progress{Finished: true}, nil
}

// timedOut reports whether a step has run past t by now, pauses not counted (RanFor).
func timedOut(st *v1alpha1.StepStatus, t time.Duration, now time.Time) bool {
	return st.StartedAt != nil && RanFor(st, now) > t
}

// timeoutText is the bound a step timed out after, and the paused time not counted.
func timeoutText(st *v1alpha1.StepStatus, t time.Duration) string {
	if st.PausedFor == nil || st.PausedFor.Duration == 0 {
		return t.String()
	}
	return fmt.Sprintf("%s (not counting %s paused)", t, st.PausedFor.Duration)
}

// RanFor is how long a step has run by now: from its StartedAt, less the pauses
// that held it, ended (PausedFor) or going on (PausedSince). Both are journaled, so
// the count survives a restart; a clock that reads earlier counts nothing, never a
// negative time.
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

// holdStep journals when a pause began to hold the running step.
func holdStep(st *v1alpha1.StepStatus, now time.Time) {
	if st.PausedSince == nil {
		since := metav1.NewTime(now)
		st.PausedSince = &since
	}
}

// resumeStep ends the pause that held the running step, if any, adding it to PausedFor.
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
// among them) fails the playbook at once; any other error is retried, journaled,
// until the step's timeout.
func stepError(steps []v1alpha1.StepStatus, i int, step Step, r *Execution, err error) (Progress, error) {
	st := &steps[i]
	if f, ok := errors.AsType[*Failure](err); ok {
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

// pollAfter is when to check a waiting step again: after the time it asked for when
// longer than maxPoll, else after half its wait so far, between minPoll and that
// time (maxPoll when none): pods and registrations usually settle within moments.
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
// Restore undoes (a cordon): only such a playbook needs the request's finalizer.
func NeedsRestore(steps []v1alpha1.StepStatus) bool {
	return slices.ContainsFunc(steps, func(st v1alpha1.StepStatus) bool { return st.Name == v1alpha1.StepCordon })
}

// Restore undoes what the playbook will no longer undo itself: the cordon, only of a
// node this request cordoned, so it is safe at any time. It is journaled on the
// uncordon step and bounded like one (restoreFailed).
func Restore(ctx context.Context, r *Execution, why string) (string, error) {
	// The node the journal records, not the one the fresh facts name now (the Lease
	// may have passed to another holder).
	decided := *r
	decided.freshFacts, decided.freshConflicts = nil, nil
	r = &decided
	node, err := workNode(r)
	if err != nil || !NeedsRestore(r.RR.Status.Steps) {
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
	if i := slices.IndexFunc(steps, func(st v1alpha1.StepStatus) bool { return st.Name == v1alpha1.StepUncordon }); i >= 0 {
		return &steps[i]
	}
	return nil
}

// restoreFailed judges a failed restore attempt: an error to retry within the step
// timeout since the first attempt (the uncordon step's StartedAt), else a
// *RestoreFailure naming the node, given up at once on a refusal for good or when
// the journal has no uncordon step to bound the retries by.
func restoreFailed(r *Execution, st *v1alpha1.StepStatus, node, why string, err error) error {
	now := metav1.NewTime(r.Now)
	if st != nil && st.StartedAt == nil {
		st.StartedAt = &now
	}
	bound := r.Timeouts.step()
	_, refused := errors.AsType[*Failure](err)
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
