package registrar

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

const driver = "csi.trident.netapp.io"

// Pod states on node n1, named after the DaemonSet they belong to.
var (
	oldStarting = Pod{UID: "old", Name: "trident/trident-csi-a", Node: "n1"}
	oldRunning  = Pod{UID: "old", Name: "trident/trident-csi-a", Node: "n1", Running: true}
	oldReady    = Pod{UID: "old", Name: "trident/trident-csi-a", Node: "n1", Running: true, Ready: true}
	oldTerm     = Pod{UID: "old", Name: "trident/trident-csi-a", Node: "n1", Running: true, Terminating: true}
	newReady    = Pod{UID: "new", Name: "trident/trident-csi-2-b", Node: "n1", Running: true, Ready: true}
	newTerm     = Pod{UID: "new", Name: "trident/trident-csi-2-b", Node: "n1", Running: true, Terminating: true}
	pending     = Pod{UID: "pending", Name: "trident/trident-csi-c"}
	pendingTerm = Pod{UID: "pending", Name: "trident/trident-csi-c", Terminating: true}
	otherReady  = Pod{UID: "other", Name: "trident/trident-csi-d", Node: "n2", Running: true, Ready: true}
)

type op int

const (
	observe op = iota
	initial    // observed in the informer's initial list
	forget     // deleted
)

type step struct {
	op  op
	pod Pod
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
}

func csiNode(name string, drivers ...string) *storagev1.CSINode {
	cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, d := range drivers {
		cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name})
	}
	return cn
}

