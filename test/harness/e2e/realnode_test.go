//go:build e2e

package e2e

// The incidents on real kubelets (issue 23). Everywhere else in this suite kwok plays
// the kubelets and test/sim plays kubelet's plugin registration; here two real
// kubelets on containerd (`make cluster REAL_NODES=2`, test/realnode) run the pods,
// the project's own Trident-like node plugin (test/tools/tridentnode) stages and
// mounts the volumes and takes a LUKS volume's Lease as Trident does, and the nodes
// drop off the way real nodes do: powered off (kubelet and containers stop) or cut
// off (only the kubelet stops). What is still a model: Trident's controller and a
// real LUKS device (the plugin bind-mounts a directory), and the CSI sidecars (the
// plugin's registrar part removes its socket on SIGTERM as the upstream one does).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/cluster"
)

const (
	// realLabel marks the real kubelet nodes of the local cluster.
	realLabel = "node.remediator.io/real"
	// busybox is the local image every real node has (test/realnode builds it).
	busybox = "remediator.local/busybox:latest"
	// volumesDir is where the project's node plugin keeps each volume's data, one
	// directory per volume handle, shared by the nodes of this one host.
	volumesDir = "/var/lib/remediator-nodes/volumes"
	// notRegistered is kubelet's own message for a volume of a driver it does not
	// know (pkg/volume/csi, seed 000).
	notRegistered = "driver name csi.trident.netapp.io not found in the list of registered CSI drivers"
)

// realNodePair returns two Ready real nodes of the local cluster, each restored after
// the test whatever it did to it. Without them the test fails where E2E_REAL_NODES asks
// for them (make test-e2e) and is skipped elsewhere.
func realNodePair(t *testing.T) (a, b string) {
	t.Helper()
	nodes := readyRealPair(t)
	restoreRealNode(t, nodes[0])
	restoreRealNode(t, nodes[1])
	return nodes[0], nodes[1]
}

// realNode returns the i-th (0 or 1) of two Ready real nodes and restores only that
// one after the test: the tests that use one node each run in parallel, each on its own.
func realNode(t *testing.T, i int) string {
	t.Helper()
	node := readyRealPair(t)[i]
	restoreRealNode(t, node)
	return node
}

func readyRealPair(t *testing.T) []string {
	t.Helper()
	nodes, ok := readyRealNodes(t, 2)
	if !ok {
		t.Skipf("no two Ready real nodes (have %v): `make cluster REAL_NODES=2` runs these tests", nodes)
	}
	return nodes[:2]
}

// restoreRealNode brings the node back after the test whatever it did to it: powered
// on, the out-of-service taint removed, uncordoned, Ready again.
func restoreRealNode(t *testing.T, node string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		if err := cluster.NodeOn(ctx, node); err != nil {
			t.Errorf("powering %s on: %v", node, err)
		}
		n := &corev1.Node{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
			t.Errorf("reading %s: %v", node, err)
			return
		}
		patch := client.MergeFrom(n.DeepCopy())
		var kept []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != v1alpha1.TaintOutOfService {
				kept = append(kept, tn)
			}
		}
		n.Spec.Taints, n.Spec.Unschedulable = kept, false
		if err := k8s.Patch(ctx, n, patch); err != nil {
			t.Errorf("restoring %s: %v", node, err)
		}
		waitNodeReady(t, node, true, 90*time.Second)
	})
}

func waitNodeReady(t *testing.T, node string, ready bool, timeout time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n := &corev1.Node{}
		require.NoError(c, k8s.Get(context.Background(), types.NamespacedName{Name: node}, n))
		assert.Equal(c, ready, nodeReady(n), "node %s Ready: %+v", node, n.Status.Conditions)
	}, timeout, poll, "node %s Ready=%v", node, ready)
}

// realPodSpec is a busybox pod on the real nodes that mounts claim at /data and runs
// script; a TERM handler, if the script sets one, runs within grace seconds.
func realPodSpec(node, claim, script string, grace int64) corev1.PodSpec {
	spec := corev1.PodSpec{
		NodeSelector:                  map[string]string{realLabel: "true"},
		TerminationGracePeriodSeconds: ptr.To(grace),
		Containers: []corev1.Container{{
			Name: "app", Image: busybox, ImagePullPolicy: corev1.PullNever,
			Command:      []string{"sh", "-c", script},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}},
	}
	if node != "" {
		spec.NodeName = node
	}
	return spec
}

