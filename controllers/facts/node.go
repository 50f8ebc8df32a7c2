package facts

import (
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// stateTaints are the taints that decide a node's state; the policy must not depend
// on others.
var stateTaints = []string{v1alpha1.TaintCloudShutdown, v1alpha1.TaintOutOfService, v1alpha1.TaintUnreachable}

// ClassifyNode turns a Node (nil: none exists) and its kube-node-lease Lease (nil:
// none) into NodeFacts, in the runbook's node states (docs/safety.md). It is pure, to be table-tested.
func ClassifyNode(name string, node *corev1.Node, nodeLease *coordinationv1.Lease, now time.Time, grace time.Duration) v1alpha1.NodeFacts {
	nf := v1alpha1.NodeFacts{Name: name, LeaseRenewAgeSeconds: -1, HeartbeatAgeSeconds: -1}
	nf.NodeLeaseDurationSeconds = kubeletLeaseDuration(name, nodeLease)
	grace = nf.HeartbeatGrace(grace)
	nf.HeartbeatGraceSeconds = int64(grace / time.Second)
	leaseFresh := false
	if renew := leaseRenewal(nodeLease); renew != nil {
		nf.LeaseRenewTime = renew
		nf.LeaseRenewAgeSeconds = ageSeconds(now, renew.Time)
		leaseFresh = now.Sub(renew.Time) <= grace
	}
	if node == nil {
		classifyMissing(&nf, leaseFresh, now, grace)
		return nf
	}
	readNode(&nf, node, now)
	shutdownTaint := slices.Contains(nf.Taints, v1alpha1.TaintOutOfService) || slices.Contains(nf.Taints, v1alpha1.TaintCloudShutdown)
	readyTrue := nf.Ready == string(corev1.ConditionTrue)
	evidence := nodeEvidence(&nf, nodeLease != nil, grace)
	switch {
	case shutdownTaint && !readyTrue && nf.HeartbeatFresh(now, grace):
		// A taint is an administrator's (or a cloud provider's) word, a heartbeat the
		// kubelet's own: a kubelet that still reports runs, whatever the taint says,
		// and may be running cryptsetup: never a shutdown.
		nf.State = v1alpha1.NodeUnknown
		evidence = fmt.Sprintf("conflicting evidence: shutdown taint, but the kubelet's last heartbeat is only %s old (grace %s)%s; ",
			time.Duration(nf.HeartbeatAgeSeconds)*time.Second, grace, settles(&nf, now, grace)) + evidence
	case shutdownTaint && !readyTrue:
		nf.State = v1alpha1.NodeShutdown
	case shutdownTaint:
		// A live node tainted, or one that went down before the node controller saw
		// it: the evidence conflicts, so nobody may act on it now.
		nf.State = v1alpha1.NodeUnknown
		evidence = fmt.Sprintf("conflicting evidence: shutdown taint on a node that reports Ready=True%s; ", settles(&nf, now, grace)) + evidence
	case nf.Ready == string(corev1.ConditionUnknown) || slices.Contains(nf.Taints, v1alpha1.TaintUnreachable) || (nodeLease != nil && !leaseFresh):
		nf.State = v1alpha1.NodeUnreachable
	case readyTrue && leaseFresh:
		nf.State = v1alpha1.NodeHealthy
	default:
		nf.State = v1alpha1.NodeUnknown
	}
	nf.StateReason = evidence
	return nf
}

// classifyMissing classifies a node without a Node object. That is no proof the
// machine is down: a holderIdentity spelled differently (an FQDN versus a short
// name), or a Node deleted while its machine runs, would make a live holder look
// dead. So it is a state of its own, which the policy treats like Unreachable, and a
// kubelet that still renews the node's Lease runs.
func classifyMissing(nf *v1alpha1.NodeFacts, leaseFresh bool, now time.Time, grace time.Duration) {
	recordHeartbeat(nf, now)
	nf.State = v1alpha1.NodeNotFound
	nf.StateReason = fmt.Sprintf("no Node is named %s: check the holderIdentity's spelling against kubectl get nodes "+
		"(an FQDN versus a short name), and whether the machine is really gone or only its Node object was deleted", nf.Name)
	if leaseFresh {
		nf.State = v1alpha1.NodeUnknown
		nf.StateReason = fmt.Sprintf("conflicting evidence: no Node is named %s, but its kubelet renewed its node Lease %s ago (grace %s): the machine runs",
			nf.Name, time.Duration(nf.LeaseRenewAgeSeconds)*time.Second, grace)
	}
}

// readNode records what node says of itself: its Ready condition, state taints and
// newest heartbeat.
func readNode(nf *v1alpha1.NodeFacts, node *corev1.Node, now time.Time) {
	nf.Exists = true
	nf.Unschedulable = node.Spec.Unschedulable
	nf.Excluded = node.Labels[v1alpha1.LabelExclude] == "true"
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		nf.Ready = string(c.Status)
		nf.ReadyHeartbeatTime = readyHeartbeat(node, c)
		if !c.LastTransitionTime.IsZero() {
			since := c.LastTransitionTime
			nf.ReadySince = &since
			nf.ReadyAgeSeconds = ageSeconds(now, since.Time)
		}
	}
	for _, t := range node.Spec.Taints {
		if slices.Contains(stateTaints, t.Key) && !slices.Contains(nf.Taints, t.Key) {
			nf.Taints = append(nf.Taints, t.Key)
		}
	}
	slices.Sort(nf.Taints)
	recordHeartbeat(nf, now)
}

