//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
	eventually(t, timeout, fmt.Sprintf("%s in %v", key, phases), func() (bool, string) {
		if err := k8s.Get(context.Background(), key, rr); err != nil {
			return false, err.Error()
		}
		return slices.Contains(phases, rr.Status.Phase) && rr.Status.ObservedGeneration == rr.Generation,
			fmt.Sprintf("phase %s decision %+v steps %+v", rr.Status.Phase, rr.Status.Decision, rr.Status.Steps)
	})
	return rr
}

func leaseExists(t *testing.T, name string) bool {
	t.Helper()
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: tridentNS, Name: name}, &coordinationv1.Lease{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
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
	eventually(t, 60*time.Second, name+" Ready", func() (bool, string) {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			return false, err.Error()
		}
		nl := &coordinationv1.Lease{}
		return nodeReady(n) && k8s.Get(ctx, types.NamespacedName{Namespace: corev1.NamespaceNodeLease, Name: name}, nl) == nil, ""
	})
	if err := cluster.Disconnect(ctx, clientset(t), name); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, name+" unreachable", func() (bool, string) {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			return false, err.Error()
		}
		return !nodeReady(n) && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnreachable }), ""
	})
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
	eventually(t, 30*time.Second, "pod "+name+" Running", func() (bool, string) {
		got := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.PodRunning, string(got.Status.Phase)
	})
	return p
}

// graceRecorder watches pods in a namespace and records the grace period of every
// deletion it sees, to prove nothing was deleted with grace 0.
func graceRecorder(t *testing.T, ns string) func() map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := clientset(t).CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
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
	if rr.Status.Phase != v1alpha1.PhaseSucceeded || rr.Status.Decision.Playbook != "node-shutdown" {
		t.Fatalf("phase %s decision %+v", rr.Status.Phase, rr.Status.Decision)
	}
	if leaseExists(t, pv) {
		t.Error("the Lease still exists")
	}
	if c := condition(rr, v1alpha1.ConditionAccepted); c == nil || c.Reason != "NodeShutdown" || c.Status != metav1.ConditionTrue {
		t.Errorf("Accepted = %+v", c)
	}
}

