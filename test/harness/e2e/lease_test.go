//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/cluster"
)

// waitPhase waits until the request reaches one of the phases.
func waitPhase(t *testing.T, key types.NamespacedName, timeout time.Duration, phases ...v1alpha1.Phase) *v1alpha1.RemediationRequest {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(context.Background(), key, rr))
		assert.Contains(c, phases, rr.Status.Phase, describe(rr))
		assert.Equal(c, rr.Generation, rr.Status.ObservedGeneration, "observedGeneration; %s", describe(rr))
	}, timeout, poll, "%s in %v", key, phases)
	return rr
}

func leaseExists(t *testing.T, name string) bool {
	t.Helper()
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: tridentNS, Name: name}, &coordinationv1.Lease{})
	if !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
	return err == nil
}

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	return kubernetes.NewForConfigOrDie(cfg)
}

// extraNode creates a kwok-managed node for one test and deletes it afterwards.
func extraNode(t *testing.T, prefix string, managed bool, taints ...corev1.Taint) string {
	t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   prefix + "-" + rand.String(5),
			Labels: map[string]string{"type": "kwok", "kubernetes.io/os": "linux"},
		},
		Spec: corev1.NodeSpec{Taints: taints},
	}
	if managed {
		n.Annotations = map[string]string{"kwok.x-k8s.io/node": "fake"}
	}
	create(t, n)
	return n.Name
}

// unreachableNode makes a kwok node and then cuts its heartbeats, so the real
// kube-controller-manager marks it Ready=Unknown and taints it unreachable.
func unreachableNode(t *testing.T) string {
	t.Helper()
	name := extraNode(t, "e2e-cutoff", true)
	ctx := context.Background()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n := &corev1.Node{}
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Name: name}, n))
		require.True(c, nodeReady(n), "node %s is not Ready: %+v", name, n.Status.Conditions)
		assert.NoError(c, k8s.Get(ctx, types.NamespacedName{Namespace: corev1.NamespaceNodeLease, Name: name}, &coordinationv1.Lease{}), "the node Lease of %s", name)
	}, 60*time.Second, poll, "%s Ready", name)
	require.NoError(t, cluster.Disconnect(ctx, clientset(t), name))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n := &corev1.Node{}
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Name: name}, n))
		assert.False(c, nodeReady(n), "node %s is still Ready", name)
		assert.True(c, slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnreachable }),
			"node %s taints %+v lack %s", name, n.Spec.Taints, corev1.TaintNodeUnreachable)
	}, 90*time.Second, poll, "%s unreachable", name)
	return name
}

func appPod(t *testing.T, ns, name, node, claim string, labels map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
	create(t, p)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &corev1.Pod{}
		require.NoError(c, k8s.Get(context.Background(), client.ObjectKeyFromObject(p), got))
		assert.Equal(c, corev1.PodRunning, got.Status.Phase, "pod %s phase", name)
	}, 30*time.Second, poll, "pod %s Running", name)
	return p
}

