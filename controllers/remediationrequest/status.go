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
		// Nothing to write: what the Events report is stored already.
		r.recordEvents(s)
		return nil
	}
	from := s.base.ResourceVersion
	err := r.Client.Status().Patch(ctx, s.rr, client.MergeFromWithOptions(s.base, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsNotFound(err):
		// Gone: nothing to report on.
		s.events = nil
	case err != nil:
		return fmt.Errorf("patching status: %w", err)
	default:
		// Only a write the API server applied moves the resourceVersion: a patch of
		// sub-second times that the stored form rounds away changes nothing, and
		// waiting for the cache to move past from would then wait forever.
		// A terminal write brings no reconcile of its own, so it is not waited for:
		// but after a journal write earlier in this reconcile (journalThenAct) that
		// write's watch event is still on its way, and the reconcile it brings must
		// not act on the journal this one has since moved past.
		if s.rr.ResourceVersion != from && (!s.rr.Status.Phase.Terminal() || s.journaled) {
			r.written.wrote(s.rr.UID, from)
		}
		// The effects of the write, carried out only once the API server applied it,
		// so that a reconcile retried after a failed write does not repeat them:
		// the Events of the changes it carries, the metrics of phase changes and
		// ended steps, the crash points of make chaos after a step's start is
		// journaled, and the outcome's one log line.
		r.recordEvents(s)
		observeTransitions(s.base, s.rr)
		journaledStarts(s.base, s.rr)
		logOutcome(ctx, s.base, s.rr)
	}
	// A second patch in the same reconcile (deletion) diffs from what was written.
	s.base = s.rr.DeepCopy()
	return nil
}

// recordEvents records the Events s queued, once, as one write records them
// (lifecycle.EventsOfWrite).
func (r *Reconciler) recordEvents(s *scope) {
	for _, e := range lifecycle.EventsOfWrite(s.events) {
		r.Recorder.Event(s.rr, e.Type, e.Reason, e.Message)
	}
	s.events = nil
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
