package lifecycle

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// The Ready summary, for kubectl wait and kstatus-based tools (Flux, cli-utils'
// kstatus), computed in one place from the status the reconcile is about to write.
//
// kstatus reads, in this order: status.observedGeneration against metadata.generation
// (behind: InProgress), Reconciling=True (InProgress), Stalled=True (Failed), and for
// a custom resource without either, Ready (True: Current, False: InProgress). So
// Ready=False alone would tell such tools that a rejected or failed request is still
// in progress, and they would wait for it until their timeout; Stalled=True makes
// them report it failed at once. The request's own conditions already say the rest:
//
//	phase                         Ready                                     Stalled
//	Succeeded                     True,  Succeeded's reason (PlaybookCompleted)  -
//	Pending, decided DryRun       True,  DryRun (it did all it was asked)        -
//	Pending, not decided yet      False, Pending (or Progressing's reason)       -
//	Waiting                       False, Progressing's reason (Waiting, WaitingForMaintenanceWindow, ...)  -
//	Running                       False, Progressing's reason (PlaybookRunning), the step in the message  -
//	Rejected                      False, Accepted's reason (the rule)       True
//	Failed                        False, Succeeded's reason (StepFailed, ...)  True
//	any other phase               Unknown                                   -
//
// FixHeld (package verification) does not enter Ready: a Succeeded request whose incident came
// back is still Ready True, because the playbook did succeed and nothing will run it
// again, so a Ready=False there would leave kubectl wait, Flux and kstatus waiting for
// a change that never comes. FixHeld=False, its Warning Event, the metric and the
// RemediationFixDidNotHold alert carry the news instead.
//
// A decided DryRun is Ready, as the Argo CD health check calls it Healthy: nothing
// moves it further but a spec change, so a wait for it would never end. Both
// conditions carry status.observedGeneration, the generation the status describes:
// kubectl wait skips a condition whose observedGeneration is behind the object's
// generation, so a Ready left from an older spec is never taken for the current one.

// reasonUnknownPhase is Ready's reason for a phase this controller does not know.
const reasonUnknownPhase = "UnknownPhase"

// readiness is the Ready condition of a request with status st (without a
// transition time: meta.SetStatusCondition keeps or sets it).
func readiness(st v1alpha1.RemediationRequestStatus) metav1.Condition {
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: st.ObservedGeneration}
	// from takes the reason and message of condition t when it has status want (any
	// status when want is empty), else the fallbacks.
	from := func(t string, want metav1.ConditionStatus, reason, message string) {
		ready.Reason, ready.Message = reason, message
		c := meta.FindStatusCondition(st.Conditions, t)
		if c == nil || c.Reason == "" || (want != "" && c.Status != want) {
			return
		}
		ready.Reason = c.Reason
		if c.Message != "" {
			ready.Message = c.Message
		}
	}
	decision := "no decision recorded"
	if st.Decision != nil && st.Decision.Message != "" {
		decision = st.Decision.Message
	}
	switch st.Phase {
	case v1alpha1.PhaseSucceeded:
		ready.Status = metav1.ConditionTrue
		from(v1alpha1.ConditionSucceeded, metav1.ConditionTrue, v1alpha1.ReasonPlaybookCompleted, "The playbook completed")
	case v1alpha1.PhaseFailed:
		from(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonFailed, "The playbook failed")
		ready.Message = "Failed: " + ready.Message
	case v1alpha1.PhaseRejected:
		from(v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonRejected, decision)
		ready.Message = "Rejected: " + ready.Message
	case v1alpha1.PhaseWaiting:
		from(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonWaiting, decision)
	case v1alpha1.PhaseRunning:
		from(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonPlaybookRunning, "Running the playbook")
		if st.CurrentStep != "" {
			ready.Message += "; at step " + st.CurrentStep
		}
	case v1alpha1.PhasePending, "":
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing); st.Phase == v1alpha1.PhasePending &&
			c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonDryRun {
			ready.Status = metav1.ConditionTrue
		}
		from(v1alpha1.ConditionProgressing, "", v1alpha1.ReasonPending, "The controller has not decided the request yet")
	default:
		ready.Status, ready.Reason = metav1.ConditionUnknown, reasonUnknownPhase
		ready.Message = "Unknown phase " + string(st.Phase) + "; this controller knows Pending, Waiting, Running, Succeeded, Rejected and Failed"
	}
	return ready
}

// SetReadiness sets Ready on rr from its status, and Stalled while the request is
// Rejected or Failed (removed otherwise: kstatus' conditions are abnormal-true).
// The status write calls it once, before it compares the status with what was read, so
// that a reconcile that changes nothing else writes nothing.
func SetReadiness(rr *v1alpha1.RemediationRequest) {
	ready := readiness(rr.Status)
	meta.SetStatusCondition(&rr.Status.Conditions, ready)
	// kstatus counts a Rejected or Failed request as failed: only a spec change (or a
	// rejection's recheck) moves it on.
	if p := rr.Status.Phase; p != v1alpha1.PhaseRejected && p != v1alpha1.PhaseFailed {
		meta.RemoveStatusCondition(&rr.Status.Conditions, v1alpha1.ConditionStalled)
		return
	}
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: ready.Reason, Message: ready.Message, ObservedGeneration: ready.ObservedGeneration})
}