// drivers returns the driver names on node's CSINode, or nil if it does not exist.
// t is a *testing.T, or an *assert.CollectT inside EventuallyWithT.
func drivers(t require.TestingT, s *Syncer, node string) []string {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	cn, err := s.Client.StorageV1().CSINodes().Get(context.Background(), node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(t, err)
	names := []string{}
	for _, d := range cn.Spec.Drivers {
		names = append(names, d.Name)
	}
	return names
}

// TestRegistration feeds pod events through a Tracker and a Syncer on a fake clientset, syncing
// each affected node after every event as the simulator's queue does, and checks the CSINodes.
func TestRegistration(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing []runtime.Object // besides Nodes n1 and n2
		steps    []step
		want     map[string][]string // node -> drivers; nil: no CSINode
		intents  []Intent            // emitted, in order
	}{{
		name:    "pod becomes Ready: CSINode created with the driver",
		steps:   []step{{observe, oldStarting}, {observe, oldRunning}, {observe, oldReady}},
		want:    map[string][]string{"n1": {driver}, "n2": nil},
		intents: []Intent{IntentRegister},
	}, {
		name:     "existing CSINode gains the driver next to others",
		existing: []runtime.Object{csiNode("n1", "other.csi.example.com")},
		steps:    []step{{observe, oldReady}},
		want:     map[string][]string{"n1": {"other.csi.example.com", driver}},
		intents:  []Intent{IntentRegister},
	}, {
		name:    "the only pod terminates: driver removed",
		steps:   []step{{observe, oldReady}, {observe, oldTerm}, {forget, oldTerm}},
		want:    map[string][]string{"n1": {}},
		intents: []Intent{IntentRegister, IntentDeregister},
	}, {
		name:     "other drivers survive a deregistration",
		existing: []runtime.Object{csiNode("n1", driver, "other.csi.example.com")},
		steps:    []step{{initial, oldReady}, {forget, oldReady}},
		want:     map[string][]string{"n1": {"other.csi.example.com"}},
		intents:  []Intent{IntentAdopt, IntentDeregister},
	}, {
		name: "seed B: copy's pod registers, copy deleted, driver gone while old pod runs",
		steps: []step{
			{observe, oldReady}, {observe, newReady},
			{observe, newTerm}, {forget, newTerm},
			// Later updates of the still-running old pod must not re-register it.
			{observe, oldReady},
		},
		want:    map[string][]string{"n1": {}},
		intents: []Intent{IntentRegister, IntentRegister, IntentDeregister},
	}, {
		name: "seed B, recreated DaemonSet: old pod terminates after the new one registered",
		steps: []step{
			{observe, oldReady}, {observe, newReady}, {observe, oldTerm}, {forget, oldTerm},
			{observe, newReady},
		},
		want:    map[string][]string{"n1": {}},
		intents: []Intent{IntentRegister, IntentRegister, IntentDeregister},
	}, {
		name: "fix: restarting the plugin pod once it no longer overlaps re-registers",
		steps: []step{
			{observe, oldReady}, {observe, newReady}, {forget, newTerm},
			{forget, oldReady}, // the remediation deletes the old pod
			{observe, Pod{UID: "fresh", Name: "trident/trident-csi-e", Node: "n1", Running: true, Ready: true}},
		},
		want:    map[string][]string{"n1": {driver}},
		intents: []Intent{IntentRegister, IntentRegister, IntentDeregister, IntentDeregister, IntentRegister},
	}, {
		name:    "delete without a terminating update (grace period 0) deregisters once",
		steps:   []step{{observe, oldReady}, {forget, oldReady}, {forget, oldReady}},
		want:    map[string][]string{"n1": {}},
		intents: []Intent{IntentRegister, IntentDeregister},
	}, {
		name:    "terminating update and delete deregister once",
		steps:   []step{{observe, oldReady}, {observe, oldTerm}, {observe, oldTerm}, {forget, oldTerm}},
		want:    map[string][]string{"n1": {}},
		intents: []Intent{IntentRegister, IntentDeregister},
	}, {
		name:     "a pod whose registrar never ran removes nothing",
		existing: []runtime.Object{csiNode("n1", driver)},
		steps: []step{
			{initial, oldReady}, {observe, pending}, {observe, pendingTerm}, {forget, pendingTerm},
			{observe, Pod{UID: "sched", Name: "trident/trident-csi-f", Node: "n1"}},
			{forget, Pod{UID: "sched", Name: "trident/trident-csi-f", Node: "n1"}},
		},
		want:    map[string][]string{"n1": {driver}},
		intents: []Intent{IntentAdopt},
	}, {
		name:    "Ready again after not Ready registers again",
		steps:   []step{{observe, oldReady}, {observe, oldRunning}, {observe, oldReady}},
		want:    map[string][]string{"n1": {driver}},
		intents: []Intent{IntentRegister, IntentRegister},
	}, {
		name:    "a terminating pod never registers",
		steps:   []step{{observe, Pod{UID: "old", Name: "trident/trident-csi-a", Node: "n1", Running: true, Ready: true, Terminating: true}}},
		want:    map[string][]string{"n1": nil},
		intents: []Intent{IntentDeregister},
	}, {
		name:    "restart of the simulator: Ready pods create missing CSINodes",
		steps:   []step{{initial, oldReady}, {initial, otherReady}},
		want:    map[string][]string{"n1": {driver}, "n2": {driver}},
		intents: []Intent{IntentAdopt, IntentAdopt},
	}, {
		name:     "restart of the simulator does not heal the bug",
		existing: []runtime.Object{csiNode("n1")},
		steps:    []step{{initial, oldReady}, {observe, oldReady}},
		want:     map[string][]string{"n1": {}},
		intents:  []Intent{IntentAdopt},
	}, {
		name:     "initial list: a terminating pod wins over a Ready one",
		existing: []runtime.Object{csiNode("n1", driver)},
		steps:    []step{{initial, oldTerm}, {initial, newReady}},
		want:     map[string][]string{"n1": {}},
		intents:  []Intent{IntentDeregister, IntentAdopt},
	}, {
		name:    "pods on other nodes do not interfere",
		steps:   []step{{observe, oldReady}, {observe, otherReady}, {forget, oldReady}},
		want:    map[string][]string{"n1": {}, "n2": {driver}},
		intents: []Intent{IntentRegister, IntentRegister, IntentDeregister},
	}, {
		name:    "no CSINode for a Node that does not exist",
		steps:   []step{{observe, Pod{UID: "x", Name: "trident/x", Node: "gone", Running: true, Ready: true}}},
		want:    map[string][]string{"gone": nil},
		intents: []Intent{IntentRegister},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cs := fake.NewClientset(append([]runtime.Object{node("n1"), node("n2")}, tc.existing...)...)
			s := &Syncer{Client: cs, Driver: driver}
			tr := NewTracker()
			var got []Intent
			for _, st := range tc.steps {
				var ts []Transition
				switch st.op {
				case observe, initial:
					ts = tr.Observe(st.pod, st.op == initial)
				case forget:
					ts = tr.Forget(st.pod)
				}
				for _, x := range ts {
					got = append(got, x.Intent)
					_, err := s.Sync(ctx, x.Node, tr.Intent(x.Node))
					require.NoError(t, err)
				}
			}
			assert.Equal(t, tc.intents, got, "intents")
			for n, want := range tc.want {
				// Equal tells nil (no CSINode) from empty (a CSINode without drivers).
				assert.Equal(t, want, drivers(t, s, n), "CSINode %s drivers", n)
			}
		})
	}
}

