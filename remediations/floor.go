package remediations

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Floor is the runbook's minimums the floor enforces: controller flags, so tests and
// the demo may shorten them, never a policy. A zero field means the runbook's value
// (DefaultFloor): a caller that forgets one gets the strictest floor, never none.
type Floor struct {
	// UnreachableMinLeaseAge: an unreachable or missing holder's Lease is deleted only
	// once this old (runbook: 5 minutes from its creation or later acquisition).
	UnreachableMinLeaseAge time.Duration
	// HealthyStuckLeaseAge: a healthy holder's Lease without a LeaseRetained Warning
	// counts as stuck only once this old (runbook: 5-10 minutes; 10 here).
	HealthyStuckLeaseAge time.Duration
	// HeartbeatGrace: a kubelet that gave a sign of life within it is alive
	// (kube-controller-manager's --node-monitor-grace-period).
	HeartbeatGrace time.Duration
	// DriverName (--driver-name) and TridentNamespaces (--trident-namespace and
	// --allowed-trident-namespaces, sorted) bound what the playbooks act on; empty
	// enforces nothing (offline plan without a configuration).
	DriverName        string
	TridentNamespaces []string
}

// DefaultFloor is the runbook's values.
var DefaultFloor = Floor{UnreachableMinLeaseAge: 5 * time.Minute, HealthyStuckLeaseAge: 10 * time.Minute, HeartbeatGrace: 50 * time.Second}

// Effective fills zero fields with the runbook's values.
func (g Floor) Effective() Floor {
	g.UnreachableMinLeaseAge = cmp.Or(max(g.UnreachableMinLeaseAge, 0), DefaultFloor.UnreachableMinLeaseAge)
	g.HealthyStuckLeaseAge = cmp.Or(max(g.HealthyStuckLeaseAge, 0), DefaultFloor.HealthyStuckLeaseAge)
	g.HeartbeatGrace = cmp.Or(max(g.HeartbeatGrace, 0), DefaultFloor.HeartbeatGrace)
	return g
}

// Settings are the effective gates as status.decision.floor records them.
func (g Floor) Settings() *v1alpha1.FloorSettings {
	g = g.Effective()
	return &v1alpha1.FloorSettings{
		UnreachableMinLeaseAgeSeconds: int64(g.UnreachableMinLeaseAge / time.Second),
		HealthyStuckLeaseAgeSeconds:   int64(g.HealthyStuckLeaseAge / time.Second),
		HeartbeatGraceSeconds:         int64(g.HeartbeatGrace / time.Second),
		DriverName:                    g.DriverName,
		TridentNamespaces:             g.TridentNamespaces,
	}
}

// Violation is a breached invariant with the facts that breached it.
type Violation struct {
	Invariant Invariant
	Message   string
	// RecheckAfter is set when time alone lifts the violation (a Lease too young).
	RecheckAfter time.Duration
}

func (v *Violation) Error() string { return fmt.Sprintf("safety floor %s: %s", v.Invariant, v.Message) }

// FloorInput is what the floor checks: plain data, so the check is pure.
type FloorInput struct {
	// Spec is the request's current spec (its fencing statement).
	Spec v1alpha1.RemediationRequestSpec
	// Steps are the playbook's step names, in order.
	Steps []string
	// Step is the destructive step about to run; empty when checking a decision.
	Step string
	// Decided are the facts the decision was made on; nil when checking a decision.
	Decided *v1alpha1.Facts
	// Fresh are the fresh facts: gathered right now from the spec and the live
	// cluster, never from status.
	Fresh *v1alpha1.Facts
	// Conflicts are the other running requests on the same Lease or node.
	Conflicts []string
	Floor     Floor
	// Created is the request's creationTimestamp: the time of its fencing statement
	// when spec.fencing.fencedAt is not set.
	Created time.Time
}

