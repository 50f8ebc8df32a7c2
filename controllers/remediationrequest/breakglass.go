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

// breakGlass shows a request written outside Git review. The chart's admission
// policy lets only the Git writers write requests, and the break-glass group when
// the request carries remediator.io/break-glass: <reason>. Such a write is allowed
// so that an incident is never blocked on a pull request, but it must never be
// silent: while the annotation is on the request, condition BreakGlass says so with
// its reason, and each new reason is recorded as a Warning Event (the audit log has
// who wrote it). It never changes what the controller decides.
//
// The reason comes last in the message and is bounded (maxBreakGlassReason): the
// admission policy bounds the annotation too, but a controller installed without it
// must still write its status, and an Event cut to its limit loses only the end of
// the reason, never what to do.
// maxBreakGlassReason bounds the break-glass reason shown in the condition: the
// chart's admission policy bounds the annotation to as much, so a reason it admitted
// is shown whole.
const maxBreakGlassReason = 1024

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
	r.Recorder.Event(rr, corev1.EventTypeWarning, v1alpha1.ReasonBreakGlass, msg)
	ctrl.LoggerFrom(ctx).Info("Request carries the break-glass annotation", "reason", reason)
	return ctrl.Result{}, nil
}