// settleMargin is how long after the grace runs out a settling heartbeat is looked at
// again: the fresh facts also count the server's time of the kubelet's last write,
// which trails the kubelet's stamp the decision read by that write's latency. Without
// it the floor would find the same heartbeat still within its grace on a loaded API
// server, and fail the request for evidence that settles a moment later.
const settleMargin = 3 * time.Second

// settleRecheck is how soon a tainted node still Ready=True past its grace is looked
// at again: the node controller marks it within its monitor period.
const settleRecheck = 10 * time.Second

// settles records when a tainted node's conflicting evidence settles if the kubelet
// stays silent, and says so for the state's reason ("" when time does not settle
// it). Time settles it while the last heartbeat is within the grace (a node powered
// off and tainted at once), and for one more grace while Ready still reads True (the
// node controller marks a silent node only once its own grace ran out).
func settles(nf *v1alpha1.NodeFacts, now time.Time, grace time.Duration) string {
	hb := nf.NewestHeartbeat()
	if hb == nil {
		return ""
	}
	at := hb.Add(grace + settleMargin).Truncate(time.Second)
	if !at.After(now) {
		if nf.Ready != string(corev1.ConditionTrue) || !now.Before(hb.Add(2*grace)) {
			return ""
		}
		at = now.Add(settleRecheck)
	}
	t := metav1.NewTime(at)
	nf.SettlesAt = &t
	nf.SettlesInSeconds = max(int64(at.Sub(now)/time.Second), 1)
	return settleClause(at)
}

// settleClause is what a state's reason says of a settling time.
func settleClause(at time.Time) string {
	return fmt.Sprintf(", which settles at %s if no heartbeat follows", at.UTC().Format(time.RFC3339))
}

// Unsettled takes back the settling time of a node whose conflicting evidence the
// previous decision (prev) already waited on, when the kubelet gave a heartbeat
// after that decision gathered: a kubelet that keeps renewing under a shutdown taint
// runs, and waiting again would wait for ever. A heartbeat written before but seen
// only now (a lagging cache, a server-set write time) is no sign of life since.
func Unsettled(nf *v1alpha1.NodeFacts, prev *v1alpha1.Facts) {
	if nf.SettlesAt == nil || prev == nil || prev.Node == nil || prev.Node.Name != nf.Name || prev.Node.SettlesAt == nil ||
		prev.GatheredAt.IsZero() || nf.LastHeartbeat == nil {
		return
	}
	// Neither the heartbeat that decision saw nor one written before it gathered
	// counts; a second's tolerance absorbs the kubelet's clock and the truncation.
	if !nf.LastHeartbeat.After(prev.GatheredAt.Add(time.Second)) ||
		(prev.Node.LastHeartbeat != nil && !nf.LastHeartbeat.After(prev.Node.LastHeartbeat.Add(time.Second))) {
		return
	}
	nf.StateReason = strings.Replace(nf.StateReason, settleClause(nf.SettlesAt.Time),
		fmt.Sprintf(", and it renewed at %s, after the last decision waited at %s: the kubelet runs",
			nf.LastHeartbeat.UTC().Format(time.RFC3339), prev.GatheredAt.UTC().Format(time.RFC3339)), 1)
	nf.SettlesAt, nf.SettlesInSeconds = nil, 0
}

