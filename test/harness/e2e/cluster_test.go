//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/test/cluster"
)

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestClusterBaseline checks what `make cluster` promises: 3 Ready nodes, the
// trident-csi DaemonSet with a ready pod on each, and the CRD installed.
func TestClusterBaseline(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"} {
		n := &corev1.Node{}
		require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: name}, n))
		assert.True(t, nodeReady(n), "node %s is not Ready: %+v", name, n.Status.Conditions)
	}
	ds := &appsv1.DaemonSet{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: "trident", Name: "trident-csi"}, ds))
	assert.GreaterOrEqual(t, ds.Status.NumberReady, int32(3), "trident-csi ready pods, want 3")
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(ctx, pods, client.InNamespace("trident"), client.MatchingLabels{"app": "node.csi.trident.netapp.io"}))
	perNode := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			perNode[p.Spec.NodeName]++
		}
	}
	for _, name := range []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"} {
		assert.Equal(t, 1, perNode[name], "node %s: running node-plugin pods", name)
	}
}

// TestDisconnectMakesNodeUnreachable checks that cutting a node's heartbeats makes
// the real kube-controller-manager mark it unreachable, and that Reconnect restores it.
func TestDisconnectMakesNodeUnreachable(t *testing.T) {
	// Its own kwok node, so that it waits out the node grace in parallel with the other
	// tests that mostly wait (make test's budget), and no shared node goes dark.
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(cfg)
	name := extraNode(t, "e2e-disconnect", true)
	unreachable := func(n *corev1.Node) bool {
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeUnreachable && !nodeReady(n) {
				return true
			}
		}
		return false
	}
	nodeState := func(cond func(*corev1.Node) bool) func(*assert.CollectT) {
		return func(c *assert.CollectT) {
			n := &corev1.Node{}
			require.NoError(c, k8s.Get(ctx, types.NamespacedName{Name: name}, n))
			assert.True(c, cond(n), "node %s: conditions %+v taints %+v", name, n.Status.Conditions, n.Spec.Taints)
		}
	}
	require.EventuallyWithT(t, nodeState(nodeReady), 60*time.Second, poll, "%s Ready", name)
	require.NoError(t, cluster.Disconnect(ctx, cs, name))
	t.Cleanup(func() { _ = cluster.Reconnect(context.Background(), cs, name) })
	start := time.Now()
	require.EventuallyWithT(t, nodeState(unreachable), 90*time.Second, poll, "%s unreachable", name)
	t.Logf("unreachable after %s", time.Since(start).Round(100*time.Millisecond))
	require.NoError(t, cluster.Reconnect(ctx, cs, name))
	require.EventuallyWithT(t, nodeState(func(n *corev1.Node) bool {
		return nodeReady(n) && !unreachable(n)
	}), 60*time.Second, poll, "%s Ready again", name)
}
