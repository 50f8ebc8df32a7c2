package remediationrequest_test

// Regression tests for the fail-closed issue: each one stages what a careful operator
// or a hostile request author could do, on a real API server, and checks that the
// controller refuses, explains, and leaves the Lease and the node as they were.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/test/testenv"
)

// withPolicyDir runs the controller with the CUE policy written to a temp dir.
func withPolicyDir(t *testing.T, src string) func(*remediationrequest.Reconciler) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(src), 0o600))
	e, err := policies.FromDir(dir)
	require.NoError(t, err)
	return func(r *remediationrequest.Reconciler) { r.Policy = e }
}

// allowEverything is the policy a careless or hostile Git commit could bring: it
// allows the Lease-only playbook for any facts.
const allowEverything = `package policies

#Policy: {
	input: _
	decision: {
		allowed:  true
		playbook: "node-shutdown"
		rule:     "allow-everything"
		reasons: ["this policy allows everything"]
		message: "Allowed without looking at the facts."
	}
}
`

// unreachableHolder stages a Lease whose holder lost the control plane: Ready
// Unknown, the unreachable taint, and a node Lease last renewed ten minutes ago.
func unreachableHolder(t *testing.T, name string, now time.Time) {
	t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintUnreachable, Effect: corev1.TaintEffectNoExecute}}},
	}
	create(t, node)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", LastTransitionTime: metav1.NewTime(now.Add(-10 * time.Minute))}}
	require.NoError(t, env.Client.Status().Update(context.Background(), node))
	create(t, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: &metav1.MicroTime{Time: now.Add(-10 * time.Minute)}},
	})
	leaseHeldBy(t, "pvc-"+name, name)
}

// leaseHeldBy creates a Trident Lease and the PV it is named after.
func leaseHeldBy(t *testing.T, pv, holder string) {
	t.Helper()
	create(t, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)},
	})
	create(t, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: pv}},
		},
	})
}

func requestFor(t *testing.T, name string, target v1alpha1.Target, change func(*v1alpha1.RemediationRequestSpec)) client.ObjectKey {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: target,
			Reason: "LeaseRetained: cryptsetup luksOpen failed (INC-4711)",
		},
	}
	if change != nil {
		change(&rr.Spec)
	}
	create(t, rr)
	return client.ObjectKeyFromObject(rr)
}

func leaseExists(t *testing.T, name string) bool {
	t.Helper()
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "trident", Name: name}, &coordinationv1.Lease{})
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

func nodeCordoned(t *testing.T, name string) bool {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n))
	return n.Spec.Unschedulable
}

func terminal(rr *v1alpha1.RemediationRequest) bool {
	switch rr.Status.Phase {
	case v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		return true
	}
	return false
}

// TestPermissivePolicyIsHeldByTheFloor: a policy that allows everything still cannot
// release the Lease of a healthy holder whose app pod runs, nor of an unreachable
// holder nobody fenced. The floor refuses both, names the invariant, and leaves the
// Lease and the node as they were. Before the floor, both Leases were deleted.
func TestPermissivePolicyIsHeldByTheFloor(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	clock := clocktesting.NewFakePassiveClock(time.Now().Add(time.Hour).Truncate(time.Second))
	startManager(t, withClock(clock), withPolicyDir(t, allowEverything))

	healthyHolder(t, "envtest-floor-healthy", clock.Now())
	unreachableHolder(t, "envtest-floor-unreach", clock.Now())
	for _, tc := range []struct {
		name, pv, node, invariant, reason string
	}{
		{"healthy", "pvc-envtest-floor-healthy", "envtest-floor-healthy", "healthy-holder-pods-running", "HealthyHolderPodsRunning"},
		{"unreach", "pvc-envtest-floor-unreach", "envtest-floor-unreach", "holder-not-fenced", "HolderNotFenced"},
	} {
		key := requestFor(t, "floor-"+tc.name, v1alpha1.Target{PersistentVolume: tc.pv}, nil)
		rr := waitFor(t, key, 20*time.Second, "a terminal phase", terminal)
		assert.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, tc.name)
		assert.Equal(t, tc.invariant, rr.Status.Decision.Rule, tc.name)
		c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionAccepted)
		require.NotNil(t, c)
		assert.Equal(t, tc.reason, c.Reason, tc.name)
		assert.Contains(t, rr.Status.Decision.Message, "allow-everything", "the message names the policy rule the floor overrode")
		// Failed closed, and said so: a Warning Event naming the invariant (the log and
		// remediator_decisions_failed_closed_total{reason="safety-floor"}: see
		// TestFailedClosedDecisionsAreCounted).
		warningEvent(t, key.Name, v1alpha1.EventRejected, "Policy rule "+tc.invariant+": Refused by the safety floor (invariant "+tc.invariant+")")
		assert.True(t, leaseExists(t, tc.pv), "%s: the Lease must be kept", tc.name)
		assert.False(t, nodeCordoned(t, tc.node), "%s: the node must not be cordoned", tc.name)
	}
}

