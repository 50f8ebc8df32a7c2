package v1alpha1

// Condition types on RemediationRequest.status.conditions.
const (
	// ConditionAccepted is True when the policy allowed a playbook (reason: the
	// playbook), False when it rejected the request (reason: the rule).
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
	// ReasonWaitingForWindow: allowed, waiting for the maintenance window to open.
	ReasonWaitingForWindow = "WaitingForMaintenanceWindow"
	// ReasonWaitingForSlot: allowed a disruptive playbook, in line for a slot of the cap.
	ReasonWaitingForSlot = "WaitingForRemediationSlot"
	// ReasonAdmitted: granted a slot; decided again on fresh facts before it starts.
	ReasonAdmitted = "RemediationSlotGranted"
	// ReasonSlotExpired: the first step did not start within the step timeout of the
	// grant; the slot went to the next in line, and the request rejoins the line.
	ReasonSlotExpired = "RemediationSlotExpired"
	// ReasonGatherFailed: the API server did not answer a read of the facts, so the
	// request is decided again with backoff, not rejected: the answer may change
	// without a new commit.
	ReasonGatherFailed = "GatherFailed"
	// ReasonWindowClosed: the window closed mid-playbook before a destructive step;
	// the playbook stopped, restored and waits for the next window.
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

// Playbooks a policy may choose, as remediations/playbooks.yaml defines them (a test
// holds them equal to policies/schema.cue's #Playbook).
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

// AnnotationBreakGlass on a request says, with why as its value, that a member of the
// break-glass group wrote it outside Git review (the chart's admission policy admits
// no one else); ConditionBreakGlass and an Event show it, so it is never silent.
const AnnotationBreakGlass = "remediator.io/break-glass"

// ConditionBreakGlass is True, reason BreakGlass and the annotation as message, while
// the request carries AnnotationBreakGlass.
const ConditionBreakGlass = "BreakGlass"

// ReasonBreakGlass is ConditionBreakGlass's reason, and the Event's.
const ReasonBreakGlass = "BreakGlass"

// ConditionReady summarises the request for kubectl wait and kstatus: True when it
// Succeeded or a DryRun was recorded; False while decided, waiting or running (the
// Progressing reason), Rejected (the Accepted reason) or Failed (the Succeeded reason).
const ConditionReady = "Ready"

// ConditionStalled is kstatus' abnormal-true condition: True, with Ready's reason and
// message, while the request is Rejected or Failed (so kstatus reports Failed, not
// InProgress); absent otherwise.
const ConditionStalled = "Stalled"

// ReasonPending is Ready's reason while the controller has not decided the request yet.
const ReasonPending = "Pending"

// ConditionFixHeld says whether the incident stayed fixed for --verify-fix-for after
// the playbook Succeeded: Unknown while watched, False when it came back (or, after a
// release, the volume's pods did not come back), True once the window passed quietly.
// It never changes Ready: running the playbook again would not fix what makes the
// incident come back.
const ConditionFixHeld = "FixHeld"

// Reasons of ConditionFixHeld.
const (
	// ReasonVerifying: the window is open and nothing has come back yet.
	ReasonVerifying = "Verifying"
	// ReasonNoRecurrence: the window passed without the incident coming back.
	ReasonNoRecurrence = "NoRecurrence"
	// ReasonLeaseRetainedAgain: the same holder took the Lease's name again and
	// retains it (a LeaseRetained Warning on the new UID, or the healthy stuck age).
	ReasonLeaseRetainedAgain = "LeaseRetainedAgain"
	// ReasonDriverDeregisteredAgain: the CSINode lacks the driver again while a Ready
	// node-plugin pod runs there.
	ReasonDriverDeregisteredAgain = "DriverDeregisteredAgain"
	// ReasonFailedMountAfterFix: after a release, kubelet reported a FailedMount
	// Warning naming the volume or its claim on a pod that uses the claim.
	ReasonFailedMountAfterFix = "FailedMountAfterFix"
	// ReasonPodsNotReady: after a release, a pod that uses the volume's claim was not
	// Running and Ready when the window ended.
	ReasonPodsNotReady = "PodsNotReady"
)

// EventFixNotHeld is the Warning Event's reason when ConditionFixHeld turns False.
const EventFixNotHeld = "FixNotHeld"

// AnnotationGitCommit is the last Git commit that changed the request's file, set by
// remediator sync and copied into status.outcome.commit.
const AnnotationGitCommit = "remediator.io/git-commit"
