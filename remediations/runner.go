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
			now := metav1.NewTime(r.Now)
			st.State = v1alpha1.StepRunning
			st.StartedAt = &now
			st.Message = "Started"
			return Progress{Started: true, Transition: fmt.Sprintf("Step %d/%d %s started", i+1, len(steps), st.Name)}, nil
		}

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
				if t := step.Timeout(r); t > 0 && st.StartedAt != nil && r.Now.Sub(st.StartedAt.Time) > t {
					msg := fmt.Sprintf("step %s timed out after %s: the facts could not be re-read: %v", st.Name, t, err)
					return failStep(steps, i, r.Now, &Failure{Reason: v1alpha1.ReasonTimeout, Message: msg}), nil
				}
				return Progress{}, fmt.Errorf("step %s: %w", st.Name, err)
			}
		}
		out, err := step.Done(ctx, r)
		if err == nil && !out.Done {
			if t := step.Timeout(r); t > 0 && st.StartedAt != nil && r.Now.Sub(st.StartedAt.Time) > t {
				msg := fmt.Sprintf("step %s timed out after %s: %s", st.Name, t, st.Message)
				return failStep(steps, i, r.Now, &Failure{Reason: v1alpha1.ReasonTimeout, Message: msg}), nil
			}
			if destructive[st.Name] {
				if v := r.floor(st.Name); v != nil {
					return failStep(steps, i, r.Now, &Failure{Reason: v.Invariant.Reason(), Message: v.Error() + "; nothing was done"}), nil
				}
			}
			failpoint.Inject(failpoint.Name(st.Name, failpoint.BeforeCall))
			out, err = step.Run(ctx, r)
			failpoint.Inject(failpoint.Name(st.Name, failpoint.AfterCall))
		}
		if err != nil {
			if f, ok := IsFailure(err); ok {
				return failStep(steps, i, r.Now, f), nil
			}
			return Progress{}, fmt.Errorf("step %s: %w", st.Name, err)
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
	waited := time.Duration(0)
	if st.StartedAt != nil {
		waited = now.Sub(st.StartedAt.Time)
	}
	return min(max(waited/2, minPoll), limit)
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
func Restore(ctx context.Context, r *Execution, why string) (string, error) {
	// The restore works on the node the playbook cordoned, as the journal records it,
	// not on whichever node the fresh facts name now (the Lease may have passed to
	// another holder). It only ever undoes a cordon carrying this request's mark.
	decided := *r
	decided.observed, decided.conflicts = nil, nil
	r = &decided
	if _, err := workNode(r); err != nil {
		return "", nil
	}
	if !NeedsRestore(r.RR.Status.Steps) {
		return "", nil
	}
	failpoint.Inject(failpoint.Name(failpoint.Restore, failpoint.BeforeCall))
	out, err := uncordon{}.Run(ctx, r)
	failpoint.Inject(failpoint.Name(failpoint.Restore, failpoint.AfterCall))
	if err != nil {
		return "", fmt.Errorf("restoring: %w", err)
	}
	now := metav1.NewTime(r.Now)
	for i := range r.RR.Status.Steps {
		st := &r.RR.Status.Steps[i]
		if st.Name == v1alpha1.StepUncordon && st.State != v1alpha1.StepSucceeded {
			st.State = v1alpha1.StepSucceeded
			if st.StartedAt == nil {
				st.StartedAt = &now
			}
			st.CompletedAt = &now
			st.Message = "Restore after " + why + ": " + out.Message
			st.Object, st.ObjectUID, st.ObjectResourceVersion = out.Object, out.UID, out.ResourceVersion
		}
	}
	return out.Message, nil
}