// realPod runs a pod on node and waits until it runs.
func realPod(t *testing.T, ns, name, node, claim, script string, grace int64, labels map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: realPodSpec(node, claim, script, grace)}
	create(t, p)
	waitPodRunning(t, client.ObjectKeyFromObject(p), 60*time.Second)
	return p
}

func waitPodRunning(t *testing.T, key types.NamespacedName, timeout time.Duration) *corev1.Pod {
	t.Helper()
	got := &corev1.Pod{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(context.Background(), key, got))
		assert.Equal(c, corev1.PodRunning, got.Status.Phase, "pod %s: %s", key, podEvents(c, key.Namespace, key.Name))
	}, timeout, poll, "pod %s Running", key)
	return got
}

// podEvents lists the events of a pod, for failure messages and assertions.
func podEvents(c require.TestingT, ns, pod string) string {
	list := &corev1.EventList{}
	require.NoError(c, k8s.List(context.Background(), list, client.InNamespace(ns)))
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return strings.Join(out, "\n")
}

// waitFailedMount waits for the real kubelet's FailedMount event on the pod that
// carries want.
func waitFailedMount(t *testing.T, ns, pod, want string, timeout time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events := podEvents(c, ns, pod)
		assert.Contains(c, events, "FailedMount: ", "kubelet's events")
		assert.Contains(c, events, want, "kubelet's events")
	}, timeout, poll, "FailedMount on %s/%s saying %q", ns, pod, want)
}

// volumeFile reads a file the pods wrote into the volume, from the host side.
func volumeFile(pv, name string) string {
	b, _ := os.ReadFile(filepath.Join(volumesDir, pv, name))
	return strings.TrimSpace(string(b))
}

// runningOnHost reports whether a process whose command line contains marker runs on
// this host: a container of a real node is a process of the host.
func runningOnHost(marker string) bool {
	return exec.Command("pgrep", "-f", marker).Run() == nil
}

// TestRealShutdownReleasesLease is incident A on a powered-off node. A workload on
// node a uses a LUKS volume; a holder that dies in the middle of cryptsetup leaves the
// volume's Lease behind; a is powered off (kubelet and containers stop) and
// kube-controller-manager marks it NotReady; the operator taints it out-of-service as
// the runbook says; the workload's replacement on node b cannot stage the volume
// while the Lease is held (the plugin's FailedMount); the request releases the Lease
// and the replacement mounts the volume and runs on b, reading what a wrote. FixHeld
// turns True only once the replacement runs, at the end of the verification window.
func TestRealShutdownReleasesLease(t *testing.T) {
	s := shutdownReleased(t, "e2e-real-down", 30*time.Second, nil)
	// Until the replacement runs, FixHeld is never True: each poll reads FixHeld first.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rr, pod := &v1alpha1.RemediationRequest{}, &corev1.Pod{}
		require.NoError(c, k8s.Get(context.Background(), s.key, rr))
		fh := condition(rr, v1alpha1.ConditionFixHeld)
		require.NoError(c, k8s.Get(context.Background(), client.ObjectKeyFromObject(s.replacement), pod))
		if pod.Status.Phase != corev1.PodRunning && fh != nil && fh.Status == metav1.ConditionTrue {
			t.Errorf("FixHeld True while the replacement %s is %s: %+v", pod.Name, pod.Status.Phase, fh)
		}
		assert.Equal(c, corev1.PodRunning, pod.Status.Phase, "replacement %s", pod.Name)
	}, 120*time.Second, poll, "the replacement running")
	require.Eventually(t, func() bool { return volumeFile(s.pv, "nodes") == s.a+"\n"+s.b }, 30*time.Second, poll,
		"the replacement on %s appended to what %s wrote: %q", s.b, s.a, volumeFile(s.pv, "nodes"))

	rr := waitFixHeld(t, s.key, metav1.ConditionTrue)
	c := condition(rr, v1alpha1.ConditionFixHeld)
	assert.Equal(t, v1alpha1.ReasonNoRecurrence, c.Reason, "FixHeld: %+v", c)
	assert.Contains(t, c.Message, "are Running and Ready: "+s.ns+"/"+s.replacement.Name, "FixHeld's message")
	pod := &corev1.Pod{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(s.replacement), pod))
	ready := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
	require.GreaterOrEqual(t, ready, 0, "no Ready condition on %s", pod.Name)
	assert.False(t, c.LastTransitionTime.Before(&pod.Status.Conditions[ready].LastTransitionTime),
		"FixHeld turned True at %s, before the replacement was Ready at %s", c.LastTransitionTime, pod.Status.Conditions[ready].LastTransitionTime)
}