// graceRecorder watches pods in a namespace and records the grace period of every
// deletion it sees, to prove nothing was deleted with grace 0.
func graceRecorder(t *testing.T, ns string) func() map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := clientset(t).CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[string]int64{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil {
				continue
			}
			mu.Lock()
			if _, ok := seen[p.Name]; !ok {
				seen[p.Name] = *p.DeletionGracePeriodSeconds
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return func() map[string]int64 {
		mu.Lock()
		defer mu.Unlock()
		return maps(seen)
	}
}

func maps(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func condition(rr *v1alpha1.RemediationRequest, t string) *metav1.Condition {
	return meta.FindStatusCondition(rr.Status.Conditions, t)
}

func TestShutdownHolderLeaseDeleted(t *testing.T) {
	startController(t)
	ns := namespace(t, "e2e-shutdown")
	node := extraNode(t, "e2e-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, ns, node, 20*time.Minute, 1)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "holder powered off after a kernel panic during cryptsetup",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.Equal(t, "node-shutdown", string(decision(t, rr).Playbook), describe(rr))
	assert.False(t, leaseExists(t, pv), "the Lease still exists")
	if c := condition(rr, v1alpha1.ConditionAccepted); assert.NotNil(t, c, "no Accepted condition") {
		assert.Equal(t, "NodeShutdown", c.Reason, "Accepted = %+v", c)
		assert.Equal(t, metav1.ConditionTrue, c.Status, "Accepted = %+v", c)
	}
}

// TestUnreachableHolderNeedsFencingAndAge: the Lease of a holder cut off from the
// control plane goes only with fencing that names that very holder, and only once the
// Lease is old enough by server time. Lease age counts from the later of
// creationTimestamp (which a test cannot backdate) and acquireTime, so this controller
// runs on a copy of the real policies whose 300s gate is shortened to
// shortUnreachableGate (shortGatePolicies); production keeps the runbook's 5 minutes.
func TestUnreachableHolderNeedsFencingAndAge(t *testing.T) {
	// In parallel with the other tests that mostly wait out a Lease-age gate or a node's
	// grace (make test's budget), so its controller decides only this namespace's requests.
	t.Parallel()
	ns := namespace(t, "e2e-unreach")
	startController(t, "--policies-dir", shortGatePolicies(t), "--request-namespaces", ns)
	ctx := context.Background()
	node := unreachableNode(t)
	// The holder's clock claims the Lease was acquired an hour ago; that must not make
	// it old: the age counts from its creation, just now.
	pv, _ := luksVolume(t, ns, node, time.Hour, 0)
	l := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, l))
	created := l.CreationTimestamp.Time
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "holder lost the control plane during cryptsetup",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, "without fencing: %s", describe(rr))
	require.Equal(t, "unreachable-not-fenced", string(decision(t, rr).Rule), "without fencing: %s", describe(rr))
	require.Contains(t, rr.Status.Decision.Message, "spec.fencing.confirmed", "the rejection must explain fencing")
	require.Contains(t, rr.Status.Decision.Message, "spec.fencing.node: "+node, "the rejection must name the holder")
	require.True(t, leaseExists(t, pv), "the rejection must leave the Lease")

	// Fencing that names another node says nothing about the holder.
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: "kwok-node-0"}
	})
	rr = waitPhase(t, key, 30*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, "fencing names kwok-node-0: %s", describe(rr))
	require.Equal(t, "fencing-names-another-node", string(decision(t, rr).Rule), "fencing names kwok-node-0: %s", describe(rr))
	require.True(t, leaseExists(t, pv), "fencing names kwok-node-0: the Lease was deleted")

	// Fenced, but the Lease is younger than the gate by server time.
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) { s.Fencing.Node = node })
	rr = waitPhase(t, key, 30*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	require.Equal(t, "unreachable-lease-too-young", string(decision(t, rr).Rule), "fenced but young: %s", describe(rr))
	require.NotNil(t, rr.Status.Decision.RecheckAt, "fenced but young: %s", describe(rr))
	require.True(t, leaseExists(t, pv), "fenced but young: the Lease was deleted")
	// The age must count from creationTimestamp, not the backdated acquireTime.
	lf := rr.Status.Facts.Lease
	require.NotNil(t, lf, "no Lease facts")
	require.Less(t, time.Duration(lf.AgeSeconds)*time.Second, shortUnreachableGate, "Lease age: %+v", lf)
	require.True(t, strings.HasPrefix(lf.AgeFrom, "creationTimestamp"), "the age must count from creationTimestamp: %+v", lf)
	// The controller's reading of the server's clock errs up to a second low (so that
	// no age gate opens early), and status keeps whole seconds: the recheck may come up
	// to two seconds before the Lease is old enough, when the floor refuses once more.
	assert.WithinRange(t, rr.Status.Decision.RecheckAt.Time, created.Add(shortUnreachableGate-2*time.Second), created.Add(shortUnreachableGate+5*time.Second),
		"recheckAt: want when the Lease is %s old (created %s)", shortUnreachableGate, created)

	rr = waitPhase(t, key, shortUnreachableGate+60*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "once old enough: %s", describe(rr))
	require.Equal(t, "fenced-unreachable", string(decision(t, rr).Playbook), "once old enough: %s", describe(rr))
	require.Equal(t, "unreachable-fenced", string(rr.Status.Decision.Rule), "once old enough: %s", describe(rr))
	require.False(t, leaseExists(t, pv), "once old enough: the Lease still exists")
	for _, st := range rr.Status.Steps {
		if st.Name == "deleteLease" && assert.NotNil(t, st.StartedAt, "deleteLease has no startedAt: %+v", st) {
			assert.False(t, st.StartedAt.Time.Before(created.Add(shortUnreachableGate)),
				"the Lease (created %s) was deleted before it was %s old: %+v", created, shortUnreachableGate, st)
		}
	}
}

