package remediations

// The gate: the one answer to "may this destructive step start, or run, now?".
//
// Before, four places answered it (the policy's conflict rule, the floor, the
// withdrawal check on a spec edit and the window check in the reconciler) and they
// disagreed: a spec edit while the window was closed ended Failed, the window simply
// closing ended Waiting. Now every path asks Gate, and the answer says what to do.
// The CUE rules keep the explanations for people at decision time; the gate keeps
// the safety before every destructive call.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Action is what a closed gate asks of the playbook.
type Action string

const (
	// ActionFail means the safety floor is breached: the step fails, the playbook
	// restores what it changed and the request ends Failed (reason: the invariant).
	ActionFail Action = "Fail"
	// ActionAbort means the spec no longer allows the playbook (DryRun, fencing withdrawn,
	// an invalid window, the namespace or driver changed): the playbook restores and
	// the request ends Failed, reason Aborted.
	ActionAbort Action = "Abort"
	// ActionHold means Remediator is paused: the step does not start, or a running
	// one neither checks, acts nor times out, and nothing is restored; the playbook
	// goes on when resumed, a running step with the time it had left.
	ActionHold Action = "Hold"
	// ActionWait means the maintenance window is closed: the playbook restores and waits
	// for the next window, when the request is decided again.
	ActionWait Action = "Wait"
)

// Stop is a closed gate: what to do, and why.
type Stop struct {
	Action Action
	// Violation is the floor's, for ActionFail.
	Violation *Violation
	// Message says why, for people.
	Message string
	// Opens is when the next window opens, for ActionWait.
	Opens time.Time
}

// GateInput is what the gate weighs.
type GateInput struct {
	// RR is the request: its current spec, the decided playbook and facts, and the
	// journal.
	RR *v1alpha1.RemediationRequest
	// Step is the destructive step.
	Step string
	// Starting: the step is about to start; otherwise it is about to act, and Fresh
	// and Conflicts are the facts read right now.
	Starting  bool
	Fresh     *v1alpha1.Facts
	Conflicts []string
	Playbooks Playbooks
	Gates     Gates
	Now       time.Time
	// Paused is the pause's message while Remediator is paused; empty otherwise.
	Paused string
}

// Gate returns nil when the step may go on, else what to do instead. Every step's
// start asks it (the pause holds any step, and a running one: pauseHold); the rest
// applies to destructive steps,
// which ask again right before they act. A step that starts after the window
// closed, because the workload was already evicted, goes on with a note saying so.
func Gate(in GateInput) (stop *Stop, note string) {
	if stop := pauseHold(in.Paused); stop != nil {
		return stop, ""
	}
	if !destructive[in.Step] {
		return nil, ""
	}
	rr := in.RR
	if d := rr.Status.Decision; d != nil && d.Generation != rr.Generation {
		if why := withdrawn(rr, in.Now); why != "" {
			return &Stop{Action: ActionAbort, Message: why}, ""
		}
	}
	if in.Starting {
		inside, opens, _ := MaintenanceWindow(rr.Spec.MaintenanceWindow, in.Now)
		switch {
		case inside:
		case WorkloadEvicted(rr.Status.Steps):
			// From the eviction on, the rest of the playbook is what brings the
			// workload back: stopping would strand it until the next window.
			note = fmt.Sprintf("The maintenance window closed after the affected pods were evicted; step %s starts all the same, so that the workload is not left down until the next window: the playbook finishes the Lease deletion and the uncordon", in.Step)
		default:
			return &Stop{Action: ActionWait, Opens: opens,
				Message: fmt.Sprintf("The maintenance window closed before step %s, so the playbook stopped without starting it", in.Step)}, ""
		}
		return nil, note
	}
	if v := floor(in); v != nil {
		return &Stop{Action: ActionFail, Violation: v, Message: v.Error() + "; nothing was done"}, ""
	}
	return nil, ""
}

