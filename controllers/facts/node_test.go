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
