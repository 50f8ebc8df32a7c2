package main

// The branches of both incidents that the campaigns drive, each with the terminal
// state the runbook (docs/safety.md) gives it and the destructive calls it may
// make. A subject is one staged incident and its request.

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/stage"
)

// branch is one path through the policies.
type branch struct {
	Name     string
	Phase    v1alpha1.Phase // the terminal phase the runbook gives
	Playbook string         // the playbook of an allowed request
	Rule     string         // the deciding rule
	// Calls are the kinds of destructive call a Succeeded request makes, each once.
	Calls []string
	// Steps are the playbook's steps, for the crash points.
	Steps []string
	// Recheck: the runbook's rejection names a time to look again (a healthy
	// holder's Lease is re-evaluated when it is 600 s old), and that rejection
	// is where the campaign leaves it. Other rejections with a recheck time (the
	// fencing gate, 15 s here) are waited out.
	Recheck bool
	// FailReasons are the Succeeded=False reasons a Failed branch may end with.
	FailReasons []string
}

var (
	brShutdown = &branch{Name: "shutdown", Phase: v1alpha1.PhaseSucceeded, Playbook: "node-shutdown", Rule: "holder-shutdown",
		Calls: []string{callDeleteLease}, Steps: []string{"deleteLease"}}
	brFenced = &branch{Name: "fenced", Phase: v1alpha1.PhaseSucceeded, Playbook: "fenced-unreachable", Rule: "unreachable-fenced",
		Calls: []string{callDeleteLease}, Steps: []string{"deleteLease"}}
	brMove = &branch{Name: "move", Phase: v1alpha1.PhaseSucceeded, Playbook: "healthy-move-workload", Rule: "healthy-lease-stuck",
		Calls: []string{callCordon, callEvict, callDeleteLease, callUncordon},
		Steps: []string{"cordon", "deleteAffectedPods", "waitPodsGone", "deleteLease", "uncordon"}}
	brPlugin = &branch{Name: "plugin", Phase: v1alpha1.PhaseSucceeded, Playbook: "restart-node-plugin", Rule: "driver-deregistered",
		Calls: []string{callCordon, callEvict, callUncordon},
		Steps: []string{"cordon", "deletePluginPod", "waitPluginPodReady", "waitDriverRegistered", "uncordon"}}
	// brReturns is a shut-down holder that comes back while the release is under
	// way (the out-of-service taint removed, as an administrator does when the
	// machine is powered on again): the floor's re-check before the delete must
	// see it and fail the playbook without touching the Lease.
	brReturns = &branch{Name: "returns", Phase: v1alpha1.PhaseFailed, Playbook: "node-shutdown", Rule: "holder-shutdown",
		Steps: []string{"deleteLease"}, FailReasons: []string{remediations.InvariantHolderStateChanged.Reason()}}
	// brFencedBack is a fenced unreachable holder that comes back while the release
	// is under way: its kubelet renews its kube-node-lease Lease again (and may post
	// Ready), after the fencing statement was made. The statement no longer
	// describes the node, so the floor's re-check before the delete must fail the
	// playbook without touching the Lease: the fencing is stale (the node still
	// looks unreachable) or the holder's state changed (it turned Healthy).
	brFencedBack = &branch{Name: "fencedback", Phase: v1alpha1.PhaseFailed, Playbook: "fenced-unreachable", Rule: "unreachable-fenced",
		Steps: []string{"deleteLease"}, FailReasons: []string{remediations.InvariantFencingStale.Reason(), remediations.InvariantHolderStateChanged.Reason()}}
	brUnfenced   = &branch{Name: "unfenced", Phase: v1alpha1.PhaseRejected, Rule: "unreachable-not-fenced"}
	brYoung      = &branch{Name: "young", Phase: v1alpha1.PhaseRejected, Rule: "healthy-operation-may-be-running", Recheck: true}
	brNotFound   = &branch{Name: "notfound", Phase: v1alpha1.PhaseRejected, Rule: "holder-node-not-found"}
	brNoLease    = &branch{Name: "nolease", Phase: v1alpha1.PhaseRejected, Rule: "no-lease"}
	brRegistered = &branch{Name: "registered", Phase: v1alpha1.PhaseRejected, Rule: "driver-registered"}

	// playbookBranches are the four playbooks, for the crash campaign.
	playbookBranches = []*branch{brShutdown, brFenced, brMove, brPlugin}
	allBranches      = []*branch{brShutdown, brFenced, brMove, brPlugin, brUnfenced, brYoung, brNotFound, brNoLease, brRegistered}
)

