package facts_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// TestGatherVolumeEvidence: the facts of a release-luks-lease request record whether
// the holder still has the Lease's volume: the holder Node's volumesInUse lists it
// under the kubelet's name, and a VolumeAttachment attaches it there; for another
// volume on the same driver, neither.
func TestGatherVolumeEvidence(t *testing.T) {
	w := newWorld(t)
	const unique = "kubernetes.io/csi/" + facts.DefaultDriverName + "^pvc-evidence-held"
	w.csiDriver(facts.DefaultDriverName, nil)
	w.node("holder-has-volume", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second,
		volumesInUse: []corev1.UniqueVolumeName{"kubernetes.io/csi/" + facts.DefaultDriverName + "^pvc-other", unique}})
	w.volume("pvc-evidence-held", "app", "data-evidence-held")
	w.tridentLease("pvc-evidence-held", "holder-has-volume", 20*time.Minute, 1)
	va := w.volumeAttachment("pvc-evidence-held", "holder-has-volume", true)

	f := w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-evidence-held"})
	require.NotNil(t, f.Volume, "volume evidence")
	v := f.Volume
	assert.Equal(t, "holder-has-volume", v.Node)
	assert.True(t, v.PersistentVolumeExists)
	assert.Equal(t, facts.DefaultDriverName, v.Driver)
	assert.Equal(t, "pvc-evidence-held", v.VolumeHandle)
	assert.Equal(t, unique, v.UniqueName)
	assert.True(t, v.InUseOnNode, "volumesInUse lists the volume")
	require.NotNil(t, v.InUseReportedAt, "when the kubelet posted")
	assert.Equal(t, f.Node.ReadyHeartbeatTime, v.InUseReportedAt, "the kubelet's status post is the Ready heartbeat")
	assert.GreaterOrEqual(t, v.InUseReportAgeSeconds, int64(0))
	assert.True(t, v.CSIDriverExists)
	assert.True(t, v.AttachRequired, "attachRequired unset means required")
	assert.Equal(t, va.Name, v.VolumeAttachment.Name)
	assert.True(t, v.VolumeAttachment.Exists, "%+v", v)
	assert.True(t, v.VolumeAttachment.Attached, "%+v", v)
	assert.NotNil(t, v.VolumeAttachment.CreationTimestamp)
	assert.Nil(t, v.VolumeAttachment.DeletionTimestamp)
	assert.Empty(t, v.Message)

	// Another volume whose Lease the same node holds, neither in use nor attached there.
	w.volume("pvc-evidence-gone", "app", "data-evidence-gone")
	w.tridentLease("pvc-evidence-gone", "holder-has-volume", 20*time.Minute, 1)
	w.volumeAttachment("pvc-evidence-gone", "holder-elsewhere", true) // another node's
	f = w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-evidence-gone"})
	require.NotNil(t, f.Volume, "volume evidence")
	assert.False(t, f.Volume.InUseOnNode, "%+v", f.Volume)
	assert.False(t, f.Volume.VolumeAttachment.Exists, "%+v", f.Volume)
	assert.Equal(t, facts.AttachmentName("pvc-evidence-gone", facts.DefaultDriverName, "holder-has-volume"), f.Volume.VolumeAttachment.Name)

	// No evidence without a holder, or for the CSI remediation.
	w.volume("pvc-evidence-nolease", "app", "data-evidence-nolease")
	f = w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-evidence-nolease"})
	assert.Nil(t, f.Volume, "no Lease, no holder")
	f = w.gather(t, v1alpha1.RemediationReregisterCSIDriver, v1alpha1.Target{Node: "holder-has-volume"})
	assert.Nil(t, f.Volume, "reregister-csi-driver")
}