// TestHolderNodeNotFound: the holder of a Lease has no Node object any more (deleted
// while its machine may still run; the same holds for a holderIdentity spelled
// differently from the Node name). That is no proof of a shutdown, even though the
// Node carried the out-of-service taint before it was deleted: the request is rejected
// and the Lease kept until fencing names the holder, and then the age gate applies.
func TestHolderNodeNotFound(t *testing.T) {
	startController(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-notfound")
	node := extraNode(t, "e2e-gone", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, ns, node, 20*time.Minute, 1)
	require.NoError(t, k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8s.Get(ctx, types.NamespacedName{Name: node}, &corev1.Node{})
		assert.True(c, apierrors.IsNotFound(err), "get node %s: %v", node, err)
	}, 30*time.Second, poll, "node %s gone", node)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "the holder's Node object is gone; its machine may be gone too",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	require.Equal(t, "holder-node-not-found", string(decision(t, rr).Rule), describe(rr))
	if n := rr.Status.Facts.Node; assert.NotNil(t, n, "no holder node facts") {
		assert.Equal(t, v1alpha1.NodeNotFound, n.State, "holder node facts = %+v", n)
	}
	if c := condition(rr, v1alpha1.ConditionAccepted); assert.NotNil(t, c, "no Accepted condition") {
		assert.Equal(t, metav1.ConditionFalse, c.Status, "Accepted = %+v", c)
		assert.Equal(t, "HolderNodeNotFound", c.Reason, "Accepted = %+v", c)
	}
	require.True(t, leaseExists(t, pv), "the Lease of a holder without a Node was deleted")

	// Fencing that names the holder is not enough on its own: the Lease, created just
	// now, is younger than the (embedded, 300s) gate.
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: node}
	})
	rr = waitPhase(t, key, 30*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, "not-found-lease-too-young", string(decision(t, rr).Rule), "fenced but young: %s", describe(rr))
	require.NotNil(t, rr.Status.Decision.RecheckAt, "fenced but young: %s", describe(rr))
	time.Sleep(2 * time.Second) // give a wrongly acting controller the chance to act
	assert.True(t, leaseExists(t, pv), "the Lease was deleted before the age gate")
}

// updateSpec changes a request's spec, as an amended pull request would, retrying on
// conflicts with the controller's status patches.
func updateSpec(t *testing.T, key types.NamespacedName, change func(*v1alpha1.RemediationRequestSpec)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rr := &v1alpha1.RemediationRequest{}
		if err := k8s.Get(context.Background(), key, rr); err != nil {
			return err
		}
		change(&rr.Spec)
		return k8s.Update(context.Background(), rr)
	})
	require.NoError(t, err)
}

