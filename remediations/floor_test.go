package remediations

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// factsAt is when the fixtures' facts were factsAt. The Lease was requestAt an hour
// before, the request half an hour before; a silent node's last heartbeat is older
// than both, a healthy node's a few seconds old.
var (
	factsAt   = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	requestAt = factsAt.Add(-30 * time.Minute)
)

func ago(d time.Duration) *metav1.Time { t := metav1.NewTime(factsAt.Add(-d)); return &t }

// nodeFacts are the facts of a node in state, as ClassifyNode records them.
func nodeFacts(name string, state v1alpha1.NodeState) *v1alpha1.NodeFacts {
	n := &v1alpha1.NodeFacts{Name: name, Exists: state != v1alpha1.NodeNotFound, State: state, StateReason: "test", LeaseRenewAgeSeconds: -1, HeartbeatAgeSeconds: -1}
	silent := func(ready string) {
		n.Ready, n.LeaseRenewTime, n.ReadyHeartbeatTime = ready, ago(2*time.Hour), ago(2*time.Hour)
	}
	switch state {
	case v1alpha1.NodeShutdown:
		silent("False")
		n.Taints = []string{v1alpha1.TaintOutOfService}
	case v1alpha1.NodeUnreachable:
		silent("Unknown")
		n.Taints = []string{v1alpha1.TaintUnreachable}
	case v1alpha1.NodeHealthy:
		n.Ready, n.LeaseRenewTime, n.ReadyHeartbeatTime = "True", ago(5*time.Second), ago(10*time.Second)
	}
	return n
}

// leaseFacts are the facts of a Lease held by node-a, whose state is given.
func leaseFacts(state v1alpha1.NodeState, pods ...string) *v1alpha1.Facts {
	f := &v1alpha1.Facts{
		GatheredAt:       metav1.NewTime(factsAt),
		TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
		Target: v1alpha1.TargetFacts{Found: true, PersistentVolume: "pvc-1", PersistentVolumeClaim: "app/data"},
		Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", Exists: true, UID: "lease-uid", ResourceVersion: "10", HolderIdentity: "node-a",
			AgeSeconds: 3600},
		Node: nodeFacts("node-a", state),
	}
	for _, p := range pods {
		f.AffectedPods = append(f.AffectedPods, v1alpha1.PodFacts{Namespace: "app", Name: p, UID: p + "-uid", Node: "node-a"})
	}
	if state == v1alpha1.NodeHealthy {
		// A decision reads the holder's log: it shows nothing of the volume.
		f.Logs = holderLog(v1alpha1.LogNone, "")
	}
	return f
}

// holderLog is the evidence of node-a's Trident log in state, resting on line.
func holderLog(state v1alpha1.LogState, line string) *v1alpha1.LogEvidence {
	e := &v1alpha1.LogEvidence{Namespace: "trident", Pod: "trident-node-a", Container: "trident-main", SinceTime: ago(time.Hour + time.Minute),
		BytesRead: 4096, VolumeNames: []string{"pvc-1"}, State: state, Line: line}
	if state == v1alpha1.LogUnread {
		e.BytesRead, e.ReadError = 0, "reading the log of trident/trident-node-a: the server could not find the requested resource"
	}
	return e
}

func csiFacts(registered bool, pods ...string) *v1alpha1.Facts {
	f := &v1alpha1.Facts{
		GatheredAt:       metav1.NewTime(factsAt),
		TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
		Target: v1alpha1.TargetFacts{Found: true, Node: "node-b"},
		Node:   nodeFacts("node-b", v1alpha1.NodeHealthy),
		CSI:    &v1alpha1.CSIFacts{CSINodeExists: true, DriverRegistered: registered},
	}
	for _, p := range pods {
		f.CSI.PluginPods = append(f.CSI.PluginPods, v1alpha1.PodFacts{Namespace: "trident", Name: p, UID: p + "-uid", Node: "node-b", Phase: "Running", Ready: true})
	}
	return f
}

func fenced(node string) v1alpha1.RemediationRequestSpec {
	return v1alpha1.RemediationRequestSpec{Fencing: &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: node}}
}

func fencedAt(node string, at *metav1.Time) v1alpha1.RemediationRequestSpec {
	s := fenced(node)
	s.Fencing.FencedAt = at
	return s
}

func with(f *v1alpha1.Facts, change func(*v1alpha1.Facts)) *v1alpha1.Facts {
	change(f)
	return f
}

// withVolume adds the volume evidence of pvc-1 on node-a: whether the kubelet lists
// it in use, and whether its VolumeAttachment to node-a is attached.
func withVolume(f *v1alpha1.Facts, inUse, attached bool) *v1alpha1.Facts {
	f.Volume = &v1alpha1.VolumeFacts{Node: "node-a", PersistentVolumeExists: true, Driver: "csi.trident.netapp.io", VolumeHandle: "pvc-1",
		UniqueName: "kubernetes.io/csi/csi.trident.netapp.io^pvc-1", InUseOnNode: inUse, InUseReportedAt: ago(10 * time.Second), InUseReportAgeSeconds: 10,
		CSIDriverExists: true, AttachRequired: true,
		VolumeAttachment: v1alpha1.VolumeAttachmentFacts{Name: "csi-0123", Exists: true, Attached: attached}}
	return f
}