// TestRealShutdownFixNotHeldWhileMountFails: the same release, but the replacement's
// cryptsetup keeps failing on b after it: the Lease went, the workload did not come
// back, and FixHeld turns False naming the pod and quoting kubelet's FailedMount.
func TestRealShutdownFixNotHeldWhileMountFails(t *testing.T) {
	// A window long enough for kubelet to fail the replacement's mount, past the 10 s
	// grace after the fix, even on a loaded machine: False comes with that FailedMount,
	// not at the window's end (PodsNotReady, which a slow attach under load gave).
	s := shutdownReleased(t, "e2e-real-down-fail", 90*time.Second, func(pv string) {
		hook := filepath.Join(volumesDir, pv+".cryptsetup-fail")
		require.NoError(t, os.WriteFile(hook, []byte("No key available with this passphrase."), 0o644))
		t.Cleanup(func() { _ = os.Remove(hook) })
	})
	rr := waitFixHeld(t, s.key, metav1.ConditionFalse)
	c := condition(rr, v1alpha1.ConditionFixHeld)
	assert.Equal(t, v1alpha1.ReasonFailedMountAfterFix, c.Reason, "FixHeld: %+v", c)
	assert.Contains(t, c.Message, s.ns+"/"+s.replacement.Name, "FixHeld's message names the pod")
	assert.Contains(t, c.Message, "No key available with this passphrase.", "FixHeld's message quotes the FailedMount")
}

// released is a shut-down holder's Lease released while the workload's replacement
// waited for it.
type released struct {
	ns, pv, a, b string
	key          types.NamespacedName
	replacement  *corev1.Pod
}

// shutdownReleased runs incident A to the release (see TestRealShutdownReleasesLease),
// with a verification window of verifyFor; beforeRequest, if set, runs with the PV's
// name right before the request is created.
func shutdownReleased(t *testing.T, nsPrefix string, verifyFor time.Duration, beforeRequest func(pv string)) released {
	a, b := realNodePair(t)
	ctx := context.Background()
	s := released{ns: namespace(t, nsPrefix), a: a, b: b}
	metrics := freeAddr(t)
	startController(t, "--policies-dir", shortGatePolicies(t), "--request-namespaces", s.ns, "--metrics-bind-address", metrics,
		"--verify-fix-for", verifyFor.String())
	pv, pvc := csiVolume(t, s.ns, true)
	s.pv = pv

	// The workload starts on a: b is cordoned until a is gone.
	setUnschedulable(t, b, true)
	t.Cleanup(func() { setUnschedulable(t, b, false) })
	labels := map[string]string{"app": "db-" + rand.String(4)}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "db"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       realPodSpec("", pvc, `echo "$NODE" >> /data/nodes; while true; do sleep 1; done`, 10),
			},
		},
	}
	dep.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	create(t, dep)
	first := waitWorkloadPod(t, s.ns, labels, a)
	require.Eventually(t, func() bool { return volumeFile(pv, "nodes") == a }, 30*time.Second, poll, "the pod on %s wrote to the volume", a)

	// a dies in the middle of cryptsetup: its Lease stays, and a goes dark.
	strandLease(t, pv, a, 0, 0)
	require.NoError(t, cluster.NodeOff(ctx, a))
	waitNodeReady(t, a, false, 90*time.Second)
	setUnschedulable(t, b, false)
	taintOutOfService(t, a)

	// The replacement lands on b and is held by the Lease.
	s.replacement = waitWorkloadPodNot(t, s.ns, labels, first.Name)
	require.Equal(t, b, s.replacement.Spec.NodeName, "the replacement's node")
	waitFailedMount(t, s.ns, s.replacement.Name, "held by "+a, 90*time.Second)
	require.True(t, leaseExists(t, pv), "the Lease went before the request")
	// Before any request: the controller's detection exports the stuck Lease with its
	// holder's state and the real kubelet's symptoms.
	waitDetected(t, metrics, map[string]string{"kind": "StuckLease", "node": a, "node_state": "Shutdown",
		"lease_namespace": tridentNS, "lease": pv}, "FailedMount", "ContainerCreating")

	if beforeRequest != nil {
		beforeRequest(pv)
	}
	s.key = request(t, s.ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      fmt.Sprintf("%s powered off during cryptsetup; its replacement on %s cannot mount", a, b),
	})
	rr := waitPhase(t, s.key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.Equal(t, "node-shutdown", string(decision(t, rr).Playbook), describe(rr))
	assert.Equal(t, v1alpha1.NodeShutdown, holderState(rr), "holder state: %s", describe(rr))
	return s
}

