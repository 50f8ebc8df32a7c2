package facts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

func withHeartbeat(n *corev1.Node, at time.Time) *corev1.Node {
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(at)
	}
	return n
}

// written records a write by manager at the server's time at.
func written(l *coordinationv1.Lease, manager, subresource string, at time.Time) *coordinationv1.Lease {
	ts := metav1.NewTime(at)
	l.ManagedFields = append(l.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: subresource, Time: &ts})
	return l
}

// writtenNode records a status write of the Node by manager at the server's time at.
func writtenNode(n *corev1.Node, manager string, at time.Time) *corev1.Node {
	ts := metav1.NewTime(at)
	n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &ts})
	return n
}

func TestClassifyNode(t *testing.T) {
	now := time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)
	grace := 40 * time.Second
	node := func(ready corev1.ConditionStatus, taints ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(now.Add(-90 * time.Second)),
			}}
		}
		for _, k := range taints {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoExecute})
		}
		return n
	}
	lease := func(age time.Duration) *coordinationv1.Lease {
		renew := metav1.NewMicroTime(now.Add(-age))
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
	}
	cases := []struct {
		name  string
		node  *corev1.Node
		lease *coordinationv1.Lease
		want  v1alpha1.NodeState
	}{
		// A missing Node is not proof of a shutdown: the holderIdentity may be spelled
		// differently from the Node name, or the Node was deleted while its machine
		// still runs.
		{"node gone", nil, nil, v1alpha1.NodeNotFound},
		{"out-of-service and NotReady", node(corev1.ConditionFalse, v1alpha1.TaintOutOfService), lease(time.Hour), v1alpha1.NodeShutdown},
		{"cloud shutdown and Unknown", node(corev1.ConditionUnknown, v1alpha1.TaintCloudShutdown, v1alpha1.TaintUnreachable), lease(time.Hour), v1alpha1.NodeShutdown},
		{"shutdown taint but Ready", node(corev1.ConditionTrue, v1alpha1.TaintOutOfService), lease(time.Second), v1alpha1.NodeUnknown},
		// Issue 22: a kubelet that still renews its node Lease is running, whatever the
		// taint says (runtime or CNI down, a taint set by mistake): never a shutdown.
		{"out-of-service, NotReady, node Lease renewed seconds ago", node(corev1.ConditionFalse, v1alpha1.TaintOutOfService), lease(3 * time.Second), v1alpha1.NodeUnknown},
		{"out-of-service, NotReady, node Lease renewed exactly at grace", node(corev1.ConditionFalse, v1alpha1.TaintOutOfService), lease(grace), v1alpha1.NodeUnknown},
		{"out-of-service, NotReady, Ready heartbeat fresh, no node Lease", withHeartbeat(node(corev1.ConditionFalse, v1alpha1.TaintOutOfService), now.Add(-5*time.Second)), nil, v1alpha1.NodeUnknown},
		{"out-of-service, NotReady, Ready heartbeat fresh, node Lease stale", withHeartbeat(node(corev1.ConditionFalse, v1alpha1.TaintOutOfService), now.Add(-5*time.Second)), lease(time.Hour), v1alpha1.NodeUnknown},
		{"out-of-service, NotReady, both heartbeats stale", withHeartbeat(node(corev1.ConditionFalse, v1alpha1.TaintOutOfService), now.Add(-time.Hour)), lease(time.Hour), v1alpha1.NodeShutdown},
		{"out-of-service, never reported", node("", v1alpha1.TaintOutOfService), nil, v1alpha1.NodeShutdown},
		// A Node deleted while its machine runs: the kubelet still renews its Lease.
		{"node gone, node Lease renewed seconds ago", nil, lease(3 * time.Second), v1alpha1.NodeUnknown},
		{"node gone, node Lease stale", nil, lease(time.Hour), v1alpha1.NodeNotFound},
		// Server time: a kubelet whose clock runs an hour slow writes an old renewTime,
		// but the API server stamps its write now (managedFields).
		{"out-of-service, NotReady, slow kubelet clock, renewed now by server time", node(corev1.ConditionFalse, v1alpha1.TaintOutOfService), written(lease(time.Hour), "kubelet", "", now), v1alpha1.NodeUnknown},
		{"out-of-service, NotReady, kubelet posted status now by server time", writtenNode(withHeartbeat(node(corev1.ConditionFalse, v1alpha1.TaintOutOfService), now.Add(-time.Hour)), "kubelet", now), lease(time.Hour), v1alpha1.NodeUnknown},
		// kube-controller-manager writes the status of a silent node: no sign of life.
		{"out-of-service, Unknown, only the controller-manager wrote status now", writtenNode(withHeartbeat(node(corev1.ConditionUnknown, v1alpha1.TaintOutOfService), now.Add(-time.Hour)), "kube-controller-manager", now), lease(time.Hour), v1alpha1.NodeShutdown},
		{"Ready Unknown", node(corev1.ConditionUnknown), lease(time.Second), v1alpha1.NodeUnreachable},
		{"unreachable taint only", node(corev1.ConditionTrue, v1alpha1.TaintUnreachable), lease(time.Second), v1alpha1.NodeUnreachable},
		{"stale node lease", node(corev1.ConditionTrue), lease(grace + time.Second), v1alpha1.NodeUnreachable},
		{"lease exactly at grace is fresh", node(corev1.ConditionTrue), lease(grace), v1alpha1.NodeHealthy},
		{"healthy", node(corev1.ConditionTrue), lease(2 * time.Second), v1alpha1.NodeHealthy},
		{"Ready without node lease", node(corev1.ConditionTrue), nil, v1alpha1.NodeUnknown},
		{"kubelet reports NotReady", node(corev1.ConditionFalse), lease(time.Second), v1alpha1.NodeUnknown},
		{"no Ready condition", node(""), lease(time.Second), v1alpha1.NodeUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ClassifyNode("n", tc.node, tc.lease, now, grace)
			require.Equal(t, tc.want, got.State, "state (%s)", got.StateReason)
			assert.NotEmpty(t, got.StateReason, "state has no evidence")
			assert.Equal(t, tc.node != nil, got.Exists, "exists")
		})
	}
}