// CheckFloor returns the first invariant the input breaches, or nil.
func CheckFloor(in FloorInput) *Violation {
	in.Floor = in.Floor.Effective()
	if len(in.Conflicts) > 0 {
		return violation(InvariantConcurrentRemediation, "another remediation is running on the same Lease or node: %s",
			strings.Join(in.Conflicts, "; "))
	}
	if in.Fresh == nil {
		return violation(InvariantHolderStateUnproven, "no facts were gathered")
	}
	if n := in.Fresh.Node; n != nil && n.Excluded {
		return violation(InvariantNodeExcluded, "node %s carries the label %s=true, which keeps every playbook off it", n.Name, v1alpha1.LabelExclude)
	}
	if in.Step != "" && in.Spec.Mode == v1alpha1.ModeDryRun {
		return violation(InvariantDryRun, "spec.mode is DryRun")
	}
	if v := namespaceFloor(in); v != nil && in.Step != v1alpha1.StepUncordon {
		return v
	}
	// A playbook that does not end in its remediation's destructive call is refused.
	switch in.Spec.Remediation {
	case v1alpha1.RemediationReleaseLUKSLease:
		if !slices.Contains(in.Steps, v1alpha1.StepDeleteLease) {
			return violation(InvariantPlaybookMismatch, "playbook %s does not release a Lease", strings.Join(in.Steps, " -> "))
		}
		if in.Step != v1alpha1.StepUncordon {
			return leaseFloor(in)
		}
	case v1alpha1.RemediationReregisterCSIDriver:
		if !slices.Contains(in.Steps, v1alpha1.StepDeletePluginPod) {
			return violation(InvariantPlaybookMismatch, "playbook %s does not restart a node-plugin pod", strings.Join(in.Steps, " -> "))
		}
		if in.Decided != nil && in.Decided.Target.Node != in.Fresh.Target.Node {
			return violation(InvariantHolderStateChanged, "the decision was made for node %q, the request targets node %q", in.Decided.Target.Node, in.Fresh.Target.Node)
		}
		// The cordon too: cordoning a node mid-rollout is a disruption of its own.
		if in.Step != v1alpha1.StepUncordon {
			return pluginFloor(in)
		}
	default:
		return violation(InvariantPlaybookMismatch, "unknown remediation %q", in.Spec.Remediation)
	}
	return nil
}

func violation(inv Invariant, format string, args ...any) *Violation {
	return &Violation{Invariant: inv, Message: fmt.Sprintf(format, args...)}
}

// leaseFloor guards a playbook that ends in a Lease deletion, from decision to deletion.
func leaseFloor(in FloorInput) *Violation {
	l, n := in.Fresh.Lease, in.Fresh.Node
	if l == nil || !l.Exists || l.HolderIdentity == "" || l.UID == "" {
		return violation(InvariantLeaseNotHeld, "there is no held Trident Lease to release")
	}
	key := l.Namespace + "/" + l.Name
	if d := in.Decided; d != nil {
		switch {
		case d.Target.Node != in.Fresh.Target.Node:
			return violation(InvariantLeaseChanged, "the decision names node %q, the request resolves to none", d.Target.Node)
		case d.Lease == nil:
			return violation(InvariantLeaseChanged, "the decision recorded no Lease, but Lease %s exists now", key)
		case d.Lease.UID != l.UID:
			return violation(InvariantLeaseChanged, "Lease %s was re-created since the decision (uid %s, now %s)", key, d.Lease.UID, l.UID)
		case d.Lease.HolderIdentity != l.HolderIdentity:
			return violation(InvariantLeaseChanged, "Lease %s passed from %q to %q since the decision", key, d.Lease.HolderIdentity, l.HolderIdentity)
		case d.Lease.ResourceVersion != l.ResourceVersion:
			return violation(InvariantLeaseChanged, "Lease %s changed since the decision (resourceVersion %s, now %s)", key, d.Lease.ResourceVersion, l.ResourceVersion)
		}
		if d.Node == nil || n == nil || d.Node.State != n.State {
			return violation(InvariantHolderStateChanged, "holder node %s is now %s, not %s as when decided (%s)",
				l.HolderIdentity, nodeState(n), nodeState(d.Node), nodeReason(n))
		}
	}
	if n == nil || n.Name != l.HolderIdentity {
		return violation(InvariantHolderStateUnproven, "the state of holder node %s was not established", l.HolderIdentity)
	}
	now := in.Fresh.GatheredAt.Time
	switch n.State {
	case v1alpha1.NodeShutdown:
		return shutdownFloor(in, n, now)
	case v1alpha1.NodeUnreachable, v1alpha1.NodeNotFound:
		f := in.Spec.Fencing
		switch {
		case f == nil || !f.Confirmed:
			return violation(InvariantHolderNotFenced, "holder node %s is %s (%s) and spec.fencing does not confirm that it was fenced",
				n.Name, n.State, n.StateReason)
		case f.Node != l.HolderIdentity:
			return violation(InvariantHolderNotFenced, "holder node %s is %s, but spec.fencing names node %q: a fencing statement covers only the node it names",
				n.Name, n.State, f.Node)
		}
		if v := fencingFresh(in, n, now); v != nil {
			return v
		}
		if v := fencingEvidence(in, n, now); v != nil {
			return v
		}
		return leaseOldEnough(l, in.Floor.UnreachableMinLeaseAge, fmt.Sprintf("holder node %s is %s", n.Name, n.State))
	case v1alpha1.NodeHealthy:
		if v := provenStuck(l, holderLogs(in), in.Floor.HealthyStuckLeaseAge); v != nil {
			return v
		}
		return healthyFloor(in)
	}
	return violation(InvariantHolderStateUnproven, "holder node %s is %s (%s)", l.HolderIdentity, nodeState(n), n.StateReason)
}

