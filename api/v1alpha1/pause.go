package v1alpha1

// The stop button's names: `kubectl remediator pause` writes the pause ConfigMap,
// which the controller reads (package pause).
const (
	// LabelExclude on a Node, set to "true", keeps every playbook off the node.
	LabelExclude = "remediator.io/exclude"

	// PauseConfigMap is the pause ConfigMap's name, in the controller's namespace.
	PauseConfigMap = "remediator-pause"
	// The pause ConfigMap's keys: PauseKeyPaused is "true" while paused; the others
	// say who paused or resumed, why and when (RFC 3339).
	PauseKeyPaused = "paused"
	PauseKeyReason = "reason"
	PauseKeyBy     = "by"
	PauseKeyAt     = "at"

	// ReasonPaused is the Progressing reason of a request held by the pause: it
	// waits, or its running playbook holds before its next step.
	ReasonPaused = "Paused"
)