// TestUnreachableHolderNeedsFencingAndAge: the Lease of a holder cut off from the
// control plane goes only with fencing that names that very holder, and only once the
// Lease is old enough by server time. Lease age counts from the later of
// creationTimestamp (which a test cannot backdate) and acquireTime, so this controller
// runs on a copy of the real policies whose 300s gate is shortened to
// shortUnreachableGate (shortGatePolicies); production keeps the runbook's 5 minutes.
func TestUnreachableHolderNeedsFencingAndAge(t *testing.T) {
	startController(t, "--policies-dir", shortGatePolicies(t))
	ctx := context.Background()
	ns := namespace(t, "e2e-unreach")
	node := unreachableNode(t)
	// The holder's clock claims the Lease was acquired an hour ago; that must not make
	// it old: the age counts from its creation, just now.
	pv, _ := luksVolume(t, ns, node, time.Hour, 0)
	l := &coordinationv1.Lease{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, l); err != nil {
		t.Fatal(err)
	}
	created := l.CreationTimestamp.Time
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "holder lost the control plane during cryptsetup",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	if rr.Status.Phase != v1alpha1.PhaseRejected || rr.Status.Decision.Rule != "unreachable-not-fenced" {
		t.Fatalf("without fencing: phase %s decision %+v", rr.Status.Phase, rr.Status.Decision)
	}
	if !strings.Contains(rr.Status.Decision.Message, "spec.fencing.confirmed") || !strings.Contains(rr.Status.Decision.Message, "spec.fencing.node: "+node) || !leaseExists(t, pv) {
		t.Fatalf("rejection must explain fencing (naming %s) and leave the Lease: %q", node, rr.Status.Decision.Message)
	}

	// Fencing that names another node says nothing about the holder.
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: "kwok-node-0"}
	})
	rr = waitPhase(t, key, 30*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	if rr.Status.Phase != v1alpha1.PhaseRejected || rr.Status.Decision.Rule != "fencing-names-another-node" || !leaseExists(t, pv) {
		t.Fatalf("fencing names kwok-node-0: phase %s decision %+v lease exists %v", rr.Status.Phase, rr.Status.Decision, leaseExists(t, pv))
	}

	// Fenced, but the Lease is younger than the gate by server time.
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) { s.Fencing.Node = node })
	rr = waitPhase(t, key, 30*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	if rr.Status.Decision.Rule != "unreachable-lease-too-young" || rr.Status.Decision.RecheckAt == nil || !leaseExists(t, pv) {
		t.Fatalf("fenced but young: phase %s decision %+v", rr.Status.Phase, rr.Status.Decision)
	}
	if lf := rr.Status.Facts.Lease; lf == nil || time.Duration(lf.AgeSeconds)*time.Second >= shortUnreachableGate || !strings.HasPrefix(lf.AgeFrom, "creationTimestamp") {
		t.Fatalf("the age must count from creationTimestamp, not the backdated acquireTime: %+v", rr.Status.Facts.Lease)
	}
	if at := rr.Status.Decision.RecheckAt.Time; at.Before(created.Add(shortUnreachableGate)) || at.After(created.Add(shortUnreachableGate+5*time.Second)) {
		t.Errorf("recheckAt %s, want when the Lease is %s old (created %s)", at, shortUnreachableGate, created)
	}

	rr = waitPhase(t, key, shortUnreachableGate+60*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	if rr.Status.Phase != v1alpha1.PhaseSucceeded || rr.Status.Decision.Playbook != "fenced-unreachable" || rr.Status.Decision.Rule != "unreachable-fenced" || leaseExists(t, pv) {
		t.Fatalf("once old enough: phase %s decision %+v lease exists %v", rr.Status.Phase, rr.Status.Decision, leaseExists(t, pv))
	}
	for _, st := range rr.Status.Steps {
		if st.Name == "deleteLease" && (st.StartedAt == nil || st.StartedAt.Time.Before(created.Add(shortUnreachableGate))) {
			t.Errorf("the Lease (created %s) was deleted before it was %s old: %+v", created, shortUnreachableGate, st)
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
	if err := k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "node "+node+" gone", func() (bool, string) {
		err := k8s.Get(ctx, types.NamespacedName{Name: node}, &corev1.Node{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "the holder's Node object is gone; its machine may be gone too",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	if rr.Status.Phase != v1alpha1.PhaseRejected || rr.Status.Decision.Rule != "holder-node-not-found" {
		t.Fatalf("phase %s decision %+v", rr.Status.Phase, rr.Status.Decision)
	}
	if n := rr.Status.Facts.Node; n == nil || n.State != v1alpha1.NodeNotFound {
		t.Errorf("holder node facts = %+v, want state NotFound", n)
	}
	if c := condition(rr, v1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "HolderNodeNotFound" {
		t.Errorf("Accepted = %+v", c)
	}
	if !leaseExists(t, pv) {
		t.Fatal("the Lease of a holder without a Node was deleted")
	}

	// Fencing that names the holder is not enough on its own: the Lease, created just
	// now, is younger than the (embedded, 300s) gate.
	updateSpec(t, key, func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: node}
	})
	rr = waitPhase(t, key, 30*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	if rr.Status.Decision.Rule != "not-found-lease-too-young" || rr.Status.Decision.RecheckAt == nil {
		t.Fatalf("fenced but young: phase %s decision %+v", rr.Status.Phase, rr.Status.Decision)
	}
	time.Sleep(2 * time.Second) // give a wrongly acting controller the chance to act
	if !leaseExists(t, pv) {
		t.Error("the Lease was deleted before the age gate")
	}
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
	if err != nil {
		t.Fatal(err)
	}
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
			if rr.Status.Phase != v1alpha1.PhaseSucceeded || rr.Status.Decision.Playbook != "healthy-move-workload" {
				t.Fatalf("phase %s decision %+v steps %+v", rr.Status.Phase, rr.Status.Decision, rr.Status.Steps)
			}
			if leaseExists(t, pv) {
				t.Error("the Lease still exists")
			}
			for _, name := range []string{"web-0", "web-1"} {
				err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
				if !apierrors.IsNotFound(err) {
					t.Errorf("pod %s not gone: %v", name, err)
				}
			}
			// The eviction kept each pod's own 30s grace period; kwok's simulated
			// kubelet then finishes the termination, as a kubelet would.
			if g := grace(); g["web-0"] != 30 || g["web-1"] != 30 {
				t.Errorf("deletion grace periods = %v, want 30s for both pods", g)
			}
			n := &corev1.Node{}
			if err := k8s.Get(ctx, types.NamespacedName{Name: tc.node}, n); err != nil {
				t.Fatal(err)
			}
			if n.Spec.Unschedulable != tc.alreadyCordoned || n.Annotations[remediations.CordonedByAnnotation] != "" {
				t.Errorf("node %s unschedulable=%v annotations=%v; want unschedulable=%v and no cordon mark",
					tc.node, n.Spec.Unschedulable, n.Annotations, tc.alreadyCordoned)
			}
			var names []string
			for _, st := range rr.Status.Steps {
				names = append(names, st.Name)
				if st.State != v1alpha1.StepSucceeded || st.StartedAt == nil || st.CompletedAt == nil {
					t.Errorf("step %+v", st)
				}
			}
			if want := []string{"cordon", "deleteAffectedPods", "waitPodsGone", "deleteLease", "uncordon"}; !slices.Equal(names, want) {
				t.Errorf("journal %v, want %v", names, want)
			}
			if tc.alreadyCordoned && !strings.Contains(rr.Status.Steps[0].Message, "already cordoned") {
				t.Errorf("cordon step message %q", rr.Status.Steps[0].Message)
			}
			assertKubectlViews(t, key)
		})
	}
}

func setUnschedulable(t *testing.T, node string, v bool) {
	t.Helper()
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	before := n.DeepCopy()
	n.Spec.Unschedulable = v
	if err := k8s.Patch(context.Background(), n, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}

// assertKubectlViews checks what an operator sees with kubectl.
func assertKubectlViews(t *testing.T, key types.NamespacedName) {
	t.Helper()
	kubectl := filepath.Join(root, "bin", "kubectl")
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "rr", "-n", key.Namespace, key.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get rr: %v\n%s", err, out)
	}
	header := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	if want := []string{"NAME", "REMEDIATION", "TARGET", "PHASE", "DECISION", "AGE"}; !slices.Equal(header, want) {
		t.Errorf("kubectl get rr columns %v, want %v", header, want)
	}
	if !strings.Contains(string(out), "Succeeded") || !strings.Contains(string(out), "healthy-lease-stuck") {
		t.Errorf("kubectl get rr:\n%s", out)
	}
	out, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "describe", "rr", "-n", key.Namespace, key.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl describe rr: %v\n%s", err, out)
	}
	for _, want := range []string{"healthy-move-workload", "PlaybookCompleted", "Step 1/5 cordon succeeded",
		"Step 4/5 deleteLease succeeded: Deleted Lease", "Step 5/5 uncordon succeeded", "Playbook healthy-move-workload completed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl describe rr lacks %q:\n%s", want, out)
		}
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
	startController(t, "--policies-dir", shortGatePolicies(t))
	ctx := context.Background()
	ns := namespace(t, "e2e-young")
	const node = "kwok-node-2"
	pv, _ := luksVolume(t, ns, node, 15*time.Minute, 0)
	l := &coordinationv1.Lease{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, l); err != nil {
		t.Fatal(err)
	}
	created := l.CreationTimestamp.Time
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "pods slow to start, suspect the Lease",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded)
	d := rr.Status.Decision
	if rr.Status.Phase != v1alpha1.PhaseRejected || d.Rule != "healthy-operation-may-be-running" || !strings.Contains(d.Message, "-c trident-main") || d.RecheckAt == nil {
		t.Fatalf("phase %s decision %+v", rr.Status.Phase, d)
	}
	if c := condition(rr, v1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "HealthyOperationMayBeRunning" || c.Message != d.Message {
		t.Errorf("Accepted = %+v", c)
	}
	if lf := rr.Status.Facts.Lease; lf == nil || time.Duration(lf.AgeSeconds)*time.Second >= shortHealthyGate || !strings.HasPrefix(lf.AgeFrom, "creationTimestamp") {
		t.Errorf("the age must count from creationTimestamp, not the backdated acquireTime: %+v", rr.Status.Facts.Lease)
	}
	if !leaseExists(t, pv) {
		t.Error("the Lease was deleted")
	}

	// Old enough by server time, the stuck Lease is released the healthy way.
	rr = waitPhase(t, key, shortHealthyGate+90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	d = rr.Status.Decision
	if rr.Status.Phase != v1alpha1.PhaseSucceeded || d.Rule != "healthy-lease-stuck" || d.Playbook != "healthy-move-workload" || leaseExists(t, pv) {
		t.Fatalf("once old enough: phase %s decision %+v steps %+v lease exists %v", rr.Status.Phase, d, rr.Status.Steps, leaseExists(t, pv))
	}
	if d.DecidedAt.Time.Before(created.Add(shortHealthyGate)) {
		t.Errorf("allowed at %s, before the Lease (created %s) was %s old", d.DecidedAt, created, shortHealthyGate)
	}
	n := &corev1.Node{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, n); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s left cordoned: %v", node, err)
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
	eventually(t, 30*time.Second, "PDB observed", func() (bool, string) {
		got := &policyv1.PodDisruptionBudget{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pdb), got); err != nil {
			return false, err.Error()
		}
		return got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1, fmt.Sprintf("%+v", got.Status)
	})
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
	if h.cordon.Name != "cordon" || h.cordon.State != v1alpha1.StepSucceeded {
		t.Fatalf("journal while held: %+v", before.Status.Steps)
	}
	return h
}

// waitStep waits until the named step reaches state.
func waitStep(t *testing.T, key types.NamespacedName, step string, state v1alpha1.StepState) *v1alpha1.RemediationRequest {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{}
	eventually(t, 60*time.Second, step+" "+string(state), func() (bool, string) {
		if err := k8s.Get(context.Background(), key, rr); err != nil {
			return false, err.Error()
		}
		for _, st := range rr.Status.Steps {
			if st.Name == step {
				return st.State == state, fmt.Sprintf("%+v", rr.Status.Steps)
			}
		}
		return false, fmt.Sprintf("%s %+v", rr.Status.Phase, rr.Status.Steps)
	})
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
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, l); err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("kwok-node-2")
	l.Spec.AcquireTime = ptr.To(metav1.NowMicro())
	if err := k8s.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}

	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseFailed, v1alpha1.PhaseSucceeded)
	// The safety floor compares the live Lease with the decision's right before the
	// deletion and stops the playbook with the breached invariant as the reason.
	c := condition(rr, v1alpha1.ConditionSucceeded)
	if rr.Status.Phase != v1alpha1.PhaseFailed || c == nil || c.Status != metav1.ConditionFalse || c.Reason != remediations.InvariantLeaseChanged.Reason() ||
		!strings.Contains(c.Message, `passed from "`+node+`" to "kwok-node-2"`) || !strings.Contains(c.Message, "nothing was done") {
		t.Fatalf("phase %s Succeeded=%+v", rr.Status.Phase, c)
	}
	if !slices.ContainsFunc(rr.Status.Steps, func(st v1alpha1.StepStatus) bool {
		return st.Name == "deleteLease" && st.State == v1alpha1.StepFailed && strings.Contains(st.Message, "nothing was done")
	}) {
		t.Errorf("journal %+v, want a failed deleteLease that did nothing", rr.Status.Steps)
	}
	got := &coordinationv1.Lease{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(l), got); err != nil || *got.Spec.HolderIdentity != "kwok-node-2" {
		t.Fatalf("the re-acquired Lease must be left alone: %v %+v", err, got.Spec)
	}
	n := &corev1.Node{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, n); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s must be uncordoned by the restore: %v unschedulable=%v", node, err, n.Spec.Unschedulable)
	}
}

