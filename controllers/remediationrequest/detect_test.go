package remediationrequest_test

import (
	"context"
	"fmt"
	"strings"
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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/remediator/remediator/controllers/detection"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/wiring"
	"github.com/remediator/remediator/test/testenv"
)

// TestDetectorExportsIncidentsWithSymptoms wires the detector as `remediator
// controller` does (the manager's cache with the FailedMount events of every
// namespace, pods live) and stages incident A as kubelet and Trident leave it: a young
// Lease without events held by a node whose kubelet stopped, and the claim's pod
// waiting in ContainerCreating with kubelet's FailedMount on it, in a workload
// namespace. The detector exports it, with the holder's state and both symptoms,
// before any request exists; a Healthy holder's young Lease is not exported.
func TestDetectorExportsIncidentsWithSymptoms(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "trident", "detect-app", corev1.NamespaceNodeLease)
	create := func(obj client.Object) {
		t.Helper()
		require.NoError(t, env.Client.Create(ctx, obj), "creating %T %s", obj, obj.GetName())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	node := func(name string, renewedAgo time.Duration) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		create(n)
		ready, heartbeat := corev1.ConditionTrue, time.Now()
		if renewedAgo > time.Minute {
			ready, heartbeat = corev1.ConditionUnknown, time.Now().Add(-renewedAgo)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(heartbeat)}}
		require.NoError(t, env.Client.Status().Update(ctx, n))
		create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-renewedAgo)))},
		})
	}
	volume := func(pv, claim, holder string) {
		create(&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "detect-app", Name: claim},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				VolumeName:  pv,
			},
		})
		create(&corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: pv},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				ClaimRef:    &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "detect-app", Name: claim},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver: facts.DefaultDriverName, VolumeHandle: pv,
				}},
			},
		})
		create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), AcquireTime: ptr.To(metav1.NewMicroTime(time.Now()))},
		})
	}
	node("detect-down", 10*time.Minute)
	node("detect-up", time.Second)
	volume("pvc-detect-down", "detect-down", "detect-down")
	volume("pvc-detect-up", "detect-up", "detect-up")

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "detect-app", Name: "web-0"},
		Spec: corev1.PodSpec{NodeName: "detect-up", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "detect-down"}}}}},
	}
	create(pod)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	now := metav1.Now()
	create(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "detect-app", Name: "web-0.failedmount"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "detect-app", Name: "web-0", UID: pod.UID},
		Reason:         facts.FailedMountReason, Type: corev1.EventTypeWarning, Count: 5,
		Message:        `MountVolume.MountDevice failed for volume "pvc-detect-down" : rpc error: code = Aborted desc = the Lease is held by detect-down`,
		FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "kubelet", Host: "detect-up"},
	})

	series := startDetector(t, ctx)
	testenv.Eventually(t, "the stuck Lease exported with both symptoms", func() (bool, string) {
		s := series("remediator_detected_symptoms")
		ok := s["kind=StuckLease,lease=pvc-detect-down,lease_namespace=trident,node=detect-down,symptom=FailedMount"] == 5 &&
			s["kind=StuckLease,lease=pvc-detect-down,lease_namespace=trident,node=detect-down,symptom=ContainerCreating"] == 1
		return ok, fmtSeries(s)
	})
	incidents := series("remediator_detected_incident")
	assert.Equal(t, 1.0, incidents["cause=,kind=StuckLease,lease=pvc-detect-down,lease_namespace=trident,node=detect-down,node_state=Unreachable"], fmtSeries(incidents))
	for k := range incidents {
		assert.NotContains(t, k, "pvc-detect-up", "a Healthy holder's young Lease without events is an operation in flight")
	}
	assert.Contains(t, series("remediator_detected_stuck_lease_age_seconds"), "lease=pvc-detect-down,lease_namespace=trident,node=detect-down")
	last := series("remediator_detection_last_success_timestamp_seconds")[""]
	assert.InDelta(t, float64(time.Now().Unix()), last, 10, "the last scan's time")
}

// startDetector runs a manager with the controller's cache and a Detector scanning
// every 200 ms until the test ends, and returns a reader of the Detector's series of
// a family, by their labels (labelString).
func startDetector(t *testing.T, ctx context.Context) func(name string) map[string]float64 {
	t.Helper()
	cacheOpts, clientOpts := wiring.CacheOptions(facts.DefaultConfig(), nil, types.NamespacedName{}, wiring.Runs{Detect: true})
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme.Scheme, Cache: cacheOpts, Client: clientOpts,
		Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	_, err = wiring.PrepareCache(ctx, mgr)
	require.NoError(t, err)
	d := &detection.Detector{Gatherer: wiring.DetectGatherer(mgr, facts.DefaultConfig()), Interval: 200 * time.Millisecond, LeaseAge: 10 * time.Minute}
	require.NoError(t, mgr.Add(d))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(d))
	return func(name string) map[string]float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				out[labelString(m)] = m.GetGauge().GetValue()
			}
		}
		return out
	}
}

func labelString(m *dto.Metric) string {
	s := ""
	for i, l := range m.GetLabel() {
		if i > 0 {
			s += ","
		}
		s += l.GetName() + "=" + l.GetValue()
	}
	return s
}

func fmtSeries(s map[string]float64) string { return fmt.Sprint(s) }

// TestDetectorSeesPluginDaemonSetRecreated wires the detector as `remediator
// controller` does (the Trident namespace's DaemonSets in the manager's cache) and
// stages the deregistration incident's cause: the node-plugin DaemonSet deleted and
// created again under its name while its old pod still runs on a node whose CSINode
// lists the driver (envtest runs no garbage collector). The detector exports the node as
// OldPluginPodOverlap before any mount fails.
func TestDetectorSeesPluginDaemonSetRecreated(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "trident")
	create := func(obj client.Object) {
		t.Helper()
		require.NoError(t, env.Client.Create(ctx, obj), "creating %T %s", obj, obj.GetName())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj, client.GracePeriodSeconds(0)) })
	}
	labels := map[string]string{"app": "node.csi.trident.netapp.io"}
	daemonSet := func() *appsv1.DaemonSet {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "trident-node-detect"},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/trident:1"}}}}}}
		create(ds)
		return ds
	}
	pod := func(name string, owner *appsv1.DaemonSet) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}},
			Spec: corev1.PodSpec{NodeName: "detect-recreated", Containers: []corev1.Container{{Name: "main", Image: "registry.example/trident:1"}}}}
		create(p)
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		require.NoError(t, env.Client.Status().Update(ctx, p))
	}
	create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "detect-recreated"}})
	create(&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "detect-recreated"}, Spec: storagev1.CSINodeSpec{
		Drivers: []storagev1.CSINodeDriver{{Name: facts.DefaultDriverName, NodeID: "detect-recreated"}}}})
	old := daemonSet()
	pod("trident-node-detect-old", old)

	series := startDetector(t, ctx)
	overlap := func() (bool, string) {
		s := series("remediator_detected_incident")
		for k := range s {
			if strings.HasPrefix(k, "cause=,kind=OldPluginPodOverlap,lease=,lease_namespace=,node=detect-recreated,") {
				return true, fmtSeries(s)
			}
		}
		return false, fmtSeries(s)
	}
	testenv.Eventually(t, "a first scan, one pod on the node", func() (bool, string) {
		found, s := overlap()
		return len(series("remediator_detection_last_success_timestamp_seconds")) == 1 && !found, s
	})
	require.NoError(t, env.Client.Delete(ctx, old))
	pod("trident-node-detect-new", daemonSet())
	testenv.Eventually(t, "the old and new node-plugin pods overlapping", overlap)
}