func TestVolumeOnHolder(t *testing.T) {
	cases := []struct {
		name string
		f    *v1alpha1.Facts
		want string // a part of the reason; "" means released
	}{
		{"no evidence", leaseFacts(v1alpha1.NodeHealthy), ""},
		{"healthy, kubelet lists it", withVolume(leaseFacts(v1alpha1.NodeHealthy), true, true),
			"its kubelet still lists volume kubernetes.io/csi/csi.trident.netapp.io^pvc-1 in the Node's status.volumesInUse (status posted 2026-12-02T02:59:50Z)"},
		{"healthy, unmounted, still attached", withVolume(leaseFacts(v1alpha1.NodeHealthy), false, true), ""},
		{"shut down, attached", withVolume(leaseFacts(v1alpha1.NodeShutdown), false, true),
			"VolumeAttachment csi-0123 still attaches PersistentVolume pvc-1 to it (the attach-detach controller detaches it once node node-a carries node.kubernetes.io/out-of-service"},
		{"shut down, detached", withVolume(leaseFacts(v1alpha1.NodeShutdown), true, false), ""},
		{"shut down, driver attaches nothing", with(withVolume(leaseFacts(v1alpha1.NodeShutdown), false, true), func(f *v1alpha1.Facts) { f.Volume.AttachRequired = false }), ""},
		{"shut down, attachment being deleted but attached", with(withVolume(leaseFacts(v1alpha1.NodeShutdown), false, true), func(f *v1alpha1.Facts) {
			f.Volume.VolumeAttachment.DeletionTimestamp = ago(time.Second)
		}), "VolumeAttachment csi-0123 still attaches"},
		{"fenced unreachable: not awaited", withVolume(leaseFacts(v1alpha1.NodeUnreachable), true, true), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := VolumeOnHolder(tc.f)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tc.want)
		})
	}
}

