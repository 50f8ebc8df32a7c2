package controllers

// Stopping a running playbook before its next destructive step: when a new
// generation of the spec withdraws what made it safe (abort, Failed/Aborted), and
// when its maintenance window closes (restore, then wait for the next window).

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

// honourSpecChange stops a running playbook when a later generation of the spec
// withdraws what made it safe to run: spec.mode switched to DryRun, the fencing an
// unreachable or missing holder was released on withdrawn or pointed elsewhere, the
// maintenance window changed so that it is closed now, or the Trident namespace or
// driver changed under the facts. The playbook restores what it changed (its cordon)
// and the request fails with reason Aborted. Other edits, such as spec.reason, are
// recorded without stopping. Either way the new generation has been honoured.
func (r *RemediationRequestReconciler) honourSpecChange(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	if rr.Status.Phase != v1alpha1.PhaseRunning || rr.Generation == rr.Status.ObservedGeneration ||
		(rr.Status.Decision != nil && rr.Generation == rr.Status.Decision.Generation) {
		return ctrl.Result{}, nil
	}
	why := withdrawn(rr, s.now)
	if why == "" {
		ctrl.LoggerFrom(ctx).Info("Spec changed mid-run without affecting safety; the playbook goes on", "generation", rr.Generation)
		return ctrl.Result{}, nil
	}
	return r.abort(ctx, s, why)
}

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
	ctrl.LoggerFrom(ctx).Info("Aborted the playbook after a spec change", "why", why)
	return ctrl.Result{}, nil
}

// workloadEvicted reports whether the playbook has evicted the workload: its
// deleteAffectedPods step succeeded. From then on the pods are down until the Lease
// is released, so stopping at a closing window would strand them until the next
// one; the playbook finishes instead (the Lease deletion and the uncordon).
func workloadEvicted(steps []v1alpha1.StepStatus) bool {
	for _, st := range steps {
		if st.Name == v1alpha1.StepDeleteAffectedPods {
			return st.State == v1alpha1.StepSucceeded
		}
	}
	return false
}

// windowClosedAfterEviction says so when the maintenance window closed after the
// workload was evicted and step next starts all the same.
func (r *RemediationRequestReconciler) windowClosedAfterEviction(ctx context.Context, s *scope, next string) {
	rr := s.rr
	msg := fmt.Sprintf("The maintenance window closed after the affected pods were evicted; step %s starts all the same, so that the workload is not left down until the next window: the playbook finishes the Lease deletion and the uncordon", next)
	for i := range rr.Status.Steps {
		if st := &rr.Status.Steps[i]; st.Name == next && st.State == v1alpha1.StepRunning {
			st.Message = msg
		}
	}
	r.Recorder.Event(rr, corev1.EventTypeWarning, EventWindowClosedAfterEviction, msg)
	ctrl.LoggerFrom(ctx).Info("Maintenance window closed after the eviction; the playbook finishes", "step", next)
}

// EventWindowClosedAfterEviction is the Event of a destructive step that starts after
// the window closed, because the workload was already evicted.
const EventWindowClosedAfterEviction = "WindowClosedAfterEviction"

// withdrawn says why the current spec no longer allows the running playbook, or ""
// when it still does.
func withdrawn(rr *v1alpha1.RemediationRequest, now time.Time) string {
	spec, f := rr.Spec, rr.Status.Facts
	if spec.Mode == v1alpha1.ModeDryRun {
		return "spec.mode is now DryRun"
	}
	if f != nil && f.Node != nil && f.Lease != nil && (f.Node.State == v1alpha1.NodeUnreachable || f.Node.State == v1alpha1.NodeNotFound) {
		switch fe := spec.Fencing; {
		case fe == nil || !fe.Confirmed:
			return fmt.Sprintf("spec.fencing no longer confirms that holder node %s was fenced", f.Lease.HolderIdentity)
		case fe.Node != f.Lease.HolderIdentity:
			return fmt.Sprintf("spec.fencing now names node %q, not holder node %s", fe.Node, f.Lease.HolderIdentity)
		}
	}
	inside, _, err := MaintenanceWindow(spec.MaintenanceWindow, now)
	switch {
	case err != nil:
		return fmt.Sprintf("spec.maintenanceWindow is now invalid (%v)", err)
	case !inside && !workloadEvicted(rr.Status.Steps):
		// After the eviction a closed window does not stop the playbook either way:
		// it finishes, rather than leave the workload down (see workloadEvicted).
		return "the spec changed and its maintenance window is closed now"
	case f != nil && spec.TridentNamespace != "" && spec.TridentNamespace != f.TridentNamespace:
		return fmt.Sprintf("spec.tridentNamespace changed to %s, but the facts were gathered in %s", spec.TridentNamespace, f.TridentNamespace)
	case f != nil && spec.DriverName != "" && spec.DriverName != f.DriverName:
		return fmt.Sprintf("spec.driverName changed to %s, but the facts are about %s", spec.DriverName, f.DriverName)
	}
	return ""
}

// windowClosed stops a playbook whose maintenance window closed before its next
// destructive step: it restores what the playbook changed (the cordon), skips the
// remaining steps, and waits for the next window, when the request is decided again
// on fresh facts. A waiting request has nothing left to restore, so the restore
// finalizer is released once that is written. A restore that gave up ends the
// request Failed instead, naming the node it left cordoned.
func (r *RemediationRequestReconciler) windowClosed(ctx context.Context, s *scope, run *remediations.Execution, next string, opens time.Time) (ctrl.Result, error) {
	rr := s.rr
	restored, err := remediations.Restore(ctx, run, "the maintenance window closed")
	if rf, ok := remediations.IsRestoreFailure(err); ok {
		return r.restoreGaveUp(ctx, s, fmt.Sprintf("The maintenance window closed before step %s, so the playbook stopped without starting it", next), rf)
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
	msg := fmt.Sprintf("The maintenance window closed before step %s, so the playbook stopped without starting it; %s. The request is decided again when the next window opens at %s.",
		next, what, at.UTC().Format(time.RFC3339))
	r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonWindowClosed, msg)
	r.Recorder.Event(rr, corev1.EventTypeWarning, v1alpha1.ReasonWindowClosed, msg)
	ctrl.LoggerFrom(ctx).Info("Maintenance window closed mid-playbook", "nextStep", next, "opens", at.Time)
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
