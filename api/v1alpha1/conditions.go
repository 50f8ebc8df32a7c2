package v1alpha1

// Condition types on RemediationRequest.status.conditions.
const (
	// ConditionAccepted is True when the policy allowed a playbook (reason: the
	// playbook) and False when it rejected the request (reason: the rule).
	ConditionAccepted = "Accepted"
	// ConditionProgressing is True while a playbook runs or a request waits its turn.
	ConditionProgressing = "Progressing"
	// ConditionSucceeded is True when the playbook finished and False when it failed.
	ConditionSucceeded = "Succeeded"
)

// Reasons for ConditionSucceeded=False.
const (
	ReasonStepFailed = "StepFailed"
	ReasonTimeout    = "Timeout"
	ReasonAborted    = "Aborted"
)

// Condition reasons besides the playbook and rule names (Accepted) and the safety
// floor's invariants (remediations.Invariant.Reason). Tools read them: the Argo CD
// health check (charts/remediator/files/argocd/health.lua) maps DryRun and the
// waiting reasons to a health status.
const (
	ReasonPlaybookRunning   = "PlaybookRunning"
	ReasonPlaybookCompleted = "PlaybookCompleted"
	ReasonDryRun            = "DryRun"
	ReasonRejected          = "Rejected"
	ReasonWaiting           = "Waiting"
	ReasonFailed            = "Failed"
	// ReasonWaitingForWindow: the playbook is allowed and waits for its maintenance
	// window to open.
	ReasonWaitingForWindow = "WaitingForMaintenanceWindow"
	// ReasonWaitingForSlot: the policy allowed a disruptive playbook, and the request
	// waits in line for a slot of the cluster-wide cap (package controllers/admission).
	ReasonWaitingForSlot = "WaitingForRemediationSlot"
	// ReasonAdmitted: admission granted the request a slot of the cap; the request
	// is decided again on fresh facts before its playbook starts in it.
	ReasonAdmitted = "RemediationSlotGranted"
	// ReasonSlotExpired: the request was granted a slot but did not start its first
	// step within the step timeout, so admission gave the slot to the next request
	// in line; the request is decided again and rejoins the line.
	ReasonSlotExpired = "RemediationSlotExpired"
	// ReasonGatherFailed: the API server did not answer a read of the facts the
	// request is decided on (a permission the controller lacks, a timeout, a name it
	// refuses), so the request is not decided yet. Progressing is False with this
	// reason and the API server's answer, a Warning Event of the same reason says so,
	// and the request is decided again with backoff; it is not rejected, since the
	// answer may change without a new commit.
	ReasonGatherFailed = "GatherFailed"
	// ReasonWindowClosed: the maintenance window closed mid-playbook before a
	// destructive step, so the playbook stopped, restored and waits for the next one.
	ReasonWindowClosed = "MaintenanceWindowClosed"
)

// Event reasons on RemediationRequests.
const (
	EventAccepted = "Accepted"
	EventRejected = "Rejected"
	EventWaiting  = "Waiting"
	// Step transitions get a reason per kind so that the event correlator, which
	// folds more than ten similar events of one reason, keeps each one readable.
	EventStepStarted   = "StepStarted"
	EventStepSucceeded = "StepSucceeded"
	EventFailed        = "Failed"
	EventDone          = "Succeeded"
)

// Playbooks a policy may choose (status.decision.playbook). Each is defined, as the
// steps it runs, in remediations/playbooks.yaml; the policies' schema types the
// field as exactly these (policies/schema.cue #Playbook), and a test holds the three
// lists equal.
const (
	PlaybookNodeShutdown        = "node-shutdown"
	PlaybookFencedUnreachable   = "fenced-unreachable"
	PlaybookHealthyMoveWorkload = "healthy-move-workload"
	PlaybookRestartNodePlugin   = "restart-node-plugin"
)

// Step names (status.steps[].name), from the step library in remediations.
const (
	StepCordon               = "cordon"
	StepDeleteAffectedPods   = "deleteAffectedPods"
	StepWaitPodsGone         = "waitPodsGone"
	StepDeleteLease          = "deleteLease"
	StepUncordon             = "uncordon"
	StepDeletePluginPod      = "deletePluginPod"
	StepWaitPluginPodReady   = "waitPluginPodReady"
	StepWaitDriverRegistered = "waitDriverRegistered"
)

