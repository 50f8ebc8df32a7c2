//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Trident simulator (test/sim, started by test/cluster/up.sh) plays kubelet's plugin
// registration for the trident-csi DaemonSet. These tests reproduce seed B with the real
// DaemonSet controller and check the baseline the other tests rely on.

const (
	simDriver   = "csi.trident.netapp.io"
	simDS       = "trident-csi"
	simPodLabel = "node.csi.trident.netapp.io"
)

var simNodes = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"}

// simDrivers returns the drivers node's CSINode lists; ok is false without a CSINode.
func simDrivers(t *testing.T, node string) (drivers []string, ok bool) {
	t.Helper()
	cn := &storagev1.CSINode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, cn); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false
		}
		t.Fatal(err)
	}
	for _, d := range cn.Spec.Drivers {
		drivers = append(drivers, d.Name)
	}
	return drivers, true
}

// simWaitRegistered waits until every baseline node's CSINode lists the driver (want) or
// lacks it (!want).
func simWaitRegistered(t *testing.T, want bool, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("driver registered=%v on every node", want), func() (bool, string) {
		var state []string
		done := true
		for _, n := range simNodes {
			d, _ := simDrivers(t, n)
			state = append(state, fmt.Sprintf("%s:%v", n, d))
			done = done && slices.Contains(d, simDriver) == want
		}
		return done, strings.Join(state, " ")
	})
}

func simPodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// simPluginPods returns the node-plugin pods controlled by the DaemonSet named ds, by node.
func simPluginPods(t *testing.T, ds string) map[string][]corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(tridentNS),
		client.MatchingLabels{"app": simPodLabel}); err != nil {
		t.Fatal(err)
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" && ref.Name == ds {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	return byNode
}

// simWaitPodsReady waits until ds runs exactly one Ready pod on every baseline node and returns
// their UIDs by node.
func simWaitPodsReady(t *testing.T, ds string, timeout time.Duration) map[string]types.UID {
	t.Helper()
	uids := map[string]types.UID{}
	eventually(t, timeout, "one Ready "+ds+" pod per node", func() (bool, string) {
		byNode := simPluginPods(t, ds)
		clear(uids)
		for _, n := range simNodes {
			if len(byNode[n]) != 1 || !simPodReady(&byNode[n][0]) {
				return false, fmt.Sprintf("%s pods on %s: %d", ds, n, len(byNode[n]))
			}
			uids[n] = byNode[n][0].UID
		}
		return true, ""
	})
	return uids
}

// simRestoreBaseline undoes the tests' damage the way the seed's fix does: once no other
// plugin pod overlaps, restart the node-plugin pods; their registrars register again.
func simRestoreBaseline(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	copyDS := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: simDS + "-2"}}
	if err := k8s.Delete(ctx, copyDS, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %s: %v", copyDS.Name, err)
	}
	eventually(t, 60*time.Second, "no "+copyDS.Name+" pods", func() (bool, string) {
		n := len(simPluginPods(t, copyDS.Name))
		return n == 0, fmt.Sprintf("pods on %d nodes", n)
	})
	if err := k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(tridentNS),
		client.MatchingLabels{"app": simPodLabel}); err != nil {
		t.Errorf("restarting the node-plugin pods: %v", err)
	}
	simWaitPodsReady(t, simDS, 60*time.Second)
	simWaitRegistered(t, true, 30*time.Second)
}

// TestSimBaselineRegistered: every node's CSINode lists the driver, created like kubelet's.
func TestSimBaselineRegistered(t *testing.T) {
	simWaitRegistered(t, true, 60*time.Second)
	for _, n := range simNodes {
		cn := &storagev1.CSINode{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: n}, cn); err != nil {
			t.Fatal(err)
		}
		node := &corev1.Node{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: n}, node); err != nil {
			t.Fatal(err)
		}
		if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].Kind != "Node" || cn.OwnerReferences[0].UID != node.UID {
			t.Errorf("CSINode %s ownerReferences = %+v", n, cn.OwnerReferences)
		}
		i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == simDriver })
		if d := cn.Spec.Drivers[i]; d.NodeID != n || !slices.Equal(d.TopologyKeys, []string{"topology.kubernetes.io/zone"}) {
			t.Errorf("CSINode %s driver = %+v", n, d)
		}
	}
}

