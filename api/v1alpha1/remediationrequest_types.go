package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Remediation names the problem a request asks to fix.
// +kubebuilder:validation:Enum=release-luks-lease;reregister-csi-driver
type Remediation string

const (
	// RemediationReleaseLUKSLease releases a Trident Lease that serialises cryptsetup
	// on a LUKS ReadWriteMany volume and was left behind by a failed or dead holder.
	RemediationReleaseLUKSLease Remediation = "release-luks-lease"
	// RemediationReregisterCSIDriver restarts a node's Trident node-plugin pod so that
	// kubelet registers csi.trident.netapp.io again.
	RemediationReregisterCSIDriver Remediation = "reregister-csi-driver"
)

// Mode says whether a request may act on the cluster.
// +kubebuilder:validation:Enum=Apply;DryRun
type Mode string

const (
	// ModeApply decides and, when allowed, runs the playbook.
	ModeApply Mode = "Apply"
	// ModeDryRun decides and records the plan, but acts on nothing.
	ModeDryRun Mode = "DryRun"
)

// FencingMethod is how the operator made sure an unreachable holder can no longer
// run cryptsetup.
// +kubebuilder:validation:Enum=NodeShutdown;TridentNodeContainerStopped;LogsVerified
type FencingMethod string

const (
	// FencingNodeShutdown means the node was powered off or shut down out of band.
	FencingNodeShutdown FencingMethod = "NodeShutdown"
	// FencingTridentNodeContainerStopped means the Trident node container on the node was stopped.
	FencingTridentNodeContainerStopped FencingMethod = "TridentNodeContainerStopped"
	// FencingLogsVerified means the trident-main logs show the node can neither acquire nor
	// delete the Lease and is not running cryptsetup.
	FencingLogsVerified FencingMethod = "LogsVerified"
)

// RemediationRequestSpec is what an operator commits to Git and a reviewer approves.
//
// +kubebuilder:validation:XValidation:rule="self.remediation != 'reregister-csi-driver' || has(self.target.node)",message="remediation reregister-csi-driver needs spec.target.node",fieldPath=".target"
// +kubebuilder:validation:XValidation:rule="self.remediation != 'release-luks-lease' || !has(self.target.node)",message="remediation release-luks-lease needs spec.target.persistentVolume, spec.target.persistentVolumeClaim or spec.target.pod, not spec.target.node",fieldPath=".target"
type RemediationRequestSpec struct {
	// Remediation is the problem to fix. It cannot change once created: a different
	// problem is a different request with its own review.
	//   - release-luks-lease: release a Trident Lease that serialises cryptsetup on a
	//     LUKS ReadWriteMany volume and was left behind by a failed or dead holder
	//     (target: a persistentVolume, persistentVolumeClaim or pod);
	//   - reregister-csi-driver: restart a node's Trident node-plugin pod so that
	//     kubelet registers the CSI driver again (target: a node).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.remediation is immutable; create a new request"
	// +required
	Remediation Remediation `json:"remediation"`

	// Target is the object the remediation is about. Exactly one field is set. The
	// controller resolves pod -> PVC -> PV -> Lease the way the Trident runbook does.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.target is immutable; create a new request"
	// +required
	Target Target `json:"target"`

	// Reason says why the operator asks. It is kept for the audit trail.
	// +kubebuilder:validation:MinLength=10
	// +kubebuilder:validation:MaxLength=4096
	// +required
	Reason string `json:"reason"`

	// Mode is Apply (the default) or DryRun. Apply decides and, when allowed, runs
	// the playbook. DryRun decides and records the plan (the steps, all Pending), but
	// acts on nothing.
	// +kubebuilder:default=Apply
	// +optional
	Mode Mode `json:"mode,omitempty"`

	// Fencing is the operator's reviewed statement that an unreachable holder node can
	// no longer run cryptsetup.
	// +optional
	Fencing *Fencing `json:"fencing,omitempty"`

	// MaintenanceWindow restricts when playbook steps may start.
	// +optional
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`

	// TridentNamespace overrides the controller's --trident-namespace for this request.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	TridentNamespace string `json:"tridentNamespace,omitempty"`

	// DriverName overrides the controller's --driver-name (the CSI driver) for this request.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?$`
	// +optional
	DriverName string `json:"driverName,omitempty"`
}

