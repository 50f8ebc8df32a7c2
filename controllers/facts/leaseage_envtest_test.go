package facts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// TestReacquiredLeaseAgesFromTheAPIServersTime: a holder retries on its Lease, as
// Trident does after a failed operation (an update, the same holderIdentity), from a
// clock ten minutes slow. The hold counts from the API server's time of that write,
// read from the Lease's managedFields: the Lease is about 0 s old, and the
// LeaseRetained event of the hold before the retry is set aside. Before, the hold
// counted from the later of the creation and the holder's acquireTime, so the age ran
// from the creation and the earlier hold's event counted as evidence against this one.
func TestReacquiredLeaseAgesFromTheAPIServersTime(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.volume("pvc-reacquired", "app", "data-reacquired")
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-reacquired"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("holder-reacquired"), AcquireTime: ptr.To(metav1.NowMicro())},
	}
	w.create(lease)
	// The first hold's operation failed, and Trident said so.
	earlier := lease.CreationTimestamp
	w.create(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "trident", Name: "pvc-reacquired.first-hold"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: "trident", Name: lease.Name, UID: lease.UID},
		Reason:         "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1, Message: "cryptsetup luksOpen failed (the first hold)",
		FirstTimestamp: earlier, LastTimestamp: earlier,
	})

	// The API server's times have whole seconds: the retry comes two seconds later.
	time.Sleep(time.Until(lease.CreationTimestamp.Add(2*time.Second + 100*time.Millisecond)))
	lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-10 * time.Minute)))
	require.NoError(t, env.Client.Update(ctx, lease, client.FieldOwner("trident-node")), "the holder's retry")

	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()} // the real clock, as the API server's
	f, err := g.Gather(ctx, &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: "pvc-reacquired"},
	}})
	require.NoError(t, err)
	l := f.Lease
	require.True(t, l != nil && l.Exists, "lease facts = %+v", l)
	assert.LessOrEqual(t, l.AgeSeconds, int64(1), "the retry's hold is fresh: %s", l.AgeFrom)
	assert.Contains(t, l.AgeFrom, `by the API server's clock (field manager "trident-node")`)
	assert.Zero(t, l.RetainedEvents, "the first hold's LeaseRetained event counted against the retry")
	assert.Equal(t, int32(1), l.IgnoredRetainedEvents)
}
