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

// Finalizer guards requests so that one deleted mid-run restores what it changed.
const Finalizer = "remediator.io/restore"
