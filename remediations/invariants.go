package remediations

import (
	"strings"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Invariant names one rule of the safety floor: a condition under which no
// destructive step runs, whatever the policy answered. The names are API: the
// decision's rule, and in CamelCase the condition reason.
type Invariant string

const (
	// InvariantHealthyHolderPodsRunning means the holder is Healthy and pods that use the
	// volume still run on it, or are not drained first, or cannot be listed.
	InvariantHealthyHolderPodsRunning Invariant = "healthy-holder-pods-running"
	// InvariantHealthyHolderVolumeInUse means the holder is Healthy and, when its Lease
	// would be deleted, its kubelet still lists the volume in the Node's
	// status.volumesInUse: the volume is still mounted there, or being unmounted.
	InvariantHealthyHolderVolumeInUse Invariant = "healthy-holder-volume-in-use"
	// InvariantHolderNotFenced means the holder is Unreachable or NotFound, and
	// spec.fencing does not confirm fencing of that very node.
	InvariantHolderNotFenced Invariant = "holder-not-fenced"
	// InvariantHolderStateUnproven means nothing proves the holder Shutdown, Unreachable,
	// NotFound or Healthy.
	InvariantHolderStateUnproven Invariant = "holder-state-unproven"
	// InvariantLeaseNotHeld means there is no held Lease to act on.
	InvariantLeaseNotHeld Invariant = "lease-not-held"
	// InvariantLeaseChanged means the Lease's UID, resourceVersion or holder changed.
	InvariantLeaseChanged Invariant = "lease-changed"
	// InvariantHolderStateChanged means the holder (or target) node's state changed.
	InvariantHolderStateChanged Invariant = "holder-state-changed"
	// InvariantConcurrentRemediation means another request on the same Lease or node runs.
	InvariantConcurrentRemediation Invariant = "concurrent-remediation"
	// InvariantPluginPodsOverlap means the node does not run exactly one node-plugin pod,
	// the one decided on; restarting one that another overlaps is incident B.
	InvariantPluginPodsOverlap Invariant = "plugin-pods-overlap"
	// InvariantDriverRegistered means the CSI driver is registered again: nothing to repair.
	InvariantDriverRegistered Invariant = "driver-registered"
	// InvariantPlaybookMismatch means the playbook does not fit the remediation, or the
	// journal does not list the decided playbook's steps.
	InvariantPlaybookMismatch Invariant = "playbook-mismatch"
	// InvariantDryRun means spec.mode is DryRun, which acts on nothing.
	InvariantDryRun Invariant = "dry-run"
	// InvariantLeaseTooYoung means an unreachable or missing holder's Lease is younger than
	// Floor.UnreachableMinLeaseAge: an operation in flight may still be finishing.
	InvariantLeaseTooYoung Invariant = "lease-too-young"
	// InvariantLeaseNotProvenStuck means the holder is healthy, no LeaseRetained Warning
	// names this hold, and the Lease is younger than Floor.HealthyStuckLeaseAge.
	InvariantLeaseNotProvenStuck Invariant = "lease-not-proven-stuck"
	// InvariantFencingStale means the holder gave a sign of life after the fencing
	// statement, or fencedAt is in the future.
	InvariantFencingStale Invariant = "fencing-stale"
	// InvariantDriverNotConfigured means the request's CSI driver is not --driver-name.
	InvariantDriverNotConfigured Invariant = "driver-not-configured"
	// InvariantNodeNotHealthy means the node whose plugin would restart is not Healthy;
	// a restart there repairs nothing and cannot be watched.
	InvariantNodeNotHealthy Invariant = "node-not-healthy"
	// InvariantPluginPodNotReady means the one node-plugin pod is not Running and Ready,
	// or is terminating: a rollout is under way.
	InvariantPluginPodNotReady Invariant = "plugin-pod-not-ready"
	// InvariantNodeExcluded means the node acted on carries remediator.io/exclude: "true".
	InvariantNodeExcluded Invariant = "node-excluded"
	// InvariantNamespaceNotAllowed means a Trident namespace neither --trident-namespace
	// nor --allowed-trident-namespaces: there, a Lease is not Trident's and a pod
	// labelled as the node plugin is anyone's.
	InvariantNamespaceNotAllowed Invariant = "trident-namespace-not-allowed"
)

// Reason is the invariant as a condition reason: "holder-not-fenced" is "HolderNotFenced".
func (i Invariant) Reason() string {
	var b strings.Builder
	for _, part := range strings.Split(string(i), "-") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// Advice tells the operator what to do about a breached invariant.
func (i Invariant) Advice() string { return advice[i] }

var advice = map[Invariant]string{
	InvariantHolderNotFenced:          "Fence the holder node (shut it down, or stop its Trident node container), then set spec.fencing.confirmed, spec.fencing.method and spec.fencing.node to that node's name.",
	InvariantHealthyHolderPodsRunning: "Move the pods that use the volume off the holder node first (playbook healthy-move-workload does it), and make sure the volume's PersistentVolumeClaim resolves.",
	InvariantHealthyHolderVolumeInUse: "Wait until the holder's kubelet has unmounted the volume (kubectl get node <node> -o jsonpath='{.status.volumesInUse}' no longer lists it); if a pod mounted it again, find out why it was scheduled there, then create a new request.",
	InvariantHolderStateUnproven:      "Find out whether the holder node is shut down, cut off from the control plane or healthy, fix what can be fixed, and re-submit.",
	InvariantLeaseNotHeld:             "No held Lease was found, so there is nothing to release.",
	InvariantLeaseChanged:             "The cluster changed since the decision; create a new request so that it is decided on current facts.",
	InvariantHolderStateChanged:       "The cluster changed since the decision; create a new request so that it is decided on current facts.",
	InvariantConcurrentRemediation:    "Only one remediation runs per node and per Lease; this one waits for the other to finish.",
	InvariantPluginPodsOverlap:        "Wait until exactly one node-plugin pod runs on the node (the DaemonSet rollout has finished), then re-submit.",
	InvariantDriverRegistered:         "The driver is registered; nothing needs repairing.",
	InvariantPlaybookMismatch:         "The request's status does not match a playbook this controller runs; create a new request.",
	InvariantDryRun:                   "Set spec.mode: Apply in a new request to act.",
	InvariantLeaseTooYoung:            "Wait: the request is decided again when the Lease is old enough.",
	InvariantLeaseNotProvenStuck:      "Read the trident-main logs of the holder's Trident node pod; the request is decided again when the Lease is old enough to count as stuck, or when Trident reports LeaseRetained on it.",
	InvariantFencingStale:             "The holder came back after it was fenced: fence it again (shut it down, or stop its Trident node container), then set spec.fencing.fencedAt to the time you did, in a new pull request.",
	InvariantDriverNotConfigured:      "Remove spec.driverName, or run a controller configured for that driver (--driver-name).",
	InvariantNodeNotHealthy:           "Bring the node back (its kubelet must report Ready), then re-submit; a node that is down needs no plugin restart.",
	InvariantPluginPodNotReady:        "Wait until the node's plugin pod is Running and Ready (the DaemonSet rollout has finished), then re-submit.",
	InvariantNodeExcluded:             "An administrator keeps Remediator off this node; handle it by hand, or remove the label (kubectl label node <node> " + v1alpha1.LabelExclude + "-) and re-submit.",
	InvariantNamespaceNotAllowed:      "Remove spec.tridentNamespace to use the controller's Trident namespace; if Trident really runs in another namespace, its administrators list it in the settings (allowed-trident-namespaces), then re-submit.",
}