// subject is one staged incident and its request.
type subject struct {
	Branch *branch
	RR     *v1alpha1.RemediationRequest
	Lease  string // trident/<pv> for the LUKS branches
	// LeaseCreated is the Lease's creationTimestamp: the fencing age gate counts from it.
	LeaseCreated time.Time
	// LeaseUID is the staged Lease's UID: a branch that never deletes the Lease must
	// end with this very Lease in place.
	LeaseUID types.UID
	Node     string   // the holder, or the plugin's node
	Pods     []string // namespace/name of the pods the playbook must move off Node first
	// Deleted is set when the campaign deleted the request before it was terminal:
	// it then only has to end without a leak and without a repeated call.
	Deleted bool
}

// objects are the keys the subject's destructive calls may name.
func (s *subject) expected() []string {
	var out []string
	for _, k := range s.Branch.Calls {
		switch k {
		case callDeleteLease:
			out = append(out, k+" "+s.Lease)
		case callCordon, callUncordon:
			out = append(out, k+" "+s.Node)
		case callEvict:
			for _, p := range s.Pods {
				out = append(out, k+" "+p)
			}
		}
	}
	return out
}

// owns reports whether a destructive call names one of the subject's objects.
func (s *subject) owns(c call) bool {
	return (s.Lease != "" && c.Object == s.Lease) || (s.Node != "" && c.Object == s.Node) || slices.Contains(s.Pods, c.Object)
}

// stager stages subjects for one campaign.
type stager struct {
	h   *harness
	st  *stage.Stager
	seq atomic.Int64 // staged in parallel
	// carrier is a kwok node for application pods of holders that are down.
	carrier string
	// gate is the fencing age gate of the campaign's policies.
	gate time.Duration
}

func (s *stager) next(kind string) string {
	return fmt.Sprintf("chaos-%s-%s-%04d", s.st.RunID, kind, s.seq.Add(1))
}

func (s *stager) request(name string, spec v1alpha1.RemediationRequestSpec) *v1alpha1.RemediationRequest {
	return &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.st.Requests,
		Labels: map[string]string{stage.Label: s.st.RunID}}, Spec: spec}
}

func (s *stager) luks(ctx context.Context, b *branch, holder, podNode string, retained bool, fencing *v1alpha1.Fencing) (*subject, error) {
	base := s.next(b.Name)
	in := stage.Incident{Name: "pvc-" + base, Claim: base + "-data", Pod: base + "-app", Holder: holder, PodNode: podNode}
	if err := s.st.StageIncident(ctx, in, retained); err != nil {
		return nil, err
	}
	l, err := s.h.cs.CoordinationV1().Leases(stage.TridentNamespace).Get(ctx, in.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sub := &subject{Branch: b, Lease: stage.TridentNamespace + "/" + in.Name, LeaseCreated: l.CreationTimestamp.Time, LeaseUID: l.UID, Node: holder}
	if podNode == holder {
		sub.Pods = []string{s.st.Apps + "/" + in.Pod}
	}
	sub.RR = s.request(base, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: in.Name},
		Reason:      "make chaos: " + b.Name,
		Fencing:     fencing,
	})
	if b == brNoLease {
		if err := s.h.cs.CoordinationV1().Leases(stage.TridentNamespace).Delete(ctx, in.Name, metav1.DeleteOptions{}); err != nil {
			return nil, err
		}
		sub.Lease = ""
	}
	return sub, nil
}

// stage stages one subject of branch b. Plugin subjects take a baseline node from
// pluginNodes (each may be restarted once per campaign phase).
func (s *stager) stage(ctx context.Context, b *branch, pluginNode string) (*subject, error) {
	switch b {
	case brShutdown, brReturns:
		n := s.next("down")
		if err := s.st.ShutdownNode(ctx, n); err != nil {
			return nil, err
		}
		return s.luks(ctx, b, n, s.carrier, false, nil)
	case brFenced, brUnfenced, brFencedBack:
		n := s.next("cutoff")
		if err := s.st.UnreachableNode(ctx, n); err != nil {
			return nil, err
		}
		var f *v1alpha1.Fencing
		if b != brUnfenced {
			f = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: n}
		}
		return s.luks(ctx, b, n, s.carrier, false, f)
	case brMove, brYoung:
		n := s.next("healthy")
		if err := s.st.KwokNode(ctx, n); err != nil {
			return nil, err
		}
		if err := s.st.WaitNodesReady(ctx, []string{n}, 60*time.Second); err != nil {
			return nil, err
		}
		return s.luks(ctx, b, n, n, b == brMove, nil)
	case brNotFound, brNoLease:
		return s.luks(ctx, b, s.next("gone"), s.carrier, false, nil)
	case brPlugin, brRegistered:
		sub := &subject{Branch: b, Node: pluginNode}
		if b == brPlugin {
			pod, err := s.deregister(ctx, pluginNode)
			if err != nil {
				return nil, err
			}
			sub.Pods = []string{stage.TridentNamespace + "/" + pod}
		}
		sub.RR = s.request(s.next(b.Name), v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReregisterCSIDriver,
			Target:      v1alpha1.Target{Node: pluginNode},
			Reason:      fmt.Sprintf("make chaos: driver name %s not found in the list of registered CSI drivers on %s", stage.DriverName, pluginNode),
		})
		return sub, nil
	}
	return nil, fmt.Errorf("unknown branch %s", b.Name)
}