// Target names the object a remediation is about.
//
// +kubebuilder:validation:XValidation:rule="[has(self.persistentVolume), has(self.persistentVolumeClaim), has(self.pod), has(self.node)].filter(x, x).size() == 1",message="exactly one of spec.target.persistentVolume, spec.target.persistentVolumeClaim, spec.target.pod or spec.target.node must be set"
type Target struct {
	// PersistentVolume is a PV name; the Trident Lease has the same name. It is
	// a name the API server accepts for a PV (a DNS-1123 subdomain: lowercase
	// letters, digits, '-' and '.'), so that reading it cannot fail for its spelling.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	PersistentVolume string `json:"persistentVolume,omitempty"`

	// PersistentVolumeClaim is resolved to its bound PV.
	// +optional
	PersistentVolumeClaim *ObjectReference `json:"persistentVolumeClaim,omitempty"`

	// Pod is resolved through its PVC volumes to a PV.
	// +optional
	Pod *ObjectReference `json:"pod,omitempty"`

	// Node is the node whose CSI driver registration is repaired: a Node name (a
	// DNS-1123 subdomain).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	Node string `json:"node,omitempty"`
}

// ObjectReference names a namespaced object: a pod or a PersistentVolumeClaim,
// spelled as the API server accepts their names.
type ObjectReference struct {
	// Namespace is the object's namespace (a DNS-1123 label: lowercase letters,
	// digits and '-').
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Namespace string `json:"namespace"`
	// Name is the object's name (a DNS-1123 subdomain: lowercase letters, digits,
	// '-' and '.').
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`
}

// Fencing records that an unreachable node was isolated before its Lease is deleted.
// It names the node it is about: a statement about one holder says nothing about the
// next one, so a Lease that passed to another holder is not covered by it.
//
// +kubebuilder:validation:XValidation:rule="!self.confirmed || has(self.method)",message="spec.fencing.method is required when spec.fencing.confirmed is true"
// +kubebuilder:validation:XValidation:rule="!self.confirmed || has(self.node)",message="spec.fencing.node is required when spec.fencing.confirmed is true: name the holder node that was fenced, as the Lease's holderIdentity spells it"
type Fencing struct {
	// Confirmed is true once the operator has fenced the holder node.
	// +required
	Confirmed bool `json:"confirmed"`
	// Method is how the node was fenced, one of:
	//   - NodeShutdown: the node was powered off or shut down out of band (through
	//     the hypervisor, the cloud console or the BMC);
	//   - TridentNodeContainerStopped: the Trident node container on the node was
	//     stopped (the node itself may still run);
	//   - LogsVerified: the trident-main logs show the node can neither acquire nor
	//     delete the Lease and is not running cryptsetup.
	// Required when confirmed is true.
	// +optional
	Method FencingMethod `json:"method,omitempty"`
	// Node is the node that was fenced. It must equal the Lease's holderIdentity when
	// the request is decided and again right before the Lease is deleted.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node,omitempty"`
	// FencedAt is when the node was fenced (RFC 3339), and must not be in the future.
	// The statement holds only while the node stays silent: a kube-node-lease renewal
	// or Ready heartbeat of the node newer than FencedAt (or, without it, newer than
	// the request's creation) means the node came back after it was fenced, and the
	// statement is void. Set it when the request is written long after the fencing.
	// +optional
	FencedAt *metav1.Time `json:"fencedAt,omitempty"`
}

