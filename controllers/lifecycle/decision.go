package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

// Rules the decision path itself can give, besides the policy's rules and the
// safety floor's invariants.
const (
	// RuleInvalidWindow rejects a request whose maintenance window cannot be parsed,
	// is out of bounds, or never opens.
	RuleInvalidWindow = "invalid-maintenance-window"
	// RulePolicyError rejects a request the policy could not decide: a policy that
	// cannot decide fails closed.
	RulePolicyError = "policy-error"
	// RuleUnknownPlaybook rejects a request whose allowing rule names a playbook that
	// does not exist.
	RuleUnknownPlaybook = "unknown-playbook"
)

// ReasonPolicyInvalid is the reason of condition Accepted (Unknown) while the
// controller has no policy to decide with: it started on policy files that do not
// load, and the engine answers rule policies.RulePolicyInvalid, whose condition
// reason this is. The request waits and is decided once a policy loads.
const ReasonPolicyInvalid = "PolicyInvalid"

// policyErrorRecheck is when a request the policy could not decide is tried again:
// a fixed policy (reloaded from --policies-dir) then decides it.
const policyErrorRecheck = time.Minute

// minRecheck is the shortest recheck a policy may ask for: each recheck gathers live
// facts again, and a policy answering recheckAfterSeconds: 1 would make every waiting
// request re-read the cluster every second.
const minRecheck = 10 * time.Second

// maxRecheck caps a policy's recheckAfterSeconds. A recheck only decides again, on
// fresh facts, so deciding sooner is always safe; an uncapped value from an override
// policy (say, 10^12 seconds) would overflow time.Duration into a time in the past.
const maxRecheck = 24 * time.Hour

// DecisionInput is everything one decision depends on. It is plain data: the
// controller fills it from the live cluster, `remediator plan` from live or saved
// facts, and tests from tables.
type DecisionInput struct {
	// Request is the request being decided: its spec, and its UID so that it is not
	// its own conflict.
	Request *v1alpha1.RemediationRequest
	// Facts are the facts gathered for it.
	Facts *v1alpha1.Facts
	// Others are the other requests that can hold this one back, in the guards'
	// view (metadata and status): at least those running on the same Lease or node,
	// those running a disruptive playbook and those waiting for a slot. Every
	// request in the cluster will do; Request itself may be among them.
	Others []v1alpha1.RemediationRequest
	// MaxConcurrent caps the disruptive playbooks running at once; zero means no cap.
	// It is only told, in the message of a request waiting for a slot: admission
	// grants the slots.
	MaxConcurrent int
	// Paused is the pause's message while Remediator is paused (pause.State.Message):
	// an allowed playbook then waits instead of starting. Empty when not paused.
	Paused string
	// Admitted: the request holds a slot admission granted it, so an allowed
	// disruptive playbook starts; without one it joins the line. `remediator plan`
	// predicts it (WouldAdmit).
	Admitted bool
	// Floor is the safety floor's minimums (the controller's --floor-* flags); zero
	// fields mean the runbook's values.
	Floor remediations.Floor
	Now   time.Time
}

// Condition is a status condition an outcome sets.
type Condition struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// Transition is what one decision makes of a request. The reconciler writes it to
// status; plan prints it. Both get it from Decide, so they cannot disagree.
type Transition struct {
	Phase    v1alpha1.Phase
	Decision v1alpha1.Decision
	// Steps is the playbook's journal, all Pending, when a playbook was chosen.
	Steps []v1alpha1.StepStatus
	// WaitingFor is the waiting sub-state of phase Waiting; empty otherwise.
	WaitingFor  v1alpha1.WaitingFor
	Accepted    Condition
	Progressing Condition
	// EventType, EventReason and EventMessage are the Event to record.
	EventType, EventReason, EventMessage string
	// Conflicts are the other running requests on the same Lease or node.
	Conflicts []string
	// Running are the requests holding the cap's slots, when the request waits for
	// one.
	Running []string
	// RequeueAfter is when to decide again; zero means only on a change.
	RequeueAfter time.Duration
}

// Decide is the one decision path: the policy, then the safety floor, then DryRun,
// the maintenance window and the cluster-wide cap. It is pure, apart from evaluating
// the compiled policy, and always returns an outcome: whatever cannot be decided is
// rejected with an explanation.
func Decide(policy *policies.Engine, playbooks remediations.Playbooks, in DecisionInput) Transition {
	return DecideWith(Evaluate(policy, in), playbooks, in)
}

