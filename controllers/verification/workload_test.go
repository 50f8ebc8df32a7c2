package verification

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// podLists counts the pod lists that pass through it.
type podLists struct {
	client.Reader
	n int
}

func (p *podLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.PodList); ok {
		p.n++
	}
	return p.Reader.List(ctx, list, opts...)
}

// TestReadWorkloadListsPodsOnlyWhenTheyTell: the claim's namespace is listed for
// the check that ends the window, or for a FailedMount after the fix to attribute;
// a check within the window reads no pod (a storm's thousand windows would list
// the namespace a thousand times a minute).
func TestReadWorkloadListsPodsOnlyWhenTheyTell(t *testing.T) {
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pvc-1"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-0"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "data",
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	event := func(lastSeen time.Time) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-0.mount"}, Type: corev1.EventTypeWarning, Reason: facts.FailedMountReason,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "app", Name: "web-0"}, Message: `MountVolume.MountDevice failed for volume "pvc-1"`,
			LastTimestamp: metav1.NewTime(lastSeen)}
	}
	rr := &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease},
		Status: v1alpha1.RemediationRequestStatus{Facts: &v1alpha1.Facts{Target: v1alpha1.TargetFacts{PersistentVolumeClaim: "app/data"},
			Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1"}}}}
	for name, tc := range map[string]struct {
		final    bool
		event    *corev1.Event
		wantList int
	}{
		"within the window, nothing failed":               {},
		"within the window, a FailedMount before the fix": {event: event(fixed.Add(-time.Minute))},
		"within the window, a FailedMount after the fix":  {event: event(fixed.Add(time.Minute)), wantList: 1},
		"the window's end":                                {final: true, wantList: 1},
	} {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{claim.DeepCopy(), pod.DeepCopy()}
			if tc.event != nil {
				objs = append(objs, tc.event)
			}
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).
				WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).Build()
			reads := &podLists{Reader: c}
			w, err := readWorkload(context.Background(), reads, rr, fixed, tc.final)
			require.NoError(t, err)
			assert.Equal(t, tc.wantList, reads.n)
			if tc.wantList > 0 {
				assert.Len(t, w.Pods, 1, "the claim's pod")
			}
		})
	}
}
