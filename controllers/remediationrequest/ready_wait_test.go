package remediationrequest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/remediator/remediator/api/v1alpha1"
)

// waitMet is kubectl wait --for=condition=TYPE=STATUS's test (k8s.io/kubectl's
// pkg/cmd/wait, condition.go): the condition has that status, and its
// observedGeneration (else status.observedGeneration) is not behind the object's
// generation: kubectl wait skips a condition left from an older spec.
func waitMet(rr *v1alpha1.RemediationRequest, typ string, status metav1.ConditionStatus) bool {
	c := meta.FindStatusCondition(rr.Status.Conditions, typ)
	if c == nil || c.Status != status {
		return false
	}
	observed := c.ObservedGeneration
	if observed == 0 {
		observed = rr.Status.ObservedGeneration
	}
	return observed >= rr.Generation
}

// TestKubectlWaitTellsSuccessFromRejection: `kubectl wait --for=condition=Ready=false`
// returns on a rejected request (and kstatus reports it failed: Stalled), and after
// the spec is fixed `--for=condition=Ready` returns once the new generation
// succeeded, not on the rejection's Ready of the older one.
func TestKubectlWaitTellsSuccessFromRejection(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	// Ten minutes after the Leases were created: past the five-minute gate.
	clock := clocktesting.NewFakePassiveClock(time.Now().Add(10 * time.Minute).Truncate(time.Second))
	startManager(t, withClock(clock))
	unreachableHolder(t, "envtest-ready-b", time.Now())
	key := requestFor(t, "ready-rejected", v1alpha1.Target{PersistentVolume: "pvc-envtest-ready-b"}, func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: "envtest-ready-a"}
	})

	rr := waitFor(t, key, 20*time.Second, "kubectl wait --for=condition=Ready=false", func(rr *v1alpha1.RemediationRequest) bool {
		return waitMet(rr, v1alpha1.ConditionReady, metav1.ConditionFalse) && rr.Status.Phase == v1alpha1.PhaseRejected
	})
	ready := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady)
	assert.Equal(t, "FencingNamesAnotherNode", ready.Reason, "Ready says why: the Accepted condition's reason")
	assert.Contains(t, ready.Message, "Rejected: ")
	assert.True(t, waitMet(rr, v1alpha1.ConditionStalled, metav1.ConditionTrue), "kstatus reads Stalled=True as Failed: %+v", rr.Status.Conditions)
	assert.False(t, waitMet(rr, v1alpha1.ConditionReady, metav1.ConditionTrue))
	for _, c := range rr.Status.Conditions {
		assert.Equal(t, rr.Generation, c.ObservedGeneration, "condition %s carries the generation it describes", c.Type)
	}

	// Fencing that names the holder: generation 2 runs and succeeds.
	require.NoError(t, env.Client.Get(context.Background(), key, rr))
	rr.Spec.Fencing.Node = "envtest-ready-b"
	require.NoError(t, env.Client.Update(context.Background(), rr))
	rr = waitFor(t, key, 20*time.Second, "kubectl wait --for=condition=Ready", func(rr *v1alpha1.RemediationRequest) bool {
		return waitMet(rr, v1alpha1.ConditionReady, metav1.ConditionTrue)
	})
	assert.Equal(t, int64(2), rr.Generation)
	assert.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "Ready=True only once the playbook completed")
	assert.Equal(t, v1alpha1.ReasonPlaybookCompleted, meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady).Reason)
	assert.Nil(t, meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionStalled), "no longer stalled: %+v", rr.Status.Conditions)
}
