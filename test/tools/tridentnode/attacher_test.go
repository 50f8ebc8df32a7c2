package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func attachment(name, attacher, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: attacher, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-" + name)}},
	}
}

// TestAttacherMarksOnlyItsNodesAttachments: the attacher attaches the driver's
// attachments to its own node, those created before it started and after, and leaves
// other nodes', other drivers' and those being detached alone.
func TestAttacherMarksOnlyItsNodesAttachments(t *testing.T) {
	deleting := attachment("deleting", DriverName, "real-1")
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	deleting.Finalizers = []string{"test/keep"}
	cs := fake.NewClientset(
		attachment("before", DriverName, "real-1"),
		attachment("other-node", DriverName, "real-2"),
		attachment("other-driver", "ebs.csi.aws.com", "real-1"),
		deleting,
	)
	log, _ := testLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Attacher{Client: cs, DriverName: DriverName, Node: "real-1", Log: log}).Run(ctx) }()

	attached := func(name string) bool {
		va, err := cs.StorageV1().VolumeAttachments().Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		return va.Status.Attached
	}
	require.Eventually(t, func() bool { return attached("before") }, 10*time.Second, 20*time.Millisecond, "an attachment that existed at start")
	_, err := cs.StorageV1().VolumeAttachments().Create(context.Background(), attachment("after", DriverName, "real-1"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return attached("after") }, 10*time.Second, 20*time.Millisecond, "an attachment created later")
	for _, name := range []string{"other-node", "other-driver", "deleting"} {
		assert.False(t, attached(name), "%s must be left alone", name)
	}
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the attacher did not stop with its context")
	}
}