// MaintenanceWindow is a recurring window in which playbook steps may start.
type MaintenanceWindow struct {
	// Schedule is a cron expression (robfig/cron syntax: five fields, descriptors such
	// as @daily, and an optional CRON_TZ= or TZ= prefix) for the start of each window.
	// The pattern only checks the shape; a schedule that parses but never fires (such
	// as 0 2 30 2 *) is rejected when the request is decided.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^((CRON_TZ|TZ)=[A-Za-z0-9_+/-]+ +)?(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every +[0-9.]+(ns|us|µs|ms|s|m|h)([0-9.]+(ns|us|µs|ms|s|m|h))*|[A-Za-z0-9*/,?-]+( +[A-Za-z0-9*/,?-]+){4})$`
	// +required
	Schedule string `json:"schedule"`
	// Duration is how long each window stays open, as a Go duration such as 2h or 90m:
	// positive and at most 7 days (168h). CEL parses it the way the controller does,
	// so a value the controller cannot decode (an overflow such as 9999999999h) is
	// refused at admission instead of stalling the controller.
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('168h')",message="spec.maintenanceWindow.duration must be a positive duration of at most 168h (7 days)"
	// +required
	Duration metav1.Duration `json:"duration"`
}

// Phase summarises where a request is.
// +kubebuilder:validation:Enum=Pending;Rejected;Waiting;Running;Succeeded;Failed
type Phase string

// The phases; the conditions say why a request is in one.
const (
	PhasePending   Phase = "Pending"
	PhaseRejected  Phase = "Rejected"
	PhaseWaiting   Phase = "Waiting"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
)

// PlaybookEnded reports that the playbook ran and ended (Succeeded or Failed), so there is
// nothing left to restore and nothing will act on the request again.
func (p Phase) PlaybookEnded() bool { return p == PhaseSucceeded || p == PhaseFailed }

// Terminal reports that the request reached an outcome (Succeeded, Failed or Rejected); only a
// new generation of its spec (or a recheck of a rejection) decides it again.
func (p Phase) Terminal() bool { return p.PlaybookEnded() || p == PhaseRejected }

// WaitingFor is what a request that is not moving on waits for: the sub-state of
// phase Waiting (and of Running held by the pause, and of a request whose facts
// could not be read). The controller and admission steer by it; the Progressing
// condition says the same in words for people and tools.
// +kubebuilder:validation:Enum=Policy;MaintenanceWindow;Pause;Slot;Start;Redecision;Facts
type WaitingFor string

const (
	// WaitingForPolicy means the policy or the safety floor answered wait (another
	// remediation on the same Lease or node, a holder state still settling, no
	// policy loaded). Decided again when that other stops or at decision.recheckAt.
	WaitingForPolicy WaitingFor = "Policy"
	// WaitingForWindow means allowed, and waits for its maintenance window to open.
	WaitingForWindow WaitingFor = "MaintenanceWindow"
	// WaitingForPause means Remediator is paused; a running playbook holds before its
	// next step.
	WaitingForPause WaitingFor = "Pause"
	// WaitingForSlot means allowed a disruptive playbook, and in line for a slot of the
	// cluster-wide cap.
	WaitingForSlot WaitingFor = "Slot"
	// WaitingForStart means granted a slot; decided again on fresh facts, then starts.
	WaitingForStart WaitingFor = "Start"
	// WaitingForRedecision means a granted slot was given back unused; decided again now.
	WaitingForRedecision WaitingFor = "Redecision"
	// WaitingForFacts means the facts could not be read; decided again with backoff.
	WaitingForFacts WaitingFor = "Facts"
)