// powerOn removes the out-of-service taint from a shut-down holder: its machine is
// back, so it is no longer proven down.
func (s *stager) powerOn(ctx context.Context, node string) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := s.h.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintOutOfService })
		_, err = s.h.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// heartbeat makes a cut-off holder's kubelet reach the API server again: it renews
// the node's Lease in kube-node-lease now, as a kubelet does every 10 s (the staged
// node has none: its kubelet was never heard from). With ready it also posts
// Ready=True with a fresh heartbeat, after which the node lifecycle controller
// lifts the unreachable taint. Either is a sign of life after the fencing
// statement.
func (s *stager) heartbeat(ctx context.Context, node string, ready bool) error {
	n, err := s.h.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.NowMicro()
	leases := s.h.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l, err := leases.Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Owned by the node, as the kubelet's is, so that it goes with the node.
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease, Labels: map[string]string{stage.Label: s.st.RunID},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("renewing the node Lease of %s: %w", node, err)
		}
	case err != nil:
		return err
	default:
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(node), &now
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("renewing the node Lease of %s: %w", node, err)
		}
	}
	if !ready {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := s.h.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		t := metav1.Now()
		cur.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: t, LastTransitionTime: t}}
		_, err = s.h.cs.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// pluginNodes are the local cluster's baseline nodes, which run trident-csi.
var pluginNodes = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"}

// deregister stages seed B on node: the driver is gone from its CSINode while its
// node-plugin pod keeps running, as kubelet leaves it after the DaemonSet's copy
// was deleted. The Trident simulator registers the driver again only when a new
// plugin pod on the node turns Ready, as kubelet's plugin watcher does. It returns
// the running plugin pod, which the playbook must restart.
func (s *stager) deregister(ctx context.Context, node string) (string, error) {
	pod, err := s.pluginPod(ctx, node, 60*time.Second)
	if err != nil {
		return "", err
	}
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cn, err := s.h.cs.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cn.Spec.Drivers = slices.DeleteFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == stage.DriverName })
		_, err = s.h.cs.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("deregistering %s on %s: %w", stage.DriverName, node, err)
	}
	return pod, nil
}

// restartPlugin deletes node's plugin pods (the harness's own call, not the
// controller's); the DaemonSet replaces them and the simulator registers the
// driver again once the new pod is Ready.
func (s *stager) restartPlugin(ctx context.Context, node string) error {
	err := s.h.cs.CoreV1().Pods(stage.TridentNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "app=node.csi.trident.netapp.io", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("restarting the plugin pod on %s: %w", node, err)
	}
	_, err = s.pluginPod(ctx, node, 90*time.Second)
	return err
}

// pluginPod waits for exactly one Ready node-plugin pod on node, and the driver
// registered there, and returns the pod's name.
func (s *stager) pluginPod(ctx context.Context, node string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		pods, err := s.h.cs.CoreV1().Pods(stage.TridentNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app=node.csi.trident.netapp.io", FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return "", err
		}
		var ready []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && podReady(p) {
				ready = append(ready, p.Name)
			}
		}
		registered := false
		if cn, err := s.h.cs.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			registered = slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == stage.DriverName })
		}
		if len(ready) == 1 && len(pods.Items) == 1 && registered {
			return ready[0], nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("node %s: %d plugin pods, %d Ready, driver registered %v after %s", node, len(pods.Items), len(ready), registered, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// node returns a node, for the checks at the end.
func (h *harness) node(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	err := h.k8s.Get(ctx, types.NamespacedName{Name: name}, n)
	return n, err
}
