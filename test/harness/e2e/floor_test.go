//go:build e2e

package e2e

// The runbook's gates in the Go floor (issue 22): a policy can only be stricter than
// the runbook. These tests run the real controller on the local cluster.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/cluster"
	"github.com/remediator/remediator/test/stage"
)

// gatePolicies writes a copy of the real policies with the Lease-age gates set to
// the given seconds, as a one-line pull request to the policies would.
func gatePolicies(t *testing.T, unreachable, healthy int) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "policies", "*.cue"))
	require.NoError(t, err)
	dir := t.TempDir()
	set := map[string]int{"#UnreachableMinLeaseAgeSeconds": unreachable, "#HealthyStuckLeaseAgeSeconds": healthy}
	found := map[string]int{}
	for _, f := range files {
		// The schema is the controller's own: a policy directory holds the rules only.
		if filepath.Base(f) == "schema.cue" {
			continue
		}
		if strings.HasSuffix(f, "_test.cue") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for name, v := range set {
			re := regexp.MustCompile(`(?m)^(` + regexp.QuoteMeta(name) + `:\s*)\d+`)
			found[name] += len(re.FindAllIndex(src, -1))
			src = re.ReplaceAll(src, []byte(fmt.Sprintf("${1}%d", v)))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), src, 0o644))
	}
	for name := range set {
		require.Equal(t, 1, found[name], "%s must be defined exactly once in policies/*.cue", name)
	}
	return dir
}

// runbookFloor are the floor flags at the runbook's values, overriding the shortened
// ones startController passes.
var runbookFloor = []string{"--floor-unreachable-lease-age", "5m", "--floor-healthy-lease-age", "10m"}

// TestPolicyCannotLowerTheFloor: a policy from Git that sets both Lease-age gates to
// 0 (a one-line pull request) allows what the runbook forbids; the Go floor refuses
// it, names itself, and leaves the Lease, the pods and the node alone.
func TestPolicyCannotLowerTheFloor(t *testing.T) {
	startController(t, append([]string{"--policies-dir", gatePolicies(t, 0, 0)}, runbookFloor...)...)
	ctx := context.Background()

	t.Run("fenced unreachable holder, Lease one minute old", func(t *testing.T) {
		ns := namespace(t, "e2e-floor-unreach")
		node := unreachableNode(t)
		pv, _ := luksVolume(t, ns, node, time.Hour, 0)
		key := request(t, ns, v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: pv},
			Reason:      "holder lost the control plane; fenced by powering it off",
			Fencing:     &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: node},
		})
		rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded)
		require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
		d := decision(t, rr)
		assert.Equal(t, string(remediations.InvariantLeaseTooYoung), d.Rule, describe(rr))
		assert.Contains(t, d.Message, "Refused by the safety floor", "the reason must name the floor")
		assert.Contains(t, d.Message, "Policy rule unreachable-fenced allowed playbook fenced-unreachable", "the policy allowed it")
		require.NotNil(t, d.RecheckAt, "a Lease too young is decided again when it is old enough")
		if assert.NotNil(t, d.Floor, "status records the floor in force") {
			assert.Equal(t, int64(300), d.Floor.UnreachableMinLeaseAgeSeconds)
			assert.Equal(t, int64(600), d.Floor.HealthyStuckLeaseAgeSeconds)
		}
		if c := condition(rr, v1alpha1.ConditionAccepted); assert.NotNil(t, c) {
			assert.Equal(t, remediations.InvariantLeaseTooYoung.Reason(), c.Reason)
		}
		assert.True(t, leaseExists(t, pv), "the floor let the young Lease go")
	})

	t.Run("healthy holder, fresh Lease, no LeaseRetained", func(t *testing.T) {
		ns := namespace(t, "e2e-floor-healthy")
		const node = "kwok-node-2"
		pv, pvc := luksVolume(t, ns, node, 10*time.Second, 0)
		appPod(t, ns, "web-0", node, pvc, nil)
		key := request(t, ns, v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: ns, Name: pvc}},
			Reason:      "pods stuck in ContainerCreating behind the Lease",
		})
		rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded)
		require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
		d := decision(t, rr)
		assert.Equal(t, string(remediations.InvariantLeaseNotProvenStuck), d.Rule, describe(rr))
		assert.Contains(t, d.Message, "Refused by the safety floor", "the reason must name the floor")
		assert.Contains(t, d.Message, "healthy-move-workload", "the policy chose the playbook")
		assert.Empty(t, rr.Status.Steps, "no step may run")
		assert.True(t, leaseExists(t, pv), "the floor let the Lease go")
		pod := &corev1.Pod{}
		require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web-0"}, pod))
		assert.Nil(t, pod.DeletionTimestamp, "the application pod was evicted")
		n := &corev1.Node{}
		require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n))
		assert.False(t, n.Spec.Unschedulable, "the holder was cordoned")
	})
}