func TestHealthyHolderMovesWorkload(t *testing.T) {
	startController(t)
	for _, tc := range []struct {
		name            string
		node            string
		alreadyCordoned bool
		podTarget       bool // target a pod the playbook moves, as the seed's operator would
	}{
		{"uncordoned afterwards", "kwok-node-0", false, false},
		{"already cordoned stays cordoned", "kwok-node-1", true, false},
		{"pod target", "kwok-node-0", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t, "e2e-healthy")
			if tc.alreadyCordoned {
				setUnschedulable(t, tc.node, true)
				t.Cleanup(func() { setUnschedulable(t, tc.node, false) })
			}
			grace := graceRecorder(t, ns)
			pv, pvc := luksVolume(t, ns, tc.node, 3*time.Minute, 2)
			appPod(t, ns, "web-0", tc.node, pvc, nil)
			appPod(t, ns, "web-1", tc.node, pvc, nil)
			target := v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: ns, Name: pvc}}
			if tc.podTarget {
				// web-0 is one of the pods the playbook evicts: the Lease stays the
				// decided one after its target pod is gone.
				target = v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: ns, Name: "web-0"}}
			}
			key := request(t, ns, v1alpha1.RemediationRequestSpec{
				Remediation: v1alpha1.RemediationReleaseLUKSLease,
				Target:      target,
				Reason:      "LeaseRetained events: cryptsetup luksOpen failed repeatedly",
			})
			rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
			require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
			require.Equal(t, "healthy-move-workload", string(decision(t, rr).Playbook), describe(rr))
			assert.False(t, leaseExists(t, pv), "the Lease still exists")
			for _, name := range []string{"web-0", "web-1"} {
				err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
				assert.True(t, apierrors.IsNotFound(err), "pod %s not gone: %v", name, err)
			}
			// The eviction kept each pod's own 30s grace period; kwok's simulated
			// kubelet then finishes the termination, as a kubelet would.
			g := grace()
			assert.Equal(t, int64(30), g["web-0"], "deletion grace period of web-0 (all seen: %v)", g)
			assert.Equal(t, int64(30), g["web-1"], "deletion grace period of web-1 (all seen: %v)", g)
			n := &corev1.Node{}
			require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: tc.node}, n))
			assert.Equal(t, tc.alreadyCordoned, n.Spec.Unschedulable, "node %s unschedulable", tc.node)
			assert.Empty(t, n.Annotations[remediations.CordonedByAnnotation], "node %s keeps the cordon mark: annotations %v", tc.node, n.Annotations)
			var names []string
			for _, st := range rr.Status.Steps {
				names = append(names, st.Name)
				assert.Equal(t, v1alpha1.StepSucceeded, st.State, "step %+v", st)
				assert.NotNil(t, st.StartedAt, "step %+v", st)
				assert.NotNil(t, st.CompletedAt, "step %+v", st)
			}
			assert.Equal(t, []string{"cordon", "deleteAffectedPods", "waitPodsGone", "deleteLease", "uncordon"}, names, "journal")
			if tc.alreadyCordoned {
				assert.Contains(t, rr.Status.Steps[0].Message, "already cordoned", "cordon step message")
			}
			assertKubectlViews(t, key)
		})
	}
}

func setUnschedulable(t *testing.T, node string, v bool) {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: node}, n))
	before := n.DeepCopy()
	n.Spec.Unschedulable = v
	require.NoError(t, k8s.Patch(context.Background(), n, client.MergeFrom(before)))
}

