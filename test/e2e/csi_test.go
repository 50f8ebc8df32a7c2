//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// copyPluginDaemonSet runs trident-csi-2, a copy of trident-csi under another name, as
// the seed does with `kubectl get ds -n trident trident-csi -o json | jq
// '.metadata.name|="trident-csi-2"' | kubectl apply -f -`.
func copyPluginDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: tridentNS, Name: simDS}, ds); err != nil {
		t.Fatal(err)
	}
	cp := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: simDS + "-2", Labels: ds.Labels},
		Spec:       *ds.Spec.DeepCopy(),
	}
	if err := k8s.Create(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// deregisterEverywhere stages incident B with the seed's own steps: copy trident-csi
// as trident-csi-2, wait until it runs, delete it. Every node then lacks the driver
// while its original node-plugin pod keeps running.
func deregisterEverywhere(t *testing.T) map[string]types.UID {
	t.Helper()
	ctx := context.Background()
	simWaitRegistered(t, true, 60*time.Second)
	original := simWaitPodsReady(t, simDS, 60*time.Second)
	cp := copyPluginDaemonSet(t)
	simWaitPodsReady(t, cp.Name, 60*time.Second)
	if err := k8s.Delete(ctx, cp, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	simWaitRegistered(t, false, 30*time.Second)
	eventually(t, 30*time.Second, "the copies' pods gone", func() (bool, string) {
		return len(simPluginPods(t, cp.Name)) == 0, ""
	})
	return original
}

func TestReregisterCSIDriver(t *testing.T) {
	startController(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-csi-fix")
	const node = "kwok-node-1"
	t.Cleanup(func() { simRestoreBaseline(t) })
	grace := graceRecorder(t, tridentNS)
	original := deregisterEverywhere(t)
	oldPod := simPluginPods(t, simDS)[node][0].Name

	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReregisterCSIDriver,
		Target:      v1alpha1.Target{Node: node},
		Reason:      "driver name csi.trident.netapp.io not found in the list of registered CSI drivers on kwok-node-1",
	})
	rr := waitPhase(t, key, 120*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	if rr.Status.Phase != v1alpha1.PhaseSucceeded || rr.Status.Decision.Playbook != "restart-node-plugin" {
		t.Fatalf("phase %s decision %+v steps %+v", rr.Status.Phase, rr.Status.Decision, rr.Status.Steps)
	}
	if d, _ := simDrivers(t, node); !slices.Contains(d, simDriver) {
		t.Errorf("CSINode %s drivers %v, want %s registered again", node, d, simDriver)
	}
	// Only the target node was touched.
	if d, _ := simDrivers(t, "kwok-node-0"); slices.Contains(d, simDriver) {
		t.Errorf("kwok-node-0 re-registered without a request: %v", d)
	}
	pods := simPluginPods(t, simDS)
	if len(pods[node]) != 1 || pods[node][0].UID == original[node] || !simPodReady(&pods[node][0]) {
		t.Errorf("node-plugin pods on %s = %+v; want one new Ready pod (old uid %s)", node, pods[node], original[node])
	}
	if len(pods["kwok-node-0"]) != 1 || pods["kwok-node-0"][0].UID != original["kwok-node-0"] {
		t.Errorf("the plugin pod on kwok-node-0 was restarted")
	}
	// Replaced gracefully: the eviction kept the DaemonSet pod's own grace period.
	if g, ok := grace()[oldPod]; !ok || g <= 0 {
		t.Errorf("old plugin pod %s deleted with grace %d (seen %v), want its own positive grace period", oldPod, g, ok)
	}
	n := &corev1.Node{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, n); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s left cordoned: %v", node, err)
	}

	// Asked again, the policy finds nothing to do.
	key = request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReregisterCSIDriver,
		Target:      v1alpha1.Target{Node: node},
		Reason:      "second request for the same node after the fix",
	})
	rr = waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseRunning)
	if rr.Status.Decision == nil || rr.Status.Decision.Rule != "driver-registered" {
		t.Errorf("second request: phase %s decision %+v", rr.Status.Phase, rr.Status.Decision)
	}
}

