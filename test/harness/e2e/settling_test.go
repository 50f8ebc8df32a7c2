//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/cluster"
)

// TestRealShutdownRequestedAtOnceSettles: a hurried operator powers the holder off,
// taints it out-of-service at once and pushes the request straight away, while the
// real kubelet's last heartbeat is still within its grace. The evidence conflicts
// only until the grace runs out: the request waits (rule holder-state-settling, with
// the time it is decided again) and ends Succeeded on its own, without a new commit.
func TestRealShutdownRequestedAtOnceSettles(t *testing.T) {
	a, _ := realNodePair(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-real-settle")
	pv, _ := csiVolume(t, ns, true)

	strandLease(t, pv, a, 0, 0)
	require.NoError(t, cluster.NodeOff(ctx, a))
	taintOutOfService(t, a)
	// The controller starts only now, well within the kubelet's grace, so that its first
	// decision reads a Node cache listed after the taint. Started before, its Node watch
	// could deliver the taint a moment after that decision (seen once on a loaded
	// machine): the holder then read Healthy and the request was refused until the
	// Lease's age gate, by when the heartbeat had gone stale and nothing was unsettled.
	startController(t, "--policies-dir", shortGatePolicies(t), "--request-namespaces", ns)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      fmt.Sprintf("%s powered off and tainted a moment ago", a),
	})

	// First it waits on the settling evidence, saying when it decides again.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events := &corev1.EventList{}
		require.NoError(c, k8s.List(ctx, events, client.InNamespace(ns)))
		var seen []string
		for _, e := range events.Items {
			if e.InvolvedObject.Name == key.Name {
				seen = append(seen, e.Reason+": "+e.Message)
			}
		}
		assert.True(c, strings.Contains(strings.Join(seen, "\n"), "is not settled yet"), "events of %s: %v", key.Name, seen)
	}, 60*time.Second, poll, "the request waits on the settling evidence")

	rr := waitPhase(t, key, 150*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	assert.Equal(t, int64(1), rr.Generation, "no new commit: the spec was never changed")
	assert.Equal(t, v1alpha1.NodeShutdown, holderState(rr), "holder state: %s", describe(rr))
	assert.False(t, leaseExists(t, pv), "the stuck Lease is gone")
}