// assertKubectlViews checks what an operator sees with kubectl.
func assertKubectlViews(t *testing.T, key types.NamespacedName) {
	t.Helper()
	kubectl := filepath.Join(root, "bin", "kubectl")
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "rr", "-n", key.Namespace, key.Name).CombinedOutput()
	require.NoError(t, err, "kubectl get rr:\n%s", out)
	header := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	assert.Equal(t, []string{"NAME", "REMEDIATION", "TARGET", "PHASE", "DECISION", "STEP", "AGE"}, header, "kubectl get rr columns")
	assert.Contains(t, string(out), "Succeeded", "kubectl get rr")
	assert.Contains(t, string(out), "healthy-lease-stuck", "kubectl get rr")
	// The long Message column only with -o wide, so that `kubectl get rr -w` stays one
	// line per request.
	out, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "rr", "-o", "wide", "-n", key.Namespace, key.Name).CombinedOutput()
	require.NoError(t, err, "kubectl get rr -o wide:\n%s", out)
	header = strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	assert.Equal(t, []string{"NAME", "REMEDIATION", "TARGET", "PHASE", "DECISION", "STEP", "MESSAGE", "AGE"}, header, "kubectl get rr -o wide columns")
	assert.Contains(t, string(out), "Playbook healthy-move-workload completed", "kubectl get rr -o wide's Message column")
	// The documented ways to wait for a request in a script: its Succeeded condition,
	// and Ready (kstatus), which a Succeeded request meets.
	for _, cond := range []string{"Succeeded", "Ready"} {
		out, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "wait", "--for=condition="+cond, "--timeout=10s",
			"-n", key.Namespace, "rr/"+key.Name).CombinedOutput()
		require.NoError(t, err, "kubectl wait --for=condition=%s:\n%s", cond, out)
		assert.Contains(t, string(out), "condition met")
	}
	// kubectl explain reads the CRD's descriptions: each fencing method is described.
	out, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "explain", "remediationrequest.spec.fencing.method").CombinedOutput()
	require.NoError(t, err, "kubectl explain:\n%s", out)
	for _, m := range []v1alpha1.FencingMethod{v1alpha1.FencingNodeShutdown, v1alpha1.FencingTridentNodeContainerStopped, v1alpha1.FencingLogsVerified} {
		// "- NodeShutdown: the node was powered off ...", not only the enum's list.
		assert.Regexp(t, `- `+string(m)+`: \w+`, string(out), "kubectl explain describes the fencing method %s", m)
	}
	out, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "describe", "rr", "-n", key.Namespace, key.Name).CombinedOutput()
	require.NoError(t, err, "kubectl describe rr:\n%s", out)
	for _, want := range []string{"healthy-move-workload", "PlaybookCompleted", "Step 1/5 cordon succeeded",
		"Step 4/5 deleteLease succeeded: Deleted Lease", "Step 5/5 uncordon succeeded", "Playbook healthy-move-workload completed"} {
		assert.Contains(t, string(out), want, "kubectl describe rr")
	}
}