func TestCheckFloor(t *testing.T) {
	release := []string{"deleteLease"}
	move := []string{"cordon", "deleteAffectedPods", "waitPodsGone", "deleteLease", "uncordon"}
	restart := []string{"cordon", "deletePluginPod", "waitPluginPodReady", "waitDriverRegistered", "uncordon"}
	lease := v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease}
	plugin := v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver}
	cases := []struct {
		name string
		in   FloorInput
		want Invariant // "" means no violation
	}{
		// Decisions: whatever playbook a policy chose.
		{"shut-down holder, Lease released", FloorInput{Steps: release, Fresh: leaseFacts(v1alpha1.NodeShutdown)}, ""},
		{"unreachable holder without fencing", FloorInput{Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantHolderNotFenced},
		{"unreachable holder fenced as itself", FloorInput{Spec: fenced("node-a"), Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, ""},
		{"unreachable holder, fencing names another node", FloorInput{Spec: fenced("node-b"), Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantHolderNotFenced},
		{"fencing stated but not confirmed", FloorInput{Spec: v1alpha1.RemediationRequestSpec{Fencing: &v1alpha1.Fencing{Node: "node-a"}}, Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantHolderNotFenced},
		{"missing holder node without fencing", FloorInput{Steps: release, Fresh: leaseFacts(v1alpha1.NodeNotFound)}, InvariantHolderNotFenced},
		{"missing holder node fenced as itself", FloorInput{Spec: fenced("node-a"), Steps: release, Fresh: leaseFacts(v1alpha1.NodeNotFound)}, ""},
		{"unknown holder state", FloorInput{Spec: fenced("node-a"), Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnknown)}, InvariantHolderStateUnproven},
		{"healthy holder with pods, Lease deleted outright", FloorInput{Steps: release, Fresh: leaseFacts(v1alpha1.NodeHealthy, "web-0")}, InvariantHealthyHolderPodsRunning},
		{"healthy holder without pods, Lease deleted outright", FloorInput{Steps: release, Fresh: leaseFacts(v1alpha1.NodeHealthy)}, InvariantHealthyHolderPodsRunning},
		{"healthy holder, pods moved first", FloorInput{Steps: move, Fresh: leaseFacts(v1alpha1.NodeHealthy, "web-0")}, ""},
		{"healthy holder, claim unverified", FloorInput{Steps: move, Fresh: with(leaseFacts(v1alpha1.NodeHealthy), func(f *v1alpha1.Facts) { f.Target.PersistentVolumeClaim = "" })}, InvariantHealthyHolderPodsRunning},
		{"no Lease", FloorInput{Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.Exists = false })}, InvariantLeaseNotHeld},
		{"another request runs on the Lease", FloorInput{Steps: release, Fresh: leaseFacts(v1alpha1.NodeShutdown), Conflicts: []string{"ns/other (Running, on Lease trident/pvc-1)"}}, InvariantConcurrentRemediation},
		{"no facts", FloorInput{Steps: release}, InvariantHolderStateUnproven},
		// The opt-out label keeps every playbook off the node (issue 26).
		{"shut-down holder excluded by its label", FloorInput{Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Node.Excluded = true })}, InvariantNodeExcluded},
		{"healthy holder excluded, before the cordon", FloorInput{Steps: move, Step: "cordon", Fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) { f.Node.Excluded = true })}, InvariantNodeExcluded},
		{"plugin node excluded", FloorInput{Spec: plugin, Steps: restart, Fresh: with(csiFacts(false, "trident-csi-abcde"), func(f *v1alpha1.Facts) { f.Node.Excluded = true })}, InvariantNodeExcluded},

		// The runbook's gates, which no policy can lower (issue 22).
		{"shutdown taint, but the kubelet still renews its node Lease", FloorInput{Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) {
			f.Node.LeaseRenewTime = ago(3 * time.Second)
		})}, InvariantHolderStateUnproven},
		{"shutdown taint, but the kubelet still posts Ready=False", FloorInput{Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) {
			f.Node.ReadyHeartbeatTime = ago(20 * time.Second)
		})}, InvariantHolderStateUnproven},
		{"shutdown, heartbeat just past a shortened grace", FloorInput{Steps: release, Floor: Floor{HeartbeatGrace: 10 * time.Second}, Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) {
			f.Node.ReadyHeartbeatTime = ago(20 * time.Second)
		})}, ""},
		// The grace never falls below the node Lease's own duration, whatever a flag or
		// the settings ConfigMap says: a kubelet renewing every 10 s is alive.
		{"shutdown, 1ms grace, kubelet renewed 10s ago within its 40s node Lease", FloorInput{Steps: release, Floor: Floor{HeartbeatGrace: time.Millisecond}, Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) {
			f.Node.LeaseRenewTime, f.Node.NodeLeaseDurationSeconds = ago(10*time.Second), 40
		})}, InvariantHolderStateUnproven},
		{"shutdown, 1ms grace, renewal older than the node Lease's duration", FloorInput{Steps: release, Floor: Floor{HeartbeatGrace: time.Millisecond}, Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) {
			f.Node.LeaseRenewTime, f.Node.NodeLeaseDurationSeconds = ago(41*time.Second), 40
		})}, ""},
		{"recorded Shutdown but Ready=True", FloorInput{Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Node.Ready = "True" })}, InvariantHolderStateUnproven},
		{"fenced unreachable holder, Lease one minute old", FloorInput{Spec: fenced("node-a"), Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeUnreachable), func(f *v1alpha1.Facts) {
			f.Lease.AgeSeconds = 60
		})}, InvariantLeaseTooYoung},
		{"fenced unreachable holder, Lease re-acquired a minute ago", FloorInput{Spec: fenced("node-a"), Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeUnreachable), func(f *v1alpha1.Facts) {
			f.Lease.AgeSeconds = 60
		})}, InvariantLeaseTooYoung},
		{"fenced unreachable holder, Lease past a shortened gate", FloorInput{Spec: fenced("node-a"), Steps: release, Floor: Floor{UnreachableMinLeaseAge: 30 * time.Second}, Fresh: with(leaseFacts(v1alpha1.NodeUnreachable), func(f *v1alpha1.Facts) {
			f.Lease.AgeSeconds = 60
		})}, ""},
		{"fenced missing holder, Lease one minute old", FloorInput{Spec: fenced("node-a"), Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeNotFound), func(f *v1alpha1.Facts) {
			f.Lease.AgeSeconds = 60
		})}, InvariantLeaseTooYoung},
		{"fencing statement older than the holder's last heartbeat", FloorInput{Spec: fenced("node-a"), Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeUnreachable), func(f *v1alpha1.Facts) {
			f.Node.LeaseRenewTime = ago(10 * time.Minute) // the request was created 30 minutes ago
		})}, InvariantFencingStale},
		{"fencedAt after the holder's last heartbeat", FloorInput{Spec: fencedAt("node-a", ago(5*time.Minute)), Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeUnreachable), func(f *v1alpha1.Facts) {
			f.Node.LeaseRenewTime = ago(10 * time.Minute)
		})}, ""},
		{"fencedAt before the holder's last heartbeat", FloorInput{Spec: fencedAt("node-a", ago(3*time.Hour)), Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantFencingStale},
		{"missing holder node whose kubelet renewed its node Lease after the fencing statement", FloorInput{Spec: fenced("node-a"), Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeNotFound), func(f *v1alpha1.Facts) {
			f.Node.LeaseRenewTime = ago(10 * time.Minute) // the request was created 30 minutes ago
		})}, InvariantFencingStale},
		{"fencedAt in the future", FloorInput{Spec: fencedAt("node-a", ago(-time.Minute)), Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantFencingStale},
		// The controller reads the server's clock up to a second and a round trip low,
		// and facts keep whole seconds: a statement written at once is not the future.
		{"fencedAt two seconds ahead of the controller's now", FloorInput{Spec: fencedAt("node-a", ago(-2*time.Second)), Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, ""},
		{"fencedAt past the tolerance", FloorInput{Spec: fencedAt("node-a", ago(-FencedAtTolerance-time.Second)), Steps: release, Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantFencingStale},
		{"fencedAt within the tolerance still voided by a heartbeat after now", FloorInput{Spec: fencedAt("node-a", ago(-3*time.Second)), Steps: release, Fresh: with(leaseFacts(v1alpha1.NodeUnreachable), func(f *v1alpha1.Facts) {
			f.Node.LeaseRenewTime = ago(-time.Second)
		})}, InvariantFencingStale},
		{"healthy holder, young Lease, no LeaseRetained", FloorInput{Steps: move, Fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) {
			f.Lease.AgeSeconds = 60
		})}, InvariantLeaseNotProvenStuck},
		{"healthy holder, young Lease, LeaseRetained on it", FloorInput{Steps: move, Fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) {
			f.Lease.AgeSeconds, f.Lease.RetainedEvents = 60, 2
		})}, ""},
		{"healthy holder, young Lease, LeaseRetained only on another incarnation", FloorInput{Steps: move, Fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) {
			f.Lease.AgeSeconds, f.Lease.IgnoredRetainedEvents = 60, 3
		})}, InvariantLeaseNotProvenStuck},
		{"healthy holder, young Lease past a shortened gate", FloorInput{Steps: move, Floor: Floor{HealthyStuckLeaseAge: 40 * time.Second}, Fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) {
			f.Lease.AgeSeconds = 60
		})}, ""},
		{"evict, healthy holder's Lease re-acquired since the decision", FloorInput{Steps: move, Step: "deleteAffectedPods", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"),
			Fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) { f.Lease.AgeSeconds = 1 })}, InvariantLeaseNotProvenStuck},
		{"CSI: the node is not Healthy", FloorInput{Steps: restart, Fresh: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.Node = nodeFacts("node-b", v1alpha1.NodeUnreachable) })}, InvariantNodeNotHealthy},
		{"CSI: the plugin pod is not Ready", FloorInput{Steps: restart, Fresh: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.CSI.PluginPods[0].Ready = false })}, InvariantPluginPodNotReady},
		{"CSI: the plugin pod is Pending", FloorInput{Steps: restart, Fresh: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.CSI.PluginPods[0].Phase = "Pending" })}, InvariantPluginPodNotReady},
		{"CSI: the plugin pod is terminating", FloorInput{Steps: restart, Fresh: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.CSI.PluginPods[0].DeletionTimestamp = ago(time.Second) })}, InvariantPluginPodNotReady},
		{"CSI: spec.driverName is not the configured driver", FloorInput{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver, DriverName: "csi.trident.netapp.com"}, Steps: restart,
			Fresh: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.DriverName = "csi.trident.netapp.com" })}, InvariantDriverNotConfigured},
		// The Trident namespace is the controller's, not the request's.
		{"CSI: a tenant namespace", FloorInput{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver, TridentNamespace: "tenant"}, Steps: restart,
			Fresh: with(csiFacts(false, "tenant-app"), func(f *v1alpha1.Facts) { f.TridentNamespace, f.CSI.PluginPods[0].Namespace = "tenant", "tenant" })}, InvariantNamespaceNotAllowed},
		{"CSI: cordon in a tenant namespace", FloorInput{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver, TridentNamespace: "tenant"}, Steps: restart, Step: "cordon",
			Fresh: with(csiFacts(false, "tenant-app"), func(f *v1alpha1.Facts) { f.TridentNamespace, f.CSI.PluginPods[0].Namespace = "tenant", "tenant" })}, InvariantNamespaceNotAllowed},
		{"CSI: a plugin pod from another namespace than the facts'", FloorInput{Steps: restart,
			Fresh: with(csiFacts(false, "tenant-app"), func(f *v1alpha1.Facts) { f.CSI.PluginPods[0].Namespace = "tenant" })}, InvariantNamespaceNotAllowed},
		{"CSI: a namespace the settings allow", FloorInput{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver, TridentNamespace: "netapp-trident"}, Steps: restart,
			Floor: Floor{TridentNamespaces: []string{"netapp-trident", "trident"}},
			Fresh: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) {
				f.TridentNamespace, f.CSI.PluginPods[0].Namespace = "netapp-trident", "netapp-trident"
			})}, ""},
		{"Lease in a tenant namespace", FloorInput{Spec: v1alpha1.RemediationRequestSpec{TridentNamespace: "tenant"}, Steps: release,
			Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.TridentNamespace, f.Lease.Namespace = "tenant", "tenant" })}, InvariantNamespaceNotAllowed},
		{"Lease from another namespace than the facts'", FloorInput{Steps: release,
			Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.Namespace = "tenant" })}, InvariantNamespaceNotAllowed},
		{"spec.tridentNamespace not allowed, whatever the facts say", FloorInput{Spec: v1alpha1.RemediationRequestSpec{TridentNamespace: "tenant"}, Steps: release,
			Fresh: leaseFacts(v1alpha1.NodeShutdown)}, InvariantNamespaceNotAllowed},
		{"Lease in a namespace the settings allow", FloorInput{Spec: v1alpha1.RemediationRequestSpec{TridentNamespace: "netapp-trident"}, Steps: release,
			Floor: Floor{TridentNamespaces: []string{"netapp-trident", "trident"}},
			Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.TridentNamespace, f.Lease.Namespace = "netapp-trident", "netapp-trident" })}, ""},
		{"uncordon in a tenant namespace is a restore, never refused", FloorInput{Spec: v1alpha1.RemediationRequestSpec{TridentNamespace: "tenant"}, Steps: move, Step: "uncordon",
			Decided: leaseFacts(v1alpha1.NodeHealthy), Fresh: with(leaseFacts(v1alpha1.NodeHealthy), func(f *v1alpha1.Facts) { f.TridentNamespace, f.Lease.Namespace = "tenant", "tenant" })}, ""},
		{"CSI: cordon, a second plugin pod appeared", FloorInput{Steps: restart, Step: "cordon", Decided: csiFacts(false, "trident-csi-a"), Fresh: csiFacts(false, "trident-csi-a", "trident-csi-2-b")}, InvariantPluginPodsOverlap},
		{"CSI: cordon, the node dropped off", FloorInput{Steps: restart, Step: "cordon", Decided: csiFacts(false, "trident-csi-a"),
			Fresh: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.Node = nodeFacts("node-b", v1alpha1.NodeUnreachable) })}, InvariantNodeNotHealthy},

		// Right before a destructive step, against the decision's facts.
		{"deleteLease, unchanged", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown), Fresh: leaseFacts(v1alpha1.NodeShutdown)}, ""},
		{"deleteLease, Lease passed to another holder", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown),
			Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.HolderIdentity = "node-b" })}, InvariantLeaseChanged},
		{"deleteLease, Lease re-requestAt", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown),
			Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.UID = "other" })}, InvariantLeaseChanged},
		{"deleteLease, Lease updated", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown),
			Fresh: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.ResourceVersion = "11" })}, InvariantLeaseChanged},
		{"deleteLease, holder came back", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown), Fresh: leaseFacts(v1alpha1.NodeHealthy)}, InvariantHolderStateChanged},
		{"deleteLease, fencing withdrawn since the decision", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeUnreachable), Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantHolderNotFenced},
		{"deleteLease, healthy holder's pods still there", FloorInput{Steps: move, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), Fresh: leaseFacts(v1alpha1.NodeHealthy, "web-1")}, InvariantHealthyHolderPodsRunning},
		{"deleteLease, healthy holder drained", FloorInput{Steps: move, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), Fresh: leaseFacts(v1alpha1.NodeHealthy)}, ""},
		// The pods gone is not the volume unmounted: the kubelet's volumesInUse decides.
		{"deleteLease, healthy holder drained, kubelet still lists the volume", FloorInput{Steps: move, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"),
			Fresh: withVolume(leaseFacts(v1alpha1.NodeHealthy), true, false)}, InvariantHealthyHolderVolumeInUse},
		{"deleteLease, healthy holder drained, volume unmounted", FloorInput{Steps: move, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"),
			Fresh: withVolume(leaseFacts(v1alpha1.NodeHealthy), false, true)}, ""},
		{"decision, healthy holder still mounts the volume", FloorInput{Steps: move, Fresh: withVolume(leaseFacts(v1alpha1.NodeHealthy, "web-0"), true, true)}, ""},
		// A shut-down holder's attachment is awaited by the deleteLease step, not refused.
		{"deleteLease, shut-down holder's volume still attached", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown),
			Fresh: withVolume(leaseFacts(v1alpha1.NodeShutdown), false, true)}, ""},
		{"evict, healthy holder's pods are there to evict", FloorInput{Steps: move, Step: "deleteAffectedPods", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), Fresh: leaseFacts(v1alpha1.NodeHealthy, "web-0")}, ""},
		{"evict, holder lost the control plane", FloorInput{Steps: move, Step: "deleteAffectedPods", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), Fresh: leaseFacts(v1alpha1.NodeUnreachable, "web-0")}, InvariantHolderStateChanged},
		{"uncordon is a restore, never refused", FloorInput{Steps: move, Step: "uncordon", Decided: leaseFacts(v1alpha1.NodeHealthy), Fresh: leaseFacts(v1alpha1.NodeUnreachable)}, ""},

		// The node-plugin restart.
		{"one plugin pod, driver missing", FloorInput{Steps: restart, Fresh: csiFacts(false, "trident-csi-a")}, ""},
		{"two plugin pods overlap", FloorInput{Steps: restart, Fresh: csiFacts(false, "trident-csi-a", "trident-csi-2-b")}, InvariantPluginPodsOverlap},
		{"driver registered", FloorInput{Steps: restart, Fresh: csiFacts(true, "trident-csi-a")}, InvariantDriverRegistered},
		{"deletePluginPod, a second pod appeared", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: csiFacts(false, "trident-csi-a"), Fresh: csiFacts(false, "trident-csi-a", "trident-csi-2-b")}, InvariantPluginPodsOverlap},
		{"deletePluginPod, pod replaced", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: csiFacts(false, "trident-csi-a"), Fresh: csiFacts(false, "trident-csi-c")}, InvariantPluginPodsOverlap},
		{"deletePluginPod, driver came back", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: csiFacts(false, "trident-csi-a"), Fresh: csiFacts(true, "trident-csi-a")}, InvariantDriverRegistered},
		{"deletePluginPod, unchanged", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: csiFacts(false, "trident-csi-a"), Fresh: csiFacts(false, "trident-csi-a")}, ""},
		{"deletePluginPod, other target", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.Target.Node = "node-z" }),
			Fresh: csiFacts(false, "trident-csi-a")}, InvariantHolderStateChanged},
	}
	forged := []struct {
		name string
		in   FloorInput
		want Invariant
	}{
		{"status lists a playbook without the Lease delete", FloorInput{Spec: lease, Steps: []string{"cordon"}, Step: "cordon",
			Decided: leaseFacts(v1alpha1.NodeHealthy), Fresh: leaseFacts(v1alpha1.NodeHealthy)}, InvariantPlaybookMismatch},
		{"status lists a playbook without the plugin restart", FloorInput{Spec: plugin, Steps: []string{"cordon", "uncordon"}, Step: "cordon",
			Decided: csiFacts(false, "trident-csi-a"), Fresh: csiFacts(false, "trident-csi-a")}, InvariantPlaybookMismatch},
		{"status names a node to cordon on a Lease request", FloorInput{Spec: lease, Steps: move, Step: "cordon",
			Decided: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) { f.Target.Node = "victim" }), Fresh: leaseFacts(v1alpha1.NodeHealthy, "web-0")}, InvariantLeaseChanged},
		{"the CSI cordon re-checks the target node", FloorInput{Spec: plugin, Steps: restart, Step: "cordon",
			Decided: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.Target.Node = "victim" }), Fresh: csiFacts(false, "trident-csi-a")}, InvariantHolderStateChanged},
		{"dry run refuses every step", FloorInput{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, Mode: v1alpha1.ModeDryRun},
			Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown), Fresh: leaseFacts(v1alpha1.NodeShutdown)}, InvariantDryRun},
	}
	for _, f := range forged {
		cases = append(cases, struct {
			name string
			in   FloorInput
			want Invariant
		}{f.name, f.in, f.want})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.Spec.Remediation == "" {
				tc.in.Spec.Remediation = v1alpha1.RemediationReleaseLUKSLease
				if tc.in.Fresh != nil && tc.in.Fresh.CSI != nil {
					tc.in.Spec.Remediation = v1alpha1.RemediationReregisterCSIDriver
				}
			}
			if tc.in.Created.IsZero() {
				tc.in.Created = requestAt
			}
			if tc.in.Floor.DriverName == "" {
				tc.in.Floor.DriverName = "csi.trident.netapp.io"
			}
			if tc.in.Floor.TridentNamespaces == nil {
				tc.in.Floor.TridentNamespaces = []string{"trident"}
			}
			v := CheckFloor(tc.in)
			if tc.want == "" {
				assert.Nil(t, v)
				return
			}
			require.NotNil(t, v, "want invariant %s", tc.want)
			assert.Equal(t, tc.want, v.Invariant, v.Message)
			assert.NotEmpty(t, tc.want.Advice())
		})
	}
}