// TestStaleFencingIsRefused: a fencing statement describes the node when it was
// made. Fenced for the holder, rejected while the Lease is young; the holder then
// comes back (its kubelet renews its node Lease) and drops off again. Decided again,
// the old statement no longer holds: the Lease stays. Fenced anew (spec.fencing.
// fencedAt after the last heartbeat), it goes.
func TestStaleFencingIsRefused(t *testing.T) {
	// In parallel with the other tests that mostly wait out a Lease-age gate or a node's
	// grace (make test's budget), so its controller decides only this namespace's requests.
	t.Parallel()
	ns := namespace(t, "e2e-stale-fence")
	// The healthy gate stays the runbook's: while the holder is back, its Lease must
	// not count as a healthy holder's stuck one.
	startController(t, "--policies-dir", gatePolicies(t, int(shortUnreachableGate/time.Second), 600), "--floor-healthy-lease-age", "10m",
		"--request-namespaces", ns)
	ctx := context.Background()
	cs := clientset(t)
	node := unreachableNode(t)
	t.Cleanup(func() { _ = cluster.Reconnect(context.Background(), cs, node) })
	pv, _ := luksVolume(t, ns, node, time.Hour, 0)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "holder lost the control plane; fenced by powering it off",
		Fencing:     &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: node},
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, "young: %s", describe(rr))
	require.Contains(t, []string{"unreachable-lease-too-young", string(remediations.InvariantLeaseTooYoung)}, decision(t, rr).Rule, describe(rr))

	// The holder comes back: its kubelet (kwok) renews its node Lease again...
	require.NoError(t, cluster.Reconnect(ctx, cs, node))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l := &coordinationv1.Lease{}
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Namespace: corev1.NamespaceNodeLease, Name: node}, l))
		assert.NotEqual(c, cluster.DisconnectedHolder, ptr.Deref(l.Spec.HolderIdentity, ""), "kwok renews the node Lease of %s", node)
		assert.True(c, l.Spec.RenewTime != nil && l.Spec.RenewTime.After(rr.CreationTimestamp.Time), "renewed after the fencing statement")
	}, 60*time.Second, poll, "%s back", node)
	// ...and drops off again.
	require.NoError(t, cluster.Disconnect(ctx, cs, node))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n := &corev1.Node{}
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Name: node}, n))
		assert.False(c, nodeReady(n), "node %s is still Ready", node)
	}, 90*time.Second, poll, "%s unreachable again", node)
	// The Lease is past the gate by now; the request is decided again (an amended
	// pull request, here a new reason).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l := &coordinationv1.Lease{}
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, l),
			"Lease %s: the stale fencing statement must not release it", pv)
		assert.Greater(c, time.Since(l.CreationTimestamp.Time), shortUnreachableGate+2*time.Second, "Lease age")
	}, shortUnreachableGate+30*time.Second, poll)
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) { s.Reason += " (rechecked)" })
	rr = waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, "stale fencing: %s", describe(rr))
	require.Equal(t, string(remediations.InvariantFencingStale), decision(t, rr).Rule, describe(rr))
	assert.Contains(t, rr.Status.Decision.Message, "came back since it was fenced")
	assert.True(t, leaseExists(t, pv), "stale fencing: the Lease was deleted")

	// Fenced again after it dropped off: the statement holds.
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) { s.Fencing.FencedAt = ptr.To(metav1.Now()) })
	rr = waitPhase(t, key, 60*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "fenced anew: %s", describe(rr))
	assert.False(t, leaseExists(t, pv), "fenced anew: the Lease still exists")
}