// TestHealthyYoungLeaseRejected: a healthy holder without LeaseRetained events may
// still be running cryptsetup, so its Lease is left alone until it is old enough by
// server time; then the request is re-evaluated by itself and the workload is moved.
// The holder's acquireTime claims 15 minutes, older than the runbook's 600s, which
// must not count. The controller runs on a copy of the real policies whose 600s gate
// is shortened to shortHealthyGate (shortGatePolicies), since creationTimestamp cannot
// be backdated; production keeps the runbook's 10 minutes.
func TestHealthyYoungLeaseRejected(t *testing.T) {
	// In parallel with the other tests that mostly wait out a Lease-age gate or a node's
	// grace (make test's budget), so its controller decides only this namespace's requests.
	t.Parallel()
	ns := namespace(t, "e2e-young")
	startController(t, "--policies-dir", shortGatePolicies(t), "--request-namespaces", ns)
	ctx := context.Background()
	// No other parallel test uses this node.
	const node = "kwok-node-2"
	pv, _ := luksVolume(t, ns, node, 15*time.Minute, 0)
	l := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, l))
	created := l.CreationTimestamp.Time
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "pods slow to start, suspect the Lease",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	d := decision(t, rr)
	require.Equal(t, "healthy-operation-may-be-running", string(d.Rule), describe(rr))
	require.Contains(t, d.Message, "-c trident-main", describe(rr))
	// kubectl wait and kstatus tell a rejection from a success: Ready is False.
	out, err := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", kubeconfig, "wait", "--for=condition=Ready=false", "--timeout=10s",
		"-n", key.Namespace, "rr/"+key.Name).CombinedOutput()
	require.NoError(t, err, "kubectl wait --for=condition=Ready=false on a Rejected request:\n%s", out)
	require.NotNil(t, d.RecheckAt, describe(rr))
	if c := condition(rr, v1alpha1.ConditionAccepted); assert.NotNil(t, c, "no Accepted condition") {
		assert.Equal(t, metav1.ConditionFalse, c.Status, "Accepted = %+v", c)
		assert.Equal(t, "HealthyOperationMayBeRunning", c.Reason, "Accepted = %+v", c)
		assert.Equal(t, d.Message, c.Message, "Accepted's message")
	}
	// The age must count from creationTimestamp, not the backdated acquireTime.
	if lf := rr.Status.Facts.Lease; assert.NotNil(t, lf, "no Lease facts") {
		assert.Less(t, time.Duration(lf.AgeSeconds)*time.Second, shortHealthyGate, "Lease age: %+v", lf)
		assert.True(t, strings.HasPrefix(lf.AgeFrom, "creationTimestamp"), "the age must count from creationTimestamp: %+v", lf)
	}
	assert.True(t, leaseExists(t, pv), "the Lease was deleted")

	// Old enough by server time, the stuck Lease is released the healthy way.
	rr = waitPhase(t, key, shortHealthyGate+90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "once old enough: %s", describe(rr))
	d = decision(t, rr)
	require.Equal(t, "healthy-lease-stuck", string(d.Rule), "once old enough: %s", describe(rr))
	require.Equal(t, "healthy-move-workload", string(d.Playbook), "once old enough: %s", describe(rr))
	require.False(t, leaseExists(t, pv), "once old enough: the Lease still exists")
	assert.False(t, d.DecidedAt.Time.Before(created.Add(shortHealthyGate)), "allowed at %s, before the Lease (created %s) was %s old", d.DecidedAt, created, shortHealthyGate)
	n := &corev1.Node{}
	if assert.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n)) {
		assert.False(t, n.Spec.Unschedulable, "node %s left cordoned", node)
	}
}

// blockedWorkload stages a healthy holder whose affected pod a PodDisruptionBudget
// protects, so the playbook stops after cordon until the test removes the PDB.
func blockedWorkload(t *testing.T, ns, node string) (pv string, pdb *policyv1.PodDisruptionBudget) {
	t.Helper()
	pv, pvc := luksVolume(t, ns, node, 15*time.Minute, 1)
	appPod(t, ns, "db-0", node, pvc, map[string]string{"app": "db"})
	pdb = &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		},
	}
	create(t, pdb)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &policyv1.PodDisruptionBudget{}
		require.NoError(c, k8s.Get(context.Background(), client.ObjectKeyFromObject(pdb), got))
		assert.Equal(c, got.Generation, got.Status.ObservedGeneration, "PDB status %+v", got.Status)
		assert.Equal(c, int32(1), got.Status.CurrentHealthy, "PDB status %+v", got.Status)
	}, 30*time.Second, poll, "PDB observed")
	return pv, pdb
}

// held is a healthy-holder request stopped after its cordon by a PodDisruptionBudget,
// the moment a crash or failover hurts most: the node is cordoned, nothing else done.
type held struct {
	ns, pv string
	key    types.NamespacedName
	pdb    *policyv1.PodDisruptionBudget
	cordon v1alpha1.StepStatus
}

func heldAfterCordon(t *testing.T, nsPrefix, node, reason string) held {
	t.Helper()
	h := held{ns: namespace(t, nsPrefix)}
	h.pv, h.pdb = blockedWorkload(t, h.ns, node)
	h.key = request(t, h.ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: h.pv},
		Reason:      reason,
	})
	before := waitStep(t, h.key, "deleteAffectedPods", v1alpha1.StepRunning)
	h.cordon = before.Status.Steps[0]
	require.Equal(t, "cordon", string(h.cordon.Name), "journal while held: %+v", before.Status.Steps)
	require.Equal(t, v1alpha1.StepSucceeded, h.cordon.State, "journal while held: %+v", before.Status.Steps)
	return h
}

