package remediationrequest

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
func (r *Reconciler) gatherFailed(s *scope, err error) (ctrl.Result, error) {
	msg := requests.Bound(gatherFailedMessage(err), requests.MaxStatusString)
	// lifecycle.GatherFailed sets observedGeneration, which the deferred write sets
	// only for a reconcile without error: the status says why this generation is not
	// decided yet.
	if lifecycle.GatherFailed(s.rr, msg) {
		// Once per different answer: the retries repeat it every few seconds.
		s.record(corev1.EventTypeWarning, v1alpha1.ReasonGatherFailed, msg)
	}
	return ctrl.Result{}, err
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
