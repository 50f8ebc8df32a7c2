package remediationrequest

// The restore finalizer: added before a playbook that cordons acts, run on
// deletion mid-run (restore, then release), and released once a playbook ends.

import (
	"cmp"
	"context"
	"fmt"

	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/remediations/failpoint"
)

// patchFinalizer adds or removes the restore finalizer, guarded by the
// resourceVersion rr was read at, unless there is nothing to do.
func (r *Reconciler) patchFinalizer(ctx context.Context, rr *v1alpha1.RemediationRequest, add bool) error {
	before := rr.DeepCopy()
	change := controllerutil.RemoveFinalizer
	if add {
		change = controllerutil.AddFinalizer
	}
	if !change(rr, v1alpha1.Finalizer) {
		return nil
	}
	return r.Client.Patch(ctx, rr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// ensureFinalizer adds the restore finalizer to a running playbook that will change
// something it must restore (a cordon) before its first step acts: the deciding
// reconcile only journals the first step's start, and the next one adds the
// finalizer before the step runs, so a request deleted mid-run can always undo what
// it changed. Playbooks that restore nothing carry none: their deletion never waits.
func (r *Reconciler) ensureFinalizer(ctx context.Context, rr *v1alpha1.RemediationRequest) error {
	if err := r.patchFinalizer(ctx, rr, true); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", v1alpha1.Finalizer, err)
	}
	return nil
}

// releaseFinalizer removes the restore finalizer once the playbook ended, having
// restored what it changed (uncordon is its last step; a failure restores before the
// Failed write). Kept, it would block every finished request's deletion while no
// controller runs (an uninstall). It is called only after the terminal status write
// returned: a crash in between leaves it for the next reconcile to release.
func (r *Reconciler) releaseFinalizer(ctx context.Context, rr *v1alpha1.RemediationRequest) error {
	if err := r.patchFinalizer(ctx, rr, false); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("removing finalizer %s from a finished request: %w", v1alpha1.Finalizer, err))
	}
	return nil
}

// releaseIdle releases the restore finalizer of a request neither Running nor
// finished (Waiting, Rejected): every way out of Running restores first, and one that
// runs again gets it back before its first step acts. The status is written first,
// so the finalizer never goes before the restore's journal; this reconcile has
// honoured the generation by then, as the deferred write would record.
func (r *Reconciler) releaseIdle(ctx context.Context, s *scope) error {
	rr := s.rr
	if rr.Status.Phase == v1alpha1.PhaseRunning || rr.Status.Phase.PlaybookEnded() || !controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer) {
		return nil
	}
	rr.Status.ObservedGeneration = rr.Generation
	if err := r.patchStatus(ctx, s); err != nil {
		return err
	}
	if err := r.releaseFinalizer(ctx, rr); err != nil {
		return err
	}
	// The deferred status write of the reconcile diffs from what is stored now.
	s.base = rr.DeepCopy()
	return nil
}

// reconcileDelete restores what a running playbook changed, journals it, and only
// then releases the finalizer. A failed restore is retried within the step timeout
// from its journaled first attempt; one that gives up ends the request Failed naming
// the node, and the finalizer goes all the same: a controller can do nothing more,
// and keeping it would only block the deletion (the sweeper uncordons the node later).
//
// A running request without the finalizer has nothing to restore (no cordon, or its
// first step not journaled yet) and, being deleted, is never advanced; but another
// finalizer may keep it indefinitely while it holds a slot of the cap, so it is ended
// (Failed, Aborted) and the slot goes to the next request in line.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	if !controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer) {
		if rr.Status.Phase != v1alpha1.PhaseRunning {
			return ctrl.Result{}, nil
		}
		s.recordTransition(lifecycle.Deleted(rr, v1alpha1.ReasonAborted, "nothing needed restoring"))
		return ctrl.Result{}, r.patchStatus(ctx, s)
	}
	if rr.Status.Phase == v1alpha1.PhaseRunning {
		reason := v1alpha1.ReasonAborted
		msg, err := remediations.Restore(ctx, r.execution(s), "the request was deleted")
		if rf, ok := remediations.IsRestoreFailure(err); ok {
			reason, msg, err = remediations.ReasonRestoreFailed, rf.Message, nil
		}
		if err != nil {
			// Journal the attempt: the bound counts from the first one.
			return ctrl.Result{}, kerrors.NewAggregate([]error{err, r.patchStatus(ctx, s)})
		}
		// The steps not done are skipped; Succeeded is False with reason and what the
		// restore did.
		s.recordTransition(lifecycle.Deleted(rr, reason, cmp.Or(msg, "nothing needed restoring")))
		if err := r.patchStatus(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	failpoint.Inject(failpoint.Name(failpoint.Restore, failpoint.BeforeFinalizerRelease))
	if err := r.patchFinalizer(ctx, rr, false); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("removing finalizer %s: %w", v1alpha1.Finalizer, err))
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Released finalizer")
	return ctrl.Result{}, nil
}