// TestClassifyNodeNotFound: the reason for a missing Node tells the operator what to
// check, because NotFound is usually a name mismatch or a deleted Node object, not a
// dead machine.
func TestClassifyNodeNotFound(t *testing.T) {
	now := time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)
	got := ClassifyNode("kwok-node-2.example.internal", nil, nil, now, 40*time.Second)
	require.Equal(t, v1alpha1.NodeNotFound, got.State, "facts = %+v", got)
	require.False(t, got.Exists, "facts = %+v", got)
	require.Equal(t, "kwok-node-2.example.internal", got.Name, "facts = %+v", got)
	want := "no Node is named kwok-node-2.example.internal: check the holderIdentity's spelling against kubectl get nodes " +
		"(an FQDN versus a short name), and whether the machine is really gone or only its Node object was deleted"
	assert.Equal(t, want, got.StateReason, "reason")
	assert.Equal(t, int64(-1), got.LeaseRenewAgeSeconds, "a missing Node has no evidence fields: %+v", got)
	assert.Empty(t, got.Ready, "a missing Node has no evidence fields: %+v", got)
	assert.Empty(t, got.Taints, "a missing Node has no evidence fields: %+v", got)
}

func TestClassifyNodeEvidence(t *testing.T) {
	now := time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)
	n := &corev1.Node{
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: v1alpha1.TaintUnreachable, Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/other"},
			{Key: v1alpha1.TaintUnreachable, Effect: corev1.TaintEffectNoExecute},
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(now.Add(-75 * time.Second)),
		}}},
	}
	renew := metav1.NewMicroTime(now.Add(-80 * time.Second))
	got := ClassifyNode("kwok-node-2", n, &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}, now, 40*time.Second)
	want := "Ready=Unknown for 1m15s; taints node.kubernetes.io/unreachable; node Lease renewed 1m20s ago (grace 40s)"
	assert.Equal(t, want, got.StateReason, "reason")
	assert.Equal(t, int64(75), got.ReadyAgeSeconds, "evidence fields: %+v", got)
	assert.Equal(t, int64(80), got.LeaseRenewAgeSeconds, "evidence fields: %+v", got)
	assert.True(t, got.Unschedulable, "evidence fields: %+v", got)
	assert.Len(t, got.Taints, 1, "taints, want only the unreachable key once")
}

