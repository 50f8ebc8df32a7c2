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
// reason Aborted.
func (r *RemediationRequestReconciler) abort(ctx context.Context, s *scope, why string) (ctrl.Result, error) {
	rr := s.rr
	restored, err := remediations.Restore(ctx, r.execution(s), "the abort")
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
	r.setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonAborted, msg)
	r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonAborted, msg)
	r.Recorder.Event(rr, corev1.EventTypeWarning, v1alpha1.EventFailed, msg)
	ctrl.LoggerFrom(ctx).Info("Aborted the playbook after a spec change", "why", why)
	return ctrl.Result{}, nil
}

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
	case !inside:
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
// on fresh facts.
func (r *RemediationRequestReconciler) windowClosed(ctx context.Context, s *scope, run *remediations.Execution, next string, opens time.Time) (ctrl.Result, error) {
	rr := s.rr
	restored, err := remediations.Restore(ctx, run, "the maintenance window closed")
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
	return ctrl.Result{RequeueAfter: opens.Sub(s.now)}, nil
}
