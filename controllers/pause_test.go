package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers"
)

// setPause writes the pause ConfigMap as `kubectl remediator pause/resume` does.
func setPause(t *testing.T, paused bool, reason string) {
	t.Helper()
	ctx := context.Background()
	key := controllers.DefaultPauseConfigMap
	data := map[string]string{v1alpha1.PauseKeyPaused: map[bool]string{true: "true", false: "false"}[paused],
		v1alpha1.PauseKeyReason: reason, v1alpha1.PauseKeyBy: "alice@oncall", v1alpha1.PauseKeyAt: time.Now().UTC().Format(time.RFC3339)}
	cm := &corev1.ConfigMap{}
	err := env.Client.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		require.NoError(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: data}))
		return
	}
	require.NoError(t, err)
	cm.Data = data
	require.NoError(t, env.Client.Update(ctx, cm))
}

func progressingReason(rr *v1alpha1.RemediationRequest) string {
	if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing); c != nil {
		return c.Reason
	}
	return ""
}

// TestPauseHoldsAtTheNextStepAndResumeFinishes: the stop button. Paused while a
// playbook waits for its evicted pod, the playbook finishes that wait but starts no
// further step: the Lease stays, the node stays cordoned, and the request says who
// paused and why. A request filed meanwhile waits with reason Paused and touches
// nothing. Resumed, both finish.
func TestPauseHoldsAtTheNextStepAndResumeFinishes(t *testing.T) {
	ctx := context.Background()
	ensureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease, controllers.DefaultPauseConfigMap.Namespace)
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: controllers.DefaultPauseConfigMap.Namespace, Name: controllers.DefaultPauseConfigMap.Name}})
	})
	startManager(t)
	node := "envtest-pause"
	pod := healthyHolder(t, node, time.Now())
	key := newRequest(t, "pause-running", "pvc-"+node, nil)
	waitFor(t, key, 20*time.Second, "holding at waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})

	setPause(t, true, "INC-4711: storage array firmware upgrade")
	finishTermination(t, pod)
	held := waitFor(t, key, 20*time.Second, "held before deleteLease", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepSucceeded && progressingReason(rr) == v1alpha1.ReasonPaused
	})
	assert.Equal(t, v1alpha1.PhaseRunning, held.Status.Phase)
	assert.Equal(t, v1alpha1.StepPending, stepState(held, "deleteLease"))
	assert.Contains(t, meta.FindStatusCondition(held.Status.Conditions, v1alpha1.ConditionProgressing).Message,
		`paused by alice@oncall since`)
	assert.Contains(t, meta.FindStatusCondition(held.Status.Conditions, v1alpha1.ConditionProgressing).Message, "INC-4711")
	// Held, not restored: the node stays cordoned and the Lease stays.
	time.Sleep(time.Second)
	assert.True(t, nodeCordoned(t, node), "a held playbook keeps its cordon")
	assert.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-" + node}, &coordinationv1.Lease{}))
	warningEvent(t, key.Name, v1alpha1.ReasonPaused, "alice@oncall")

	shutdownHolder(t, "envtest-pause-down", time.Now())
	waiting := newRequest(t, "pause-new", "pvc-envtest-pause-down", nil)
	w := waitFor(t, waiting, 20*time.Second, "a new request waits with reason Paused", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseWaiting && progressingReason(rr) == v1alpha1.ReasonPaused
	})
	assert.True(t, w.Status.Decision.Allowed, "decided, and allowed: only the start is held")
	assert.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-envtest-pause-down"}, &coordinationv1.Lease{}))

	setPause(t, false, "firmware done")
	for _, k := range []client.ObjectKey{key, waiting} {
		waitFor(t, k, 20*time.Second, "Succeeded after the resume", func(rr *v1alpha1.RemediationRequest) bool {
			return rr.Status.Phase == v1alpha1.PhaseSucceeded
		})
	}
	assert.False(t, nodeCordoned(t, node), "the resumed playbook uncordoned")
}

// TestExcludedNodeIsRejected: the opt-out label keeps every playbook off a node; a
// request for it is rejected by the floor, saying so, and nothing is touched.
func TestExcludedNodeIsRejected(t *testing.T) {
	ctx := context.Background()
	ensureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	startManager(t)
	node := "envtest-excluded"
	shutdownHolder(t, node, time.Now())
	n := &corev1.Node{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: node}, n))
	n.Labels = map[string]string{v1alpha1.LabelExclude: "true"}
	require.NoError(t, env.Client.Update(ctx, n))
	inManagerCache(t, n)
	require.Eventually(t, func() bool {
		got := &corev1.Node{}
		return managerCache.Get(ctx, client.ObjectKey{Name: node}, got) == nil && got.Labels[v1alpha1.LabelExclude] == "true"
	}, 10*time.Second, 10*time.Millisecond)
	key := newRequest(t, "excluded", "pvc-"+node, nil)
	got := waitFor(t, key, 20*time.Second, "Rejected", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseRejected })
	assert.Equal(t, "node-excluded", got.Status.Decision.Rule)
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAccepted)
	require.NotNil(t, c)
	assert.Equal(t, "NodeExcluded", c.Reason)
	assert.Contains(t, c.Message, "remediator.io/exclude=true")
	assert.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-" + node}, &coordinationv1.Lease{}))
}