// shutdownFloor: a shutdown is the taint (ClassifyNode records Shutdown only with
// one) and the kubelet's silence. A heartbeat within the grace (never less than the
// node Lease's duration) means the kubelet runs, and may be running cryptsetup.
func shutdownFloor(in FloorInput, n *v1alpha1.NodeFacts, now time.Time) *Violation {
	if n.Ready == "True" || n.HeartbeatFresh(now, in.Floor.HeartbeatGrace) {
		return violation(InvariantHolderStateUnproven, "holder node %s carries a shutdown taint, but its kubelet still reports (Ready=%s, last heartbeat %s, within the grace period of %s): a node whose kubelet still reports is not shut down",
			n.Name, cmp.Or(n.Ready, "none"), heartbeatString(n), n.HeartbeatGrace(in.Floor.HeartbeatGrace))
	}
	return nil
}

func heartbeatString(n *v1alpha1.NodeFacts) string {
	if hb := n.NewestHeartbeat(); hb != nil {
		return hb.UTC().Format(time.RFC3339)
	}
	return "none"
}

// leaseOldEnough: the runbook gives an operation in flight min from the Lease's
// creation or later acquisition, by server time (LeaseFacts.AgeSeconds), to finish.
func leaseOldEnough(l *v1alpha1.LeaseFacts, min time.Duration, who string) *Violation {
	if age := time.Duration(l.AgeSeconds) * time.Second; age < min {
		v := violation(InvariantLeaseTooYoung, "%s and Lease %s/%s is %s old, younger than the floor's %s (%s)",
			who, l.Namespace, l.Name, age, min, cmp.Or(l.AgeFrom, "age counted from its creation or later acquisition"))
		v.RecheckAfter = min - age
		return v
	}
	return nil
}

// provenStuck: a healthy holder's Lease goes only on evidence that its operation
// failed: a LeaseRetained Warning on this hold of the Lease, or an age past the point
// where cryptsetup, which takes seconds, can still be running, and then only once the
// holder's Trident log was read in full and shows no operation on the volume running
// (the runbook reads that log before it calls the Lease stuck). Even after a
// LeaseRetained Warning, a log that shows the operation running keeps the Lease: the
// same node may be retrying.
func provenStuck(l *v1alpha1.LeaseFacts, logs *v1alpha1.LogEvidence, stuck time.Duration) *Violation {
	age := time.Duration(l.AgeSeconds) * time.Second
	if logs != nil && logs.State == v1alpha1.LogRunning {
		v := violation(InvariantLeaseNotProvenStuck, "holder node %s is healthy and the log of its Trident node pod (%s) shows the LUKS operation on the volume of Lease %s/%s still running: %q",
			l.HolderIdentity, logSource(logs), l.Namespace, l.Name, logs.Line)
		v.RecheckAfter = logRecheck
		return v
	}
	if l.RetainedEvents > 0 {
		return nil
	}
	if age < stuck {
		v := violation(InvariantLeaseNotProvenStuck, "holder node %s is healthy and nothing proves its operation on Lease %s/%s failed: no LeaseRetained Warning names this Lease's UID since its hold began, and it is %s old, younger than the floor's %s",
			l.HolderIdentity, l.Namespace, l.Name, age, stuck)
		v.RecheckAfter = stuck - age
		return v
	}
	switch {
	case logs == nil:
		return violation(InvariantLeaseNotProvenStuck, "holder node %s is healthy, no LeaseRetained Warning names Lease %s/%s, and the log of its Trident node pod was not read, so nothing shows that the operation on the volume no longer runs",
			l.HolderIdentity, l.Namespace, l.Name)
	case logs.State == v1alpha1.LogUnread:
		v := violation(InvariantLeaseNotProvenStuck, "holder node %s is healthy, no LeaseRetained Warning names Lease %s/%s, and the log of its Trident node pod (%s) could not be read in full, so nothing shows that the operation on the volume no longer runs: %s",
			l.HolderIdentity, l.Namespace, l.Name, logSource(logs), logs.ReadError)
		v.RecheckAfter = logRecheck
		return v
	}
	return nil
}

