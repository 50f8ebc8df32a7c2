package plan

// What applying a request file does to a request of the same name that is already in
// the cluster, as the controller's Reconcile and needsDecision handle it
// (controllers/remediationrequest/remediationrequest_controller.go):
//   - Succeeded, Failed: Phase.PlaybookEnded() returns before any phase runs; an edit is never
//     decided again and the playbook never runs again.
//   - Running: not decided again (needsDecision); a safety-relevant spec change stops
//     it before its next destructive step (remediations.Gate).
//   - Rejected, Waiting, Pending (a DryRun), or no phase: decided again, on fresh
//     facts, when the spec changes (a new generation), and a decision with a recheck
//     time is made again at that time. An unchanged Rejected request with no recheck
//     time stays Rejected.

import (
	"cmp"
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
)

// planExisting is the plan of a request the controller will not decide again.
type planExisting struct {
	// Phase is the request's phase in the cluster: Succeeded, Failed or Rejected.
	Phase v1alpha1.Phase `json:"phase"`
	// Rule and Message are its standing decision's.
	Rule    string `json:"rule,omitempty"`
	Message string `json:"message"`
}

// existingRequest is what adoptExisting found.
type existingRequest struct {
	// note is for the plan of a request the controller decides (again).
	note string
	// done is set when the controller will not decide the request again: plan
	// reports that instead of a decision on today's facts.
	done *planExisting
}

// adoptExisting looks for a request of the same name in the cluster. The controller
// never counts a request as its own conflict (it compares UIDs), so the plan of an
// update takes the existing UID. A request that already ran, or whose rejection
// stands unchanged, is not decided again; a plan on today's facts would judge what
// the controller will not do (a Succeeded release-luks-lease request, whose Lease is
// gone, would plan as rejected and fail every later pull request).
func (p *planner) adoptExisting(ctx context.Context, rr *v1alpha1.RemediationRequest) (existingRequest, error) {
	if rr.Namespace == "" {
		return existingRequest{}, nil
	}
	existing := &v1alpha1.RemediationRequest{}
	if err := p.reader.Get(ctx, types.NamespacedName{Namespace: rr.Namespace, Name: rr.Name}, existing); err != nil {
		if apierrors.IsNotFound(err) {
			return existingRequest{}, nil
		}
		return existingRequest{}, fmt.Errorf("reading RemediationRequest %s/%s: %w", rr.Namespace, rr.Name, err)
	}
	rr.UID = existing.UID
	key := rr.Namespace + "/" + rr.Name
	var rule string
	if d := existing.Status.Decision; d != nil {
		rule = d.Rule
	}
	switch existing.Status.Phase {
	case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		return existingRequest{done: &planExisting{Phase: existing.Status.Phase, Rule: rule, Message: fmt.Sprintf(
			"RemediationRequest %s already ran: %s; the controller will not run it again, whatever this file changes. Remove the file in a later pull request (the prune deletes the request); to run the remediation again, add a request with a new name.",
			key, existing.Status.Phase)}}, nil
	case v1alpha1.PhaseRejected:
		if sameSpec(existing.Spec, rr.Spec) && (existing.Status.Decision == nil || existing.Status.Decision.RecheckAt == nil) {
			return existingRequest{done: &planExisting{Phase: existing.Status.Phase, Rule: rule, Message: fmt.Sprintf(
				"RemediationRequest %s is already Rejected (rule %s) and this file does not change its spec: the controller does not decide it again. Change its spec to have it decided again on fresh facts, or add a request with a new name.",
				key, cmp.Or(rule, "-"))}}, nil
		}
		return existingRequest{note: fmt.Sprintf("RemediationRequest %s already exists and is Rejected: the controller decides it again on fresh facts when its spec changes or its recheck time comes, as planned here.", key)}, nil
	case v1alpha1.PhaseRunning:
		return existingRequest{note: fmt.Sprintf("RemediationRequest %s already exists and is Running: applying this file changes its spec but it is not decided again; create a request with a new name instead."+
			" A change that sets spec.mode: DryRun, withdraws the fencing or closes the maintenance window stops the running playbook (Failed, reason Aborted).", key)}, nil
	}
	return existingRequest{note: fmt.Sprintf("RemediationRequest %s already exists (phase %s); applying this file updates it and it is decided again.",
		key, cmp.Or(string(existing.Status.Phase), "-"))}, nil
}

// sameSpec: applying a file with spec b over a request with spec a leaves the spec,
// and so the generation the controller decides on, unchanged. spec.mode is the one
// field the API server defaults (to Apply).
func sameSpec(a, b v1alpha1.RemediationRequestSpec) bool {
	a.Mode = cmp.Or(a.Mode, v1alpha1.ModeApply)
	b.Mode = cmp.Or(b.Mode, v1alpha1.ModeApply)
	return apiequality.Semantic.DeepEqual(a, b)
}