// Evaluate asks the policy about the request, on the guards' view in in.Others. It
// always answers: a policy that cannot decide fails closed (RulePolicyError). It
// takes no lock of the controller's, so a slow policy holds up no other decision.
func Evaluate(policy *policies.Engine, in DecisionInput) policies.Decision {
	conflicts := ConflictsIn(in.Others, in.Request.UID, in.Facts)
	d, err := policy.Decide(policies.Input{
		Remediation: in.Request.Spec.Remediation, Mode: in.Request.Spec.Mode, Fencing: in.Request.Spec.Fencing, Facts: in.Facts, Conflicts: conflicts,
	})
	if err != nil {
		d = policies.Decision{Verdict: policies.VerdictReject, Rule: RulePolicyError, Reasons: []string{err.Error()}, Digest: policy.Digest(),
			Message:             fmt.Sprintf("The policy could not decide this request (%v), so it fails closed and nothing is changed. Fix the policy; the request is decided again in %s.", err, policyErrorRecheck),
			RecheckAfterSeconds: int64(policyErrorRecheck / time.Second)}
	}
	return d
}

// DecideWith takes the policy's answer d through the floor, DryRun, the maintenance
// window and the line for a slot. It is pure.
func DecideWith(d policies.Decision, playbooks remediations.Playbooks, in DecisionInput) Transition {
	rr, now := in.Request, in.Now
	o := Transition{Conflicts: ConflictsIn(in.Others, rr.UID, in.Facts), Decision: v1alpha1.Decision{
		Allowed: d.Verdict == policies.VerdictAllow, Playbook: d.Playbook, Rule: d.Rule, Reasons: d.Reasons, Message: d.Message,
		PolicyDigest: d.Digest, Generation: rr.Generation, DecidedAt: metav1.NewTime(now), Floor: in.Floor.Settings(),
	}}
	if d.RecheckAfterSeconds > 0 {
		after := maxRecheck
		if d.RecheckAfterSeconds < int64(maxRecheck/time.Second) {
			after = max(time.Duration(d.RecheckAfterSeconds)*time.Second, minRecheck)
		}
		o.recheck(now.Add(after))
	}
	switch d.Verdict {
	case policies.VerdictAllow:
		return o.allowed(playbooks, in)
	case policies.VerdictWait:
		o = o.wait(now)
		if d.Rule == policies.RulePolicyInvalid {
			// No policy at all: an operator must fix Git, so it is a warning.
			o.EventType = corev1.EventTypeWarning
		}
		return o
	}
	return o.reject(fmt.Sprintf("Rejected by policy rule %s", d.Rule))
}

// recheck sets when to decide again, and says so in the message.
func (o *Transition) recheck(at time.Time) {
	t := metav1.NewTime(at)
	o.Decision.RecheckAt = &t
	o.Decision.Message += " Re-evaluated at " + Stamp(at) + "."
	o.RequeueAfter = at.Sub(o.Decision.DecidedAt.Time)
}

func (o Transition) reject(progressing string) Transition {
	o.Phase = v1alpha1.PhaseRejected
	o.Decision.Allowed, o.Decision.Playbook, o.Steps = false, "", nil
	o.Accepted = Condition{metav1.ConditionFalse, policies.ConditionReason(o.Decision.Rule), o.Decision.Message}
	o.Progressing = Condition{metav1.ConditionFalse, v1alpha1.ReasonRejected, progressing}
	o.EventType, o.EventReason = corev1.EventTypeWarning, v1alpha1.EventRejected
	o.EventMessage = fmt.Sprintf("Policy rule %s: %s", o.Decision.Rule, o.Decision.Message)
	return o
}

func (o Transition) wait(now time.Time) Transition {
	o.Phase = v1alpha1.PhaseWaiting
	o.Decision.Allowed, o.Decision.Playbook, o.Steps = false, "", nil
	if o.Decision.RecheckAt == nil {
		o.recheck(now.Add(guardRecheck))
	}
	o.Accepted = Condition{metav1.ConditionUnknown, policies.ConditionReason(o.Decision.Rule), o.Decision.Message}
	return o.waitingFor(v1alpha1.WaitingForPolicy, v1alpha1.ReasonWaiting, o.Decision.Message)
}

