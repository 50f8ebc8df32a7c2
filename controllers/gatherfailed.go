package controllers

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/requests"
)

// gatherFailed records that the facts of s's request could not be read (err), and
// returns err after the reconcile's status write, so that the work queue's rate
// limiter retries it with backoff. The request is not rejected: a permission granted
// or an API server back on its feet decides it without a new commit. Until then it
// says why in Progressing (False, GatherFailed), Ready and a Warning Event, rather
// than staying without a phase, a condition or an Event.
func (r *RemediationRequestReconciler) gatherFailed(s *scope, err error) (ctrl.Result, error) {
	rr := s.rr
	msg := requests.Bound(gatherFailedMessage(err), requests.MaxStatusString)
	if rr.Status.Phase == "" {
		rr.Status.Phase = v1alpha1.PhasePending
	}
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	if c == nil || c.Reason != v1alpha1.ReasonGatherFailed || c.Message != msg {
		// Once per different answer: the retries repeat it every few seconds.
		r.Recorder.Event(rr, corev1.EventTypeWarning, v1alpha1.ReasonGatherFailed, msg)
	}
	r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonGatherFailed, msg)
	// The status describes this generation: it says why it is not decided yet. The
	// deferred write sets observedGeneration only for a reconcile without error.
	rr.Status.ObservedGeneration = rr.Generation
	return ctrl.Result{}, err
}

// gatherFailed reports whether rr's last decision failed for want of facts: it is
// decided again on its next reconcile.
func gatherFailed(rr *v1alpha1.RemediationRequest) bool {
	return lifecycle.ProgressingReason(rr) == v1alpha1.ReasonGatherFailed
}

// gatherFailedMessage says why the facts could not be read and what the operator can
// do about it.
func gatherFailedMessage(err error) string {
	const head = "The controller could not read the facts this request is decided on, so it is not decided yet; it tries again with backoff, at most %s apart. The API server's answer: %v. "
	msg := fmt.Sprintf(head, requests.MaxRetryDelay, err)
	switch {
	case apierrors.IsForbidden(err):
		// The answer names the verb, the resource and the namespace.
		return msg + "Grant the controller's ServiceAccount that permission (a Role in that namespace), or correct the request in Git if it names the wrong namespace."
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsNotAcceptable(err):
		return msg + "The API server refuses what the request names: correct the request in Git."
	}
	return msg + "Nothing to do if this passes; if it persists, check the API server and the controller's connection to it."
}
