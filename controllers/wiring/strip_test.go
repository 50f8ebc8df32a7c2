package wiring

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		co, _ := CacheOptions(facts.Config{TridentNamespace: "trident"}, requestNamespaces, types.NamespacedName{}, true)
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
