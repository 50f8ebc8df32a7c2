package facts

// Volume evidence: whether the Lease's holder still has the volume, as the holder's
// kubelet (the Node's status.volumesInUse) and the attach/detach machinery (the
// VolumeAttachment) report it. The playbooks wait on it before the Lease delete and
// the safety floor re-checks it there (remediations.VolumeOnHolder).

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// csiPluginName is the kubelet's name of its CSI volume plugin (CSIPluginName in
// k8s.io/kubernetes pkg/volume/csi/csi_plugin.go).
const csiPluginName = "kubernetes.io/csi"

// UniqueVolumeName is the kubelet's unique name of a CSI volume, the form the Node's
// status.volumesInUse lists it in: kubernetes.io/csi/<driver>^<volumeHandle>.
// k8s.io/kubernetes pkg/volume/util/util.go GetUniqueVolumeName joins the plugin's
// name and its name of the volume with "/", and csiPlugin.GetVolumeName in
// pkg/volume/csi/csi_plugin.go names a volume driver + "^" + volumeHandle (volNameSep).
func UniqueVolumeName(driver, volumeHandle string) string {
	return csiPluginName + "/" + driver + "^" + volumeHandle
}

// AttachmentName is the name the attach/detach controller's CSI attacher gives the
// VolumeAttachment of a volume on a node: csi-<hex sha256 of volumeHandle, driver and
// node, concatenated> (getAttachmentName in k8s.io/kubernetes
// pkg/volume/csi/csi_attacher.go). Reading it by name is one GET, where finding it by
// its spec would list every VolumeAttachment of the cluster.
func AttachmentName(volumeHandle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(volumeHandle+driver+node)))
}

// VolumeEvidence turns what was read of the volume named pvName on the holder node
// into VolumeFacts: its PV (nil: gone), the holder's Node (nil: none) and its
// NodeFacts, the PV driver's CSIDriver (nil: none) and the VolumeAttachment under
// AttachmentName (nil: none). It is pure, to be table-tested.
func VolumeEvidence(pvName string, pv *corev1.PersistentVolume, node *corev1.Node, nf v1alpha1.NodeFacts,
	driver *storagev1.CSIDriver, va *storagev1.VolumeAttachment, now time.Time,
) v1alpha1.VolumeFacts {
	vf := v1alpha1.VolumeFacts{Node: nf.Name, InUseReportAgeSeconds: -1, AttachRequired: true}
	// volumesInUse comes with the kubelet's status post, which the Ready heartbeat
	// dates (the kubelet posts when the status changes, else every
	// nodeStatusReportFrequency, 5m by default); the node Lease's renewal only says
	// that the kubelet runs, not what it mounts.
	if hb := nf.ReadyHeartbeatTime; hb != nil {
		t := *hb
		vf.InUseReportedAt = &t
		vf.InUseReportAgeSeconds = ageSeconds(now, hb.Time)
	}
	if node == nil {
		vf.Message = fmt.Sprintf("no Node is named %s: nothing reports the volumes in use there", nf.Name)
	}
	switch {
	case pv == nil:
		vf.Message = joinMessage(vf.Message, fmt.Sprintf("PersistentVolume %s not found: its CSI driver and volume handle, "+
			"and so the kubelet's name for it and its VolumeAttachment, are unknown", pvName))
		return vf
	case pv.Spec.CSI == nil:
		vf.PersistentVolumeExists = true
		vf.Message = joinMessage(vf.Message, fmt.Sprintf("PersistentVolume %s is not a CSI volume: "+
			"the kubelet's name for it and its VolumeAttachment are not looked up", pvName))
		return vf
	}
	vf.PersistentVolumeExists = true
	vf.Driver, vf.VolumeHandle = pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
	vf.UniqueName = UniqueVolumeName(vf.Driver, vf.VolumeHandle)
	if node != nil {
		vf.InUseOnNode = slices.Contains(node.Status.VolumesInUse, corev1.UniqueVolumeName(vf.UniqueName))
	}
	// As the kubelet reads it: attach is skipped only when a CSIDriver says false.
	if driver != nil {
		vf.CSIDriverExists = true
		vf.AttachRequired = driver.Spec.AttachRequired == nil || *driver.Spec.AttachRequired
	}
	vf.VolumeAttachment.Name = AttachmentName(vf.VolumeHandle, vf.Driver, nf.Name)
	if va == nil {
		return vf
	}
	source := ""
	if va.Spec.Source.PersistentVolumeName != nil {
		source = *va.Spec.Source.PersistentVolumeName
	}
	// The name is a hash of the handle, not of the PV: an object under it that
	// attaches another PV, or to another node, is not this volume's on the holder.
	if source != pvName || va.Spec.NodeName != nf.Name {
		vf.Message = joinMessage(vf.Message, fmt.Sprintf("VolumeAttachment %s attaches PersistentVolume %s to node %s, not PersistentVolume %s to node %s",
			va.Name, source, va.Spec.NodeName, pvName, nf.Name))
		return vf
	}
	created := va.CreationTimestamp
	vf.VolumeAttachment = v1alpha1.VolumeAttachmentFacts{
		Name: va.Name, Exists: true, Attached: va.Status.Attached,
		CreationTimestamp: &created, DeletionTimestamp: va.DeletionTimestamp,
	}
	return vf
}

// volume records the evidence of the volume pvName on the Lease's holder: s.f.Node
// and s.holder, which node read. Each read is one GET by name, from the controller's
// cache where it holds the kind: the PV (again: resolving the target keeps only its
// name, and a Lease can outlive its PV), the driver's CSIDriver and the
// VolumeAttachment under AttachmentName, so the evidence costs three reads however
// large the cluster.
func (s *gathering) volume(ctx context.Context, pvName string) error {
	pv := &corev1.PersistentVolume{}
	found, err := s.g.get(ctx, types.NamespacedName{Name: pvName}, pv)
	if err != nil {
		return err
	}
	if !found {
		pv = nil
	}
	s.pv = pv
	var driver *storagev1.CSIDriver
	var va *storagev1.VolumeAttachment
	if pv != nil && pv.Spec.CSI != nil {
		src := pv.Spec.CSI
		driver, err = getIfFound(ctx, s.g, src.Driver, &storagev1.CSIDriver{})
		if err != nil {
			return err
		}
		va, err = getIfFound(ctx, s.g, AttachmentName(src.VolumeHandle, src.Driver, s.f.Node.Name), &storagev1.VolumeAttachment{})
		if err != nil {
			return err
		}
	}
	vf := VolumeEvidence(pvName, pv, s.holder, *s.f.Node, driver, va, s.now)
	s.f.Volume = &vf
	return nil
}

// getIfFound reads the cluster-scoped object name into obj, and returns nil when
// there is none.
func getIfFound[T client.Object](ctx context.Context, g *Gatherer, name string, obj T) (T, error) {
	var none T
	found, err := g.get(ctx, types.NamespacedName{Name: name}, obj)
	if err != nil || !found {
		return none, err
	}
	return obj, nil
}

func joinMessage(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