// TestCustomRuleNameBecomesAValidReason: a rule name with a leading digit, dots and
// non-ASCII used to become an invalid condition reason, so every status patch of
// the request failed and it was never decided visibly.
func TestCustomRuleNameBecomesAValidReason(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident")
	startManager(t, withPolicyDir(t, `package policies

#Policy: {
	input: _
	decision: {
		allowed: false
		rule:    "1st.règle-locale"
		reasons: ["house rule"]
		message: "Refused by the house rule."
	}
}
`))
	key := requestFor(t, "custom-rule", v1alpha1.Target{PersistentVolume: "pvc-custom-rule"}, nil)
	rr := waitFor(t, key, 20*time.Second, "Rejected", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseRejected })
	assert.Equal(t, "1st.règle-locale", rr.Status.Decision.Rule)
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionAccepted)
	require.NotNil(t, c)
	assert.Equal(t, "Rule1stRgleLocale", c.Reason)
	p := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	require.NotNil(t, p)
	assert.Contains(t, p.Message, "1st.règle-locale", "the original rule name is kept in the message")
}

// TestMissingHolderNodeIsNotAShutdown: a holderIdentity that names no Node (a
// misspelling, or a Node deleted while its machine runs) used to count as shut down
// and the Lease was deleted at once.
func TestMissingHolderNodeIsNotAShutdown(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident")
	startManager(t)
	leaseHeldBy(t, "pvc-envtest-gone", "envtest-gone.example.internal")
	key := requestFor(t, "gone-holder", v1alpha1.Target{PersistentVolume: "pvc-envtest-gone"}, nil)
	rr := waitFor(t, key, 20*time.Second, "a terminal phase", terminal)
	assert.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase)
	assert.Equal(t, "holder-node-not-found", rr.Status.Decision.Rule)
	assert.Equal(t, v1alpha1.NodeNotFound, rr.Status.Facts.Node.State)
	assert.Contains(t, rr.Status.Decision.Message, "spelled differently")
	assert.True(t, leaseExists(t, "pvc-envtest-gone"))
}

// TestFencingCoversOnlyTheNodeItNames: a confirmation written about one holder used
// to be honoured for whichever node held the Lease.
func TestFencingCoversOnlyTheNodeItNames(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	// Ten minutes after the Leases were created: past the five-minute gate.
	clock := clocktesting.NewFakePassiveClock(time.Now().Add(10 * time.Minute).Truncate(time.Second))
	startManager(t, withClock(clock))
	unreachableHolder(t, "envtest-fence-b", time.Now())
	key := requestFor(t, "fence-other", v1alpha1.Target{PersistentVolume: "pvc-envtest-fence-b"}, func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: "envtest-fence-a"}
	})
	rr := waitFor(t, key, 20*time.Second, "a terminal phase", terminal)
	assert.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase)
	assert.Equal(t, "fencing-names-another-node", rr.Status.Decision.Rule)
	assert.True(t, leaseExists(t, "pvc-envtest-fence-b"))

	// Fencing that names the holder releases it.
	require.NoError(t, env.Client.Get(context.Background(), key, rr))
	rr.Spec.Fencing.Node = "envtest-fence-b"
	require.NoError(t, env.Client.Update(context.Background(), rr))
	rr = waitFor(t, key, 20*time.Second, "Succeeded", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseSucceeded })
	assert.Equal(t, "fenced-unreachable", rr.Status.Decision.Playbook)
	assert.False(t, leaseExists(t, "pvc-envtest-fence-b"))
}