// TestFreshHeartbeatUnderShutdownTaintIsNotAShutdown: the out-of-service taint on a
// node whose kubelet still renews its node Lease every 10 s (runtime or CNI down,
// Ready=False, or a taint set by mistake) is not a shutdown, even with the heartbeat
// grace set as low as a flag or the settings ConfigMap can set it (1ms): the grace is
// never shorter than the node Lease's own 40 s. The request first waits for the
// evidence to settle, then, the kubelet having renewed since, is rejected and the
// Lease stays. Once the kubelet falls silent for the Lease's duration, the same node
// is shut down and the Lease goes, without a new decision forced by hand.
func TestFreshHeartbeatUnderShutdownTaintIsNotAShutdown(t *testing.T) {
	// In parallel with the other tests that mostly wait (make test's budget): its
	// controller decides only this namespace's requests, and its node is its own.
	t.Parallel()
	ns := namespace(t, "e2e-oos-live")
	startController(t, "--request-namespaces", ns, "--node-lease-grace-period", "1ms")
	ctx := context.Background()
	node := extraNode(t, "e2e-oos-live", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})

	// A kubelet whose container runtime is down: it posts Ready=False and renews its
	// node Lease every 10 s, until stop is called.
	create(t, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: ptr.To(metav1.NowMicro())},
	})
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node}})
	})
	renewCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				l := &coordinationv1.Lease{}
				if err := k8s.Get(renewCtx, types.NamespacedName{Namespace: corev1.NamespaceNodeLease, Name: node}, l); err != nil {
					return err
				}
				l.Spec.RenewTime = ptr.To(metav1.NowMicro())
				return k8s.Update(renewCtx, l)
			})
			select {
			case <-renewCtx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
	}()
	stopped := false
	stopRenewing := func() {
		if !stopped {
			stopped = true
			stop()
			wg.Wait()
		}
	}
	t.Cleanup(stopRenewing)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
			Message: "container runtime network not ready: NetworkReady=false", LastHeartbeatTime: now, LastTransitionTime: now}}
		return k8s.Status().Update(ctx, n)
	}))

	pv, _ := luksVolume(t, ns, node, 20*time.Minute, 1)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "node tainted out-of-service during a CNI outage",
	})
	rr := waitPhase(t, key, 120*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseRunning)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, "live kubelet under the taint: %s", describe(rr))
	require.NotNil(t, rr.Status.Facts.Node)
	assert.Equal(t, v1alpha1.NodeUnknown, rr.Status.Facts.Node.State, "node facts: %+v", rr.Status.Facts.Node)
	assert.Contains(t, rr.Status.Facts.Node.StateReason, "conflicting evidence: shutdown taint, but the kubelet's last heartbeat")
	assert.Contains(t, rr.Status.Facts.Node.StateReason, "the kubelet runs", "rejected only once it renewed after the heartbeat waited on")
	assert.Equal(t, int64(40), rr.Status.Facts.Node.HeartbeatGraceSeconds, "the grace is the node Lease's duration, not the 1ms flag")
	assert.Equal(t, "holder-state-unknown", decision(t, rr).Rule, describe(rr))
	assert.True(t, leaseExists(t, pv), "a node whose kubelet still renews its Lease was taken for shut down")

	// The kubelet falls silent: once its node Lease's 40 s have run out it is shut
	// down (the request, re-submitted, waits for that on its own).
	stopRenewing()
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) { s.Reason += " (rechecked)" })
	rr = waitPhase(t, key, 120*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "silent kubelet: %s", describe(rr))
	assert.Equal(t, "node-shutdown", decision(t, rr).Playbook)
	err := k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, &coordinationv1.Lease{})
	assert.True(t, apierrors.IsNotFound(err), "the Lease of a shut-down holder is released: %v", err)
}