// kubeletLeaseDuration is the node Lease's leaseDurationSeconds when the node itself
// holds it, else 0: no heartbeat is judged stale sooner (NodeFacts.HeartbeatGrace),
// and a Lease held by anyone else makes no promise about the kubelet.
func kubeletLeaseDuration(name string, l *coordinationv1.Lease) int32 {
	if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != name || l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return max(*l.Spec.LeaseDurationSeconds, 0)
}

// recordHeartbeat records the newest of the node's heartbeats and its age.
func recordHeartbeat(nf *v1alpha1.NodeFacts, now time.Time) {
	if hb := nf.NewestHeartbeat(); hb != nil {
		nf.LastHeartbeat = hb
		nf.HeartbeatAgeSeconds = ageSeconds(now, hb.Time)
	}
}

// leaseRenewal is when the node's Lease was last renewed: the later of its
// spec.renewTime (the kubelet's clock) and the server-set time of the newest write
// (managedFields, which live reads carry and the cache strips), so that a kubelet
// whose clock runs slow does not look silent.
func leaseRenewal(l *coordinationv1.Lease) *metav1.Time {
	if l == nil {
		return nil
	}
	var renewed *metav1.Time
	if l.Spec.RenewTime != nil {
		renewed = &metav1.Time{Time: l.Spec.RenewTime.Time}
	}
	return latestWrite(renewed, l.ManagedFields, func(metav1.ManagedFieldsEntry) bool { return true })
}

// readyHeartbeat is the later of the Ready condition's lastHeartbeatTime and the
// server-set time of the kubelet's own newest status write (kube-controller-manager
// writes the status of a silent node, which is no sign of life).
func readyHeartbeat(node *corev1.Node, c corev1.NodeCondition) *metav1.Time {
	var posted *metav1.Time
	if !c.LastHeartbeatTime.IsZero() {
		posted = &metav1.Time{Time: c.LastHeartbeatTime.Time}
	}
	return latestWrite(posted, node.ManagedFields, func(mf metav1.ManagedFieldsEntry) bool {
		return mf.Manager == "kubelet" && mf.Subresource == "status"
	})
}

// latestWrite is the later of t and the server-set times of the writes counted.
func latestWrite(t *metav1.Time, writes []metav1.ManagedFieldsEntry, counts func(metav1.ManagedFieldsEntry) bool) *metav1.Time {
	for _, mf := range writes {
		if mf.Time != nil && counts(mf) && (t == nil || mf.Time.After(t.Time)) {
			t = &metav1.Time{Time: mf.Time.Time}
		}
	}
	return t
}

// nodeEvidence describes the facts behind a node state in one deterministic line.
func nodeEvidence(nf *v1alpha1.NodeFacts, hasLease bool, grace time.Duration) string {
	var parts []string
	if nf.Ready == "" {
		parts = append(parts, "no Ready condition")
	} else {
		parts = append(parts, fmt.Sprintf("Ready=%s for %s", nf.Ready, time.Duration(nf.ReadyAgeSeconds)*time.Second))
	}
	if len(nf.Taints) > 0 {
		parts = append(parts, "taints "+strings.Join(nf.Taints, ","))
	}
	switch {
	case !hasLease:
		parts = append(parts, "no node Lease in kube-node-lease")
	case nf.LeaseRenewTime == nil:
		parts = append(parts, "node Lease never renewed")
	default:
		parts = append(parts, fmt.Sprintf("node Lease renewed %s ago (grace %s)", time.Duration(nf.LeaseRenewAgeSeconds)*time.Second, grace))
	}
	return strings.Join(parts, "; ")
}

func ageSeconds(now, t time.Time) int64 {
	if now.Before(t) {
		return 0
	}
	return int64(now.Sub(t) / time.Second)
}