// RemediationRequestStatus is the controller's account of the request.
type RemediationRequestStatus struct {
	// ObservedGeneration is the spec generation the last successful reconcile acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is one of Pending, Rejected, Waiting, Running, Succeeded or Failed.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Facts is the live evidence the decision was made on.
	// +optional
	Facts *Facts `json:"facts,omitempty"`

	// Decision is the policy outcome.
	// +optional
	Decision *Decision `json:"decision,omitempty"`

	// Steps is the journal of the playbook: one entry per step, in order.
	// +listType=atomic
	// +optional
	Steps []StepStatus `json:"steps,omitempty"`

	// WaitingFor is what the request waits for, while it waits, empty otherwise:
	// Policy (the policy or the safety floor answered wait), MaintenanceWindow,
	// Pause (also a running playbook held before its next step), Slot (in line for
	// a slot of the cluster-wide cap), Start (granted one: decided again on fresh
	// facts, then starts), Redecision (a slot given back unused) or Facts (the
	// facts could not be read). The Progressing condition says it in words.
	// +optional
	WaitingFor WaitingFor `json:"waitingFor,omitempty"`

	// AdmittedAt is when admission granted the request its slot of the cluster-wide
	// cap, written once per grant. A grant whose playbook has not started its first
	// step within the step timeout from it is given back to the line.
	// +optional
	AdmittedAt *metav1.Time `json:"admittedAt,omitempty"`

	// CurrentStep is the step the playbook is on, as its position and name
	// ("2/5 deleteAffectedPods"): the running step, else the next one while the
	// request runs or waits. Empty otherwise. It repeats steps[] for kubectl's Step
	// column, which JSONPath cannot compute.
	// +optional
	CurrentStep string `json:"currentStep,omitempty"`

	// Outcome is the record of how the request ended (Succeeded, Failed or
	// Rejected), written once, in the status write that ended it.
	// +optional
	Outcome *Outcome `json:"outcome,omitempty"`

	// Conditions are Ready, Stalled, Accepted, Progressing, Succeeded, BreakGlass
	// and, for --verify-fix-for after a Succeeded playbook, FixHeld.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Outcome is the durable record of a request's end: what status.decision (rule,
// playbook) and status.steps (startedAt, completedAt) do not already say. The
// controller writes it in the same status write that makes the phase Succeeded,
// Failed or Rejected, and logs it then, once, as the line "Remediation outcome
// recorded". A rejection decided again with the same reason for the same generation
// keeps the first record; a request decided again into another phase loses it.
type Outcome struct {
	// Result is the phase the request ended in: Succeeded, Failed or Rejected
	// (never Pending, Waiting or Running, which are not ends).
	Result Phase `json:"result"`
	// Reason is the Ready condition's reason then: PlaybookCompleted, the failure
	// (StepFailed, Timeout, Aborted, ...), or the rule or invariant that rejected it.
	Reason string `json:"reason"`
	// FinishedAt is when the controller recorded the outcome.
	FinishedAt metav1.Time `json:"finishedAt"`
	// Generation is the spec generation the outcome is for.
	Generation int64 `json:"generation"`
	// Commit is the Git commit the request came from (its remediator.io/git-commit
	// annotation, set by remediator sync); empty when unknown, as for a request
	// applied by hand or by Argo CD, which records no revision on the object.
	// +optional
	Commit string `json:"commit,omitempty"`
}

// Decision is what the policy concluded from the facts.
type Decision struct {
	// Allowed is true when a playbook may run.
	Allowed bool `json:"allowed"`
	// Playbook is the playbook chosen when allowed.
	// +optional
	Playbook string `json:"playbook,omitempty"`
	// Rule is the policy rule that fired.
	Rule string `json:"rule"`
	// Reasons lists the facts that made the rule fire.
	// +listType=atomic
	// +optional
	Reasons []string `json:"reasons,omitempty"`
	// Message explains a rejection and says what the operator should do next.
	// +optional
	Message string `json:"message,omitempty"`
	// PolicyDigest identifies the policy source the decision was made with.
	PolicyDigest string `json:"policyDigest"`
	// Generation is the spec generation the decision was made for. A playbook that
	// runs on it stops before its next destructive step when a later generation
	// withdraws what made it safe (Apply, fencing, an open window).
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// RecheckAt is when a rejection or wait should be re-evaluated, if ever.
	// +optional
	RecheckAt *metav1.Time `json:"recheckAt,omitempty"`
	// DecidedAt is when the decision was made.
	DecidedAt metav1.Time `json:"decidedAt"`
	// Floor are the safety floor's minimums in force for this decision: the runbook's
	// values unless the controller's flags shortened them. No policy can change them.
	// +optional
	Floor *FloorSettings `json:"floor,omitempty"`
}

// FloorSettings are the runbook's gates the Go safety floor enforces whatever the
// policy answers. They are controller flags (--floor-*), defaulting to the runbook.
type FloorSettings struct {
	// UnreachableMinLeaseAgeSeconds is the age a Lease held by an unreachable or
	// missing holder must reach before it may be deleted (runbook: 300).
	UnreachableMinLeaseAgeSeconds int64 `json:"unreachableMinLeaseAgeSeconds"`
	// HealthyStuckLeaseAgeSeconds is the age at which a healthy holder's Lease counts
	// as stuck without a LeaseRetained event (runbook: 600).
	HealthyStuckLeaseAgeSeconds int64 `json:"healthyStuckLeaseAgeSeconds"`
	// HeartbeatGraceSeconds is how old a node's last heartbeat (kube-node-lease
	// renewal, Ready heartbeat) must be before the node counts as silent.
	HeartbeatGraceSeconds int64 `json:"heartbeatGraceSeconds"`
	// DriverName is the controller's configured CSI driver; a request naming another
	// driver is rejected.
	// +optional
	DriverName string `json:"driverName,omitempty"`
	// TridentNamespaces are the namespaces the playbooks may act in: the controller's
	// Trident namespace and those its settings allow; a request naming another is
	// rejected.
	// +optional
	// +listType=set
	TridentNamespaces []string `json:"tridentNamespaces,omitempty"`
}

// StepState is where one playbook step is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Skipped
type StepState string

// The states of a step in status.steps.
const (
	StepPending   StepState = "Pending"
	StepRunning   StepState = "Running"
	StepSucceeded StepState = "Succeeded"
	StepFailed    StepState = "Failed"
	StepSkipped   StepState = "Skipped"
)

// StepStatus is one journal entry of the playbook.
type StepStatus struct {
	// Name is the step's name in the playbook.
	Name string `json:"name"`
	// State is Pending, Running, Succeeded, Failed or Skipped.
	State StepState `json:"state"`
	// StartedAt is written once, when the step first runs; timeouts count from it,
	// less the time the step was held by a pause (pausedSince, pausedFor).
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// PausedSince is when a pause first held this running step; it is cleared at the
	// resume, when the time since is added to pausedFor. While it is set the step
	// neither acts nor times out.
	// +optional
	PausedSince *metav1.Time `json:"pausedSince,omitempty"`
	// PausedFor is how long pauses that have ended held this running step: its
	// timeout counts only the time it ran unpaused.
	// +optional
	PausedFor *metav1.Duration `json:"pausedFor,omitempty"`
	// CompletedAt is when the step reached Succeeded, Failed or Skipped.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// Message says what the step did or is waiting for.
	// +optional
	Message string `json:"message,omitempty"`
	// Object is the object acted on, as Kind namespace/name.
	// +optional
	Object string `json:"object,omitempty"`
	// ObjectUID is the UID of the object acted on.
	// +optional
	ObjectUID string `json:"objectUID,omitempty"`
	// ObjectResourceVersion is the resourceVersion of the object acted on.
	// +optional
	ObjectResourceVersion string `json:"objectResourceVersion,omitempty"`
}

// RemediationRequest asks the controller to fix one Trident storage incident. It is
// committed to Git, reviewed, synced, and then decided by policy from live facts.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rr,categories=remediator
// +kubebuilder:printcolumn:name="Remediation",type=string,JSONPath=`.spec.remediation`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.status.facts.target.ref`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.status.decision.rule`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.currentStep`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RemediationRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RemediationRequestSpec `json:"spec"`
	// +optional
	Status RemediationRequestStatus `json:"status,omitempty"`
}

// RemediationRequestList is a list of RemediationRequests.
//
// +kubebuilder:object:root=true
type RemediationRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RemediationRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RemediationRequest{}, &RemediationRequestList{})
}
