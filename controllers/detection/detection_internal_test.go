package detection

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