// waitFixHeld waits for the request's FixHeld to reach status.
func waitFixHeld(t *testing.T, key types.NamespacedName, status metav1.ConditionStatus) *v1alpha1.RemediationRequest {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(context.Background(), key, rr))
		fh := condition(rr, v1alpha1.ConditionFixHeld)
		require.NotNil(c, fh, "no FixHeld yet: %s", describe(rr))
		assert.Equal(c, status, fh.Status, "FixHeld: %+v", fh)
	}, 120*time.Second, poll, "FixHeld %s", status)
	return rr
}

// taintOutOfService sets the out-of-service taint on a node that is shut down, as
// the runbook tells the operator to.
func taintOutOfService(t *testing.T, node string) {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: node}, n))
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	require.NoError(t, k8s.Patch(context.Background(), n, patch))
}

// waitWorkloadPod waits for the workload's pod to run on node.
func waitWorkloadPod(t *testing.T, ns string, labels map[string]string, node string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &corev1.PodList{}
		require.NoError(c, k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels(labels)))
		require.Len(c, list.Items, 1, "workload pods")
		pod = list.Items[0]
		assert.Equal(c, node, pod.Spec.NodeName, "node of %s", pod.Name)
		assert.Equal(c, corev1.PodRunning, pod.Status.Phase, "pod %s: %s", pod.Name, podEvents(c, ns, pod.Name))
	}, 60*time.Second, poll, "workload running on %s", node)
	return &pod
}

// waitWorkloadPodNot waits for a scheduled pod of the workload other than old.
func waitWorkloadPodNot(t *testing.T, ns string, labels map[string]string, old string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &corev1.PodList{}
		require.NoError(c, k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels(labels)))
		pod = nil
		for i := range list.Items {
			if p := &list.Items[i]; p.Name != old && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				pod = p
			}
		}
		assert.NotNil(c, pod, "a replacement for %s: %d pods", old, len(list.Items))
	}, 90*time.Second, poll, "a replacement for %s", old)
	return pod
}