// TestReregisterRefusedWhilePluginPodsOverlap: with trident-csi-2 running next to
// trident-csi, restarting a plugin pod would only lose the socket again.
func TestReregisterRefusedWhilePluginPodsOverlap(t *testing.T) {
	startController(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-csi-overlap")
	const node = "kwok-node-2"
	t.Cleanup(func() { simRestoreBaseline(t) })
	simWaitRegistered(t, true, 60*time.Second)
	original := simWaitPodsReady(t, simDS, 60*time.Second)
	cp := copyPluginDaemonSet(t)
	copies := simWaitPodsReady(t, cp.Name, 60*time.Second)
	before, _ := simDrivers(t, node)

	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReregisterCSIDriver,
		Target:      v1alpha1.Target{Node: node},
		Reason:      "trident-operator recreated trident-csi; re-register to be safe",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded)
	d := rr.Status.Decision
	if rr.Status.Phase != v1alpha1.PhaseRejected || d.Rule != "plugin-pods-overlap" || !strings.Contains(d.Message, "remove the registration socket again") {
		t.Fatalf("phase %s decision %+v", rr.Status.Phase, d)
	}
	time.Sleep(2 * time.Second)
	if now := simWaitPodsReady(t, simDS, 5*time.Second); now[node] != original[node] {
		t.Errorf("trident-csi pod on %s was touched", node)
	}
	if now := simWaitPodsReady(t, cp.Name, 5*time.Second); now[node] != copies[node] {
		t.Errorf("trident-csi-2 pod on %s was touched", node)
	}
	if after, _ := simDrivers(t, node); !slices.Equal(after, before) {
		t.Errorf("CSINode %s drivers changed from %v to %v", node, before, after)
	}
	n := &corev1.Node{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, n); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s cordoned by a rejected request", node)
	}
}

// TestScanFindsBothIncidents stages incident A (a Lease held by a shut-down node) and
// incident B (the seed's reproduction), runs `remediator scan`, applies its manifests
// with kubectl and expects every remediation to succeed.
func TestScanFindsBothIncidents(t *testing.T) {
	startController(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-scan")
	t.Cleanup(func() { simRestoreBaseline(t) })
	down := extraNode(t, "e2e-scan-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, ns, down, 25*time.Minute, 2)
	deregisterEverywhere(t)

	scan := func(args ...string) (string, int) {
		cmd := exec.Command(filepath.Join(root, "bin", "remediator"), append([]string{"scan", "--kubeconfig", kubeconfig,
			"--node-lease-grace-period", "20s", "--request-namespace", ns}, args...)...)
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	var findings []struct{ Kind, Node, Lease string }
	out, code := scan("-o", "json")
	if code != 3 {
		t.Fatalf("scan exit code %d with findings, want 3\n%s", code, out)
	}
	if err := json.Unmarshal([]byte(out), &findings); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range findings {
		got = append(got, f.Kind+" "+f.Node+" "+f.Lease)
	}
	want := []string{
		"DeregisteredDriver kwok-node-0 ", "DeregisteredDriver kwok-node-1 ", "DeregisteredDriver kwok-node-2 ",
		"StuckLease " + down + " " + tridentNS + "/" + pv,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("scan found %q, want exactly %q", got, want)
	}
	if table, _ := scan(); !strings.Contains(table, "DeregisteredDriver") || !strings.Contains(table, "StuckLease") {
		t.Errorf("scan table:\n%s", table)
	}

	manifests, _ := scan("-o", "yaml")
	apply := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", kubeconfig, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(manifests)
	if res, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply of scan's manifests: %v\n%s\n%s", err, res, manifests)
	}
	list := &v1alpha1.RemediationRequestList{}
	if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) != 4 {
		t.Fatalf("want 4 requests from scan, got %d (%v)", len(list.Items), err)
	}
	t.Cleanup(func() {
		_ = k8s.DeleteAllOf(context.Background(), &v1alpha1.RemediationRequest{}, client.InNamespace(ns))
	})
	for _, rr := range list.Items {
		done := waitPhase(t, client.ObjectKeyFromObject(&rr), 120*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
		if done.Status.Phase != v1alpha1.PhaseSucceeded {
			t.Errorf("%s: phase %s decision %+v", rr.Name, done.Status.Phase, done.Status.Decision)
		}
	}
	simWaitRegistered(t, true, 30*time.Second)
	if leaseExists(t, pv) {
		t.Error("the stuck Lease still exists")
	}
	if out, code := scan(); code != 0 {
		t.Errorf("after remediation scan exits %d:\n%s", code, out)
	}
}