// waitingFor puts o in phase Waiting for w: Progressing True with reason and msg,
// and a Normal Waiting Event saying msg.
func (o Transition) waitingFor(w v1alpha1.WaitingFor, reason, msg string) Transition {
	o.Phase, o.WaitingFor = v1alpha1.PhaseWaiting, w
	o.Progressing = Condition{metav1.ConditionTrue, reason, msg}
	o.EventType, o.EventReason, o.EventMessage = corev1.EventTypeNormal, v1alpha1.EventWaiting, msg
	return o
}

// allowed takes a playbook the policy chose through the floor and the guards.
func (o Transition) allowed(playbooks remediations.Playbooks, in DecisionInput) Transition {
	rr, now, playbook, rule := in.Request, in.Now, o.Decision.Playbook, o.Decision.Rule
	plan, err := playbooks.Plan(playbook)
	if err != nil {
		o.Decision.Rule, o.Decision.RecheckAt, o.RequeueAfter = RuleUnknownPlaybook, nil, 0
		o.Decision.Reasons = []string{fmt.Sprintf("policy rule %s chose playbook %q", rule, playbook)}
		o.Decision.Message = fmt.Sprintf("Policy rule %s chose playbook %q, which this controller does not have (%v); nothing is changed. Fix the policy.", rule, playbook, err)
		return o.reject("Rejected: unknown playbook")
	}
	names := playbooks[playbook].Steps // the plan's step names, in order (read only)
	if v := remediations.CheckFloor(remediations.FloorInput{Spec: rr.Spec, Steps: names, Fresh: in.Facts, Conflicts: o.Conflicts,
		Floor: in.Floor, Created: created(rr, now)}); v != nil {
		o.Decision.Rule, o.Decision.RecheckAt, o.RequeueAfter = string(v.Invariant), nil, 0
		o.Decision.Reasons = []string{v.Message, fmt.Sprintf("policy rule %s chose playbook %s", rule, playbook)}
		o.Decision.Message = fmt.Sprintf("Refused by the safety floor (invariant %s): %s. Policy rule %s allowed playbook %s, but no policy can lift this invariant. %s",
			v.Invariant, v.Message, rule, playbook, v.Invariant.Advice())
		if v.Invariant == remediations.InvariantConcurrentRemediation {
			return o.wait(now)
		}
		if v.RecheckAfter > 0 {
			// Time alone lifts it (a Lease too young): decide again then, on fresh facts.
			o.recheck(now.Add(max(v.RecheckAfter, minRecheck)))
		}
		return o.reject("Rejected by the safety floor: " + string(v.Invariant))
	}

	o.Steps = plan
	o.Accepted = Condition{metav1.ConditionTrue, policies.ConditionReason(playbook), o.Decision.Message}
	return o.start(playbooks, in, names)
}