// pdbFor blocks evictions of the pods labelled app=name, the way a
// PodDisruptionBudget with no disruption left does.
func pdbFor(t *testing.T, ns, name string) *policyv1.PodDisruptionBudget {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}
	create(t, pdb)
	processed(t, pdb)
	return pdb
}

// processed plays the disruption controller: the budget is observed and allows no
// disruption. (An unprocessed budget makes the Eviction API ask the client to retry
// after 10 s, which client-go does by itself.)
func processed(t *testing.T, pdb *policyv1.PodDisruptionBudget) {
	t.Helper()
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	require.NoError(t, env.Client.Status().Update(context.Background(), pdb))
}

// running plays the kubelet: the pod runs and is Ready, so that the Eviction API
// consults its PodDisruptionBudget (a Pending pod is evicted regardless).
func running(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	require.NoError(t, env.Client.Status().Update(context.Background(), p))
}

func label(t *testing.T, obj client.Object, labels map[string]string) {
	t.Helper()
	before := obj.DeepCopyObject().(client.Object)
	obj.SetLabels(labels)
	require.NoError(t, env.Client.Patch(context.Background(), obj, client.MergeFrom(before)))
}

// TestDryRunMidRunAborts: switching a running playbook to DryRun through the API used
// to be ignored while observedGeneration moved on as if it had been honoured.
func TestDryRunMidRunAborts(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	clock := clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	startManager(t, withClock(clock))
	name := "envtest-abort"
	pod := healthyHolder(t, name, clock.Now())
	label(t, pod, map[string]string{"app": name})
	running(t, pod)
	pdbFor(t, "app", name)

	key := requestFor(t, "abort", v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: name}}, nil)
	waitFor(t, key, 20*time.Second, "eviction held by the PodDisruptionBudget", func(rr *v1alpha1.RemediationRequest) bool {
		for _, st := range rr.Status.Steps {
			if st.Name == "deleteAffectedPods" && strings.Contains(st.Message, "Eviction refused") {
				return true
			}
		}
		return false
	})
	require.True(t, nodeCordoned(t, name))

	rr := &v1alpha1.RemediationRequest{}
	require.NoError(t, env.Client.Get(ctx, key, rr))
	rr.Spec.Mode = v1alpha1.ModeDryRun
	require.NoError(t, env.Client.Update(ctx, rr))
	rr = waitFor(t, key, 20*time.Second, "Failed", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseFailed })
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionSucceeded)
	require.NotNil(t, c)
	assert.Equal(t, v1alpha1.ReasonAborted, c.Reason)
	assert.Contains(t, c.Message, "DryRun")
	assert.Equal(t, rr.Generation, rr.Status.ObservedGeneration)
	assert.True(t, leaseExists(t, "pvc-"+name), "the Lease must be kept")
	assert.False(t, nodeCordoned(t, name), "the node must be uncordoned")
	assert.Equal(t, v1alpha1.StepSkipped, stepState(rr, "deleteLease"))
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	assert.Nil(t, pod.DeletionTimestamp, "the pod must not be evicted")
}