func TestCreatedCSINodeLooksLikeKubelets(t *testing.T) {
	cs := fake.NewClientset(node("n1"))
	s := &Syncer{Client: cs, Driver: driver}
	changed, err := s.Sync(context.Background(), "n1", IntentRegister)
	require.NoError(t, err)
	require.True(t, changed, "the first Sync changed nothing")
	cn, err := cs.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "uid-n1"}}
	assert.Equal(t, want, cn.OwnerReferences, "ownerReferences")
	d := cn.Spec.Drivers
	if assert.Len(t, d, 1, "drivers") {
		assert.Equal(t, driver, d[0].Name, "driver name")
		assert.Equal(t, "n1", d[0].NodeID, "driver nodeID")
		assert.Equal(t, []string{"topology.kubernetes.io/zone"}, d[0].TopologyKeys, "driver topologyKeys")
	}
	// Syncing an intent that already holds writes nothing.
	changed, err = s.Sync(context.Background(), "n1", IntentRegister)
	assert.NoError(t, err, "second Sync")
	assert.False(t, changed, "second Sync changed something")
}

// podWatchOpened returns a channel closed once an informer has opened its watch of pods on cs.
// The fake clientset's watch does not resume from the list's resourceVersion, so an object
// created between the informer's list and its watch is never seen (client-go's own
// fake-client example waits the same way); a fixed sleep was not enough under CI load
// (TestRunLeavesRealNodesAlone missed the kwok node's pod).
func podWatchOpened(cs *fake.Clientset) <-chan struct{} {
	opened := make(chan struct{})
	var once sync.Once
	cs.PrependWatchReactor("pods", func(action clienttesting.Action) (bool, watch.Interface, error) {
		wa := action.(clienttesting.WatchActionImpl)
		w, err := cs.Tracker().Watch(wa.GetResource(), wa.GetNamespace(), wa.ListOptions)
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(opened) })
		return true, w, nil
	})
	return opened
}

func waitOpened(t *testing.T, opened <-chan struct{}) {
	t.Helper()
	select {
	case <-opened:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the informer never opened its watch of pods")
	}
}

