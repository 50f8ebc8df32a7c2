//go:build e2e

package e2e

import (
	"context"
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

// deregisterEverywhere stages incident B with the seed's own steps: copy trident-csi
// as trident-csi-2, wait until it runs, delete it. Every node then lacks the driver
// while its original node-plugin pod keeps running.
func deregisterEverywhere(t *testing.T) map[string]types.UID {
	t.Helper()
	ctx := context.Background()
	simWaitRegistered(t, true, 60*time.Second)
	original := simWaitPodsReady(t, simDS, 60*time.Second)
	ds := &appsv1.DaemonSet{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: simDS}, ds); err != nil {
		t.Fatal(err)
	}
	cp := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: simDS + "-2", Labels: ds.Labels},
		Spec:       *ds.Spec.DeepCopy(),
	}
	if err := k8s.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
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
	original := deregisterEverywhere(t)
	assertScanFindsDeregisteredDrivers(t)

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

// assertScanFindsDeregisteredDrivers runs `remediator scan` the way an operator would
// and checks that its manifests name every broken node and pass server-side validation.
func assertScanFindsDeregisteredDrivers(t *testing.T) {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "bin", "remediator"), "scan", "--kubeconfig", kubeconfig, "-o", "yaml").Output()
	if err != nil {
		t.Fatalf("remediator scan: %v\n%s", err, out)
	}
	for _, n := range simNodes {
		if !strings.Contains(string(out), "name: reregister-csi-"+n) {
			t.Errorf("scan -o yaml does not suggest a request for %s:\n%s", n, out)
		}
	}
	apply := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-")
	apply.Stdin = strings.NewReader(string(out))
	if res, err := apply.CombinedOutput(); err != nil {
		t.Errorf("the API server refuses scan's manifests: %v\n%s", err, res)
	}
	table, err := exec.Command(filepath.Join(root, "bin", "remediator"), "scan", "--kubeconfig", kubeconfig).Output()
	if err != nil || !strings.Contains(string(table), "DeregisteredDriver") {
		t.Errorf("scan table: %v\n%s", err, table)
	}
}