// TestStatusCannotChooseWhichPodsAreEvicted: the healthy playbook used to evict the
// pods recorded in status, so anyone who could write status could have an unrelated
// pod evicted. Evictions now follow a live listing of the holder's pods that use the
// volume.
func TestStatusCannotChooseWhichPodsAreEvicted(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", "bystander", corev1.NamespaceNodeLease)
	clock := clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	startManager(t, withClock(clock))
	name := "envtest-forged"
	pod := healthyHolder(t, name, clock.Now())
	label(t, pod, map[string]string{"app": name})
	running(t, pod)
	pdb := pdbFor(t, "app", name)
	bystander := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bystander", Name: "db-0"},
		Spec:       corev1.PodSpec{NodeName: "elsewhere", Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}}},
	}
	create(t, bystander)

	key := requestFor(t, "forged", v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: name}}, nil)
	waitFor(t, key, 20*time.Second, "eviction held by the PodDisruptionBudget", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "deleteAffectedPods") == v1alpha1.StepRunning && rr.Status.Facts != nil
	})
	// Forge status: add the bystander to the pods the decision recorded.
	forged := []any{
		map[string]any{"namespace": "app", "name": name, "uid": string(pod.UID), "node": name, "ready": false},
		map[string]any{"namespace": "bystander", "name": "db-0", "uid": string(bystander.UID), "node": name, "ready": true},
	}
	// The controller writes the request too (the refused eviction's retries).
	require.NoError(t, retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(requests.GVK)
		if err := env.Client.Get(ctx, key, u); err != nil {
			return err
		}
		if err := unstructured.SetNestedSlice(u.Object, forged, "status", "facts", "affectedPods"); err != nil {
			return err
		}
		return env.Client.Status().Update(ctx, u)
	}))

	// Two eviction retries (every 5 s), then let the real pod go.
	time.Sleep(11 * time.Second)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(bystander), bystander))
	assert.Nil(t, bystander.DeletionTimestamp, "a pod named only in status must not be evicted")
	require.NoError(t, env.Client.Delete(ctx, pdb))
	waitFor(t, key, 20*time.Second, "the real pod evicted", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "deleteAffectedPods") == v1alpha1.StepSucceeded
	})
	finishTermination(t, pod)
	rr := waitFor(t, key, 30*time.Second, "Succeeded", func(rr *v1alpha1.RemediationRequest) bool { return terminal(rr) })
	assert.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "%+v", rr.Status.Conditions)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(bystander), bystander))
	assert.Nil(t, bystander.DeletionTimestamp)
}

// TestUndecodableRequestDoesNotStallOthers: with the admission rule on the window
// duration removed (a CRD installed without it, or an older one), a request whose
// duration overflows cannot be decoded into the Go type. It used to fail every list
// of requests, so the informer never synced and no request was decided. Now the
// others are decided within seconds and the bad one is reported by name.
func TestUndecodableRequestDoesNotStallOthers(t *testing.T) {
	ctx := context.Background()
	e := testenv.StartT(t)
	c := e.Client
	for _, ns := range []string{"remediator", "trident"} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	dropDurationRule(t, c)

	poison := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"remediation": "release-luks-lease", "target": map[string]any{"persistentVolume": "pvc-poison"},
		"reason": "anyone who may create a request", "maintenanceWindow": map[string]any{"schedule": "@daily", "duration": "9999999999h"},
	}}}
	poison.SetGroupVersionKind(testenv.GVK)
	poison.SetNamespace("remediator")
	poison.SetName("poison")
	require.Eventually(t, func() bool { return c.Create(ctx, poison) == nil }, 10*time.Second, 100*time.Millisecond,
		"the poison request must pass admission once the rule is gone")

	startManagerOn(t, e.Config)
	good := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "good"},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target: v1alpha1.Target{PersistentVolume: "pvc-good"}, Reason: "an ordinary request next to the poison"},
	}
	require.NoError(t, c.Create(ctx, good))
	require.Eventually(t, func() bool {
		got := &v1alpha1.RemediationRequest{}
		return c.Get(ctx, client.ObjectKeyFromObject(good), got) == nil && got.Status.Phase != ""
	}, 10*time.Second, 100*time.Millisecond, "the good request must be decided within 10 s")

	require.Eventually(t, reportedUndecodable(ctx, c, "poison"), 10*time.Second, 100*time.Millisecond, "the poison request must be reported by name")

	// A poison request created while the controller runs comes by the watch, whose
	// decode of it fails: the informer lists again, and the requests after it are
	// decided as well.
	late := poison.DeepCopy()
	late.SetName("poison-late")
	late.SetResourceVersion("")
	require.NoError(t, c.Create(ctx, late))
	lateAt := time.Now()
	after := good.DeepCopy()
	after.ObjectMeta = metav1.ObjectMeta{Namespace: "remediator", Name: "after"}
	require.NoError(t, c.Create(ctx, after))
	require.Eventually(t, func() bool {
		got := &v1alpha1.RemediationRequest{}
		return c.Get(ctx, client.ObjectKeyFromObject(after), got) == nil && got.Status.Phase != ""
	}, 20*time.Second, 100*time.Millisecond, "a request created after a poison one must be decided within 20 s")
	t.Logf("the request after the late poison decided %s after it", time.Since(lateAt).Round(time.Millisecond))
	require.Eventually(t, reportedUndecodable(ctx, c, "poison-late"), 20*time.Second, 100*time.Millisecond, "the poison request created later must be reported by name")
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(testenv.GVK)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(late), got))
	assert.Empty(t, got.Object["status"], "what the controller decoded of a poison request is never written")
	assert.NotContains(t, got.GetAnnotations(), v1alpha1.AnnotationUndecodable)
}