// TestRun drives the whole loop (informer, queue, Syncer) against a fake clientset.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cs := fake.NewClientset(node("n1"))
	opened := podWatchOpened(cs)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Client: cs, Namespace: "trident", Selector: "app=node.csi.trident.netapp.io",
			Driver: driver, Log: testWriter{t}})
	}()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trident-csi-a", Namespace: "trident", UID: "a",
			Labels: map[string]string{"app": "node.csi.trident.netapp.io"}},
		Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	s := &Syncer{Client: cs, Driver: driver}
	waitDrivers := func(want []string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			d := drivers(c, s, "n1")
			require.NotNil(c, d, "CSINode n1 does not exist")
			assert.Equal(c, want, d, "CSINode n1 drivers")
		}, 10*time.Second, 20*time.Millisecond)
	}
	waitOpened(t, opened)
	_, err := cs.CoreV1().Pods("trident").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	waitDrivers([]string{driver})
	require.NoError(t, cs.CoreV1().Pods("trident").Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	waitDrivers([]string{})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "Run")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Run did not return after cancel")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func realNode(name string) *corev1.Node {
	n := node(name)
	n.Labels = map[string]string{RealNodeLabel: "true"}
	return n
}

// TestSyncLeavesRealNodesAlone: a real kubelet owns a real node's CSINode. The Syncer never
// creates one for a Node labelled real, and touches none of the nodes Skip names.
func TestSyncLeavesRealNodesAlone(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(realNode("real-1"), realNode("real-2"), csiNode("real-2", driver), node("n1"))
	s := &Syncer{Client: cs, Driver: driver}
	changed, err := s.Sync(ctx, "real-1", IntentRegister)
	require.NoError(t, err)
	assert.False(t, changed, "Sync changed something for real-1")
	assert.Nil(t, drivers(t, s, "real-1"), "the simulator created real-1's CSINode")

	s.Skip = func(n string) bool { return n == "real-2" }
	changed, err = s.Sync(ctx, "real-2", IntentDeregister)
	require.NoError(t, err)
	assert.False(t, changed, "Sync changed something for real-2")
	assert.Equal(t, []string{driver}, drivers(t, s, "real-2"), "real-2's CSINode, which its kubelet wrote")

	// Simulated nodes are still the simulator's.
	changed, err = s.Sync(ctx, "n1", IntentRegister)
	require.NoError(t, err)
	assert.True(t, changed, "Sync did not register the driver on n1")
	assert.Equal(t, []string{driver}, drivers(t, s, "n1"), "n1's CSINode")
}

// TestRunLeavesRealNodesAlone drives the whole loop: the plugin pods of a real node neither
// create its CSINode nor, when they terminate, remove the driver its kubelet registered,
// while a kwok node's CSINode follows its plugin pod as before.
func TestRunLeavesRealNodesAlone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(node("n1"), realNode("real-1"), realNode("real-2"), csiNode("real-2", driver))
	opened := podWatchOpened(cs)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Client: cs, Namespace: "trident", Selector: "app=node.csi.trident.netapp.io",
			Driver: driver, Log: testWriter{t}})
	}()
	s := &Syncer{Client: cs, Driver: driver}
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "trident", UID: types.UID(name),
				Labels: map[string]string{"app": "node.csi.trident.netapp.io"}},
			Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	waitDrivers := func(node string, want []string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, want, drivers(c, s, node), "CSINode %s drivers", node)
		}, 10*time.Second, 20*time.Millisecond)
	}
	waitOpened(t, opened)
	pods := cs.CoreV1().Pods("trident")
	// Each real node's pod first, then the kwok node's: once the kwok node's CSINode has
	// changed, the simulator has handled the real nodes' events before it.
	for _, p := range []*corev1.Pod{pod("r1", "real-1"), pod("r2", "real-2"), pod("k1", "n1")} {
		_, err := pods.Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	waitDrivers("n1", []string{driver})
	assert.Nil(t, drivers(t, s, "real-1"), "the simulator created real-1's CSINode")
	for _, name := range []string{"r1", "r2", "k1"} {
		require.NoError(t, pods.Delete(ctx, name, metav1.DeleteOptions{}))
	}
	waitDrivers("n1", []string{})
	assert.Equal(t, []string{driver}, drivers(t, s, "real-2"), "the simulator deregistered the driver real-2's kubelet registered")
	assert.Nil(t, drivers(t, s, "real-1"), "the simulator created real-1's CSINode")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "Run")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Run did not return after cancel")
	}
}
