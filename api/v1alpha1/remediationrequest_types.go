package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Remediation names the problem a request asks to fix.
// +kubebuilder:validation:Enum=release-luks-lease;reregister-csi-driver
type Remediation string

// The remediations; spec.remediation's description says what each does.
const (
	RemediationReleaseLUKSLease    Remediation = "release-luks-lease"
	RemediationReregisterCSIDriver Remediation = "reregister-csi-driver"
)

// Mode says whether a request may act on the cluster.
// +kubebuilder:validation:Enum=Apply;DryRun
type Mode string

// The modes; spec.mode's description says what each does.
const (
	ModeApply  Mode = "Apply"
	ModeDryRun Mode = "DryRun"
)

// FencingMethod is how an unreachable holder was kept from running cryptsetup.
// +kubebuilder:validation:Enum=NodeShutdown;TridentNodeContainerStopped;LogsVerified
type FencingMethod string

// The fencing methods; spec.fencing.method's description says what each means.
const (
	FencingNodeShutdown                FencingMethod = "NodeShutdown"
	FencingTridentNodeContainerStopped FencingMethod = "TridentNodeContainerStopped"
	FencingLogsVerified                FencingMethod = "LogsVerified"
)

// RestsOnTheLog reports whether a statement of this method is proven by the holder's
// trident-main log: the log shows no operation running (LogsVerified), or the
// container stopped, so that it writes nothing after the statement
// (TridentNodeContainerStopped). A shutdown is proven by the node's silence instead.
func (m FencingMethod) RestsOnTheLog() bool {
	return m == FencingLogsVerified || m == FencingTridentNodeContainerStopped
}

// RemediationRequestSpec is what an operator commits to Git and a reviewer approves.
//
// +kubebuilder:validation:XValidation:rule="self.remediation != 'reregister-csi-driver' || has(self.target.node)",message="remediation reregister-csi-driver needs spec.target.node",fieldPath=".target"
// +kubebuilder:validation:XValidation:rule="self.remediation != 'release-luks-lease' || !has(self.target.node)",message="remediation release-luks-lease needs spec.target.persistentVolume, spec.target.persistentVolumeClaim or spec.target.pod, not spec.target.node",fieldPath=".target"
type RemediationRequestSpec struct {
	// Remediation is the problem to fix; another problem is another request:
	//   - release-luks-lease: release a Trident Lease that serialises cryptsetup on a
	//     LUKS ReadWriteMany volume and was left behind by a failed or dead holder
	//     (target: a persistentVolume, persistentVolumeClaim or pod);
	//   - reregister-csi-driver: restart a node's Trident node-plugin pod so that
	//     kubelet registers the CSI driver again (target: a node).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.remediation is immutable; create a new request"
	// +required
	Remediation Remediation `json:"remediation"`
	// Target is the object to fix, exactly one field, resolved pod -> PVC -> PV -> Lease.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.target is immutable; create a new request"
	// +required
	Target Target `json:"target"`
	// Reason says why the operator asks, for the audit trail.
	// +kubebuilder:validation:MinLength=10
	// +kubebuilder:validation:MaxLength=4096
	// +required
	Reason string `json:"reason"`
	// Mode is Apply (the default: decide and, when allowed, run the playbook) or
	// DryRun (decide and record the plan, its steps all Pending, acting on nothing).
	// +kubebuilder:default=Apply
	// +optional
	Mode Mode `json:"mode,omitempty"`
	// Fencing is the reviewed statement that an unreachable holder can no longer run
	// cryptsetup.
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
// +kubebuilder:validation:XValidation:rule="[has(self.persistentVolume), has(self.persistentVolumeClaim), has(self.pod), has(self.node)].filter(x, x).size() == 1",message="exactly one of spec.target.persistentVolume, spec.target.persistentVolumeClaim, spec.target.pod or spec.target.node must be set"
type Target struct {
	// PersistentVolume is a PV name, which its Trident Lease shares.
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
	// Node is the node whose CSI driver registration is repaired.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	Node string `json:"node,omitempty"`
}

// ObjectReference names a namespaced object: a pod or a PersistentVolumeClaim.
type ObjectReference struct {
	// Namespace is the object's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Namespace string `json:"namespace"`
	// Name is the object's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`
}

// Fencing records that an unreachable node was isolated before its Lease is deleted.
// It names the node: a Lease that passed to another holder is not covered by it.
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
	// The last two rest on the holder's trident-main log, which the controller reads
	// with the decision: they count only when it was read in full, shows no LUKS
	// operation on the volume running, and has no line after the statement. A holder
	// whose log cannot be read (its kubelet unreachable) is fenced by NodeShutdown.
	// Required when confirmed is true.
	// +optional
	Method FencingMethod `json:"method,omitempty"`
	// Node is the fenced node: the Lease's holderIdentity at decision and at deletion.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node,omitempty"`
	// FencedAt is when the node was fenced (RFC 3339, not in the future); a heartbeat
	// newer than it (unset: than the request) voids the statement: the node is back.
	// +optional
	FencedAt *metav1.Time `json:"fencedAt,omitempty"`
}

