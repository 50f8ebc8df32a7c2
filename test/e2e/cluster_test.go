//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

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
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			t.Fatal(err)
		}
		if !nodeReady(n) {
			t.Errorf("node %s is not Ready: %+v", name, n.Status.Conditions)
		}
	}
	ds := &appsv1.DaemonSet{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: "trident", Name: "trident-csi"}, ds); err != nil {
		t.Fatal(err)
	}
	if ds.Status.NumberReady < 3 {
		t.Errorf("trident-csi has %d ready pods, want 3", ds.Status.NumberReady)
	}
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace("trident"), client.MatchingLabels{"app": "node.csi.trident.netapp.io"}); err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			perNode[p.Spec.NodeName]++
		}
	}
	for _, name := range []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"} {
		if perNode[name] != 1 {
			t.Errorf("node %s runs %d node-plugin pods, want 1", name, perNode[name])
		}
	}
}

// TestDisconnectMakesNodeUnreachable checks that cutting a node's heartbeats makes
// the real kube-controller-manager mark it unreachable, and that Reconnect restores it.
func TestDisconnectMakesNodeUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	const name = "kwok-node-2"
	unreachable := func(n *corev1.Node) bool {
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeUnreachable && !nodeReady(n) {
				return true
			}
		}
		return false
	}
	nodeState := func(cond func(*corev1.Node) bool) func() (bool, string) {
		return func() (bool, string) {
			n := &corev1.Node{}
			if err := k8s.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
				return false, err.Error()
			}
			return cond(n), ""
		}
	}
	if err := cluster.Disconnect(ctx, cs, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Reconnect(context.Background(), cs, name) })
	start := time.Now()
	eventually(t, 90*time.Second, name+" unreachable", nodeState(unreachable))
	t.Logf("unreachable after %s", time.Since(start).Round(100*time.Millisecond))
	if err := cluster.Reconnect(ctx, cs, name); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, name+" Ready again", nodeState(func(n *corev1.Node) bool {
		return nodeReady(n) && !unreachable(n)
	}))
}
