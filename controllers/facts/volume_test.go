package facts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/api/v1alpha1"
)

// The kubelet's name of a CSI volume and the attacher's name of its VolumeAttachment
// are Kubernetes' (volume.go cites where), so they are pinned to values Kubernetes
// itself computes: a change of format would silently make every volume look unused.
func TestUniqueVolumeNameAndAttachmentName(t *testing.T) {
	assert.Equal(t, corev1.UniqueVolumeName("kubernetes.io/csi/csi.trident.netapp.io^pvc-75a6"),
		corev1.UniqueVolumeName(UniqueVolumeName("csi.trident.netapp.io", "pvc-75a6")))
	// sha256("pvc-75a6" + "csi.trident.netapp.io" + "node-1"), as csi_attacher.go's
	// getAttachmentName computes it.
	assert.Equal(t, "csi-07f2b7f5501b19c39516544034e048f15443504aaaa1176c89678307bc484683",
		AttachmentName("pvc-75a6", "csi.trident.netapp.io", "node-1"))
}

func TestVolumeEvidence(t *testing.T) {
	now := time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)
	posted := metav1.NewTime(now.Add(-40 * time.Second))
	created := metav1.NewTime(now.Add(-time.Hour))
	const (
		driver = "csi.trident.netapp.io"
		pvName = "pvc-75a6"
		holder = "node-1"
		unique = "kubernetes.io/csi/csi.trident.netapp.io^pvc-75a6"
	)
	attachment := AttachmentName(pvName, driver, holder)
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: pvName}}}}
	node := func(inUse ...corev1.UniqueVolumeName) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: holder}, Status: corev1.NodeStatus{VolumesInUse: inUse}}
	}
	holderFacts := v1alpha1.NodeFacts{Name: holder, Exists: true, ReadyHeartbeatTime: &posted}
	va := func(pvRef, nodeName string, attached bool) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: attachment, CreationTimestamp: created},
			Spec:       storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: nodeName, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pvRef)}},
			Status:     storagev1.VolumeAttachmentStatus{Attached: attached},
		}
	}
	csiDriver := func(attachRequired *bool) *storagev1.CSIDriver {
		return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver}, Spec: storagev1.CSIDriverSpec{AttachRequired: attachRequired}}
	}
	base := v1alpha1.VolumeFacts{
		Node: holder, PersistentVolumeExists: true, Driver: driver, VolumeHandle: pvName, UniqueName: unique,
		InUseReportedAt: &posted, InUseReportAgeSeconds: 40, CSIDriverExists: true, AttachRequired: true,
		VolumeAttachment: v1alpha1.VolumeAttachmentFacts{Name: attachment},
	}
	with := func(f func(*v1alpha1.VolumeFacts)) v1alpha1.VolumeFacts {
		v := base
		f(&v)
		return v
	}
	cases := []struct {
		name   string
		pv     *corev1.PersistentVolume
		node   *corev1.Node
		nf     v1alpha1.NodeFacts
		driver *storagev1.CSIDriver
		va     *storagev1.VolumeAttachment
		want   v1alpha1.VolumeFacts
	}{{
		name: "in use and attached on the holder",
		pv:   pv, node: node("kubernetes.io/csi/other^x", unique), nf: holderFacts, driver: csiDriver(nil), va: va(pvName, holder, true),
		want: with(func(v *v1alpha1.VolumeFacts) {
			v.InUseOnNode = true
			v.VolumeAttachment = v1alpha1.VolumeAttachmentFacts{Name: attachment, Exists: true, Attached: true, CreationTimestamp: &created}
		}),
	}, {
		name: "neither in use nor attached",
		pv:   pv, node: node(), nf: holderFacts, driver: csiDriver(ptr.To(true)),
		want: base,
	}, {
		// The volumesInUse entry of the same handle under another driver is another volume.
		name: "another driver's volume of the same handle",
		pv:   pv, node: node("kubernetes.io/csi/ebs.csi.aws.com^pvc-75a6"), nf: holderFacts, driver: csiDriver(nil),
		want: base,
	}, {
		name: "attachment being detached",
		pv:   pv, node: node(unique), nf: holderFacts, driver: csiDriver(nil),
		va: func() *storagev1.VolumeAttachment {
			a := va(pvName, holder, true)
			a.DeletionTimestamp = &posted
			return a
		}(),
		want: with(func(v *v1alpha1.VolumeFacts) {
			v.InUseOnNode = true
			v.VolumeAttachment = v1alpha1.VolumeAttachmentFacts{Name: attachment, Exists: true, Attached: true, CreationTimestamp: &created, DeletionTimestamp: &posted}
		}),
	}, {
		name: "attachment not yet attached",
		pv:   pv, node: node(), nf: holderFacts, driver: csiDriver(nil), va: va(pvName, holder, false),
		want: with(func(v *v1alpha1.VolumeFacts) {
			v.VolumeAttachment = v1alpha1.VolumeAttachmentFacts{Name: attachment, Exists: true, CreationTimestamp: &created}
		}),
	}, {
		// The name is a hash; an object under it for another PV or node is not the one.
		name: "attachment of that name for another node",
		pv:   pv, node: node(), nf: holderFacts, driver: csiDriver(nil), va: va(pvName, "node-2", true),
		want: with(func(v *v1alpha1.VolumeFacts) {
			v.Message = "VolumeAttachment " + attachment + " attaches PersistentVolume pvc-75a6 to node node-2, not PersistentVolume pvc-75a6 to node node-1"
		}),
	}, {
		name: "driver that needs no attachment",
		pv:   pv, node: node(unique), nf: holderFacts, driver: csiDriver(ptr.To(false)),
		want: with(func(v *v1alpha1.VolumeFacts) { v.InUseOnNode, v.AttachRequired = true, false }),
	}, {
		// As the kubelet does: without a CSIDriver, the volume must be attached.
		name: "no CSIDriver",
		pv:   pv, node: node(unique), nf: holderFacts,
		want: with(func(v *v1alpha1.VolumeFacts) { v.InUseOnNode, v.CSIDriverExists = true, false }),
	}, {
		name: "no Node",
		pv:   pv, nf: v1alpha1.NodeFacts{Name: holder}, driver: csiDriver(nil),
		want: with(func(v *v1alpha1.VolumeFacts) {
			v.InUseReportedAt, v.InUseReportAgeSeconds = nil, -1
			v.Message = "no Node is named node-1: nothing reports the volumes in use there"
		}),
	}, {
		name: "kubelet never posted",
		pv:   pv, node: node(unique), nf: v1alpha1.NodeFacts{Name: holder, Exists: true}, driver: csiDriver(nil),
		want: with(func(v *v1alpha1.VolumeFacts) {
			v.InUseOnNode, v.InUseReportedAt, v.InUseReportAgeSeconds = true, nil, -1
		}),
	}, {
		name: "PV gone",
		node: node(unique), nf: holderFacts,
		want: v1alpha1.VolumeFacts{Node: holder, InUseReportedAt: &posted, InUseReportAgeSeconds: 40, AttachRequired: true,
			Message: "PersistentVolume pvc-75a6 not found: its CSI driver and volume handle, and so the kubelet's name for it and its VolumeAttachment, are unknown"},
	}, {
		name: "not a CSI volume",
		pv:   &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}}, node: node(unique), nf: holderFacts,
		want: v1alpha1.VolumeFacts{Node: holder, PersistentVolumeExists: true, InUseReportedAt: &posted, InUseReportAgeSeconds: 40, AttachRequired: true,
			Message: "PersistentVolume pvc-75a6 is not a CSI volume: the kubelet's name for it and its VolumeAttachment are not looked up"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := VolumeEvidence(pvName, tc.pv, tc.node, tc.nf, tc.driver, tc.va, now)
			assert.Equal(t, tc.want, got)
		})
	}
}