// TestRealPartitionNeedsFencing is incident A on a node cut off from the control
// plane: only its kubelet stops, the containers go on running with the volume
// mounted. The request is rejected without fencing, and with a stopped-container
// statement whose log cannot be read; once the operator powers the node off and says
// so, it is released after the age gate.
func TestRealPartitionNeedsFencing(t *testing.T) {
	// In parallel with the other tests that mostly wait (kube-controller-manager's grace,
	// the Lease-age gates); TestRealHealthyEvictionHonoursGrace has the other real node.
	t.Parallel()
	b := realNode(t, 1)
	ctx := context.Background()
	ns := namespace(t, "e2e-real-cut")
	startController(t, "--policies-dir", shortGatePolicies(t), "--request-namespaces", ns)
	pv, pvc := csiVolume(t, ns, true)
	marker := "cutoff-" + rand.String(6)
	realPod(t, ns, "db-0", b, pvc, `while true; do sleep 1; done # `+marker, 10, nil)
	require.True(t, runningOnHost(marker), "the container on %s runs on the host", b)

	stranded := time.Now()
	strandLease(t, pv, b, 0, 0)
	require.NoError(t, cluster.NodePartition(ctx, b))
	waitNodeReady(t, b, false, 90*time.Second)
	assert.True(t, runningOnHost(marker), "a partition stops the kubelet only: the container on %s still runs", b)

	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      fmt.Sprintf("%s lost the control plane during cryptsetup", b),
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	require.Equal(t, "unreachable-not-fenced", string(decision(t, rr).Rule), describe(rr))
	assert.Equal(t, v1alpha1.NodeUnreachable, holderState(rr), "holder state: %s", describe(rr))
	require.True(t, leaseExists(t, pv), "rejected, yet the Lease was deleted")

	// The operator says Trident's node container there was stopped. That statement
	// rests on the container's log, and with the kubelet down nobody can read it:
	// refused, saying why and what fences instead.
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingTridentNodeContainerStopped, Node: b}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &v1alpha1.RemediationRequest{}
		require.NoError(c, k8s.Get(ctx, key, got))
		require.Equal(c, got.Generation, got.Status.ObservedGeneration, "the fencing statement is decided")
		require.Equal(c, v1alpha1.PhaseRejected, got.Status.Phase, describe(got))
		d := got.Status.Decision
		require.NotNil(c, d, describe(got))
		assert.Equal(c, string(remediations.InvariantHolderNotFenced), d.Rule, describe(got))
		assert.Contains(c, d.Message, "rests on the trident-main log", describe(got))
		assert.Contains(c, d.Message, "could not be read in full", describe(got))
		if assert.NotNil(c, got.Status.Facts) && assert.NotNil(c, got.Status.Facts.Logs, "the log read is shown") {
			assert.Equal(c, v1alpha1.LogUnread, got.Status.Facts.Logs.State)
		}
	}, 60*time.Second, poll, "the stopped-container statement refused on an unread log")
	require.True(t, leaseExists(t, pv), "refused, yet the Lease was deleted")

	// So the operator powers the node off and says so: the node's silence is the proof.
	require.NoError(t, cluster.NodeOff(ctx, b))
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: b}
	})
	rr = waitPhase(t, key, shortUnreachableGate+60*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.Equal(t, "fenced-unreachable", string(decision(t, rr).Playbook), describe(rr))
	assert.False(t, leaseExists(t, pv), "the Lease still exists")
	// The age gate counts from the Lease's acquireTime; CompletedAt has whole seconds.
	var deleted bool
	for _, st := range rr.Status.Steps {
		if st.Name == "deleteLease" && st.CompletedAt != nil {
			deleted = true
			assert.GreaterOrEqual(t, st.CompletedAt.Sub(stranded), shortUnreachableGate-time.Second, "the Lease went before the age gate")
		}
	}
	assert.True(t, deleted, "no completed deleteLease step: %s", describe(rr))
}