// logRecheck is when a request refused on the holder's log is decided again, on a
// fresh read: cryptsetup may have finished, the log may read then.
const logRecheck = 2 * time.Minute

// logSource says which log was read, from when, and how much of it.
func logSource(e *v1alpha1.LogEvidence) string {
	since := "its start"
	if e.SinceTime != nil {
		since = e.SinceTime.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("pod %s/%s, container %s, since %s, %d bytes read", e.Namespace, cmp.Or(e.Pod, "none"), e.Container, since, e.BytesRead)
}

// holderLogs is the log evidence the floor weighs: the one gathered now, else the
// decision's. Only the decision reads the log; before a step, leaseFloor has checked
// that the Lease is the one decided on (its UID and resourceVersion), so the decided
// log is about this very hold.
func holderLogs(in FloorInput) *v1alpha1.LogEvidence {
	if in.Fresh.Logs != nil || in.Decided == nil {
		return in.Fresh.Logs
	}
	return in.Decided.Logs
}

// healthyFloor: a healthy holder may still run cryptsetup for the volume's pods; its
// Lease goes only after they are gone from it.
func healthyFloor(in FloorInput) *Violation {
	f := in.Fresh
	if f.Target.PersistentVolumeClaim == "" {
		return violation(InvariantHealthyHolderPodsRunning, "holder node %s is healthy and no claim of PersistentVolume %s could be verified, so the pods that use the volume cannot be listed",
			f.Lease.HolderIdentity, f.Lease.Name)
	}
	lease := slices.Index(in.Steps, v1alpha1.StepDeleteLease)
	evict, wait := slices.Index(in.Steps, v1alpha1.StepDeleteAffectedPods), slices.Index(in.Steps, v1alpha1.StepWaitPodsGone)
	if evict < 0 || wait < 0 || evict > lease || wait > lease {
		return violation(InvariantHealthyHolderPodsRunning, "holder node %s is healthy and the playbook (%s) deletes the Lease without first moving the pods that use the volume off it",
			f.Lease.HolderIdentity, strings.Join(in.Steps, " -> "))
	}
	if in.Step == v1alpha1.StepDeleteLease && len(f.AffectedPods) > 0 {
		return violation(InvariantHealthyHolderPodsRunning, "holder node %s is healthy and pods that use the volume still run on it: %s",
			f.Lease.HolderIdentity, PodList(f.AffectedPods))
	}
	// The pods gone is not the volume gone: the kubelet unmounts after the pod ends,
	// and the LUKS device is closed only then. Its own volumesInUse is the proof.
	if why := VolumeOnHolder(f); in.Step == v1alpha1.StepDeleteLease && why != "" {
		return violation(InvariantHealthyHolderVolumeInUse, "holder node %s is healthy and %s", f.Lease.HolderIdentity, why)
	}
	return nil
}

// VolumeOnHolder says why the Lease's holder still has its volume, or "" when the
// evidence shows it released, or shows nothing (no Node status, a volume that is not
// CSI). A Healthy holder has it while its kubelet lists the volume in
// status.volumesInUse: mounted, or being mounted or unmounted (the kubelet lists only
// volumes of drivers that attach). A Shutdown holder has it while the volume's
// VolumeAttachment to it is attached, where the driver attaches: the attach-detach
// controller detaches it once the node carries the out-of-service taint and its pods
// are gone. The playbooks wait on it, bounded by their steps' timeouts, before the
// Lease goes.
func VolumeOnHolder(f *v1alpha1.Facts) string {
	if f == nil || f.Volume == nil || f.Node == nil {
		return ""
	}
	v := f.Volume
	switch f.Node.State {
	case v1alpha1.NodeHealthy:
		if v.InUseOnNode {
			return fmt.Sprintf("its kubelet still lists volume %s in the Node's status.volumesInUse (status posted %s)", v.UniqueName, reportedAt(v))
		}
	case v1alpha1.NodeShutdown:
		if va := v.VolumeAttachment; v.AttachRequired && va.Exists && va.Attached {
			return fmt.Sprintf("VolumeAttachment %s still attaches PersistentVolume %s to it (the attach-detach controller detaches it once node %s carries %s and its pods are gone)",
				va.Name, f.Target.PersistentVolume, v.Node, v1alpha1.TaintOutOfService)
		}
	}
	return ""
}

func reportedAt(v *v1alpha1.VolumeFacts) string {
	if v.InUseReportedAt == nil {
		return "never"
	}
	return v.InUseReportedAt.UTC().Format(time.RFC3339)
}

// namespaceFloor: the Trident namespace is the controller's, not the request's. The
// spec's, the facts', the Lease's and the node-plugin pods' namespaces must each be
// one the controller acts in, whatever a policy allowed.
func namespaceFloor(in FloorInput) *Violation {
	allowed := in.Floor.TridentNamespaces
	if len(allowed) == 0 {
		return nil
	}
	f := in.Fresh
	type place struct{ what, ns string }
	where := []place{{"spec.tridentNamespace", in.Spec.TridentNamespace}, {"the facts' Trident namespace", f.TridentNamespace}}
	if f.Lease != nil {
		where = append(where, place{"Lease " + f.Lease.Namespace + "/" + f.Lease.Name, f.Lease.Namespace})
	}
	if f.CSI != nil {
		for _, p := range f.CSI.PluginPods {
			where = append(where, place{"node-plugin pod " + p.Namespace + "/" + p.Name, p.Namespace})
		}
	}
	for _, w := range where {
		if w.ns != "" && !slices.Contains(allowed, w.ns) {
			return violation(InvariantNamespaceNotAllowed, "%s is in namespace %q, which is not a Trident namespace of this controller (%s: --trident-namespace and --allowed-trident-namespaces)",
				w.what, w.ns, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// pluginFloor guards the node-plugin restart: exactly one plugin pod, the one the
// decision saw, and the driver still missing.
func pluginFloor(in FloorInput) *Violation {
	f := in.Fresh
	node := f.Target.Node
	if f.Node == nil || !f.Node.Exists || f.CSI == nil {
		return violation(InvariantHolderStateUnproven, "node %s or its CSI facts were not found", node)
	}
	if want := in.Floor.DriverName; want != "" && (f.DriverName != want || (in.Spec.DriverName != "" && in.Spec.DriverName != want)) {
		return violation(InvariantDriverNotConfigured, "the request is about CSI driver %q, but this controller is configured for %q (--driver-name): restarting the node plugin for another driver's missing registration would disturb a healthy plugin",
			cmp.Or(in.Spec.DriverName, f.DriverName), want)
	}
	if f.Node.State != v1alpha1.NodeHealthy {
		return violation(InvariantNodeNotHealthy, "node %s is %s (%s), not Healthy: its node plugin is restarted only on a node whose kubelet reports", node, f.Node.State, f.Node.StateReason)
	}
	// CheckFloor has compared the decided target node already.
	if d := in.Decided; d != nil && (d.Node == nil || d.Node.State != f.Node.State) {
		return violation(InvariantHolderStateChanged, "node %s is now %s, not %s as when decided (%s)",
			node, f.Node.State, nodeState(d.Node), f.Node.StateReason)
	}
	if f.CSI.DriverRegistered {
		return violation(InvariantDriverRegistered, "CSINode %s lists %s again; restarting its node-plugin pod would only disturb it", node, f.DriverName)
	}
	if len(f.CSI.PluginPods) != 1 {
		return violation(InvariantPluginPodsOverlap, "node %s runs %d node-plugin pods (%s), not exactly one; restarting one while another overlaps it deregisters the driver again",
			node, len(f.CSI.PluginPods), PodList(f.CSI.PluginPods))
	}
	if p := f.CSI.PluginPods[0]; p.Phase != "Running" || !p.Ready || p.DeletionTimestamp != nil {
		return violation(InvariantPluginPodNotReady, "the node-plugin pod on node %s is %s, not Running, Ready and in place", node, p)
	}
	if d := in.Decided; d != nil && (d.CSI == nil || len(d.CSI.PluginPods) != 1 || d.CSI.PluginPods[0].UID != f.CSI.PluginPods[0].UID) {
		return violation(InvariantPluginPodsOverlap, "the node-plugin pod on node %s is now %s, not the one the decision was made on",
			node, PodList(f.CSI.PluginPods))
	}
	return nil
}

// PodList renders pods as "namespace/name, ..." in sorted order.
func PodList(pods []v1alpha1.PodFacts) string {
	if len(pods) == 0 {
		return "none"
	}
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func nodeState(n *v1alpha1.NodeFacts) string {
	if n == nil {
		return "unknown"
	}
	return string(n.State)
}

func nodeReason(n *v1alpha1.NodeFacts) string {
	if n == nil {
		return "no node facts"
	}
	return n.StateReason
}
