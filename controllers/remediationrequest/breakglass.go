package remediationrequest

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/requests"
)

// maxBreakGlassReason bounds the reason shown: the chart's admission policy bounds
// the annotation to as much, so a reason it admitted is shown whole, and a controller
// installed without the policy still writes its status.
const maxBreakGlassReason = 1024

// breakGlass shows a request written outside Git review. The chart's admission
// policy lets the break-glass group write a request carrying remediator.io/break-glass:
// <reason>, so that an incident is never blocked on a pull request, but never
// silently: while the annotation is on, condition BreakGlass says so with its reason,
// and each new reason is a Warning Event (the audit log has who wrote it). It never
// changes what is decided. The reason comes last in the message, so an Event cut to
// its limit loses only the end of the reason, never what to do.
func (r *Reconciler) breakGlass(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	reason, ok := rr.Annotations[v1alpha1.AnnotationBreakGlass]
	if !ok {
		meta.RemoveStatusCondition(&rr.Status.Conditions, v1alpha1.ConditionBreakGlass)
		return ctrl.Result{}, nil
	}
	reason = requests.Bound(strings.TrimSpace(reason), maxBreakGlassReason)
	msg := "Written outside Git review by the break-glass group; bring the repository in line with it (a pull request) once the incident is over. Reason: " + reason
	if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionBreakGlass); c != nil && c.Status == metav1.ConditionTrue && c.Message == msg {
		return ctrl.Result{}, nil
	}
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionBreakGlass, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonBreakGlass, Message: msg, ObservedGeneration: rr.Generation})
	s.record(corev1.EventTypeWarning, v1alpha1.ReasonBreakGlass, msg)
	ctrl.LoggerFrom(ctx).Info("Request carries the break-glass annotation", "reason", reason)
	return ctrl.Result{}, nil
}