// TestRealHealthyEvictionHonoursGrace is incident A on a healthy holder: the pod's
// TERM handler runs within its grace period during the eviction, a
// PodDisruptionBudget holds the playbook until it allows, and the node is uncordoned
// after.
func TestRealHealthyEvictionHonoursGrace(t *testing.T) {
	t.Parallel() // as TestRealPartitionNeedsFencing, which has the other real node
	a := realNode(t, 0)
	ns := namespace(t, "e2e-real-healthy")
	startController(t, "--policies-dir", shortGatePolicies(t), "--request-namespaces", ns)
	pv, pvc := csiVolume(t, ns, true)
	labels := map[string]string{"app": "db"}
	// The handler takes 3 s to flush, well inside the 20 s grace: the pod is gone only
	// after it wrote its last line.
	realPod(t, ns, "db-0", a, pvc,
		`trap 'echo term >> /data/term; sleep 3; echo flushed >> /data/term; exit 0' TERM; while true; do sleep 1; done`, 20, labels)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	create(t, pdb)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &policyv1.PodDisruptionBudget{}
		require.NoError(c, k8s.Get(context.Background(), client.ObjectKeyFromObject(pdb), got))
		assert.Equal(c, int32(1), got.Status.CurrentHealthy, "PDB status %+v", got.Status)
	}, 30*time.Second, poll, "PDB observed")
	grace := graceRecorder(t, ns)

	// The Lease is retained after failed cryptsetup runs: proof that it is stuck on a
	// healthy holder.
	strandLease(t, pv, a, 0, 2)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "LeaseRetained events: cryptsetup luksOpen failed repeatedly",
	})
	waitStep(t, key, "deleteAffectedPods", v1alpha1.StepRunning)
	n := &corev1.Node{}
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: a}, n))
	require.True(t, n.Spec.Unschedulable, "%s not cordoned", a)
	time.Sleep(3 * time.Second) // the PDB holds: nothing may be evicted meanwhile
	assert.Empty(t, volumeFile(pv, "term"), "the pod was told to stop while the PDB forbade it")
	require.True(t, leaseExists(t, pv), "the Lease went while the PDB held the pod")

	release := watchVolumeRelease(t, a, pv)
	require.NoError(t, k8s.Delete(context.Background(), pdb))
	rr := waitPhase(t, key, shortHealthyGate+90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.Equal(t, "healthy-move-workload", string(decision(t, rr).Playbook), describe(rr))
	// The real kubelet listed the volume while the pod ran, and the Lease went only
	// after it had dropped it (the wait step waits on the kubelet, not on the pod).
	lastListed, leaseGone := release()
	require.False(t, lastListed.IsZero(), "%s's kubelet never listed the volume in status.volumesInUse", a)
	require.False(t, leaseGone.IsZero(), "the Lease was never seen gone")
	assert.True(t, leaseGone.After(lastListed), "the Lease was gone at %s, but %s's kubelet still listed the volume at %s",
		leaseGone.Format(time.StampMilli), a, lastListed.Format(time.StampMilli))
	t.Logf("the kubelet last listed the volume at %s, the Lease was seen gone at %s", lastListed.Format(time.StampMilli), leaseGone.Format(time.StampMilli))
	assert.Contains(t, rr.Status.Steps[2].Message, "its kubelet no longer lists the volume in use", "waitPodsGone: %+v", rr.Status.Steps[2])
	assert.Equal(t, "term\nflushed", volumeFile(pv, "term"), "the TERM handler ran to its end")
	assert.Equal(t, map[string]int64{"db-0": 20}, grace(), "grace periods of the deletions")
	assert.False(t, leaseExists(t, pv), "the Lease still exists")
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: a}, n))
	assert.False(t, n.Spec.Unschedulable, "%s still cordoned", a)
}

// TestRealHealthyLogShowsCryptsetupRunning: the runbook reads the holder's trident-main
// log before it calls a healthy holder's Lease stuck. Here the stand-in's cryptsetup on
// real node a stays stuck, as a hung luksOpen does, past the healthy age gate and with
// no LeaseRetained event: the request is rejected, the reason quotes the Trident line
// that began the operation, the Lease is kept and nothing is cordoned.
func TestRealHealthyLogShowsCryptsetupRunning(t *testing.T) {
	a := realNode(t, 0)
	ctx := context.Background()
	ns := namespace(t, "e2e-real-logs")
	startController(t, "--policies-dir", shortGatePolicies(t), "--request-namespaces", ns)
	pv, pvc := csiVolume(t, ns, true)
	stuck := filepath.Join(volumesDir, pv+".cryptsetup-stuck")
	require.NoError(t, os.WriteFile(stuck, []byte(a), 0o644))
	// Runs before the namespace goes: the operation completes and Trident releases the Lease.
	t.Cleanup(func() { _ = os.Remove(stuck) })
	create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-0"}, Spec: realPodSpec(a, pvc, "while true; do sleep 1; done", 5)})

	lease := &coordinationv1.Lease{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, lease))
		assert.Equal(c, a, ptr.Deref(lease.Spec.HolderIdentity, ""), "the Lease's holder")
	}, 60*time.Second, poll, "%s taking the Lease for cryptsetup", a)
	// Old enough for the healthy gate: only the log can keep it now.
	time.Sleep(time.Until(lease.CreationTimestamp.Add(shortHealthyGate + 2*time.Second)))

	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "Lease older than the healthy gate and no LeaseRetained event",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	logs := rr.Status.Facts.Logs
	require.NotNil(t, logs, "no log evidence: %s", describe(rr))
	assert.Equal(t, v1alpha1.LogRunning, logs.State, "log evidence %+v", logs)
	assert.Equal(t, "trident-main", logs.Container, "log evidence %+v", logs)
	// The stand-in logs at debug level, as Trident does with debug on: the running
	// request's first line is its entry into the LUKS step.
	assert.Contains(t, logs.Line, ">>>> EnsureCryptsetupFormattedAndMappedOnHost", "the line the state rests on")
	assert.Contains(t, strings.Join(logs.Lines, "\n"), "Opening encrypted volume.", "the volume's newest lines")
	d := decision(t, rr)
	assert.Contains(t, d.Message, logs.Line, "the reason quotes the line: %+v", d)

	got := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(lease), got), "the Lease must be kept")
	assert.Equal(t, lease.UID, got.UID, "the Lease must be kept")
	n := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: a}, n))
	assert.False(t, n.Spec.Unschedulable, "%s was cordoned", a)
}

