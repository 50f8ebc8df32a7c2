package controllers

// The reconcile's one status write, and what is derived into status right before it.

import (
	"context"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/remediations/failpoint"
)

// patchStatus writes the status once, as a merge patch guarded by the resourceVersion
// it was computed from, and skips the call when nothing changed. Every string in it
// is bounded first (requests.BoundStatus): one the API server would refuse would fail this
// write, and every later one.
func (r *RemediationRequestReconciler) patchStatus(ctx context.Context, s *scope) error {
	s.rr.Status.CurrentStep = currentStep(s.rr.Status)
	setReadiness(s.rr)
	setOutcome(s.base, s.rr, s.now)
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
		observeTransitions(s.base, s.rr)
		journaledStarts(s.base, s.rr)
		logOutcome(ctx, s.base, s.rr)
	}
	// A second patch in the same reconcile (deletion) diffs from what was written.
	s.base = s.rr.DeepCopy()
	return nil
}

// currentStep is status.currentStep: the running step, else the next pending one
// while the request runs or waits, as "position/count name".
func currentStep(st v1alpha1.RemediationRequestStatus) string {
	at := slices.IndexFunc(st.Steps, func(s v1alpha1.StepStatus) bool { return s.State == v1alpha1.StepRunning })
	if at < 0 && (st.Phase == v1alpha1.PhaseRunning || st.Phase == v1alpha1.PhaseWaiting) {
		at = slices.IndexFunc(st.Steps, func(s v1alpha1.StepStatus) bool { return s.State == v1alpha1.StepPending || s.State == "" })
	}
	if at < 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d %s", at+1, len(st.Steps), st.Steps[at].Name)
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
