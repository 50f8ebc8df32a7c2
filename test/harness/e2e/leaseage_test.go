//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestHolderRetryRestartsTheLeaseAgeGate: the holder of a stuck Lease retries, as
// Trident does after a failed operation (an update of acquireTime, the same
// holderIdentity), from a clock ten minutes slow, two thirds of the way through the
// age gate. The gate counts from the API server's time of that retry, not from the
// Lease's creation and not from the holder's acquireTime: a fenced request made then
// waits until the retry is old enough, the LeaseRetained event of the hold before the
// retry is not counted, and the Lease goes only once the retry is as old as the gate.
// The controller runs on shortGatePolicies, as TestUnreachableHolderNeedsFencingAndAge.
func TestHolderRetryRestartsTheLeaseAgeGate(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-retry")
	startController(t, "--policies-dir", shortGatePolicies(t), "--request-namespaces", ns)
	ctx := context.Background()
	node := unreachableNode(t)
	// The first hold failed once, and Trident said so.
	pv, _ := luksVolume(t, ns, node, 0, 1)
	lease := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, lease))
	created := lease.CreationTimestamp.Time

	time.Sleep(time.Until(created.Add(shortUnreachableGate * 2 / 3)))
	lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-10 * time.Minute)))
	require.NoError(t, k8s.Update(ctx, lease, client.FieldOwner("trident-node")), "the holder's retry")
	var retried time.Time
	for _, mf := range lease.ManagedFields {
		if mf.Manager == "trident-node" && mf.Time != nil {
			retried = mf.Time.Time
		}
	}
	require.False(t, retried.IsZero(), "the API server recorded no time for the retry: %+v", lease.ManagedFields)

	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Fencing:     &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: node},
		Reason:      "holder lost the control plane while retrying cryptsetup",
	})
	rr := &v1alpha1.RemediationRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(ctx, key, rr))
		require.NotNil(c, rr.Status.Decision, "status %+v", rr.Status)
		assert.Equal(c, "unreachable-lease-too-young", string(rr.Status.Decision.Rule), "fenced, the retry young: %s", describe(rr))
	}, 30*time.Second, poll, "the request waits for the retry to age")
	require.True(t, leaseExists(t, pv), "the Lease was deleted while the retry was young")
	lf := rr.Status.Facts.Lease
	require.NotNil(t, lf, "no Lease facts: %s", describe(rr))
	assert.True(t, strings.HasPrefix(lf.AgeFrom, "the holder's last write"), "the age must count from the retry: %+v", lf)
	assert.Contains(t, lf.AgeFrom, `field manager "trident-node"`, "lease = %+v", lf)
	if assert.NotNil(t, lf.HeldSince, "lease = %+v", lf) {
		assert.True(t, lf.HeldSince.Time.Equal(retried), "heldSince %s, want the retry's %s", lf.HeldSince, retried)
	}
	assert.Zero(t, lf.RetainedEvents, "the first hold's LeaseRetained event counted against the retry: %+v", lf)
	assert.EqualValues(t, 1, lf.IgnoredRetainedEvents, "lease = %+v", lf)
	if assert.NotNil(t, rr.Status.Decision.RecheckAt, "fenced but young: %s", describe(rr)) {
		// The controller's clock errs up to a second and a round trip behind the API
		// server's (facts.ServerClock), so the recheck may come that much early.
		assert.WithinRange(t, rr.Status.Decision.RecheckAt.Time, retried.Add(shortUnreachableGate-2*time.Second), retried.Add(shortUnreachableGate+5*time.Second),
			"recheckAt: want when the retry (%s, the Lease created %s) is %s old", retried, created, shortUnreachableGate)
	}

	rr = waitPhase(t, key, shortUnreachableGate+60*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "once the retry is old enough: %s", describe(rr))
	require.False(t, leaseExists(t, pv), "once the retry is old enough: the Lease still exists")
	for _, st := range rr.Status.Steps {
		if st.Name == "deleteLease" && assert.NotNil(t, st.StartedAt, "deleteLease has no startedAt: %+v", st) {
			assert.False(t, st.StartedAt.Time.Before(retried.Add(shortUnreachableGate)),
				"the Lease (retried %s) was deleted before the retry was %s old: %+v", retried, shortUnreachableGate, st)
		}
	}
}