// reportedUndecodable reports whether request name in namespace remediator carries
// the Undecodable Warning about its duration.
func reportedUndecodable(ctx context.Context, c client.Client, name string) func() bool {
	return func() bool {
		events := &corev1.EventList{}
		if c.List(ctx, events, client.InNamespace("remediator")) != nil {
			return false
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == name && ev.Reason == requests.EventUndecodable && strings.Contains(ev.Message, "duration") {
				return true
			}
		}
		return false
	}
}

// dropDurationRule removes the CEL rule on spec.maintenanceWindow.duration from the
// installed CRD, as an older or hand-edited CRD would lack it.
func dropDurationRule(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "remediationrequests.remediator.io"}, crd))
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	require.NoError(t, err)
	v := versions[0].(map[string]any)
	path := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "maintenanceWindow", "properties", "duration"}
	duration, found, err := unstructured.NestedMap(v, path...)
	require.NoError(t, err)
	require.True(t, found)
	require.Contains(t, duration, "x-kubernetes-validations", "the CRD must carry the rule this test removes")
	delete(duration, "x-kubernetes-validations")
	require.NoError(t, unstructured.SetNestedMap(v, duration, path...))
	versions[0] = v
	require.NoError(t, unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"))
	require.NoError(t, c.Update(ctx, crd))
}

// TestRequestsOutsideTheNamespacesAreIgnored: --request-namespaces used to restrict
// only the cache; the live reads behind it still reconciled, and counted for the
// cap, a tenant's request in any namespace.
func TestRequestsOutsideTheNamespacesAreIgnored(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "tenant-a", "trident")
	startManager(t, func(r *remediationrequest.Reconciler) { r.Namespaces = []string{"remediator"} })
	tenant := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "cordon-everything"},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target: v1alpha1.Target{PersistentVolume: "pvc-tenant"}, Reason: "a tenant who may create requests"},
	}
	create(t, tenant)
	key := requestFor(t, "in-scope", v1alpha1.Target{PersistentVolume: "pvc-in-scope"}, nil)
	waitFor(t, key, 20*time.Second, "the in-scope request decided", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase != "" })
	// Give the controller every chance to pick up the tenant's request too.
	time.Sleep(2 * time.Second)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(tenant), tenant))
	assert.Empty(t, tenant.Status.Phase, "a request outside --request-namespaces must not be decided")
	assert.Empty(t, tenant.Finalizers)
}
