package remediations

// The gate is the one answer to "may this step start, or act, now?": the pause, a
// spec edited since the decision, the maintenance window and the safety floor. The
// CUE rules explain to people at decision time; the gate guards every destructive call.

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
	// ActionFail means the safety floor is breached; the playbook restores and the request
	// ends Failed with the invariant as reason.
	ActionFail Action = "Fail"
	// ActionAbort means the spec no longer allows the playbook (DryRun, fencing withdrawn,
	// an invalid window, the namespace or driver changed); it restores and ends
	// Failed, reason Aborted.
	ActionAbort Action = "Abort"
	// ActionHold means Remediator is paused. Nothing starts, a running step neither
	// checks, acts nor times out, nothing is restored; on resume a running step goes
	// on with the time it had left.
	ActionHold Action = "Hold"
	// ActionWait means the maintenance window is closed; the playbook restores and the
	// request is decided again when the next window opens.
	ActionWait Action = "Wait"
)

// Halt is the gate's answer when it is closed: what to do, and why.
type Halt struct {
	Action Action
	// Violation is the floor's, for ActionFail.
	Violation *Violation
	Message   string
	// Opens is when the next window opens, for ActionWait.
	Opens time.Time
}

// Gate returns nil when the step may go on, else what to do instead. The pause holds
// every step; the rest applies to destructive steps, which ask again right before
// they act. A step that starts after the window closed, because the workload was
// already evicted, goes on with a note saying so. Starting: the step is about to
// start; otherwise it is about to act, on this Advance's fresh facts (readFresh).
func Gate(r *Execution, step string, starting bool) (halt *Halt, note string) {
	if halt := pauseHold(r.Paused); halt != nil {
		return halt, ""
	}
	if !destructive[step] {
		return nil, ""
	}
	rr := r.RR
	if d := rr.Status.Decision; d != nil && d.Generation != rr.Generation {
		if why := withdrawn(rr, r.Now); why != "" {
			return &Halt{Action: ActionAbort, Message: why}, ""
		}
	}
	if starting {
		inside, opens, _ := MaintenanceWindow(rr.Spec.MaintenanceWindow, r.Now)
		switch {
		case inside:
		case WorkloadEvicted(rr.Status.Steps):
			note = fmt.Sprintf("The maintenance window closed after the affected pods were evicted; step %s starts all the same, so that the workload is not left down until the next window: the playbook finishes the Lease deletion and the uncordon", step)
		default:
			return &Halt{Action: ActionWait, Opens: opens,
				Message: fmt.Sprintf("The maintenance window closed before step %s, so the playbook stopped without starting it", step)}, ""
		}
		return nil, note
	}
	if v := journalFloor(r, step); v != nil {
		return &Halt{Action: ActionFail, Violation: v, Message: v.Error() + "; nothing was done"}, ""
	}
	return nil, ""
}

// pauseHold holds any step, starting or running, while paused: the playbook moves no
// further and keeps what it changed (the runner journals the time held: holdStep).
func pauseHold(paused string) *Halt {
	if paused == "" {
		return nil
	}
	return &Halt{Action: ActionHold, Message: paused}
}

// journalFloor checks the safety floor for the step on the fresh facts, against the
// decided playbook's steps as the controller ships them. The journal in status must
// list exactly those: status cannot pick a shorter playbook that skips the checks.
func journalFloor(r *Execution, step string) *Violation {
	rr := r.RR
	names := make([]string, 0, len(rr.Status.Steps))
	for _, st := range rr.Status.Steps {
		names = append(names, st.Name)
	}
	d := rr.Status.Decision
	if d == nil || r.Playbooks == nil {
		return violation(InvariantPlaybookMismatch, "the request records no decided playbook")
	}
	pb, ok := r.Playbooks[d.Playbook]
	if !ok || !slices.Equal(pb.Steps, names) {
		return violation(InvariantPlaybookMismatch, "the journal lists steps %s, not those of playbook %q", strings.Join(names, " -> "), d.Playbook)
	}
	return CheckFloor(FloorInput{Spec: rr.Spec, Steps: pb.Steps, Step: step, Decided: rr.Status.Facts,
		Fresh: r.freshFacts, Conflicts: r.freshConflicts, Floor: r.Floor, Created: rr.CreationTimestamp.Time})
}

// withdrawn says why the current spec, edited since the decision, no longer allows
// the running playbook, or "". A forged decision in status is the floor's to refuse.
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

// WorkloadEvicted reports whether the deleteAffectedPods step succeeded. From then
// on the pods are down until the Lease is released, so stopping at a closing window
// would strand them: the playbook finishes instead.
func WorkloadEvicted(steps []v1alpha1.StepStatus) bool {
	i := slices.IndexFunc(steps, func(st v1alpha1.StepStatus) bool { return st.Name == v1alpha1.StepDeleteAffectedPods })
	return i >= 0 && steps[i].State == v1alpha1.StepSucceeded
}