// watchVolumeRelease polls, until the returned function is called, whether node's
// kubelet lists the CSI volume pv (handle pv) in the Node's status.volumesInUse and
// whether pv's Lease exists; the function returns when the volume was last seen listed
// and when the Lease was first seen gone (zero for never). Each poll reads the Node
// first: a Lease seen gone after a poll that saw the volume listed was deleted while
// the kubelet still had the volume (its list only shrinks once the pods are gone).
func watchVolumeRelease(t *testing.T, node, pv string) func() (lastListed, leaseGone time.Time) {
	t.Helper()
	var lastListed, leaseGone time.Time
	unique := corev1.UniqueVolumeName(facts.UniqueVolumeName("csi.trident.netapp.io", pv))
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			n := &corev1.Node{}
			if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, n); err == nil && slices.Contains(n.Status.VolumesInUse, unique) {
				lastListed = time.Now()
			}
			err := k8s.Get(context.Background(), types.NamespacedName{Namespace: tridentNS, Name: pv}, &coordinationv1.Lease{})
			if apierrors.IsNotFound(err) && leaseGone.IsZero() {
				leaseGone = time.Now()
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var once bool
	t.Cleanup(func() {
		if !once {
			close(stop)
			<-done
		}
	})
	return func() (time.Time, time.Time) {
		once = true
		close(stop)
		<-done
		return lastListed, leaseGone
	}
}

// TestRealCSIDeregistrationAndFix is incident B exactly as seed 000 reproduces it, on
// a real kubelet: a copy of the node-plugin DaemonSet, then its deletion; the copy's
// registrar removes the registration socket it shares with the original on SIGTERM;
// the real kubelet drops the driver from the node's CSINode; a new pod using a volume
// of that driver fails with kubelet's own FailedMount; scan finds it; the request
// restarts the node plugin, kubelet registers the driver again, and the pod mounts
// its volume and runs.
func TestRealCSIDeregistrationAndFix(t *testing.T) {
	a, b := realNodePair(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-real-csi")
	metrics := freeAddr(t)
	startController(t, "--request-namespaces", ns, "--metrics-bind-address", metrics)
	t.Cleanup(func() { simRestoreBaseline(t) })
	waitRealBaseline(t, a, b)
	pluginUID := func(node string) types.UID {
		p := simPluginPods(t, simDS)[node]
		require.Len(t, p, 1, "trident-csi pods on %s", node)
		return p[0].UID
	}
	before := pluginUID(a)

	cp := copyPluginDaemonSet(t)
	waitRegisteredThrough(t, cp.Name, a)
	// The cause, seen before anything fails: old and new node-plugin pods overlap on a,
	// while the copy's pod still runs and a's CSINode still lists the driver.
	waitDetected(t, metrics, map[string]string{"kind": "OldPluginPodOverlap", "node": a, "node_state": "Healthy"})
	require.Len(t, simPluginPods(t, cp.Name)[a], 1, "the copy's pod on %s must still run when the overlap is detected", a)
	drivers, ok := simDrivers(t, a)
	require.True(t, ok, "no CSINode for %s", a)
	require.Contains(t, drivers, "csi.trident.netapp.io", "%s's CSINode lost the driver before the overlap was detected", a)
	require.NoError(t, k8s.Delete(ctx, cp, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	waitCopyGone(t, cp.Name)
	waitRealDriver(t, a, false, 60*time.Second)
	assert.Equal(t, before, pluginUID(a), "the original plugin pod on %s still runs", a)

	_, pvc := csiVolume(t, ns, false)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-0"},
		Spec: realPodSpec(a, pvc, `echo mounted > /data/app; while true; do sleep 1; done`, 5)}
	create(t, pod)
	waitFailedMount(t, ns, pod.Name, notRegistered, 90*time.Second)
	// Before any request: the controller's detection exports the node and the real
	// kubelet's FailedMount saying the driver is not registered (issue 26).
	waitDetected(t, metrics, map[string]string{"kind": "DeregisteredDriver", "node": a, "node_state": "Healthy",
		"lease_namespace": "", "lease": ""}, "FailedMount")

	out, err := exec.Command(filepath.Join(root, "bin", "remediator"), "scan", "--kubeconfig", kubeconfig,
		"--node-lease-grace-period", "20s", "--request-namespace", ns, "-o", "json", "--exit-code").Output()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "scan --exit-code with findings exits 3:\n%s", out)
	require.Equal(t, 3, exit.ExitCode(), "scan exit code:\n%s", out)
	var suggested struct{ Items []v1alpha1.RemediationRequest }
	require.NoError(t, json.Unmarshal(out, &suggested))
	var fix *v1alpha1.RemediationRequest
	for i, rr := range suggested.Items {
		if rr.Spec.Remediation == v1alpha1.RemediationReregisterCSIDriver && rr.Spec.Target.Node == a {
			fix = &suggested.Items[i]
		}
	}
	require.NotNil(t, fix, "scan suggests no reregister-csi-driver for %s:\n%s", a, out)

	create(t, fix)
	rr := waitPhase(t, client.ObjectKeyFromObject(fix), 120*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.Equal(t, "restart-node-plugin", string(decision(t, rr).Playbook), describe(rr))
	waitRealDriver(t, a, true, 60*time.Second)
	assert.NotEqual(t, before, pluginUID(a), "the plugin pod on %s was not restarted", a)
	waitPodRunning(t, client.ObjectKeyFromObject(pod), 150*time.Second)
}

// waitRealDriver waits until the real kubelet of node lists (or no longer lists) the
// driver in the node's CSINode.
func waitRealDriver(t *testing.T, node string, registered bool, timeout time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d, ok := simDrivers(c, node)
		require.True(c, ok, "no CSINode %s", node)
		assert.Equal(c, registered, slices.Contains(d, simDriver), "CSINode %s drivers %v", node, d)
	}, timeout, poll, "CSINode %s lists %s: %v", node, simDriver, registered)
}