// MaintenanceWindow is a recurring window in which playbook steps may start.
type MaintenanceWindow struct {
	// Schedule is a cron expression for the start of each window: five fields or a
	// descriptor such as @daily, with an optional CRON_TZ= or TZ= prefix. One that
	// never fires (such as 0 2 30 2 *) is rejected when the request is decided.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^((CRON_TZ|TZ)=[A-Za-z0-9_+/-]+ +)?(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every +[0-9.]+(ns|us|µs|ms|s|m|h)([0-9.]+(ns|us|µs|ms|s|m|h))*|[A-Za-z0-9*/,?-]+( +[A-Za-z0-9*/,?-]+){4})$`
	// +required
	Schedule string `json:"schedule"`
	// Duration is how long each window stays open: a positive Go duration (2h, 90m),
	// at most 168h.
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

// PlaybookEnded reports Succeeded or Failed: nothing is left to restore or to do.
func (p Phase) PlaybookEnded() bool { return p == PhaseSucceeded || p == PhaseFailed }

// Terminal reports an outcome (Succeeded, Failed or Rejected); only a new spec
// generation (or a rejection's recheck) decides it again.
func (p Phase) Terminal() bool { return p.PlaybookEnded() || p == PhaseRejected }

// WaitingFor is what a request waits for (see status.waitingFor).
// +kubebuilder:validation:Enum=Policy;MaintenanceWindow;Pause;Slot;Start;Redecision;Facts
type WaitingFor string

// The values of status.waitingFor.
const (
	WaitingForPolicy     WaitingFor = "Policy"
	WaitingForWindow     WaitingFor = "MaintenanceWindow"
	WaitingForPause      WaitingFor = "Pause"
	WaitingForSlot       WaitingFor = "Slot"
	WaitingForStart      WaitingFor = "Start"
	WaitingForRedecision WaitingFor = "Redecision"
	WaitingForFacts      WaitingFor = "Facts"
)

// RemediationRequestStatus is the controller's account of the request.
type RemediationRequestStatus struct {
	// ObservedGeneration is the spec generation the last successful reconcile acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is one of Pending, Rejected, Waiting, Running, Succeeded or Failed.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// The facts, the decision and the outcome are atomic: the controller writes each
	// whole, so the API server tracks each as one field in metadata.managedFields
	// rather than each of its leaves. It processes every status write in full,
	// managed fields included, and a release writes the status twice.

	// Facts is the live evidence the decision was made on.
	// +structType=atomic
	// +optional
	Facts *Facts `json:"facts,omitempty"`
	// Decision is the policy outcome.
	// +structType=atomic
	// +optional
	Decision *Decision `json:"decision,omitempty"`
	// Steps is the journal of the playbook: one entry per step, in order.
	// +listType=atomic
	// +optional
	Steps []StepStatus `json:"steps,omitempty"`
	// WaitingFor is what the request waits for, while it waits, empty otherwise:
	// Policy (the policy or the safety floor answered wait; decided again when that
	// changes or at decision.recheckAt), MaintenanceWindow, Pause (also a running
	// playbook held before its next step), Slot (in line for a slot of the
	// cluster-wide cap), Start (granted one: decided again on fresh facts, then
	// starts), Redecision (a slot given back unused) or Facts (the facts could not be
	// read; decided again with backoff). The Progressing condition says it in words.
	// +optional
	WaitingFor WaitingFor `json:"waitingFor,omitempty"`
	// AdmittedAt is when the request was granted its slot of the cluster-wide cap. A
	// grant whose first step has not started within the step timeout is given back.
	// +optional
	AdmittedAt *metav1.Time `json:"admittedAt,omitempty"`
	// CurrentStep is the running step, else the next one while the request runs or
	// waits, as position and name ("2/5 deleteAffectedPods"), for kubectl's Step column.
	// +optional
	CurrentStep string `json:"currentStep,omitempty"`
	// Outcome records how the request ended (Succeeded, Failed or Rejected).
	// +structType=atomic
	// +optional
	Outcome *Outcome `json:"outcome,omitempty"`
	// Conditions are Ready, Stalled, Accepted, Progressing, Succeeded, BreakGlass
	// and, for --verify-fix-for after a Succeeded playbook, FixHeld.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Outcome is the durable record of a request's end, written in the status write that
// ends it; a request decided again into another phase drops it.
type Outcome struct {
	// Result is Succeeded, Failed or Rejected (never Pending, Waiting or Running).
	Result Phase `json:"result"`
	// Reason is Ready's reason then: PlaybookCompleted, the failure (StepFailed,
	// Timeout, Aborted, ...), or the rule or invariant that rejected it.
	Reason string `json:"reason"`
	// FinishedAt is when the controller recorded the outcome.
	FinishedAt metav1.Time `json:"finishedAt"`
	// Generation is the spec generation the outcome is for.
	Generation int64 `json:"generation"`
	// Commit is the Git commit the request came from (annotation
	// remediator.io/git-commit, set by remediator sync); empty when unknown.
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
	// Generation is the spec generation the decision was made for. A later generation
	// that withdraws what made it safe (Apply, fencing, an open window) stops the
	// playbook before its next destructive step.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// RecheckAt is when a rejection or wait should be re-evaluated, if ever.
	// +optional
	RecheckAt *metav1.Time `json:"recheckAt,omitempty"`
	// DecidedAt is when the decision was made.
	DecidedAt metav1.Time `json:"decidedAt"`
	// Floor are the safety floor's minimums in force, which no policy can change.
	// +optional
	Floor *FloorSettings `json:"floor,omitempty"`
}

// FloorSettings are the safety floor's gates, flags (--floor-*) defaulting to the runbook.
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
	// DriverName is the controller's CSI driver; a request naming another is rejected.
	// +optional
	DriverName string `json:"driverName,omitempty"`
	// TridentNamespaces are where playbooks may act; a request naming another is rejected.
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
	// StartedAt is when the step first ran; its timeout counts from it, less pauses.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// PausedSince is when a pause began holding this running step, which meanwhile
	// neither acts nor times out; at the resume the time is added to pausedFor.
	// +optional
	PausedSince *metav1.Time `json:"pausedSince,omitempty"`
	// PausedFor is how long ended pauses held this running step.
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
// +kubebuilder:object:root=true
type RemediationRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RemediationRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RemediationRequest{}, &RemediationRequestList{})
}