func TestInvariantReason(t *testing.T) {
	assert.Equal(t, "HolderNotFenced", InvariantHolderNotFenced.Reason())
	assert.Equal(t, "HealthyHolderPodsRunning", InvariantHealthyHolderPodsRunning.Reason())
}

func TestGatesEffective(t *testing.T) {
	assert.Equal(t, DefaultFloor, Floor{}.Effective(), "a zero Gates is the runbook's floor, never none")
	assert.Equal(t, DefaultFloor, Floor{UnreachableMinLeaseAge: -time.Second}.Effective())
	short := Floor{UnreachableMinLeaseAge: time.Second, HealthyStuckLeaseAge: 2 * time.Second, HeartbeatGrace: 3 * time.Second, DriverName: "d", TridentNamespaces: []string{"a", "b"}}
	assert.Equal(t, short, short.Effective())
	assert.Equal(t, []string{"a", "b"}, short.Settings().TridentNamespaces, "status.decision.floor records the Trident namespaces")
	assert.Equal(t, &v1alpha1.FloorSettings{UnreachableMinLeaseAgeSeconds: 300, HealthyStuckLeaseAgeSeconds: 600, HeartbeatGraceSeconds: 50}, Floor{}.Settings())
}

func TestTooYoungSaysWhenToRecheck(t *testing.T) {
	v := CheckFloor(FloorInput{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, Fencing: fenced("node-a").Fencing},
		Steps: []string{"deleteLease"}, Created: requestAt, Fresh: with(leaseFacts(v1alpha1.NodeUnreachable), func(f *v1alpha1.Facts) { f.Lease.AgeSeconds = 60 })})
	require.NotNil(t, v)
	assert.Equal(t, InvariantLeaseTooYoung, v.Invariant)
	assert.Equal(t, 4*time.Minute, v.RecheckAfter)
}