// waitCopyGone waits until every pod of the DaemonSet ds is gone: their registrars have
// removed the shared socket on SIGTERM. Only then is a driver missing from a real node's
// CSINode a deregistration: kubelet briefly unregisters and registers the driver again
// when a registrar replaces the socket, and a test that looked then saw a pod mount.
func waitCopyGone(t *testing.T, ds string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, simPluginPods(c, ds), "nodes with %s pods", ds)
	}, 60*time.Second, poll, "the %s pods gone", ds)
}

// waitRealBaseline waits until each real node runs its one trident-csi pod (the old
// ones gone: their registrars removed the socket on their way out) and kubelet
// registered the driver through it, so that no late exit deregisters the driver.
func waitRealBaseline(t *testing.T, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		waitRegisteredThrough(t, simDS, n)
		waitRealDriver(t, n, true, 60*time.Second)
	}
}

// waitRegisteredThrough waits until the pod of DaemonSet ds on a real node is Ready and
// kubelet registered the driver through its registrar: the registrar takes over the
// registration socket it shares with any other plugin pod there, and kubelet calls it
// back when it registered (NotifyRegistrationStatus), which its log shows.
func waitRegisteredThrough(t *testing.T, ds, node string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods := simPluginPods(c, ds)[node]
		require.Len(c, pods, 1, "%s pods on %s", ds, node)
		require.True(c, simPodReady(&pods[0]), "%s pod on %s Ready: %+v", ds, node, pods[0].Status)
		assert.Contains(c, podLogs(c, tridentNS, pods[0].Name, "driver-registrar"), "pluginRegistered=true",
			"kubelet registered the driver through %s's registrar on %s", ds, node)
	}, 60*time.Second, poll, "%s runs on %s and kubelet registered the driver through it", ds, node)
}

// holderState is the holder node's state in the request's facts, empty without them.
func holderState(rr *v1alpha1.RemediationRequest) v1alpha1.NodeState {
	if rr.Status.Facts == nil || rr.Status.Facts.Node == nil {
		return ""
	}
	return rr.Status.Facts.Node.State
}