// TestHeartbeatGraceNeverBelowTheNodeLease: a grace set far too short (a flag, or a
// settings ConfigMap written by someone who may write ConfigMaps) must not make a
// kubelet that renews its node Lease on time look silent. The node Lease's own
// leaseDurationSeconds is the least grace a heartbeat is judged on, when the node
// itself holds it; a Lease someone else took over says nothing about the kubelet.
func TestHeartbeatGraceNeverBelowTheNodeLease(t *testing.T) {
	now := time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)
	tainted := func(ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Effect: corev1.TaintEffectNoExecute}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready,
				LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}}}}
	}
	nodeLease := func(holder string, duration int32, age time.Duration) *coordinationv1.Lease {
		renew := metav1.NewMicroTime(now.Add(-age))
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, RenewTime: &renew}}
	}
	cases := []struct {
		name      string
		node      *corev1.Node
		lease     *coordinationv1.Lease
		grace     time.Duration
		want      v1alpha1.NodeState
		wantGrace int64
	}{
		{"1ms grace, kubelet renewed 10s ago within its 40s Lease", tainted(corev1.ConditionUnknown), nodeLease("node-2", 40, 10*time.Second), time.Millisecond, v1alpha1.NodeUnknown, 40},
		{"1ms grace, Ready=True, renewed 10s ago: healthy, not unreachable", nil, nodeLease("node-2", 40, 10*time.Second), time.Millisecond, v1alpha1.NodeHealthy, 40},
		{"1ms grace, renewal 41s old: past the Lease's duration", tainted(corev1.ConditionUnknown), nodeLease("node-2", 40, 41*time.Second), time.Millisecond, v1alpha1.NodeShutdown, 40},
		{"a longer configured grace stands", tainted(corev1.ConditionUnknown), nodeLease("node-2", 10, 30*time.Second), 50 * time.Second, v1alpha1.NodeUnknown, 50},
		{"a Lease taken over by someone else gives no duration", tainted(corev1.ConditionUnknown), nodeLease("remediator-test/disconnected", 86400, 30*time.Second), 20 * time.Second, v1alpha1.NodeShutdown, 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := tc.node
			if node == nil {
				node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
					Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}}}
			}
			got := ClassifyNode("node-2", node, tc.lease, now, tc.grace)
			require.Equal(t, tc.want, got.State, "state (%s)", got.StateReason)
			assert.Equal(t, tc.wantGrace, got.HeartbeatGraceSeconds, "the grace the heartbeat was judged on")
		})
	}
}

// TestClassifyNodeSettles: a shutdown taint on a node whose kubelet's last heartbeat
// is still within its grace is Unknown, but only until the grace runs out: the facts
// say when the evidence settles, so the request waits for it instead of being
// rejected for good. Evidence that time does not settle carries no such time.
func TestClassifyNodeSettles(t *testing.T) {
	now := time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)
	grace := 50 * time.Second
	node := func(ready corev1.ConditionStatus, hb time.Time, taints ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready,
			LastTransitionTime: metav1.NewTime(now.Add(-time.Hour)), LastHeartbeatTime: metav1.NewTime(hb)}}
		for _, k := range taints {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoExecute})
		}
		return n
	}
	cases := []struct {
		name        string
		node        *corev1.Node
		wantState   v1alpha1.NodeState
		wantSettles time.Duration // from now; 0: does not settle
	}{
		{"tainted, Unknown, heartbeat 20s old: settles when the grace runs out", node(corev1.ConditionUnknown, now.Add(-20*time.Second), v1alpha1.TaintOutOfService), v1alpha1.NodeUnknown, 33 * time.Second},
		{"tainted, Ready=True, heartbeat 20s old: settles as well", node(corev1.ConditionTrue, now.Add(-20*time.Second), v1alpha1.TaintOutOfService), v1alpha1.NodeUnknown, 33 * time.Second},
		{"tainted, Ready=True, heartbeat stale: the node controller has yet to mark it", node(corev1.ConditionTrue, now.Add(-60*time.Second), v1alpha1.TaintOutOfService), v1alpha1.NodeUnknown, 10 * time.Second},
		{"tainted, Ready=True, heartbeat stale for two graces: does not settle", node(corev1.ConditionTrue, now.Add(-101*time.Second), v1alpha1.TaintOutOfService), v1alpha1.NodeUnknown, 0},
		{"tainted, heartbeat stale: shut down", node(corev1.ConditionUnknown, now.Add(-time.Hour), v1alpha1.TaintOutOfService), v1alpha1.NodeShutdown, 0},
		{"no taint, NotReady, fresh heartbeat: nothing to settle", node(corev1.ConditionFalse, now.Add(-5*time.Second)), v1alpha1.NodeUnknown, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ClassifyNode("n", tc.node, nil, now, grace)
			require.Equal(t, tc.wantState, got.State, "state (%s)", got.StateReason)
			if tc.wantSettles == 0 {
				assert.Nil(t, got.SettlesAt, "settles")
				assert.Zero(t, got.SettlesInSeconds)
				return
			}
			require.NotNil(t, got.SettlesAt, "settles (%s)", got.StateReason)
			assert.Equal(t, now.Add(tc.wantSettles), got.SettlesAt.Time)
			assert.Equal(t, int64(tc.wantSettles/time.Second), got.SettlesInSeconds)
			assert.Contains(t, got.StateReason, "settles at "+now.Add(tc.wantSettles).Format(time.RFC3339))
		})
	}
}