// TestRefusedCordonFailsAndTheNextStarts: an admission policy refuses to cordon one
// node, as a change freeze would. The request on it fails at once with the API
// server's message (WriteRefused) instead of holding its slot for ever, and the
// request waiting for that slot (cap 1) starts and succeeds.
func TestRefusedCordonFailsAndTheNextStarts(t *testing.T) {
	ctx := context.Background()
	const freeze = "e2e.remediator.io/freeze-cordons"
	const msg = "cordons are frozen during the change freeze (CHG-1234)"
	for _, obj := range stage.FreezeCordons("e2e-freeze-cordons", freeze, msg) {
		create(t, obj)
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
	}
	frozen := extraNode(t, "e2e-frozen", true)
	other := extraNode(t, "e2e-thawed", true)
	for _, n := range []string{frozen, other} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			node := &corev1.Node{}
			require.NoError(c, k8s.Get(ctx, types.NamespacedName{Name: n}, node))
			assert.True(c, nodeReady(node), "node %s Ready", n)
		}, 60*time.Second, poll)
	}
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: frozen}, n); err != nil {
			return err
		}
		n.Labels[freeze] = "true"
		return k8s.Update(ctx, n)
	}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n := &corev1.Node{}
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Name: frozen}, n))
		before := n.DeepCopy()
		n.Spec.Unschedulable = true
		err := k8s.Patch(ctx, n, client.MergeFrom(before), client.DryRunAll)
		assert.Error(c, err, "the freeze is not enforced yet")
	}, 30*time.Second, poll)

	startController(t, "--max-concurrent-remediations", "1", "--step-timeout", "1m")
	// A first request holds the only slot: its eviction is blocked by a budget.
	h := heldAfterCordon(t, "e2e-slot", "kwok-node-1", "retained Lease on the db volume")
	healthy := func(prefix, node string) (types.NamespacedName, string) {
		ns := namespace(t, prefix)
		pv, pvc := luksVolume(t, ns, node, 3*time.Minute, 2)
		appPod(t, ns, "web-0", node, pvc, nil)
		return request(t, ns, v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: pv},
			Reason:      "LeaseRetained events: cryptsetup luksOpen failed repeatedly",
		}), pv
	}
	frozenKey, frozenPV := healthy("e2e-frozen", frozen)
	waitFor := func(key types.NamespacedName, what string, ok func(*v1alpha1.RemediationRequest) bool) *v1alpha1.RemediationRequest {
		rr := &v1alpha1.RemediationRequest{}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, k8s.Get(ctx, key, rr))
			assert.True(c, ok(rr), "%s: %s", what, describe(rr))
		}, 90*time.Second, poll, what)
		return rr
	}
	waiting := func(rr *v1alpha1.RemediationRequest) bool {
		c := condition(rr, v1alpha1.ConditionProgressing)
		return rr.Status.Phase == v1alpha1.PhaseWaiting && c != nil && c.Reason == v1alpha1.ReasonWaitingForSlot
	}
	waitFor(frozenKey, "the frozen node's request waits for the slot", waiting)
	nextKey, nextPV := healthy("e2e-next", other)
	waitFor(nextKey, "the next request waits for the slot", waiting)

	// The slot frees: the oldest waiting request, on the frozen node, starts and
	// its cordon is refused.
	require.NoError(t, k8s.Delete(ctx, h.pdb))
	rr := waitFor(frozenKey, "the refused request Failed", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseFailed })
	c := condition(rr, v1alpha1.ConditionSucceeded)
	require.NotNil(t, c, describe(rr))
	assert.Equal(t, remediations.ReasonWriteRefused, c.Reason, describe(rr))
	assert.Contains(t, c.Message, msg, "the API server's message")
	for _, st := range rr.Status.Steps {
		if st.Name == v1alpha1.StepCordon {
			require.NotNil(t, st.StartedAt)
			require.NotNil(t, st.CompletedAt)
			assert.Less(t, st.CompletedAt.Sub(st.StartedAt.Time), time.Minute, "failed within the step timeout: %+v", st)
		}
	}
	assert.True(t, leaseExists(t, frozenPV), "nothing but the cordon was tried")
	waitFor(nextKey, "the next request started and Succeeded", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseSucceeded })
	assert.False(t, leaseExists(t, nextPV), "the next request released its Lease")
	waitFor(h.key, "the slot holder Succeeded", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseSucceeded })
}