// The runbook reads the healthy holder's Trident log before it calls the Lease stuck:
// each branch of that rule, at decision and before the deletion.
func TestProvenStuckReadsTheHolderLog(t *testing.T) {
	move := []string{"cordon", "deleteAffectedPods", "waitPodsGone", "deleteLease", "uncordon"}
	running := `time="2026-12-02T02:00:05Z" level=info msg="Opening encrypted volume." luks-passphrase-name=luks-key requestID=r1 requestSource=CSI volume=trident_pvc_1`
	logs := func(e *v1alpha1.LogEvidence) func(*v1alpha1.Facts) { return func(f *v1alpha1.Facts) { f.Logs = e } }
	retained := func(e *v1alpha1.LogEvidence) func(*v1alpha1.Facts) {
		return func(f *v1alpha1.Facts) { f.Logs, f.Lease.RetainedEvents = e, 1 }
	}
	cases := []struct {
		name    string
		decided *v1alpha1.Facts
		fresh   *v1alpha1.Facts
		want    Invariant
		quotes  []string // in the message
		recheck time.Duration
	}{
		{name: "old Lease, the log shows nothing of the volume", fresh: leaseFacts(v1alpha1.NodeHealthy, "web-0")},
		{name: "old Lease, the log shows the operation failed", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), logs(holderLog(v1alpha1.LogFailed, "x")))},
		{name: "old Lease, the log shows the operation finished", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), logs(holderLog(v1alpha1.LogFinished, "x")))},
		{name: "old Lease, the log shows the operation running", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), logs(holderLog(v1alpha1.LogRunning, running))),
			want: InvariantLeaseNotProvenStuck, recheck: logRecheck,
			quotes: []string{`"time=\"2026-12-02T02:00:05Z\" level=info msg=\"Opening encrypted volume.\"`, "still running", "pod trident/trident-node-a, container trident-main, since 2026-12-02T01:59:00Z, 4096 bytes read"}},
		{name: "old Lease, the log could not be read", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), logs(holderLog(v1alpha1.LogUnread, ""))),
			want: InvariantLeaseNotProvenStuck, recheck: logRecheck,
			quotes: []string{"could not be read in full", "the server could not find the requested resource", "pod trident/trident-node-a, container trident-main", "0 bytes read"}},
		{name: "old Lease, the log was not read", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), logs(nil)),
			want: InvariantLeaseNotProvenStuck, quotes: []string{"was not read"}},
		{name: "LeaseRetained, the log could not be read: the Warning is evidence enough", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), retained(holderLog(v1alpha1.LogUnread, "")))},
		{name: "LeaseRetained, the log was not read", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), retained(nil))},
		{name: "LeaseRetained, but the same node runs the operation again", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), retained(holderLog(v1alpha1.LogRunning, running))),
			want: InvariantLeaseNotProvenStuck, recheck: logRecheck, quotes: []string{"Opening encrypted volume."}},
		{name: "young Lease: the age gate speaks first", fresh: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) { f.Lease.AgeSeconds = 60 }),
			want: InvariantLeaseNotProvenStuck, recheck: 540 * time.Second, quotes: []string{"younger than the floor's 10m0s"}},
		// Before the deletion the fresh facts carry no log (only a decision reads it):
		// the decided one counts, the Lease being the one decided on.
		{name: "deleteLease: the decision's log showed the operation running", decided: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), logs(holderLog(v1alpha1.LogRunning, running))),
			fresh: with(leaseFacts(v1alpha1.NodeHealthy), logs(nil)), want: InvariantLeaseNotProvenStuck, quotes: []string{"Opening encrypted volume."}, recheck: logRecheck},
		{name: "deleteLease: the decision's log showed nothing running", decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), fresh: with(leaseFacts(v1alpha1.NodeHealthy), logs(nil))},
		{name: "deleteLease: a fresh log that shows the operation running wins", decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"),
			fresh: with(leaseFacts(v1alpha1.NodeHealthy), logs(holderLog(v1alpha1.LogRunning, running))), want: InvariantLeaseNotProvenStuck, recheck: logRecheck},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := FloorInput{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease}, Steps: move,
				Decided: tc.decided, Fresh: tc.fresh, Created: requestAt}
			if tc.decided != nil {
				in.Step = v1alpha1.StepDeleteLease
			}
			v := CheckFloor(in)
			if tc.want == "" {
				assert.Nil(t, v)
				return
			}
			require.NotNil(t, v, "want invariant %s", tc.want)
			assert.Equal(t, tc.want, v.Invariant, v.Message)
			assert.Equal(t, tc.recheck, v.RecheckAfter)
			for _, q := range tc.quotes {
				assert.Contains(t, v.Message, q)
			}
		})
	}
}