// Finalizer guards requests so that one deleted mid-run restores what it changed.
const Finalizer = "remediator.io/restore"

// AnnotationBreakGlass on a request says that it was written outside Git review by a
// member of the break-glass group, and why (its value). The chart's admission policy
// admits such writes from that group only; the controller shows the annotation in
// ConditionBreakGlass and an Event, so a break-glass write is never silent.
const AnnotationBreakGlass = "remediator.io/break-glass"

// ConditionBreakGlass is True, with reason BreakGlass and the annotation's reason as
// message, while the request carries AnnotationBreakGlass.
const ConditionBreakGlass = "BreakGlass"

// ReasonBreakGlass is ConditionBreakGlass's reason, and the Event's.
const ReasonBreakGlass = "BreakGlass"

// ConditionReady summarises the request for kubectl wait and kstatus-based tools
// (Flux, cli-utils): True when the request Succeeded, or when a DryRun was decided and
// recorded (reason DryRun: it did all it was asked); False while the request is being
// decided, waits or runs (reason the Progressing condition's, such as
// PlaybookRunning or WaitingForMaintenanceWindow), and False when it was Rejected
// (reason the Accepted condition's: the rule or invariant) or Failed (reason the
// Succeeded condition's, such as StepFailed). Its observedGeneration is
// status.observedGeneration: the spec generation the status describes.
const ConditionReady = "Ready"

// ConditionStalled is kstatus' abnormal-true condition: True, with Ready's reason and
// message, while the request is Rejected or Failed, so that kstatus reports Failed
// instead of InProgress; absent otherwise. Only a change of the spec (or a rejection's
// recheck) moves such a request on.
const ConditionStalled = "Stalled"

// ReasonPending is Ready's reason while the controller has not decided the request yet.
const ReasonPending = "Pending"

// ConditionFixHeld says whether the incident stayed fixed after the playbook
// Succeeded. For --verify-fix-for after the request Succeeded (status.outcome's
// finishedAt), the controller re-reads the same Lease or node through its gatherer:
// Unknown (reason Verifying) while it watches; False (LeaseRetainedAgain,
// DriverDeregisteredAgain) when the incident came back, with a Warning Event
// (EventFixNotHeld) and remediator_fix_not_held_total; True (NoRecurrence) once the
// window passed quietly. It never changes Ready: the playbook did succeed, and running
// it again would not fix what makes the incident come back. Absent when verification
// is off (--verify-fix-for=0), on requests that did not Succeed, and on requests whose
// window had passed before this controller first saw them.
const ConditionFixHeld = "FixHeld"

// Reasons of ConditionFixHeld.
const (
	// ReasonVerifying: the window is open and nothing has come back yet.
	ReasonVerifying = "Verifying"
	// ReasonNoRecurrence: the window passed without the incident coming back.
	ReasonNoRecurrence = "NoRecurrence"
	// ReasonLeaseRetainedAgain: the released Lease's name was taken again by the same
	// holder node and retained: a LeaseRetained Warning names the new Lease's UID, or
	// it is as old as the safety floor's healthy stuck age (--floor-healthy-lease-age).
	ReasonLeaseRetainedAgain = "LeaseRetainedAgain"
	// ReasonDriverDeregisteredAgain: the node's CSINode lacks the driver again while a
	// Ready node-plugin pod runs there (remediator scan's DeregisteredDriver).
	ReasonDriverDeregisteredAgain = "DriverDeregisteredAgain"
)

// EventFixNotHeld is the Warning Event's reason when ConditionFixHeld turns False.
const EventFixNotHeld = "FixNotHeld"

// AnnotationGitCommit is the last Git commit that changed the request's file; the
// sync agent (remediator sync) sets it on every request it applies, and the
// controller copies it into status.outcome.commit and the outcome's log line.
const AnnotationGitCommit = "remediator.io/git-commit"
