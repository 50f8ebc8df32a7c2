//go:build e2e

package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
// t is the test, or the *assert.CollectT of a require.EventuallyWithT condition.
func simDrivers(t require.TestingT, node string) (drivers []string, ok bool) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	cn := &storagev1.CSINode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, cn); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false
		}
		require.NoError(t, err)
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
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, n := range simNodes {
			d, _ := simDrivers(c, n)
			assert.Equal(c, want, slices.Contains(d, simDriver), "%s registered on %s (drivers %v)", simDriver, n, d)
		}
	}, timeout, poll, "driver registered=%v on every node", want)
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
// t is the test, or the *assert.CollectT of a require.EventuallyWithT condition.
func simPluginPods(t require.TestingT, ds string) map[string][]corev1.Pod {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), pods, client.InNamespace(tridentNS),
		client.MatchingLabels{"app": simPodLabel}))
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
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		byNode := simPluginPods(c, ds)
		clear(uids)
		for _, n := range simNodes {
			require.Len(c, byNode[n], 1, "%s pods on %s", ds, n)
			require.True(c, simPodReady(&byNode[n][0]), "%s pod on %s is not Ready: %+v", ds, n, byNode[n][0].Status)
			uids[n] = byNode[n][0].UID
		}
	}, timeout, poll, "one Ready %s pod per node", ds)
	return uids
}

// simRestoreBaseline undoes the tests' damage the way the seed's fix does: once no other
// plugin pod overlaps, restart the node-plugin pods; their registrars register again.
func simRestoreBaseline(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	copyDS := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: simDS + "-2"}}
	if err := k8s.Delete(ctx, copyDS, client.PropagationPolicy(metav1.DeletePropagationForeground)); !apierrors.IsNotFound(err) {
		assert.NoError(t, err, "deleting %s", copyDS.Name)
	}
	waitCopyGone(t, copyDS.Name)
	assert.NoError(t, k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(tridentNS),
		client.MatchingLabels{"app": simPodLabel}), "restarting the node-plugin pods")
	simWaitPodsReady(t, simDS, 60*time.Second)
	simWaitRegistered(t, true, 30*time.Second)
	// The Ready real nodes' kubelets register the driver through the restarted pods.
	reals, _ := readyRealNodes(t, 0)
	waitRealBaseline(t, reals...)
}

// TestSimBaselineRegistered: every node's CSINode lists the driver, created like kubelet's.
func TestSimBaselineRegistered(t *testing.T) {
	simWaitRegistered(t, true, 60*time.Second)
	for _, n := range simNodes {
		cn := &storagev1.CSINode{}
		require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: n}, cn))
		node := &corev1.Node{}
		require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: n}, node))
		if assert.Len(t, cn.OwnerReferences, 1, "CSINode %s ownerReferences", n) {
			assert.Equal(t, "Node", cn.OwnerReferences[0].Kind, "CSINode %s owner", n)
			assert.Equal(t, node.UID, cn.OwnerReferences[0].UID, "CSINode %s owner", n)
		}
		i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == simDriver })
		require.GreaterOrEqual(t, i, 0, "CSINode %s lacks %s: %+v", n, simDriver, cn.Spec.Drivers)
		d := cn.Spec.Drivers[i]
		assert.Equal(t, n, d.NodeID, "CSINode %s driver nodeID", n)
		assert.Equal(t, []string{"topology.kubernetes.io/zone"}, d.TopologyKeys, "CSINode %s driver topologyKeys", n)
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
	require.Equal(t, original, simWaitPodsReady(t, simDS, 5*time.Second), "trident-csi pods changed while the copy started")
	// The copies' registrars registered too: still listed.
	simWaitRegistered(t, true, 10*time.Second)

	require.NoError(t, k8s.Delete(ctx, cp, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	start = time.Now()
	simWaitRegistered(t, false, 30*time.Second)
	t.Logf("every CSINode lost %s %s after deleting %s", simDriver, time.Since(start).Round(time.Millisecond), cp.Name)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, simPluginPods(c, cp.Name), "%s pods left of %v", cp.Name, copies)
	}, 30*time.Second, poll, "the copies' pods gone")
	// The bug: the original pods are still Running and Ready, and stay unregistered.
	time.Sleep(2 * time.Second)
	assert.Equal(t, original, simWaitPodsReady(t, simDS, 5*time.Second), "trident-csi pods: want the untouched originals")
	for _, n := range simNodes {
		d, _ := simDrivers(t, n)
		assert.NotContains(t, d, simDriver, "CSINode %s lists %s again; the running pod must not re-register", n, simDriver)
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
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: simDS}, ds))
	require.NoError(t, k8s.Delete(ctx, ds, client.PropagationPolicy(metav1.DeletePropagationForeground)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(ds), &appsv1.DaemonSet{})
		assert.True(c, apierrors.IsNotFound(err), "get %s: %v", simDS, err)
	}, 60*time.Second, poll, "%s gone", simDS)
	// Its pods terminated: their registrars removed the socket. (The simulator sees the pods
	// go through its own watch, a moment after the DaemonSet is gone.)
	simWaitRegistered(t, false, 10*time.Second)
	recreated := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: simDS, Labels: ds.Labels, Annotations: ds.Annotations},
		Spec:       *ds.Spec.DeepCopy(),
	}
	require.NoError(t, k8s.Create(ctx, recreated))
	fresh := simWaitPodsReady(t, simDS, 60*time.Second)
	for n, uid := range fresh {
		assert.NotEqual(t, original[n], uid, "pod on %s was not replaced", n)
	}
	simWaitRegistered(t, true, 30*time.Second)
}
