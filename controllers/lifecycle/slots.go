package lifecycle

// Where a request stands in admission's line, read from its status.

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/remediations"
)

// SlotState is what a request is to admission.
type SlotState int

// The slot states.
const (
	// NotInLine: neither waiting for a slot nor holding one.
	NotInLine SlotState = iota
	// InLine: allowed a disruptive playbook, decided on its current spec, waiting
	// for a slot.
	InLine
	// HoldsSlot: running a disruptive playbook, or granted a slot and about to be
	// decided again.
	HoldsSlot
)

// StateOf is where the request stands in admission's line.
func StateOf(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks) SlotState {
	deleting := !rr.DeletionTimestamp.IsZero()
	switch {
	case rr.Status.Phase == v1alpha1.PhaseRunning && playbooks.Disruptive(DecidedPlaybook(rr)):
		// Deleted mid-run, it keeps the slot until its reconcile has restored what it
		// changed and ended it (reconcileDelete).
		return HoldsSlot
	case Granted(rr) && !deleting:
		// A grant not yet used goes with the deletion: nothing decides a request that
		// is being deleted, whatever finalizers keep it.
		return HoldsSlot
	case Waits(rr, v1alpha1.WaitingForSlot) && rr.Status.ObservedGeneration == rr.Generation && !deleting:
		// In line: allowed a disruptive playbook. A request whose spec changed since it
		// joined (or one being deleted) keeps no place: it is decided again first.
		return InLine
	}
	return NotInLine
}

// Granted reports that admission granted the request a slot; its own reconcile decides it again.
func Granted(rr *v1alpha1.RemediationRequest) bool {
	return Waits(rr, v1alpha1.WaitingForStart)
}

// SlotExpired reports that the request gave back a slot it did not use in time; its own
// reconcile decides it again.
func SlotExpired(rr *v1alpha1.RemediationRequest) bool {
	return Waits(rr, v1alpha1.WaitingForRedecision)
}

// firstStepStarted: the playbook's journal has a step past Pending. Until then, a
// slot holder has changed nothing, and the first step acts only after the status
// write that journals its start (the write-ahead journal), which a give-back
// guarded by the same resourceVersion makes fail.
func firstStepStarted(rr *v1alpha1.RemediationRequest) bool {
	if rr.Status.Phase != v1alpha1.PhaseRunning {
		return false
	}
	return slices.ContainsFunc(rr.Status.Steps, func(st v1alpha1.StepStatus) bool {
		return st.State != v1alpha1.StepPending && st.State != ""
	})
}

// GrantExpiry is when a slot holder whose playbook has not started its first step
// gives the slot back: the grant time plus the step timeout. ok is false for a
// request that holds no slot or has started (its steps' own timeouts bound it from
// there). A grant written before status.admittedAt existed counts from the
// Progressing condition's last transition, which is no later than the grant.
func GrantExpiry(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks, timeout time.Duration) (at time.Time, ok bool) {
	if StateOf(rr, playbooks) != HoldsSlot || firstStepStarted(rr) {
		return time.Time{}, false
	}
	if rr.Status.AdmittedAt != nil {
		return rr.Status.AdmittedAt.Add(timeout), true
	}
	if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing); c != nil {
		return c.LastTransitionTime.Add(timeout), true
	}
	return time.Time{}, true
}

// LineAhead is what a request joining the line is told: the slot holders, and how
// many requests in line came before it.
func LineAhead(self *v1alpha1.RemediationRequest, others []v1alpha1.RemediationRequest, playbooks remediations.Playbooks) (holders []string, ahead int) {
	var held []v1alpha1.RemediationRequest
	for _, o := range others {
		if o.UID == self.UID {
			continue
		}
		switch StateOf(&o, playbooks) {
		case HoldsSlot:
			held = append(held, o)
		case InLine:
			if requests.OlderFirst(o, *self) < 0 {
				ahead++
			}
		}
	}
	return Names(held), ahead
}

// Names are the requests' namespace/name, sorted.
func Names(rrs []v1alpha1.RemediationRequest) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		out = append(out, rr.Namespace+"/"+rr.Name)
	}
	slices.Sort(out)
	return out
}

// CapString renders the cap; zero means none.
func CapString(maxConcurrent int) string {
	if maxConcurrent <= 0 {
		return "none"
	}
	return fmt.Sprint(maxConcurrent)
}

// DecidedPlaybook is the playbook the request's decision chose, "" before one.
func DecidedPlaybook(rr *v1alpha1.RemediationRequest) string {
	if rr.Status.Decision == nil {
		return ""
	}
	return rr.Status.Decision.Playbook
}

// ProgressingReason is the Progressing condition's reason, in any phase.
func ProgressingReason(rr *v1alpha1.RemediationRequest) string {
	if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing); c != nil {
		return c.Reason
	}
	return ""
}
