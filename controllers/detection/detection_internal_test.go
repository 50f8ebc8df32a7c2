package detection

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/remediator/remediator/controllers/facts"
)

// TestDetectorLifecycle: what the detector exports over its life. Nothing before its
// first scan; the incident once found; the same incident through scans that fail
// (counted in remediator_detection_failures_total, the last success's time standing
// still); nothing for it once it clears; nothing at all once the detector stops (a
// replica that lost the lead).
func TestDetectorLifecycle(t *testing.T) {
	now := time.Now()
	objs := []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastHeartbeatTime: metav1.NewTime(now.Add(-10 * time.Minute))}}}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-75a6fd7f"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-75a6fd7f", CreationTimestamp: metav1.NewTime(now)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-2")}},
	}
	var failing atomic.Bool
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).
		WithIndex(&corev1.Event{}, "involvedObject.kind", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Kind} }).
		WithIndex(&corev1.Event{}, "involvedObject.name", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Name} }).
		WithIndex(&corev1.Event{}, "type", func(o client.Object) []string { return []string{o.(*corev1.Event).Type} }).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if failing.Load() {
				return apierrors.NewServiceUnavailable("the API server is restarting")
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	d := &Detector{Gatherer: &facts.Gatherer{Reader: c, Config: facts.DefaultConfig()}, Interval: 20 * time.Millisecond, LeaseAge: 10 * time.Minute}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(d))
	count := func(name string) int {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == name {
				return len(f.GetMetric())
			}
		}
		return 0
	}
	failures := func() float64 {
		m := &dto.Metric{}
		require.NoError(t, detectionFailures.Write(m))
		return m.GetCounter().GetValue()
	}
	require.Zero(t, count("remediator_detected_incident"), "before Start")
	require.Zero(t, count("remediator_detection_last_success_timestamp_seconds"), "before a first scan")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Start(ctx) }()
	require.Eventually(t, func() bool { return count("remediator_detected_incident") == 1 }, 5*time.Second, 10*time.Millisecond, "the stuck Lease")
	require.Equal(t, 1, count("remediator_detection_last_success_timestamp_seconds"))

	before := failures()
	d.mu.Lock()
	success := d.lastSuccess
	d.mu.Unlock()
	failing.Store(true)
	require.Eventually(t, func() bool { return failures() >= before+2 }, 5*time.Second, 10*time.Millisecond, "failed scans counted")
	assert.Equal(t, 1, count("remediator_detected_incident"), "the last findings stay while scans fail")
	d.mu.Lock()
	assert.Equal(t, success, d.lastSuccess, "a failed scan is no success")
	d.mu.Unlock()

	failing.Store(false)
	require.NoError(t, c.Delete(context.Background(), objs[2]))
	require.Eventually(t, func() bool { return count("remediator_detected_incident") == 0 }, 5*time.Second, 10*time.Millisecond, "cleared")

	cancel()
	require.NoError(t, <-done)
	assert.Zero(t, count("remediator_detection_last_success_timestamp_seconds"), "a stopped detector exports nothing")

	assert.Error(t, (&Detector{Gatherer: d.Gatherer}).Start(context.Background()), "a zero interval")
}

// TestDetectorSeesPluginDaemonSetRecreated: the deregistration incident's cause exported before any
// mount fails. The node-plugin DaemonSet is recreated (a new UID under its name)
// while its old pods run: the node whose CSINode still lists the driver is exported
// as OldPluginPodOverlap, and the node whose CSINode lost it stays one
// DeregisteredDriver series, now with the overlap as its cause. A detector that
// starts afresh (a restart, a new leader) after the DaemonSet adopted its old pods
// still sees it recreated, by its youth.
func TestDetectorSeesPluginDaemonSetRecreated(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	pluginLabels := map[string]string{"app": "node.csi.trident.netapp.io"}
	ds := func(uid types.UID, created time.Time) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "trident-node-linux", UID: uid, CreationTimestamp: metav1.NewTime(created)},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pluginLabels}}}}
	}
	pod := func(name, node string, owner types.UID) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name, Labels: pluginLabels, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "DaemonSet", Name: "trident-node-linux", UID: owner, Controller: ptr.To(true)}}},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	node := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(now)}}}}
	}
	csiNode := func(name string, drivers ...string) *storagev1.CSINode {
		cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, d := range drivers {
			cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name})
		}
		return cn
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		node("node-1"), csiNode("node-1", facts.DefaultDriverName), node("node-2"), csiNode("node-2"),
		ds("uid-1", now.Add(-time.Hour)), pod("plugin-old-1", "node-1", "uid-1"), pod("plugin-old-2", "node-2", "uid-1"),
	).WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).Build()
	g := &facts.Gatherer{Reader: c, Config: facts.DefaultConfig()}
	d := &Detector{Gatherer: g, Interval: 20 * time.Millisecond, LeaseAge: 10 * time.Minute}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(d))
	incidents := func() []string {
		families, err := reg.Gather()
		require.NoError(t, err)
		var out []string
		for _, f := range families {
			if f.GetName() != "remediator_detected_incident" {
				continue
			}
			for _, m := range f.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				if l["kind"] != facts.FindingOverlappingPluginPods {
					out = append(out, l["kind"]+" "+l["node"]+" cause="+l["cause"])
				}
			}
		}
		slices.Sort(out)
		return out
	}
	run := func(d *Detector) context.CancelFunc {
		dctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Start(dctx) }()
		return func() {
			cancel()
			require.NoError(t, <-done)
		}
	}
	stop := run(d)
	require.Eventually(t, func() bool { return slices.Equal(incidents(), []string{"DeregisteredDriver node-2 cause="}) },
		5*time.Second, 10*time.Millisecond, "before the recreation: %v", incidents())

	require.NoError(t, c.Delete(ctx, ds("uid-1", now)))
	require.NoError(t, c.Create(ctx, ds("uid-2", now)))
	require.NoError(t, c.Create(ctx, pod("plugin-new-1", "node-1", "uid-2")))
	require.NoError(t, c.Create(ctx, pod("plugin-new-2", "node-2", "uid-2")))
	want := []string{"DeregisteredDriver node-2 cause=OldPluginPodOverlap", "OldPluginPodOverlap node-1 cause="}
	require.Eventually(t, func() bool { return slices.Equal(incidents(), want) }, 5*time.Second, 10*time.Millisecond, "after: %v", incidents())
	d.mu.Lock()
	assert.Equal(t, types.UID("uid-2"), d.daemonSets.ByName["trident/trident-node-linux"].UID, "the UID the next scan compares with")
	d.mu.Unlock()
	stop()

	// The DaemonSet adopted its old pods (one UID on every pod) and the detector
	// starts again: only the DaemonSet's youth says it was recreated.
	for _, name := range []string{"plugin-old-1", "plugin-old-2"} {
		p := &corev1.Pod{}
		require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "trident", Name: name}, p))
		p.OwnerReferences[0].UID = "uid-2"
		require.NoError(t, c.Update(ctx, p))
	}
	restarted := &Detector{Gatherer: g, Interval: time.Minute, LeaseAge: 10 * time.Minute}
	reg = prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(restarted))
	stop = run(restarted)
	defer stop()
	require.Eventually(t, func() bool { return slices.Equal(incidents(), want) }, 5*time.Second, 10*time.Millisecond, "after a restart: %v", incidents())
}