// waitStep waits until the named step reaches state.
func waitStep(t *testing.T, key types.NamespacedName, step string, state v1alpha1.StepState) *v1alpha1.RemediationRequest {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(context.Background(), key, rr))
		i := slices.IndexFunc(rr.Status.Steps, func(st v1alpha1.StepStatus) bool { return st.Name == step })
		require.GreaterOrEqual(c, i, 0, "no step %s yet: %s %+v", step, rr.Status.Phase, rr.Status.Steps)
		assert.Equal(c, state, rr.Status.Steps[i].State, "step %s: %+v", step, rr.Status.Steps)
	}, 60*time.Second, poll, "%s %s", step, state)
	return rr
}

func TestLeaseReacquiredAfterDecisionIsLeftAlone(t *testing.T) {
	startController(t)
	ctx := context.Background()
	const node = "kwok-node-0"
	h := heldAfterCordon(t, "e2e-race", node, "retained Lease on the db volume")
	key, pv, pdb := h.key, h.pv, h.pdb

	// Another node acquires the Lease after the decision.
	l := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, l))
	l.Spec.HolderIdentity = ptr.To("kwok-node-2")
	l.Spec.AcquireTime = ptr.To(metav1.NowMicro())
	require.NoError(t, k8s.Update(ctx, l))
	require.NoError(t, k8s.Delete(ctx, pdb))

	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseFailed, v1alpha1.PhaseSucceeded)
	// The safety floor compares the live Lease with the decision's right before the
	// deletion and stops the playbook with the breached invariant as the reason.
	c := condition(rr, v1alpha1.ConditionSucceeded)
	require.Equal(t, v1alpha1.PhaseFailed, rr.Status.Phase, "%s; Succeeded=%+v", describe(rr), c)
	require.NotNil(t, c, "no Succeeded condition: %s", describe(rr))
	require.Equal(t, metav1.ConditionFalse, c.Status, "Succeeded=%+v", c)
	require.Equal(t, remediations.InvariantLeaseChanged.Reason(), c.Reason, "Succeeded=%+v", c)
	require.Contains(t, c.Message, `passed from "`+node+`" to "kwok-node-2"`, "Succeeded's message")
	require.Contains(t, c.Message, "nothing was done", "Succeeded's message")
	assert.True(t, slices.ContainsFunc(rr.Status.Steps, func(st v1alpha1.StepStatus) bool {
		return st.Name == "deleteLease" && st.State == v1alpha1.StepFailed && strings.Contains(st.Message, "nothing was done")
	}), "journal %+v, want a failed deleteLease that did nothing", rr.Status.Steps)
	got := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(l), got), "the re-acquired Lease must be left alone")
	require.Equal(t, ptr.To("kwok-node-2"), got.Spec.HolderIdentity, "the re-acquired Lease must be left alone: %+v", got.Spec)
	n := &corev1.Node{}
	if assert.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n)) {
		assert.False(t, n.Spec.Unschedulable, "node %s must be uncordoned by the restore", node)
	}
}

func TestRestartResumesWithoutRepeatingSteps(t *testing.T) {
	ctx := context.Background()
	first := startController(t)
	h := heldAfterCordon(t, "e2e-restart", "kwok-node-1", "retained Lease on the db volume")
	ns, key, pv, pdb, cordonBefore := h.ns, h.key, h.pv, h.pdb, h.cordon

	waitStepEvents(t, ns, key, 1) // cordon succeeded (a step's start is journaled, not an Event)
	first.Kill()
	require.NoError(t, k8s.Delete(ctx, pdb))
	startController(t)
	rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.False(t, leaseExists(t, pv), "the Lease still exists: %s", describe(rr))
	cordonAfter := rr.Status.Steps[0]
	assert.True(t, cordonAfter.StartedAt.Equal(cordonBefore.StartedAt), "cordon re-ran after the restart: before %+v after %+v", cordonBefore, cordonAfter)
	assert.True(t, cordonAfter.CompletedAt.Equal(cordonBefore.CompletedAt), "cordon re-ran after the restart: before %+v after %+v", cordonBefore, cordonAfter)
	assert.Equal(t, cordonBefore.ObjectResourceVersion, cordonAfter.ObjectResourceVersion, "cordon re-ran after the restart: before %+v after %+v", cordonBefore, cordonAfter)
	// Each step done emits one Event (the last, uncordon, in the outcome's): a repeated
	// step would show twice.
	assertStepEventsOnce(t, ns, key, 4)
}