// TestUnsettled: the decision waited on a tainted node's last heartbeat; if the
// kubelet renewed after that decision, the contradiction is one time does not settle.
// A heartbeat from before it, seen only later, is not a renewal since the wait.
func TestUnsettled(t *testing.T) {
	now := time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)
	tainted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
			LastTransitionTime: metav1.NewTime(now.Add(-time.Hour)), LastHeartbeatTime: metav1.NewTime(now.Add(-5 * time.Second))}}}}
	// prevAt: the facts of a decision that gathered `ago` before now and saw the
	// heartbeat `hb` before now.
	prevAt := func(ago, hb time.Duration) *v1alpha1.Facts {
		p := ClassifyNode("n", withHeartbeat(tainted.DeepCopy(), now.Add(-hb)), nil, now.Add(-ago), 50*time.Second)
		require.NotNil(t, p.SettlesAt)
		return &v1alpha1.Facts{GatheredAt: metav1.NewTime(now.Add(-ago)), Node: &p}
	}
	for _, tc := range []struct {
		name    string
		prev    *v1alpha1.Facts
		settles bool
	}{
		{"first decision", nil, true},
		{"same heartbeat as the last decision", prevAt(4*time.Second, 5*time.Second), true},
		{"renewed since the last decision", prevAt(time.Minute, 65*time.Second), false},
		{"renewed within a second of the last decision", prevAt(5500*time.Millisecond, 15*time.Second), true},
		// The kubelet's last heartbeat was written 2s before the last decision, which
		// read a cache that had not seen it yet (the one before, 10s older).
		{"a heartbeat from before the last decision, seen late", prevAt(3*time.Second, 15*time.Second), true},
		// The decision's gatheredAt reads the server's clock low: the heartbeat it saw
		// can look later than it.
		{"the heartbeat the last decision saw, its clock read low", prevAt(6400*time.Millisecond, 5*time.Second), true},
		{"the last decision did not wait", &v1alpha1.Facts{GatheredAt: metav1.NewTime(now.Add(-time.Minute)),
			Node: &v1alpha1.NodeFacts{Name: "n", LastHeartbeat: &metav1.Time{Time: now.Add(-65 * time.Second)}}}, true},
		{"another node", func() *v1alpha1.Facts { p := prevAt(time.Minute, 65*time.Second); p.Node.Name = "m"; return p }(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nf := ClassifyNode("n", tainted.DeepCopy(), nil, now, 50*time.Second)
			require.NotNil(t, nf.SettlesAt)
			Unsettled(&nf, tc.prev)
			assert.Equal(t, v1alpha1.NodeUnknown, nf.State)
			if tc.settles {
				assert.NotNil(t, nf.SettlesAt, nf.StateReason)
				assert.Contains(t, nf.StateReason, "settles at")
				return
			}
			assert.Nil(t, nf.SettlesAt)
			assert.Zero(t, nf.SettlesInSeconds)
			assert.Contains(t, nf.StateReason, "the kubelet runs")
			assert.NotContains(t, nf.StateReason, "settles at")
		})
	}
}