// The runbook's alternatives to powering an unreachable holder off, stopping its
// Trident node container or checking its log, rest on that log: each is accepted only
// on a log read in full that shows nothing running, and a later line voids it.
func TestFencingThatRestsOnTheLog(t *testing.T) {
	release := []string{"deleteLease"}
	running := `time="2026-12-02T02:40:05Z" level=info msg="Opening encrypted volume." luks-passphrase-name=luks-key requestID=r1 requestSource=CSI volume=trident_pvc_1`
	stated := func(m v1alpha1.FencingMethod, at *metav1.Time) v1alpha1.RemediationRequestSpec {
		return v1alpha1.RemediationRequestSpec{Fencing: &v1alpha1.Fencing{Confirmed: true, Method: m, Node: "node-a", FencedAt: at}}
	}
	// read is the log read with the decision; newest and newestVolume date its lines.
	read := func(state v1alpha1.NodeState, e *v1alpha1.LogEvidence, newest, newestVolume *metav1.Time) *v1alpha1.Facts {
		if e != nil {
			e.NewestLineAt, e.NewestVolumeLineAt = newest, newestVolume
		}
		return with(leaseFacts(state), func(f *v1alpha1.Facts) { f.Logs = e })
	}
	stopped, verified, shutdown := v1alpha1.FencingTridentNodeContainerStopped, v1alpha1.FencingLogsVerified, v1alpha1.FencingNodeShutdown
	statedAt := ago(40 * time.Minute) // the log's lines are dated around it
	cases := []struct {
		name   string
		spec   v1alpha1.RemediationRequestSpec
		facts  *v1alpha1.Facts
		want   Invariant
		quotes []string
	}{
		{name: "container stopped, the log read shows nothing of the volume, no line since", spec: stated(stopped, statedAt),
			facts: read(v1alpha1.NodeUnreachable, holderLog(v1alpha1.LogNone, ""), ago(50*time.Minute), nil)},
		{name: "logs verified, the operation failed before the statement", spec: stated(verified, statedAt),
			facts: read(v1alpha1.NodeUnreachable, holderLog(v1alpha1.LogFailed, "x"), ago(45*time.Minute), ago(45*time.Minute))},
		{name: "logs verified, the statement dated by the request's creation", spec: stated(verified, nil),
			facts: read(v1alpha1.NodeNotFound, holderLog(v1alpha1.LogFinished, "x"), ago(35*time.Minute), ago(35*time.Minute))},
		{name: "container stopped, the log was not read", spec: stated(stopped, statedAt), facts: read(v1alpha1.NodeUnreachable, nil, nil, nil),
			want: InvariantHolderNotFenced, quotes: []string{"rests on the trident-main log", "it was not read", "(method NodeShutdown)"}},
		{name: "logs verified, the log could not be read", spec: stated(verified, statedAt), facts: read(v1alpha1.NodeUnreachable, holderLog(v1alpha1.LogUnread, ""), nil, nil),
			want: InvariantHolderNotFenced, quotes: []string{"could not be read in full", "the server could not find the requested resource"}},
		{name: "logs verified, the log shows the operation running", spec: stated(verified, statedAt),
			facts: read(v1alpha1.NodeNotFound, holderLog(v1alpha1.LogRunning, running), ago(50*time.Minute), ago(50*time.Minute)),
			want:  InvariantHolderNotFenced, quotes: []string{"still running", "Opening encrypted volume."}},
		{name: "container stopped, yet it wrote a line after the statement", spec: stated(stopped, statedAt),
			facts: read(v1alpha1.NodeUnreachable, holderLog(v1alpha1.LogNone, ""), ago(39*time.Minute), nil),
			want:  InvariantFencingStale, quotes: []string{"has a line at 2026-12-02T02:21:00Z", "after the fencing statement (spec.fencing.fencedAt, 2026-12-02T02:20:00Z)"}},
		{name: "container stopped, a line after a statement dated by the request's creation", spec: stated(stopped, nil),
			facts: read(v1alpha1.NodeUnreachable, holderLog(v1alpha1.LogNone, ""), ago(29*time.Minute), nil),
			want:  InvariantFencingStale, quotes: []string{"the request's creation"}},
		{name: "logs verified, a line about the volume after the statement", spec: stated(verified, statedAt),
			facts: read(v1alpha1.NodeUnreachable, holderLog(v1alpha1.LogFinished, "x"), ago(39*time.Minute), ago(39*time.Minute)),
			want:  InvariantFencingStale, quotes: []string{"a line about the volume's LUKS operation at 2026-12-02T02:21:00Z"}},
		// The operator checked the volume's operation, not the plugin's silence.
		{name: "logs verified, only other volumes' lines after the statement", spec: stated(verified, statedAt),
			facts: read(v1alpha1.NodeUnreachable, holderLog(v1alpha1.LogFinished, "x"), ago(time.Minute), ago(45*time.Minute))},
		// A shutdown rests on the node's silence; its log is not read and not asked for.
		{name: "node shut down, the log not read", spec: stated(shutdown, statedAt), facts: read(v1alpha1.NodeUnreachable, nil, nil, nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Remediation = v1alpha1.RemediationReleaseLUKSLease
			v := CheckFloor(FloorInput{Spec: tc.spec, Steps: release, Fresh: tc.facts, Created: requestAt})
			if tc.want == "" {
				assert.Nil(t, v)
				return
			}
			require.NotNil(t, v, "want invariant %s", tc.want)
			assert.Equal(t, tc.want, v.Invariant, v.Message)
			for _, q := range tc.quotes {
				assert.Contains(t, v.Message, q)
			}
		})
	}
}
