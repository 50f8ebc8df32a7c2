package controllers

// Stopping a running playbook when the gate (remediations.Gate) closes before a
// destructive step: the spec no longer allows it (abort, Failed/Aborted), or its
// maintenance window closed (restore, then wait for the next window).

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
)

// abort stops a running playbook before its next destructive step: it restores
// what the playbook changed, skips the remaining steps and fails the request with
// reason Aborted (RestoreFailed when the restore gave up, naming the node).
func (r *RemediationRequestReconciler) abort(ctx context.Context, s *scope, why string) (ctrl.Result, error) {
	rr := s.rr
	reason := v1alpha1.ReasonAborted
	restored, err := remediations.Restore(ctx, r.execution(s), "the abort")
	if rf, ok := remediations.IsRestoreFailure(err); ok {
		reason, restored, err = remediations.ReasonRestoreFailed, rf.Message, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	for i := range rr.Status.Steps {
		if st := &rr.Status.Steps[i]; st.State == v1alpha1.StepPending || st.State == v1alpha1.StepRunning {
			st.State = v1alpha1.StepSkipped
			st.Message = "Skipped: aborted because " + why
		}
	}
	msg := fmt.Sprintf("Aborted before the next destructive step because %s; %s", why, cmp.Or(restored, "nothing needed restoring"))
	rr.Status.Phase = v1alpha1.PhaseFailed
	r.setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, reason, msg)
	r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonAborted, msg)
	r.Recorder.Event(rr, corev1.EventTypeWarning, v1alpha1.EventFailed, msg)
	ctrl.LoggerFrom(ctx).Info("Aborted the playbook", "why", why)
	return ctrl.Result{}, nil
}

// windowClosed stops a playbook whose maintenance window closed before its next
// destructive step: it restores what the playbook changed (the cordon), skips the
// remaining steps, and waits for the next window, when the request is decided again
// on fresh facts. A waiting request has nothing left to restore, so the restore
// finalizer is released once that is written. A restore that gave up ends the
// request Failed instead, naming the node it left cordoned.
func (r *RemediationRequestReconciler) windowClosed(ctx context.Context, s *scope, run *remediations.Execution, stop *remediations.Halt) (ctrl.Result, error) {
	rr, opens := s.rr, stop.Opens
	restored, err := remediations.Restore(ctx, run, "the maintenance window closed")
	if rf, ok := remediations.IsRestoreFailure(err); ok {
		return r.restoreGaveUp(ctx, s, stop.Message, rf)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	for i := range rr.Status.Steps {
		if st := &rr.Status.Steps[i]; st.State == v1alpha1.StepPending {
			st.State = v1alpha1.StepSkipped
			st.Message = "Skipped: the maintenance window closed before it started"
		}
	}
	at := metav1.NewTime(opens)
	rr.Status.Decision.RecheckAt = &at
	rr.Status.Phase = v1alpha1.PhaseWaiting
	what := "nothing needed restoring"
	if restored != "" {
		what = "restored: " + restored
	}
	msg := fmt.Sprintf("%s; %s. The request is decided again when the next window opens at %s.",
		stop.Message, what, at.UTC().Format(time.RFC3339))
	r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonWindowClosed, msg)
	r.Recorder.Event(rr, corev1.EventTypeWarning, v1alpha1.ReasonWindowClosed, msg)
	ctrl.LoggerFrom(ctx).Info("Maintenance window closed mid-playbook", "opens", at.Time)
	if err := r.releaseIdle(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: opens.Sub(s.now)}, nil
}

// restoreGaveUp ends a running request Failed because its restore gave up: the
// remaining steps are skipped, and the condition and a Warning Event name the node
// left cordoned. The caller's status write then releases the slot and the
// finalizer.
func (r *RemediationRequestReconciler) restoreGaveUp(ctx context.Context, s *scope, what string, rf *remediations.RestoreFailure) (ctrl.Result, error) {
	rr := s.rr
	for i := range rr.Status.Steps {
		if st := &rr.Status.Steps[i]; st.State == v1alpha1.StepPending || st.State == v1alpha1.StepRunning {
			st.State = v1alpha1.StepSkipped
			st.Message = "Skipped: the restore failed"
		}
	}
	msg := what + "; " + rf.Message
	rr.Status.Phase = v1alpha1.PhaseFailed
	r.setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, remediations.ReasonRestoreFailed, msg)
	r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonFailed, msg)
	r.Recorder.Event(rr, corev1.EventTypeWarning, v1alpha1.EventFailed, msg)
	ctrl.LoggerFrom(ctx).Info("The restore gave up; the node stays cordoned", "node", rf.Node)
	return ctrl.Result{}, nil
}

// EventWindowClosedAfterEviction is the Event of a destructive step that starts after
// the window closed, because the workload was already evicted (remediations.Gate).
const EventWindowClosedAfterEviction = "WindowClosedAfterEviction"

// EventSpecIgnored is the Event of a spec edit after the playbook ended: final
// requests are not decided again.
const EventSpecIgnored = "SpecIgnored"
