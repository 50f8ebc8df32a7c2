package wiring

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/remediator/remediator/controllers/facts"
)

// TestCacheKeepsTheKubeletsWriteTimes: a decision made from the cache counts the
// kubelet's heartbeat from the same times the fresh facts read live do, the API
// server's times of its writes included; the cache keeps those times (and nothing
// else of managedFields) on Nodes and node Leases.
func TestCacheKeepsTheKubeletsWriteTimes(t *testing.T) {
	stamped := metav1.NewTime(time.Date(2026, 12, 4, 7, 9, 25, 0, time.UTC))
	written := metav1.NewTime(stamped.Add(3 * time.Second))
	fields := &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "real-1", ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "kubelet", Subresource: "status", Operation: metav1.ManagedFieldsOperationApply, Time: &written, FieldsV1: fields},
			{Manager: "kube-controller-manager", Subresource: "status", Time: &written, FieldsV1: fields},
		}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastHeartbeatTime: stamped}},
			Images:     []corev1.ContainerImage{{Names: []string{"busybox"}}},
			// The volume evidence reads what the kubelet reports in use.
			VolumesInUse: []corev1.UniqueVolumeName{"kubernetes.io/csi/csi.trident.netapp.io^pvc-1"},
		},
	}
	obj, err := stripNode(node.DeepCopy())
	require.NoError(t, err)
	cached := obj.(*corev1.Node)
	assert.Empty(t, cached.Status.Images)
	assert.Equal(t, node.Status.VolumesInUse, cached.Status.VolumesInUse, "volumesInUse is kept")
	require.Len(t, cached.ManagedFields, 1, "only the kubelet's status writes")
	assert.Nil(t, cached.ManagedFields[0].FieldsV1)
	now := written.Add(21 * time.Second)
	assert.Equal(t, facts.ClassifyNode("real-1", node, nil, now, 20*time.Second).HeartbeatAgeSeconds,
		facts.ClassifyNode("real-1", cached, nil, now, 20*time.Second).HeartbeatAgeSeconds, "the cache's heartbeat is the live one")

	nodeLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "real-1",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Time: &written, FieldsV1: fields}}},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: stamped.Time}}}
	obj, err = stripLease("trident")(nodeLease.DeepCopy())
	require.NoError(t, err)
	l := obj.(*coordinationv1.Lease)
	require.Len(t, l.ManagedFields, 1)
	assert.Nil(t, l.ManagedFields[0].FieldsV1)
	assert.Equal(t, written.Time, l.ManagedFields[0].Time.Time)

	trident := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-1",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "trident", Time: &written, FieldsV1: fields}}}}
	obj, err = stripLease("trident")(trident.DeepCopy())
	require.NoError(t, err)
	assert.Equal(t, trident.ManagedFields, obj.(*coordinationv1.Lease).ManagedFields, "a Trident Lease keeps its managedFields whole")
}

// TestCacheStubsOtherLeases: the Leases of other namespaces, watched only for the
// watch's progress, keep their identity and version and nothing else.
func TestCacheStubsOtherLeases(t *testing.T) {
	holder := "kube-controller-manager-1"
	election := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager", UID: "u1", ResourceVersion: "42",
			Labels: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kcm"}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
	obj, err := stripLease("trident")(election.DeepCopy())
	require.NoError(t, err)
	assert.Equal(t, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager",
		UID: "u1", ResourceVersion: "42"}}, obj)
}

