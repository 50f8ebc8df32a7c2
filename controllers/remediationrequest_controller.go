// Package controllers owns the RemediationRequest reconciler: it fetches a request,
// guards it with a finalizer, runs small phase functions (gather facts, ...) and
// writes the status back in one merge patch at the end of every reconcile.
package controllers

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods;persistentvolumeclaims;persistentvolumes;nodes,verbs=get;list
// +kubebuilder:rbac:groups="",resources=events,verbs=list;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list

// RemediationRequestReconciler reconciles RemediationRequests.
type RemediationRequestReconciler struct {
	Client   client.Client
	Gatherer *facts.Gatherer
}

// scope carries one reconcile's request and the copy its status patch is computed from.
type scope struct {
	rr   *v1alpha1.RemediationRequest
	base *v1alpha1.RemediationRequest
}

// phase is one small step of a reconcile. A phase that returns a non-zero result or
// an error ends the reconcile.
type phase func(ctx context.Context, s *scope) (ctrl.Result, error)

// SetupWithManager registers the reconciler. Status writes do not bump the
// generation, so filtering on generation (and annotations, used to ask for a
// refresh) keeps the controller from re-triggering itself with its own patches.
func (r *RemediationRequestReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.RemediationRequest{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Named("remediationrequest").
		Complete(r)
}

// Reconcile is fetch -> ensure finalizer -> phases -> one deferred status patch.
func (r *RemediationRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	rr := &v1alpha1.RemediationRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, rr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("remediationRequest", klog.KObj(rr))
	ctx = ctrl.LoggerInto(ctx, log)

	if !rr.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, rr)
	}
	if err := r.ensureFinalizer(ctx, rr); err != nil {
		return ctrl.Result{}, err
	}

	s := &scope{rr: rr, base: rr.DeepCopy()}
	defer func() {
		if retErr == nil {
			rr.Status.ObservedGeneration = rr.Generation
		}
		if err := r.patchStatus(ctx, s); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	for _, p := range []phase{r.gatherFacts, r.awaitDecision} {
		res, err := p(ctx, s)
		if err != nil || !res.IsZero() {
			return res, err
		}
	}
	return ctrl.Result{}, nil
}

// ensureFinalizer adds the restore finalizer before anything can act, so that a
// request deleted mid-run always gets the chance to undo what it changed.
func (r *RemediationRequestReconciler) ensureFinalizer(ctx context.Context, rr *v1alpha1.RemediationRequest) error {
	if controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer) {
		return nil
	}
	before := rr.DeepCopy()
	controllerutil.AddFinalizer(rr, v1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, rr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", v1alpha1.Finalizer, err)
	}
	return nil
}

// reconcileDelete releases the finalizer. Nothing has been changed on the cluster at
// this stage of the project, so there is nothing to restore first.
func (r *RemediationRequestReconciler) reconcileDelete(ctx context.Context, rr *v1alpha1.RemediationRequest) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	before := rr.DeepCopy()
	controllerutil.RemoveFinalizer(rr, v1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, rr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("removing finalizer %s: %w", v1alpha1.Finalizer, err))
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Released finalizer")
	return ctrl.Result{}, nil
}

// gatherFacts reads the live facts the policy will decide on.
func (r *RemediationRequestReconciler) gatherFacts(ctx context.Context, s *scope) (ctrl.Result, error) {
	f, err := r.Gatherer.Gather(ctx, s.rr)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("gathering facts: %w", err)
	}
	s.rr.Status.Facts = f
	return ctrl.Result{}, nil
}

// awaitDecision keeps a gathered request Pending until a policy decides it.
func (r *RemediationRequestReconciler) awaitDecision(_ context.Context, s *scope) (ctrl.Result, error) {
	if s.rr.Status.Phase == "" {
		s.rr.Status.Phase = v1alpha1.PhasePending
	}
	return ctrl.Result{}, nil
}

// patchStatus writes the status once, as a merge patch guarded by the resourceVersion
// it was computed from, and skips the call when nothing changed.
func (r *RemediationRequestReconciler) patchStatus(ctx context.Context, s *scope) error {
	if apiequality.Semantic.DeepEqual(s.base.Status, s.rr.Status) {
		return nil
	}
	err := r.Client.Status().Patch(ctx, s.rr, client.MergeFromWithOptions(s.base, client.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching status: %w", err)
	}
	return nil
}