// TestSimCopiedDaemonSetDeregistersDriver reproduces seed B as reported: copy trident-csi as
// trident-csi-2, wait until it runs, delete the copy. Every node loses the driver while its
// trident-csi pod keeps running and Ready.
func TestSimCopiedDaemonSetDeregistersDriver(t *testing.T) {
	ctx := context.Background()
	simWaitRegistered(t, true, 60*time.Second)
	original := simWaitPodsReady(t, simDS, 60*time.Second)
	t.Cleanup(func() { simRestoreBaseline(t) })

	// The same selector and template under another name (copyPluginDaemonSet).
	cp := copyPluginDaemonSet(t)
	// The DaemonSet controller does not adopt pods another DaemonSet controls, so despite the
	// overlapping selector the copy runs pods of its own next to the originals.
	start := time.Now()
	copies := simWaitPodsReady(t, cp.Name, 60*time.Second)
	t.Logf("%s ran a Ready pod on every node after %s", cp.Name, time.Since(start).Round(time.Millisecond))
	if now := simWaitPodsReady(t, simDS, 5*time.Second); !reflect.DeepEqual(now, original) {
		t.Fatalf("trident-csi pods changed while the copy started: %v, were %v", now, original)
	}
	// The copies' registrars registered too: still listed.
	simWaitRegistered(t, true, 10*time.Second)

	if err := k8s.Delete(ctx, cp, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	simWaitRegistered(t, false, 30*time.Second)
	t.Logf("every CSINode lost %s %s after deleting %s", simDriver, time.Since(start).Round(time.Millisecond), cp.Name)
	eventually(t, 30*time.Second, "the copies' pods gone", func() (bool, string) {
		byNode := simPluginPods(t, cp.Name)
		return len(byNode) == 0, fmt.Sprintf("%d left of %v", len(byNode), copies)
	})
	// The bug: the original pods are still Running and Ready, and stay unregistered.
	time.Sleep(2 * time.Second)
	if now := simWaitPodsReady(t, simDS, 5*time.Second); !reflect.DeepEqual(now, original) {
		t.Errorf("trident-csi pods = %v, want the untouched originals %v", now, original)
	}
	for _, n := range simNodes {
		if d, _ := simDrivers(t, n); slices.Contains(d, simDriver) {
			t.Errorf("CSINode %s lists %s again (%v); the running pod must not re-register", n, simDriver, d)
		}
	}
}

// TestSimRecreatedDaemonSetWithoutOverlap deletes trident-csi the way the fixed operator does
// (foreground, waiting until its pods are gone) and recreates it: with no overlap, the new
// pods register and every node lists the driver again.
func TestSimRecreatedDaemonSetWithoutOverlap(t *testing.T) {
	ctx := context.Background()
	simWaitRegistered(t, true, 60*time.Second)
	original := simWaitPodsReady(t, simDS, 60*time.Second)
	t.Cleanup(func() { simRestoreBaseline(t) })

	ds := &appsv1.DaemonSet{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: simDS}, ds); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, ds, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, simDS+" gone", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(ds), &appsv1.DaemonSet{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// Its pods terminated: their registrars removed the socket. (The simulator sees the pods
	// go through its own watch, a moment after the DaemonSet is gone.)
	simWaitRegistered(t, false, 10*time.Second)
	recreated := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: simDS, Labels: ds.Labels, Annotations: ds.Annotations},
		Spec:       *ds.Spec.DeepCopy(),
	}
	if err := k8s.Create(ctx, recreated); err != nil {
		t.Fatal(err)
	}
	fresh := simWaitPodsReady(t, simDS, 60*time.Second)
	for n, uid := range fresh {
		if uid == original[n] {
			t.Errorf("pod on %s was not replaced", n)
		}
	}
	simWaitRegistered(t, true, 30*time.Second)
}
