package remediationrequest

// Carrying out the gate's halts (remediations.Gate, Halt) before a destructive step:
// the spec no longer allows the playbook (abort: restore, Failed/Aborted), or its
// maintenance window closed (restore, then wait for the next window). A pause's halt
// is a hold (hold.go).

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/remediations"
)

// abort stops a running playbook before its next destructive step: it restores
// what the playbook changed, skips the remaining steps and fails the request with
// reason Aborted (RestoreFailed when the restore gave up, naming the node).
func (r *Reconciler) abort(ctx context.Context, s *scope, why string) (ctrl.Result, error) {
	rr := s.rr
	reason := v1alpha1.ReasonAborted
	restored, err := remediations.Restore(ctx, r.execution(s), "the abort")
	if rf, ok := remediations.IsRestoreFailure(err); ok {
		reason, restored, err = remediations.ReasonRestoreFailed, rf.Message, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	s.recordTransition(lifecycle.Abort(rr, reason, why, restored))
	ctrl.LoggerFrom(ctx).Info("Aborted the playbook", "why", why)
	return ctrl.Result{}, nil
}

// windowClosed stops a playbook whose maintenance window closed before its next
// destructive step: it restores what the playbook changed (the cordon), skips the
// remaining steps, and waits for the next window, when the request is decided again
// on fresh facts. A waiting request has nothing left to restore, so the restore
// finalizer is released once that is written. A restore that gave up ends the
// request Failed instead, naming the node it left cordoned.
func (r *Reconciler) windowClosed(ctx context.Context, s *scope, run *remediations.Execution, stop *remediations.Halt) (ctrl.Result, error) {
	rr, opens := s.rr, stop.Opens
	restored, err := remediations.Restore(ctx, run, "the maintenance window closed")
	if rf, ok := remediations.IsRestoreFailure(err); ok {
		// Failed, the remaining steps skipped; the condition and a Warning Event name
		// the node left cordoned. The status write then releases the slot and the
		// finalizer.
		s.recordTransition(lifecycle.RestoreGaveUp(rr, remediations.ReasonRestoreFailed, stop.Message, rf.Message))
		ctrl.LoggerFrom(ctx).Info("The restore gave up; the node stays cordoned", "node", rf.Node)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	what := "nothing needed restoring"
	if restored != "" {
		what = "restored: " + restored
	}
	s.recordTransition(lifecycle.WindowClosed(rr, opens, stop.Message, what))
	ctrl.LoggerFrom(ctx).Info("Maintenance window closed mid-playbook", "opens", opens)
	if err := r.releaseIdle(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: opens.Sub(s.now)}, nil
}

// EventWindowClosedAfterEviction is the Event of a destructive step that starts after
// the window closed, because the workload was already evicted (remediations.Gate).
const EventWindowClosedAfterEviction = "WindowClosedAfterEviction"

// EventSpecIgnored is the Event of a spec edit after the playbook ended: final
// requests are not decided again.
const EventSpecIgnored = "SpecIgnored"