// start is the allowed playbook's way to its first step, or what holds it: a dry
// run, the maintenance window, the pause, the line for a slot.
func (o Transition) start(playbooks remediations.Playbooks, in DecisionInput, names []string) Transition {
	rr, now, playbook, rule := in.Request, in.Now, o.Decision.Playbook, o.Decision.Rule
	if rr.Spec.Mode == v1alpha1.ModeDryRun {
		o.Phase = v1alpha1.PhasePending
		msg := fmt.Sprintf("DryRun: playbook %s would run %s; nothing was changed. Set spec.mode: Apply to run it.", playbook, strings.Join(names, " -> "))
		o.Progressing = Condition{metav1.ConditionFalse, v1alpha1.ReasonDryRun, msg}
		o.EventType, o.EventReason, o.EventMessage = corev1.EventTypeNormal, v1alpha1.EventAccepted, msg
		return o
	}
	inside, next, err := remediations.MaintenanceWindow(rr.Spec.MaintenanceWindow, now)
	if err != nil {
		o.Decision.Rule, o.Decision.RecheckAt, o.RequeueAfter = RuleInvalidWindow, nil, 0
		o.Decision.Reasons = []string{err.Error()}
		o.Decision.Message = fmt.Sprintf("The maintenance window is invalid (%v); fix spec.maintenanceWindow.", err)
		return o.reject("Rejected: invalid maintenance window")
	}
	if !inside {
		// Decide again when the window opens, on facts gathered then.
		at := metav1.NewTime(next)
		o.Decision.RecheckAt, o.RequeueAfter = &at, next.Sub(now)
		msg := fmt.Sprintf("Playbook %s is allowed but waits for the maintenance window (%s for %s), which opens at %s; the decision is re-evaluated then.",
			playbook, rr.Spec.MaintenanceWindow.Schedule, rr.Spec.MaintenanceWindow.Duration.Duration, Stamp(next))
		return o.waitingFor(v1alpha1.WaitingForWindow, v1alpha1.ReasonWaitingForWindow, msg)
	}
	if in.Paused != "" {
		// The stop button: nothing starts, disruptive or not. A resume decides the
		// request again, on fresh facts.
		o.Steps = nil
		msg := fmt.Sprintf("Playbook %s is allowed but does not start: %s", playbook, in.Paused)
		return o.waitingFor(v1alpha1.WaitingForPause, v1alpha1.ReasonPaused, msg)
	}
	if playbooks.Disruptive(playbook) && !in.Admitted {
		// Admission grants the slot (package admission); the request is decided again
		// then, on fresh facts, and starts in it.
		holders, ahead := LineAhead(rr, in.Others, playbooks)
		o.Running = holders
		msg := fmt.Sprintf("Playbook %s is allowed and waits in line for a slot of the cluster-wide cap of %s (--max-concurrent-remediations), granted oldest request first;%s%s it is decided again on fresh facts when granted one.",
			playbook, CapString(in.MaxConcurrent), describeHolders(holders), describeAhead(ahead))
		return o.waitingFor(v1alpha1.WaitingForSlot, v1alpha1.ReasonWaitingForSlot, msg)
	}
	o.Phase = v1alpha1.PhaseRunning
	o.Progressing = Condition{metav1.ConditionTrue, v1alpha1.ReasonPlaybookRunning, fmt.Sprintf("Running playbook %s: %s", playbook, strings.Join(names, " -> "))}
	o.EventType, o.EventReason = corev1.EventTypeNormal, v1alpha1.EventAccepted
	o.EventMessage = fmt.Sprintf("Policy rule %s chose playbook %s: %s", rule, playbook, o.Decision.Message)
	return o
}

// created is the request's creation, the time of its fencing statement. A request
// that is not in the cluster yet (plan, on a pull request) will be created no
// earlier than now.
func created(rr *v1alpha1.RemediationRequest, now time.Time) time.Time {
	if rr.CreationTimestamp.IsZero() {
		return now
	}
	return rr.CreationTimestamp.Time
}

// ConflictsIn lists the other Running requests on the same Lease or node as the
// facts, sorted, in the form the policies take as input.
func ConflictsIn(others []v1alpha1.RemediationRequest, self types.UID, f *v1alpha1.Facts) []string {
	var out []string
	if f == nil {
		return out
	}
	for i := range others {
		o := &others[i]
		if o.UID == self || o.Status.Phase != v1alpha1.PhaseRunning || o.Status.Facts == nil {
			continue
		}
		of := o.Status.Facts
		switch {
		case f.Lease != nil && of.Lease != nil && f.Lease.Namespace == of.Lease.Namespace && f.Lease.Name == of.Lease.Name:
			out = append(out, fmt.Sprintf("%s/%s (Running, on Lease %s/%s)", o.Namespace, o.Name, of.Lease.Namespace, of.Lease.Name))
		case f.Node != nil && of.Node != nil && f.Node.Name == of.Node.Name:
			out = append(out, fmt.Sprintf("%s/%s (Running, on node %s)", o.Namespace, o.Name, of.Node.Name))
		}
	}
	slices.Sort(out)
	return out
}

// guardRecheck is how often a request waiting on a guard re-decides if no wake-up
// came (for instance, the blocking request was handled by a previous leader).
const guardRecheck = 30 * time.Second

// describeHolders names the slot holders, for a request in line.
func describeHolders(holders []string) string {
	if len(holders) == 0 {
		return " no slot is held now;"
	}
	return fmt.Sprintf(" %d slot(s) are held, by %s;", len(holders), strings.Join(holders, ", "))
}

// describeAhead says how many requests in line came before this one.
func describeAhead(ahead int) string {
	if ahead == 0 {
		return ""
	}
	return fmt.Sprintf(" %d request(s) that came earlier are ahead of it in line;", ahead)
}