// TestMarkedKindsAreOneWatchEach: facts.Watermarks keeps one mark per kind, which
// vouches for the cache only if that kind is one watch: cluster-scoped, or watched
// across all namespaces, whatever namespaces the requests are confined to.
func TestMarkedKindsAreOneWatchEach(t *testing.T) {
	clusterScoped := map[string]bool{}
	for _, o := range []client.Object{&corev1.Node{}, &corev1.PersistentVolume{}, &storagev1.CSINode{},
		&storagev1.CSIDriver{}, &storagev1.VolumeAttachment{}} {
		clusterScoped[facts.KindOf(o)] = true
	}
	for _, requestNamespaces := range [][]string{nil, {"team-a", "team-b"}} {
		co, _ := CacheOptions(facts.Config{TridentNamespace: "trident"}, requestNamespaces, types.NamespacedName{}, Runs{Detect: true, VerifyFixes: true})
		for _, kind := range markedKinds {
			var namespaces map[string]cache.Config
			for o, by := range co.ByObject {
				if facts.KindOf(o) == facts.KindOf(kind) {
					namespaces = by.Namespaces
				}
			}
			if clusterScoped[facts.KindOf(kind)] {
				assert.Empty(t, namespaces, "%s is cluster-scoped", facts.KindOf(kind))
				continue
			}
			assert.Equal(t, map[string]cache.Config{cache.AllNamespaces: {}}, namespaces,
				"%s is watched across all namespaces (requests in %v)", facts.KindOf(kind), requestNamespaces)
		}
	}
}

// recordingReader records the reads made of it, and finds nothing.
type recordingReader struct{ reads []string }

func (r *recordingReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.reads = append(r.reads, fmt.Sprintf("get %T %s", obj, key))
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func (r *recordingReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	r.reads = append(r.reads, fmt.Sprintf("list %T in %q", list, o.Namespace))
	return nil
}

// TestVerificationReadsTheCache: each check of a fix reads the released volume's
// namespace's FailedMount events, the claim and what the judgement weighs from the
// cache, and a miss there is final. A check is made every minute per request for the
// whole window, so a live list of events was one call a minute per request: after a
// storm of 1,000 releases, 1,000 a minute (make bench: 5.0 calls per request).
func TestVerificationReadsTheCache(t *testing.T) {
	ctx := context.Background()
	mount := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app-0.1"}, Type: corev1.EventTypeWarning,
		Reason: facts.FailedMountReason, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "apps", Name: "app-0"}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-1"}}
	cached := fake.NewClientBuilder().WithObjects(mount, lease).
		WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).Build()
	live := &recordingReader{}
	r := verifyReader(cached, live, facts.Config{TridentNamespace: "trident"})

	events := &corev1.EventList{}
	require.NoError(t, r.List(ctx, events, client.InNamespace("apps"), client.MatchingFields{"reason": facts.FailedMountReason}))
	assert.Len(t, events.Items, 1, "the namespace's FailedMount events, from the cache")
	for _, obj := range []client.Object{&corev1.PersistentVolumeClaim{}, &corev1.PersistentVolume{}, &corev1.Node{}, &storagev1.CSINode{}} {
		err := r.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "gone"}, obj)
		assert.True(t, apierrors.IsNotFound(err), "%T: a miss is final, got %v", obj, err)
	}
	require.NoError(t, r.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-1"}, &coordinationv1.Lease{}), "the Trident Lease, from the cache")
	assert.Empty(t, live.reads, "nothing read live")
}

// TestFailedMountsCachedForVerificationToo: fix verification reads the workload's
// FailedMount events from the cache (verifyReader), so the cache holds them whenever
// verification runs, with the detector off too; and not when neither runs.
func TestFailedMountsCachedForVerificationToo(t *testing.T) {
	for _, tc := range []struct {
		runs Runs
		want bool
	}{{Runs{VerifyFixes: true}, true}, {Runs{Detect: true}, true}, {Runs{}, false}} {
		co, _ := CacheOptions(facts.Config{TridentNamespace: "trident"}, nil, types.NamespacedName{}, tc.runs)
		var namespaces map[string]cache.Config
		for o, by := range co.ByObject {
			if _, ok := o.(*corev1.Event); ok {
				namespaces = by.Namespaces
			}
		}
		all, ok := namespaces[cache.AllNamespaces]
		assert.Equal(t, tc.want, ok, "%+v: FailedMount events of every namespace cached", tc.runs)
		if ok {
			assert.Equal(t, "reason="+facts.FailedMountReason, all.FieldSelector.String(), "%+v", tc.runs)
		}
	}
}
