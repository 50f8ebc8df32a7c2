package controllers

// Where a request stands in admission's line, read from its status (admission.go).

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
)

// slotState is what a request is to admission.
type slotState int

const (
	notInLine slotState = iota
	// inLine: allowed a disruptive playbook, decided on its current spec, waiting
	// for a slot.
	inLine
	// holdsSlot: running a disruptive playbook, or granted a slot and about to be
	// decided again.
	holdsSlot
)

func stateOf(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks) slotState {
	deleting := !rr.DeletionTimestamp.IsZero()
	switch {
	case rr.Status.Phase == v1alpha1.PhaseRunning && playbooks.Disruptive(decidedPlaybook(rr)):
		// Deleted mid-run, it keeps the slot until its reconcile has restored what it
		// changed and ended it (reconcileDelete).
		return holdsSlot
	case granted(rr) && !deleting:
		// A grant not yet used goes with the deletion: nothing decides a request that
		// is being deleted, whatever finalizers keep it.
		return holdsSlot
	case queued(rr) && rr.Status.ObservedGeneration == rr.Generation && !deleting:
		// A request whose spec changed since it joined (or one being deleted) keeps no
		// place: it is decided again first.
		return inLine
	}
	return notInLine
}

// queued: the policy allowed a disruptive playbook and the request waits in line.
func queued(rr *v1alpha1.RemediationRequest) bool {
	return progressingReason(rr) == v1alpha1.ReasonWaitingForSlot
}

// granted: admission granted the request a slot; its own reconcile decides it again.
func granted(rr *v1alpha1.RemediationRequest) bool {
	return progressingReason(rr) == v1alpha1.ReasonAdmitted
}

// slotExpired: the request gave back a slot it did not use in time; its own
// reconcile decides it again.
func slotExpired(rr *v1alpha1.RemediationRequest) bool {
	return progressingReason(rr) == v1alpha1.ReasonSlotExpired
}

// progressingReason is the Progressing reason of a Waiting request, else "".
func progressingReason(rr *v1alpha1.RemediationRequest) string {
	if rr.Status.Phase != v1alpha1.PhaseWaiting {
		return ""
	}
	return anyProgressingReason(rr)
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

// grantExpiry is when a slot holder whose playbook has not started its first step
// gives the slot back: the grant time plus the step timeout. ok is false for a
// request that holds no slot or has started (its steps' own timeouts bound it from
// there). A grant written before status.admittedAt existed counts from the
// Progressing condition's last transition, which is no later than the grant.
func grantExpiry(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks, timeout time.Duration) (at time.Time, ok bool) {
	if stateOf(rr, playbooks) != holdsSlot || firstStepStarted(rr) {
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
