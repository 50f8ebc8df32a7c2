package v1alpha1

import (
	"cmp"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeState is the runbook's classification of a node, the core of the policy input.
// +kubebuilder:validation:Enum=Shutdown;Unreachable;NotFound;Healthy;Unknown
type NodeState string

// The node states; status.facts.node.state's description says what each means.
const (
	NodeShutdown    NodeState = "Shutdown"
	NodeUnreachable NodeState = "Unreachable"
	NodeNotFound    NodeState = "NotFound"
	NodeHealthy     NodeState = "Healthy"
	NodeUnknown     NodeState = "Unknown"
)

// Taint keys that decide the node state.
const (
	TaintOutOfService  = "node.kubernetes.io/out-of-service"
	TaintCloudShutdown = "node.cloudprovider.kubernetes.io/shutdown"
	TaintUnreachable   = "node.kubernetes.io/unreachable"
)

// Facts is the policy's whole input, so that a decision is explained by status alone.
type Facts struct {
	// GatheredAt is when the facts were read; every age below is relative to it.
	GatheredAt metav1.Time `json:"gatheredAt"`
	// TridentNamespace is the namespace Leases and node-plugin pods were looked up in.
	TridentNamespace string `json:"tridentNamespace"`
	// DriverName is the CSI driver name looked for on CSINodes.
	DriverName string `json:"driverName"`
	// Target is how the request's target resolved.
	Target TargetFacts `json:"target"`
	// Lease describes the Trident Lease named after the PV (release-luks-lease only).
	// +optional
	Lease *LeaseFacts `json:"lease,omitempty"`
	// Node describes the Lease's holder node, or the target node.
	// +optional
	Node *NodeFacts `json:"node,omitempty"`
	// AffectedPods are the pods on the holder node that mount the PVC, sorted. They
	// are listed only for a Healthy holder, whose playbook moves them and whose
	// Lease the floor keeps while they run there.
	// +listType=atomic
	// +optional
	AffectedPods []PodFacts `json:"affectedPods,omitempty"`
	// CSI describes the driver registration on the target node (reregister-csi-driver only).
	// +optional
	CSI *CSIFacts `json:"csi,omitempty"`
	// Volume is the evidence of whether the Lease's holder still has the Lease's
	// volume (release-luks-lease only, when the Lease has a holder): what its kubelet
	// and the attach/detach machinery report, not how long ago anything happened.
	// +optional
	Volume *VolumeFacts `json:"volume,omitempty"`
	// Logs is what the Trident node plugin on the Lease's holder logged about the
	// Lease's volume since the hold began (release-luks-lease, a Healthy holder only,
	// read when the request is decided): the runbook reads them before it calls a
	// healthy holder's Lease stuck.
	// +optional
	Logs *LogEvidence `json:"logs,omitempty"`
}

// TargetFacts records the resolution chain pod -> PVC -> PV -> Lease.
type TargetFacts struct {
	// Ref is the target as written in the spec, e.g. "PersistentVolumeClaim app/data".
	Ref string `json:"ref"`
	// Found is false when the target, or any link of its resolution chain, is missing.
	Found bool `json:"found"`
	// Message says plainly what is missing or ambiguous, when something is.
	// +optional
	Message string `json:"message,omitempty"`
	// PersistentVolumeClaim is the resolved claim, as namespace/name.
	// +optional
	PersistentVolumeClaim string `json:"persistentVolumeClaim,omitempty"`
	// PersistentVolume is the resolved PV name.
	// +optional
	PersistentVolume string `json:"persistentVolume,omitempty"`
	// Node is the target node (reregister-csi-driver).
	// +optional
	Node string `json:"node,omitempty"`
}

// LeaseFacts describes the Trident Lease guarding a LUKS volume.
type LeaseFacts struct {
	// Namespace is the Lease's namespace: the Trident namespace.
	Namespace string `json:"namespace"`
	// Name is the Lease's name, which is the PV's name.
	Name string `json:"name"`
	// Exists is false when no such Lease exists: nothing is stuck.
	Exists bool `json:"exists"`
	// UID is the Lease's UID, a precondition of its deletion: a Lease re-created
	// under the same name is not deleted in its place.
	// +optional
	UID string `json:"uid,omitempty"`
	// ResourceVersion is the Lease's resourceVersion, a precondition of its deletion:
	// a Lease changed since (re-acquired, renewed) is not deleted.
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// HolderIdentity is the node that holds the Lease.
	// +optional
	HolderIdentity string `json:"holderIdentity,omitempty"`
	// AcquireTime is spec.acquireTime, when Trident set it.
	// +optional
	AcquireTime *metav1.Time `json:"acquireTime,omitempty"`
	// CreationTimestamp is metadata.creationTimestamp.
	// +optional
	CreationTimestamp *metav1.Time `json:"creationTimestamp,omitempty"`
	// HeldSince is when the current hold began, by the API server's clock: creation,
	// or a re-acquisition as managedFields record it (without them, the gathering).
	// +optional
	HeldSince *metav1.Time `json:"heldSince,omitempty"`
	// AgeSeconds is the time since HeldSince.
	// +optional
	AgeSeconds int64 `json:"ageSeconds,omitempty"`
	// AgeFrom says which time AgeSeconds counts from, and why, in words.
	// +optional
	AgeFrom string `json:"ageFrom,omitempty"`
	// RetainedEvents counts LeaseRetained Warning events on this hold of the Lease:
	// naming its UID, last seen at or after HeldSince.
	// +optional
	RetainedEvents int32 `json:"retainedEvents,omitempty"`
	// IgnoredRetainedEvents counts the LeaseRetained events on the Lease's name that
	// RetainedEvents does not (no or another UID, or older).
	// +optional
	IgnoredRetainedEvents int32 `json:"ignoredRetainedEvents,omitempty"`
	// LastRetainedMessage is the message of the newest LeaseRetained event.
	// +optional
	LastRetainedMessage string `json:"lastRetainedMessage,omitempty"`
	// LastRetainedAt is when the newest LeaseRetained event was last seen.
	// +optional
	LastRetainedAt *metav1.Time `json:"lastRetainedAt,omitempty"`
}

// NodeFacts is the evidence for a node's state.
type NodeFacts struct {
	// Name is the node's name: the Lease's holder, or the target node.
	Name string `json:"name"`
	// Exists is false when the Node object is gone.
	Exists bool `json:"exists"`
	// State is Shutdown (Ready not True, a shutdown taint and a silent kubelet),
	// Unreachable (lost the control plane, no shutdown taint; it may still run
	// workloads), NotFound (no Node of that name, which is no proof of a shutdown:
	// treated like Unreachable), Healthy (Ready, fresh node Lease), or Unknown (the
	// evidence conflicts; rejected).
	State NodeState `json:"state"`
	// StateReason is the evidence that decided State, in words.
	StateReason string `json:"stateReason"`
	// Ready is the status of the Ready condition: True, False, Unknown, or empty.
	// +optional
	Ready string `json:"ready,omitempty"`
	// ReadySince is the Ready condition's last transition time.
	// +optional
	ReadySince *metav1.Time `json:"readySince,omitempty"`
	// ReadyAgeSeconds is how long Ready has had its current status.
	// +optional
	ReadyAgeSeconds int64 `json:"readyAgeSeconds,omitempty"`
	// Taints lists the out-of-service, cloud shutdown and unreachable taint keys, sorted.
	// +listType=atomic
	// +optional
	Taints []string `json:"taints,omitempty"`
	// Unschedulable is spec.unschedulable (cordoned).
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`
	// LeaseRenewTime is when the node's kube-node-lease Lease was last renewed.
	// +optional
	LeaseRenewTime *metav1.Time `json:"leaseRenewTime,omitempty"`
	// LeaseRenewAgeSeconds is the age of that renewal; -1 when the node has no Lease.
	LeaseRenewAgeSeconds int64 `json:"leaseRenewAgeSeconds"`
	// ReadyHeartbeatTime is the Ready condition's lastHeartbeatTime.
	// +optional
	ReadyHeartbeatTime *metav1.Time `json:"readyHeartbeatTime,omitempty"`
	// LastHeartbeat is the newer of LeaseRenewTime and ReadyHeartbeatTime.
	// +optional
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`
	// HeartbeatAgeSeconds is the age of LastHeartbeat; -1 when there was none.
	// +optional
	HeartbeatAgeSeconds int64 `json:"heartbeatAgeSeconds,omitempty"`
	// NodeLeaseDurationSeconds is the leaseDurationSeconds of the node's own Lease
	// in kube-node-lease: no heartbeat is judged stale sooner.
	// +optional
	NodeLeaseDurationSeconds int32 `json:"nodeLeaseDurationSeconds,omitempty"`
	// HeartbeatGraceSeconds is the grace the heartbeats were judged on: the larger of
	// the controller's --node-lease-grace-period and NodeLeaseDurationSeconds.
	// +optional
	HeartbeatGraceSeconds int64 `json:"heartbeatGraceSeconds,omitempty"`
	// SettlesAt is set when State is Unknown only because time has not yet told (a
	// shutdown taint while the last heartbeat is within its grace, or Ready still
	// True): the request is decided again then.
	// +optional
	SettlesAt *metav1.Time `json:"settlesAt,omitempty"`
	// SettlesInSeconds is SettlesAt less the gathering (at least 1 when set).
	// +optional
	SettlesInSeconds int64 `json:"settlesInSeconds,omitempty"`
	// Excluded is true when the node is labelled remediator.io/exclude: "true": the
	// safety floor refuses any request that would act on it (invariant node-excluded).
	// +optional
	Excluded bool `json:"excluded,omitempty"`
}

// PodFacts describes one pod the remediation cares about.
type PodFacts struct {
	// Namespace is the pod's namespace.
	Namespace string `json:"namespace"`
	// Name is the pod's name.
	Name string `json:"name"`
	// UID is the pod's UID, a precondition of its eviction.
	UID string `json:"uid"`
	// Node is the node the pod runs on.
	// +optional
	Node string `json:"node,omitempty"`
	// Phase is the pod phase.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Ready is the pod's Ready condition.
	Ready bool `json:"ready"`
	// DeletionTimestamp is set when the pod is terminating.
	// +optional
	DeletionTimestamp *metav1.Time `json:"deletionTimestamp,omitempty"`
}

// String is "name (phase, ready=true)", with ", terminating" when it is.
func (p PodFacts) String() string {
	terminating := ""
	if p.DeletionTimestamp != nil {
		terminating = ", terminating"
	}
	return fmt.Sprintf("%s (%s, ready=%t%s)", p.Name, cmp.Or(p.Phase, "-"), p.Ready, terminating)
}

// CSIFacts describes the CSI driver registration on a node.
type CSIFacts struct {
	// CSINodeExists is false when the node has no CSINode object.
	CSINodeExists bool `json:"csiNodeExists"`
	// DriverRegistered is true when the CSINode lists the driver in spec.drivers.
	DriverRegistered bool `json:"driverRegistered"`
	// Drivers are the driver names the CSINode lists, sorted.
	// +listType=atomic
	// +optional
	Drivers []string `json:"drivers,omitempty"`
	// PluginPods are the node-plugin pods on the node, sorted by name.
	// +listType=atomic
	// +optional
	PluginPods []PodFacts `json:"pluginPods,omitempty"`
}

// VolumeFacts is the evidence, on the holder node, of the volume the Lease is named
// after: whether the holder's kubelet still reports it in use, and whether a
// VolumeAttachment still attaches it there. It is evidence only: no rule of the
// safety floor reads it.
type VolumeFacts struct {
	// Node is the node the evidence is about: the Lease's holder.
	Node string `json:"node"`
	// PersistentVolumeExists is false when the PV is gone; the driver, the handle and
	// everything that needs them are then unknown.
	PersistentVolumeExists bool `json:"persistentVolumeExists"`
	// Driver is the PV's spec.csi.driver; empty for a volume that is not CSI.
	// +optional
	Driver string `json:"driver,omitempty"`
	// VolumeHandle is the PV's spec.csi.volumeHandle.
	// +optional
	VolumeHandle string `json:"volumeHandle,omitempty"`
	// UniqueName is the kubelet's name for the volume, as the Node's
	// status.volumesInUse lists it: kubernetes.io/csi/<driver>^<volumeHandle>.
	// +optional
	UniqueName string `json:"uniqueName,omitempty"`
	// InUseOnNode is true when the holder Node's status.volumesInUse lists UniqueName:
	// the kubelet reports the volume mounted on the node, or being mounted or unmounted.
	InUseOnNode bool `json:"inUseOnNode"`
	// InUseReportedAt is when the kubelet last posted the Node's status, which carries
	// volumesInUse: the Ready condition's heartbeat (node.readyHeartbeatTime). The node
	// Lease's renewal says the kubelet runs, not what it mounts.
	// +optional
	InUseReportedAt *metav1.Time `json:"inUseReportedAt,omitempty"`
	// InUseReportAgeSeconds is the age of InUseReportedAt; -1 when the kubelet never
	// posted a status (or there is no Node).
	InUseReportAgeSeconds int64 `json:"inUseReportAgeSeconds"`
	// CSIDriverExists is false when no CSIDriver object is named Driver.
	CSIDriverExists bool `json:"csiDriverExists"`
	// AttachRequired is the CSIDriver's spec.attachRequired: true when it is unset or
	// there is no CSIDriver, as the kubelet reads it; then a VolumeAttachment must
	// attach the volume before the node can use it.
	AttachRequired bool `json:"attachRequired"`
	// VolumeAttachment is the VolumeAttachment of the PV on the holder node.
	VolumeAttachment VolumeAttachmentFacts `json:"volumeAttachment"`
	// Message says plainly what could not be read or did not match, when something did.
	// +optional
	Message string `json:"message,omitempty"`
}

// VolumeAttachmentFacts describes the VolumeAttachment of a PV on one node.
type VolumeAttachmentFacts struct {
	// Name is the name the attacher gives the VolumeAttachment of the volume on the
	// node (csi-<sha256 of volumeHandle, driver and node>), whether it exists or not.
	// +optional
	Name string `json:"name,omitempty"`
	// Exists is true when a VolumeAttachment of that name exists for the PV
	// (spec.source.persistentVolumeName) on the holder (spec.nodeName).
	Exists bool `json:"exists"`
	// Attached is its status.attached.
	Attached bool `json:"attached"`
	// CreationTimestamp is when it was created: present since then.
	// +optional
	CreationTimestamp *metav1.Time `json:"creationTimestamp,omitempty"`
	// DeletionTimestamp is set while the volume is being detached.
	// +optional
	DeletionTimestamp *metav1.Time `json:"deletionTimestamp,omitempty"`
}

// LogState is what the Trident node plugin's log says of the LUKS operation on a volume.
// +kubebuilder:validation:Enum=Running;Failed;Finished;None;Unread
type LogState string

// The log states; status.facts.logs.state's description says what each means.
const (
	LogRunning  LogState = "Running"
	LogFailed   LogState = "Failed"
	LogFinished LogState = "Finished"
	LogNone     LogState = "None"
	LogUnread   LogState = "Unread"
)

// LogEvidence is what was read of the log of the Trident node-plugin pod on the
// Lease's holder, and what it says of the LUKS operation on the Lease's volume.
type LogEvidence struct {
	// Namespace is the node-plugin pod's namespace: the Trident namespace.
	Namespace string `json:"namespace"`
	// Pod is the node-plugin pod on the holder whose log was read; empty when none
	// was found.
	// +optional
	Pod string `json:"pod,omitempty"`
	// Container is the container whose log was read (trident-main).
	Container string `json:"container"`
	// SinceTime is where the read began: when the Lease's hold began (its acquireTime,
	// else its creation).
	// +optional
	SinceTime *metav1.Time `json:"sinceTime,omitempty"`
	// BytesRead is how many bytes of the log were read.
	// +optional
	BytesRead int64 `json:"bytesRead,omitempty"`
	// Truncated is true when the read stopped at the controller's byte limit: the
	// newest lines were not read.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// VolumeNames are the names the volume's lines were recognised by: the PV's name,
	// its volume handle, Trident's internal name of it and its LUKS device's name.
	// +listType=atomic
	// +optional
	VolumeNames []string `json:"volumeNames,omitempty"`
	// State is Running (an operation on the volume began and its request logged no
	// end: cryptsetup may still run), Failed (the newest operation ended in a
	// failure), Finished (the newest operation ended without one), None (no line
	// about the volume) or Unread (the log could not be read in full: ReadError says
	// why).
	State LogState `json:"state"`
	// Line is the line State rests on (cut to 512 bytes): the unfinished operation's
	// first line when Running, the failure when Failed, the end when Finished.
	// +optional
	Line string `json:"line,omitempty"`
	// Lines are the newest lines about the volume's LUKS operation (at most 5, each
	// cut to 512 bytes), oldest first.
	// +listType=atomic
	// +optional
	Lines []string `json:"lines,omitempty"`
	// ReadError says what could not be read, and why.
	// +optional
	ReadError string `json:"readError,omitempty"`
	// NewestLineAt is the time of the newest Trident line read, about any volume, by
	// Trident's own time field (the holder's clock): a line after a fencing statement
	// says the container still ran then.
	// +optional
	NewestLineAt *metav1.Time `json:"newestLineAt,omitempty"`
	// NewestVolumeLineAt is the time of the newest line about the volume's LUKS
	// operation (the last of Lines): one after a LogsVerified fencing statement is
	// news the statement did not see.
	// +optional
	NewestVolumeLineAt *metav1.Time `json:"newestVolumeLineAt,omitempty"`
}

// NewestHeartbeat is the newer of LeaseRenewTime and ReadyHeartbeatTime, or nil.
func (n NodeFacts) NewestHeartbeat() *metav1.Time {
	var last *metav1.Time
	for _, t := range []*metav1.Time{n.LeaseRenewTime, n.ReadyHeartbeatTime} {
		if t != nil && (last == nil || t.After(last.Time)) {
			c := *t
			last = &c
		}
	}
	return last
}

// HeartbeatGrace is the grace a heartbeat is judged on: configured, but never less
// than the node Lease's duration, within which the kubelet promised to renew it, so
// that a grace set too short cannot make a kubelet that renews on time look silent.
func (n NodeFacts) HeartbeatGrace(configured time.Duration) time.Duration {
	return max(configured, time.Duration(n.NodeLeaseDurationSeconds)*time.Second)
}

// HeartbeatFresh reports a sign of life within HeartbeatGrace(grace) of now; one in
// the future (clock skew) counts as fresh.
func (n NodeFacts) HeartbeatFresh(now time.Time, grace time.Duration) bool {
	hb := n.NewestHeartbeat()
	return hb != nil && now.Sub(hb.Time) <= n.HeartbeatGrace(grace)
}

// HeartbeatSince reports whether the node's kubelet gave a sign of life after t.
func (n NodeFacts) HeartbeatSince(t time.Time) bool {
	hb := n.NewestHeartbeat()
	return hb != nil && hb.After(t)
}