func TestRestartResumesWithoutRepeatingSteps(t *testing.T) {
	ctx := context.Background()
	first := startController(t)
	h := heldAfterCordon(t, "e2e-restart", "kwok-node-1", "retained Lease on the db volume")
	ns, key, pv, pdb, cordonBefore := h.ns, h.key, h.pv, h.pdb, h.cordon

	first.kill()
	if err := k8s.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	startController(t)
	rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	if rr.Status.Phase != v1alpha1.PhaseSucceeded || leaseExists(t, pv) {
		t.Fatalf("phase %s steps %+v", rr.Status.Phase, rr.Status.Steps)
	}
	cordonAfter := rr.Status.Steps[0]
	if !cordonAfter.StartedAt.Equal(cordonBefore.StartedAt) || !cordonAfter.CompletedAt.Equal(cordonBefore.CompletedAt) ||
		cordonAfter.ObjectResourceVersion != cordonBefore.ObjectResourceVersion {
		t.Errorf("cordon re-ran after the restart: before %+v after %+v", cordonBefore, cordonAfter)
	}
	// Each step transition emits one Event: a repeated step would show twice.
	assertStepEventsOnce(t, ns, key, 10)
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
	eventually(t, 60*time.Second, "dry-run decision", func() (bool, string) {
		if err := k8s.Get(context.Background(), key, rr); err != nil {
			return false, err.Error()
		}
		return rr.Status.Decision != nil, string(rr.Status.Phase)
	})
	if rr.Status.Phase != v1alpha1.PhasePending || rr.Status.Decision.Playbook != "healthy-move-workload" || len(rr.Status.Steps) != 5 {
		t.Fatalf("phase %s decision %+v steps %+v", rr.Status.Phase, rr.Status.Decision, rr.Status.Steps)
	}
	for _, st := range rr.Status.Steps {
		if st.State != v1alpha1.StepPending || st.StartedAt != nil {
			t.Errorf("dry run started step %+v", st)
		}
	}
	if c := condition(rr, v1alpha1.ConditionProgressing); c == nil || c.Reason != "DryRun" {
		t.Errorf("Progressing = %+v", c)
	}
	time.Sleep(2 * time.Second) // give a wrongly acting controller the chance to act
	if !leaseExists(t, pv) {
		t.Error("dry run deleted the Lease")
	}
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil || n.Spec.Unschedulable {
		t.Errorf("dry run cordoned %s", node)
	}
	got := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("dry run touched the pod: %v", err)
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
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, n); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("node %s should be cordoned mid-run: %v", node, err)
	}
	if err := k8s.Delete(ctx, rr); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "request gone", func() (bool, string) {
		err := k8s.Get(ctx, key, &v1alpha1.RemediationRequest{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, n); err != nil || n.Spec.Unschedulable || n.Annotations[remediations.CordonedByAnnotation] != "" {
		t.Errorf("node %s not restored: unschedulable=%v annotations=%v", node, n.Spec.Unschedulable, n.Annotations)
	}
	if !leaseExists(t, pv) {
		t.Error("an aborted request deleted the Lease")
	}
	events := &corev1.EventList{}
	if err := k8s.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
		return e.InvolvedObject.Name == key.Name && strings.Contains(e.Message, "Aborted: the request was deleted mid-run; Uncordoned node "+node)
	}) {
		t.Error("no Aborted event saying what was restored")
	}
}