// pauseHold is the pause's answer for any step, destructive or not, starting or
// running: while paused (the pause's message is not empty) the playbook moves no
// further and keeps what it changed. A running step holds before it checks, acts or
// times out, and the runner journals how long it was held (holdStep, resumeStep).
func pauseHold(paused string) *Stop {
	if paused == "" {
		return nil
	}
	return &Stop{Action: ActionHold, Message: paused}
}

// floor checks the safety floor for the step on the facts read right now. The steps
// it checks against are the decided playbook's, from the playbooks the controller
// ships, and the journal in status must list exactly those: status cannot pick a
// shorter playbook that skips the floor's checks.
func floor(in GateInput) *Violation {
	rr := in.RR
	names := make([]string, 0, len(rr.Status.Steps))
	for _, st := range rr.Status.Steps {
		names = append(names, st.Name)
	}
	d := rr.Status.Decision
	if d == nil || in.Playbooks == nil {
		return violation(InvariantPlaybookMismatch, "the request records no decided playbook")
	}
	pb, ok := in.Playbooks[d.Playbook]
	if !ok || !slices.Equal(pb.Steps, names) {
		return violation(InvariantPlaybookMismatch, "the journal lists steps %s, not those of playbook %q", strings.Join(names, " -> "), d.Playbook)
	}
	return CheckFloor(FloorInput{Spec: rr.Spec, Steps: pb.Steps, Step: in.Step, Decided: rr.Status.Facts,
		Now: in.Fresh, Conflicts: in.Conflicts, Gates: in.Gates, Created: rr.CreationTimestamp.Time})
}

// withdrawn says why the current spec, a generation later than the decision's, no
// longer allows the running playbook, or "" when it still does. The decision checked
// the same fields of its own generation; what status alone says (a forged decision)
// is the floor's to refuse.
func withdrawn(rr *v1alpha1.RemediationRequest, now time.Time) string {
	spec, f := rr.Spec, rr.Status.Facts
	if spec.Mode == v1alpha1.ModeDryRun {
		return "spec.mode is now DryRun"
	}
	if f != nil && f.Node != nil && f.Lease != nil && (f.Node.State == v1alpha1.NodeUnreachable || f.Node.State == v1alpha1.NodeNotFound) {
		switch fe := spec.Fencing; {
		case fe == nil || !fe.Confirmed:
			return fmt.Sprintf("spec.fencing no longer confirms that holder node %s was fenced", f.Lease.HolderIdentity)
		case fe.Node != f.Lease.HolderIdentity:
			return fmt.Sprintf("spec.fencing now names node %q, not holder node %s", fe.Node, f.Lease.HolderIdentity)
		}
	}
	if _, _, err := MaintenanceWindow(spec.MaintenanceWindow, now); err != nil {
		return fmt.Sprintf("spec.maintenanceWindow is invalid (%v)", err)
	}
	switch {
	case f != nil && spec.TridentNamespace != "" && spec.TridentNamespace != f.TridentNamespace:
		return fmt.Sprintf("spec.tridentNamespace changed to %s, but the facts were gathered in %s", spec.TridentNamespace, f.TridentNamespace)
	case f != nil && spec.DriverName != "" && spec.DriverName != f.DriverName:
		return fmt.Sprintf("spec.driverName changed to %s, but the facts are about %s", spec.DriverName, f.DriverName)
	}
	return ""
}

// WorkloadEvicted reports whether the playbook has evicted the workload: its
// deleteAffectedPods step succeeded. From then on the pods are down until the Lease
// is released, so stopping at a closing window would strand them until the next
// one; the playbook finishes instead (the Lease deletion and the uncordon).
func WorkloadEvicted(steps []v1alpha1.StepStatus) bool {
	for _, st := range steps {
		if st.Name == v1alpha1.StepDeleteAffectedPods {
			return st.State == v1alpha1.StepSucceeded
		}
	}
	return false
}
