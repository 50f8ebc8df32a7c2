package remediationrequest

// The reconcile's one status write, and what is derived into status right before it.

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/remediations/failpoint"
)

// patchStatus writes the status once, as a merge patch guarded by the resourceVersion
// it was computed from, and skips the call when nothing changed. Every string in it
// is bounded first (requests.BoundStatus): one the API server would refuse would
// fail this write, and every later one.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope) error {
	lifecycle.Derive(s.base, s.rr, s.now)
	requests.BoundStatus(&s.rr.Status)
	if apiequality.Semantic.DeepEqual(s.base.Status, s.rr.Status) {
		return nil
	}
	from := s.base.ResourceVersion
	err := r.Client.Status().Patch(ctx, s.rr, client.MergeFromWithOptions(s.base, client.MergeFromWithOptimisticLock{}))
	// Only a write the API server applied moves the resourceVersion: a patch of
	// sub-second times that the stored form rounds away changes nothing, and waiting
	// for the cache to move past from would then wait forever.
	if err == nil && s.rr.ResourceVersion != from && !s.rr.Status.Phase.Terminal() {
		r.written.wrote(s.rr.UID, from)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching status: %w", err)
	}
	if err == nil {
		for _, effect := range afterWrite {
			effect(ctx, s.base, s.rr)
		}
	}
	// A second patch in the same reconcile (deletion) diffs from what was written.
	s.base = s.rr.DeepCopy()
	return nil
}

// afterWrite are the effects of a status write from before to after, carried out
// only once the API server applied it, so that a reconcile retried after a failed
// write does not repeat them. Deriving the status (lifecycle.Derive) writes nothing
// and records nothing.
var afterWrite = []func(ctx context.Context, before, after *v1alpha1.RemediationRequest){
	// The metrics of phase changes and of the steps that ended.
	func(_ context.Context, before, after *v1alpha1.RemediationRequest) { observeTransitions(before, after) },
	// The crash points of make chaos right after a step's start is journaled.
	func(_ context.Context, before, after *v1alpha1.RemediationRequest) { journaledStarts(before, after) },
	// The outcome's one log line.
	logOutcome,
}

// journaledStarts passes the after-journal failpoint of each step whose start the
// status write just journaled (a no-op outside failpoints builds, see package
// failpoint).
func journaledStarts(before, after *v1alpha1.RemediationRequest) {
	if !failpoint.Enabled {
		return
	}
	for i, st := range after.Status.Steps {
		if st.State == v1alpha1.StepRunning && (i >= len(before.Status.Steps) || before.Status.Steps[i].State != v1alpha1.StepRunning) {
			failpoint.Inject(failpoint.Name(st.Name, failpoint.AfterJournal))
		}
	}
}
