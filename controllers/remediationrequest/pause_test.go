package remediationrequest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/pause"
)

// setPause writes the pause ConfigMap as `kubectl remediator pause/resume` does.
func setPause(t *testing.T, paused bool, reason string) {
	t.Helper()
	ctx := context.Background()
	key := pause.DefaultConfigMap
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
// playbook waits for its evicted pod, the playbook holds where it is: the wait is
// not checked again (the pod going meanwhile changes nothing), its clock stops (the
// journal records since when), and no further step starts: the Lease stays, the node
// stays cordoned, and the request says who paused and why. A request filed meanwhile
// waits with reason Paused and touches nothing. Resumed, both finish.
func TestPauseHoldsAtTheNextStepAndResumeFinishes(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease, pause.DefaultConfigMap.Namespace)
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: pause.DefaultConfigMap.Namespace, Name: pause.DefaultConfigMap.Name}})
	})
	startManager(t)
	node := "envtest-pause"
	pod := healthyHolder(t, node, time.Now())
	key := newRequest(t, "pause-running", "pvc-"+node, nil)
	waitFor(t, key, 20*time.Second, "holding at waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})

	setPause(t, true, "INC-4711: storage array firmware upgrade")
	held := waitFor(t, key, 20*time.Second, "held in waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
		return progressingReason(rr) == v1alpha1.ReasonPaused
	})
	finishTermination(t, pod)
	assert.Equal(t, v1alpha1.PhaseRunning, held.Status.Phase)
	wait := held.Status.Steps[2]
	require.Equal(t, "waitPodsGone", wait.Name)
	assert.Equal(t, v1alpha1.StepRunning, wait.State)
	require.NotNil(t, wait.PausedSince, "the pause's start is journaled on the held step")
	assert.Equal(t, v1alpha1.StepPending, stepState(held, "deleteLease"))
	assert.Contains(t, meta.FindStatusCondition(held.Status.Conditions, v1alpha1.ConditionProgressing).Message,
		`paused by alice@oncall since`)
	assert.Contains(t, meta.FindStatusCondition(held.Status.Conditions, v1alpha1.ConditionProgressing).Message, "INC-4711")
	// Held, not restored: the node stays cordoned and the Lease stays; the wait
	// is not checked again while paused, though its pod is gone.
	time.Sleep(2 * time.Second)
	require.NoError(t, env.Client.Get(ctx, key, held))
	assert.Equal(t, v1alpha1.StepRunning, stepState(held, "waitPodsGone"), "a held step is not checked")
	assert.True(t, wait.PausedSince.Equal(held.Status.Steps[2].PausedSince), "the pause's start is written once")
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
	require.NoError(t, env.Client.Get(ctx, key, held))
	wait = held.Status.Steps[2]
	assert.Nil(t, wait.PausedSince, "resumed")
	require.NotNil(t, wait.PausedFor, "the resume journals how long the step was held")
	assert.Positive(t, wait.PausedFor.Duration)
}

// TestExcludedNodeIsRejected: the opt-out label keeps every playbook off a node; a
// request for it is rejected by the floor, saying so, and nothing is touched.
func TestExcludedNodeIsRejected(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
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

// heartbeat plays the kubelet: it renews the node's Lease in kube-node-lease at the
// given time, so that a node stays healthy on a clock the test moves on.
func heartbeat(t *testing.T, node string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, l); err != nil {
			return err
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: at}
		return env.Client.Update(ctx, l)
	}))
}

// TestPauseFreezesAHeldEvictionsTimeout: a pause freezes the running step's clock.
// Paused while a PodDisruptionBudget holds the eviction, and kept paused past the
// eviction timeout, the request stays Running and the node cordoned: before, the
// timeout was checked before the gate, so the request failed during the pause and
// its restore uncordoned the node. Resumed, the step goes on with the time it had
// left, and times out only once that is spent, saying how long it was paused.
func TestPauseFreezesAHeldEvictionsTimeout(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease, pause.DefaultConfigMap.Namespace)
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: pause.DefaultConfigMap.Namespace, Name: pause.DefaultConfigMap.Name}})
	})
	clock := clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	startManager(t, withClock(clock))
	name := "envtest-pause-pdb"
	pod := healthyHolder(t, name, clock.Now())
	label(t, pod, map[string]string{"app": name})
	running(t, pod)
	pdbFor(t, "app", name)

	key := requestFor(t, "pause-pdb", v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: name}}, nil)
	waitFor(t, key, 20*time.Second, "eviction held by the PodDisruptionBudget", func(rr *v1alpha1.RemediationRequest) bool {
		for _, st := range rr.Status.Steps {
			if st.Name == v1alpha1.StepDeleteAffectedPods && strings.Contains(st.Message, "Eviction refused") {
				return true
			}
		}
		return false
	})
	setPause(t, true, "INC-4712: array firmware")
	waitFor(t, key, 20*time.Second, "held by the pause", func(rr *v1alpha1.RemediationRequest) bool {
		return progressingReason(rr) == v1alpha1.ReasonPaused
	})

	// Eleven minutes pass during the pause: past the ten-minute eviction timeout.
	clock.SetTime(clock.Now().Add(11 * time.Minute))
	heartbeat(t, name, clock.Now())
	// A new reason wakes the held request, which reads the pause again.
	setPause(t, true, "INC-4712: array firmware, second controller")
	held := waitFor(t, key, 20*time.Second, "held again, on the later clock", func(rr *v1alpha1.RemediationRequest) bool {
		c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
		return c != nil && strings.Contains(c.Message, "second controller") || terminal(rr)
	})
	require.Equal(t, v1alpha1.PhaseRunning, held.Status.Phase, "a paused eviction must not time out: %+v", held.Status.Conditions)
	assert.Equal(t, v1alpha1.StepRunning, stepState(held, v1alpha1.StepDeleteAffectedPods))
	assert.True(t, nodeCordoned(t, name), "a held playbook keeps its cordon")

	// Resumed: the eviction goes on, with its ten minutes intact.
	setPause(t, false, "firmware done")
	waitFor(t, key, 20*time.Second, "running again after the resume", func(rr *v1alpha1.RemediationRequest) bool {
		return progressingReason(rr) == v1alpha1.ReasonPlaybookRunning || terminal(rr)
	})
	require.NoError(t, env.Client.Get(ctx, key, held))
	require.Equal(t, v1alpha1.PhaseRunning, held.Status.Phase, "%+v", held.Status.Conditions)
	assert.True(t, nodeCordoned(t, name))

	// Ten minutes and a second of unpaused time later, the eviction times out; the
	// eleven paused minutes did not count.
	clock.SetTime(clock.Now().Add(10*time.Minute + time.Second))
	heartbeat(t, name, clock.Now())
	rr := waitFor(t, key, 20*time.Second, "Failed once the unpaused time ran out", terminal)
	require.Equal(t, v1alpha1.PhaseFailed, rr.Status.Phase)
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionSucceeded)
	require.NotNil(t, c)
	assert.Equal(t, v1alpha1.ReasonTimeout, c.Reason, c.Message)
	assert.Contains(t, c.Message, "timed out after 10m0s (not counting 11m0s paused)")
	assert.False(t, nodeCordoned(t, name), "the failed request's restore uncordons")
}