func TestDryRunChangesNothing(t *testing.T) {
	startController(t)
	ns := namespace(t, "e2e-dryrun")
	const node = "kwok-node-2"
	pv, pvc := luksVolume(t, ns, node, 30*time.Minute, 3)
	pod := appPod(t, ns, "web-0", node, pvc, nil)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Mode:        v1alpha1.ModeDryRun,
		Target:      v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: ns, Name: "web-0"}},
		Reason:      "show what would be done for web-0",
	})
	rr := &v1alpha1.RemediationRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(context.Background(), key, rr))
		assert.NotNil(c, rr.Status.Decision, "no decision yet; phase %s", rr.Status.Phase)
	}, 60*time.Second, poll, "dry-run decision")
	require.Equal(t, v1alpha1.PhasePending, rr.Status.Phase, describe(rr))
	require.Equal(t, "healthy-move-workload", string(decision(t, rr).Playbook), describe(rr))
	require.Len(t, rr.Status.Steps, 5, describe(rr))
	for _, st := range rr.Status.Steps {
		assert.Equal(t, v1alpha1.StepPending, st.State, "dry run started step %+v", st)
		assert.Nil(t, st.StartedAt, "dry run started step %+v", st)
	}
	if c := condition(rr, v1alpha1.ConditionProgressing); assert.NotNil(t, c, "no Progressing condition") {
		assert.Equal(t, "DryRun", c.Reason, "Progressing = %+v", c)
	}
	time.Sleep(2 * time.Second) // give a wrongly acting controller the chance to act
	assert.True(t, leaseExists(t, pv), "dry run deleted the Lease")
	n := &corev1.Node{}
	if assert.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: node}, n)) {
		assert.False(t, n.Spec.Unschedulable, "dry run cordoned %s", node)
	}
	got := &corev1.Pod{}
	if assert.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), got), "dry run touched the pod") {
		assert.Nil(t, got.DeletionTimestamp, "dry run touched the pod")
	}
}

func TestDeletedMidRunRestores(t *testing.T) {
	startController(t)
	ctx := context.Background()
	const node = "kwok-node-0"
	h := heldAfterCordon(t, "e2e-abort", node, "retained Lease on the db volume, withdrawn in review")
	ns, key, pv := h.ns, h.key, h.pv
	rr := waitStep(t, key, "deleteAffectedPods", v1alpha1.StepRunning)
	n := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n))
	require.True(t, n.Spec.Unschedulable, "node %s should be cordoned mid-run", node)
	require.NoError(t, k8s.Delete(ctx, rr))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8s.Get(ctx, key, &v1alpha1.RemediationRequest{})
		assert.True(c, apierrors.IsNotFound(err), "get %s: %v", key, err)
	}, 30*time.Second, poll, "request gone")
	if assert.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n)) {
		assert.False(t, n.Spec.Unschedulable, "node %s not restored: still unschedulable", node)
		assert.Empty(t, n.Annotations[remediations.CordonedByAnnotation], "node %s not restored: annotations %v", node, n.Annotations)
	}
	assert.True(t, leaseExists(t, pv), "an aborted request deleted the Lease")
	events := &corev1.EventList{}
	require.NoError(t, k8s.List(ctx, events, client.InNamespace(ns)))
	assert.True(t, slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
		return e.InvolvedObject.Name == key.Name && strings.Contains(e.Message, "Aborted: the request was deleted mid-run; Uncordoned node "+node)
	}), "no Aborted event saying what was restored")
}
