//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
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
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: tridentNS, Name: simDS}, ds))
	cp := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: simDS + "-2", Labels: ds.Labels},
		Spec:       *ds.Spec.DeepCopy(),
	}
	require.NoError(t, k8s.Create(context.Background(), cp))
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
	// The real nodes, whose real kubelets register through the copy too (deregisters only
	// the nodes where kubelet had registered through it).
	reals, _ := readyRealNodes(t, 0)
	cp := copyPluginDaemonSet(t)
	simWaitPodsReady(t, cp.Name, 60*time.Second)
	for _, n := range reals {
		waitRegisteredThrough(t, cp.Name, n)
	}
	require.NoError(t, k8s.Delete(ctx, cp, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	simWaitRegistered(t, false, 30*time.Second)
	waitCopyGone(t, cp.Name)
	for _, n := range reals {
		waitRealDriver(t, n, false, 60*time.Second)
	}
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
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.Equal(t, "restart-node-plugin", string(decision(t, rr).Playbook), describe(rr))
	d, _ := simDrivers(t, node)
	assert.Contains(t, d, simDriver, "CSINode %s drivers: want %s registered again", node, simDriver)
	// Only the target node was touched.
	d, _ = simDrivers(t, "kwok-node-0")
	assert.NotContains(t, d, simDriver, "kwok-node-0 re-registered without a request")
	pods := simPluginPods(t, simDS)
	if assert.Len(t, pods[node], 1, "node-plugin pods on %s: want one new Ready pod", node) {
		assert.NotEqual(t, original[node], pods[node][0].UID, "the node-plugin pod on %s was not replaced", node)
		assert.True(t, simPodReady(&pods[node][0]), "the new node-plugin pod on %s is not Ready: %+v", node, pods[node][0].Status)
	}
	if assert.Len(t, pods["kwok-node-0"], 1, "node-plugin pods on kwok-node-0") {
		assert.Equal(t, original["kwok-node-0"], pods["kwok-node-0"][0].UID, "the plugin pod on kwok-node-0 was restarted")
	}
	// Replaced gracefully: the eviction kept the DaemonSet pod's own grace period.
	g, ok := grace()[oldPod]
	if assert.True(t, ok, "no deletion of the old plugin pod %s seen", oldPod) {
		assert.Positive(t, g, "old plugin pod %s deleted with grace %d, want its own positive grace period", oldPod, g)
	}
	n := &corev1.Node{}
	if assert.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n)) {
		assert.False(t, n.Spec.Unschedulable, "node %s left cordoned", node)
	}

	// Asked again, the policy finds nothing to do.
	key = request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReregisterCSIDriver,
		Target:      v1alpha1.Target{Node: node},
		Reason:      "second request for the same node after the fix",
	})
	rr = waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded, v1alpha1.PhaseRunning)
	if assert.NotNil(t, rr.Status.Decision, "second request: %s", describe(rr)) {
		assert.Equal(t, "driver-registered", string(rr.Status.Decision.Rule), "second request: %s", describe(rr))
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
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	d := decision(t, rr)
	require.Equal(t, "plugin-pods-overlap", string(d.Rule), describe(rr))
	require.Contains(t, d.Message, "remove the registration socket again", describe(rr))
	time.Sleep(2 * time.Second)
	assert.Equal(t, original[node], simWaitPodsReady(t, simDS, 5*time.Second)[node], "trident-csi pod on %s was touched", node)
	assert.Equal(t, copies[node], simWaitPodsReady(t, cp.Name, 5*time.Second)[node], "trident-csi-2 pod on %s was touched", node)
	after, _ := simDrivers(t, node)
	assert.Equal(t, before, after, "CSINode %s drivers changed", node)
	n := &corev1.Node{}
	if assert.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node}, n)) {
		assert.False(t, n.Spec.Unschedulable, "node %s cordoned by a rejected request", node)
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
		} else {
			require.NoError(t, err)
		}
		return string(out), code
	}
	// -o json is -o yaml's requests, as one v1 List.
	var suggested struct {
		Kind  string
		Items []v1alpha1.RemediationRequest
	}
	out, code := scan("-o", "json", "--exit-code")
	require.Equal(t, 3, code, "scan --exit-code's exit code with findings\n%s", out)
	require.NoError(t, json.Unmarshal([]byte(out), &suggested))
	assert.Equal(t, "List", suggested.Kind)
	var got []string
	for _, rr := range suggested.Items {
		got = append(got, string(rr.Spec.Remediation)+" "+rr.Spec.Target.Node+rr.Spec.Target.PersistentVolume+" "+rr.Namespace)
	}
	// Every node lost the driver: the kwok nodes and the real ones (make test-e2e runs two).
	reals, _ := readyRealNodes(t, 0)
	var want []string
	wantTable := []string{"StuckLease " + down}
	for _, n := range append(slices.Clone(simNodes), reals...) {
		want = append(want, "reregister-csi-driver "+n+" "+ns)
		wantTable = append(wantTable, "DeregisteredDriver "+n)
	}
	want = append(want, "release-luks-lease "+pv+" "+ns)
	require.Equal(t, want, got, "scan's suggested requests")
	table, _ := scan()
	for _, want := range wantTable {
		assert.Regexp(t, strings.ReplaceAll(want, " ", `\s+`), table, "scan table")
	}
	assert.Contains(t, table, tridentNS+"/"+pv, "scan table")

	names, _ := scan("-o", "name")
	assert.Len(t, strings.Fields(names), len(want), "scan -o name:\n%s", names)
	assert.Contains(t, names, "remediationrequest.remediator.io/release-lease-"+pv, "scan -o name")

	manifests, _ := scan("-o", "yaml")
	// plan on live facts reads scan's manifests: the request's rule through -o jsonpath.
	file := filepath.Join(t.TempDir(), "requests.yaml")
	require.NoError(t, os.WriteFile(file, []byte(manifests), 0o600))
	rules, _ := exec.Command(filepath.Join(root, "bin", "remediator"), "plan", "--kubeconfig", kubeconfig, "--node-lease-grace-period", "20s",
		"--settings-configmap=", "-f", file, "-o", `jsonpath={range .requests[*]}{.request.name}={.decision.rule}{"\n"}{end}`).Output()
	assert.Contains(t, string(rules), "release-lease-"+pv+"=holder-shutdown\n", "plan -o jsonpath on scan's requests:\n%s", rules)

	apply := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", kubeconfig, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(manifests)
	res, err := apply.CombinedOutput()
	require.NoError(t, err, "kubectl apply of scan's manifests:\n%s\n%s", res, manifests)
	list := &v1alpha1.RemediationRequestList{}
	require.NoError(t, k8s.List(ctx, list, client.InNamespace(ns)))
	require.Len(t, list.Items, len(want), "want %d requests from scan", len(want))
	t.Cleanup(func() {
		_ = k8s.DeleteAllOf(context.Background(), &v1alpha1.RemediationRequest{}, client.InNamespace(ns))
	})
	for _, rr := range list.Items {
		done := waitPhase(t, client.ObjectKeyFromObject(&rr), 120*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
		assert.Equal(t, v1alpha1.PhaseSucceeded, done.Status.Phase, "%s: %s", rr.Name, describe(done))
	}
	simWaitRegistered(t, true, 30*time.Second)
	assert.False(t, leaseExists(t, pv), "the stuck Lease still exists")
	out, code = scan()
	assert.Equal(t, 0, code, "after remediation scan's exit code:\n%s", out)
}
