//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/helmchart"
)

// installChart applies every object the chart renders into the release namespace
// (the CRDs are already installed by the cluster) and returns the ServiceAccount's
// name. The Deployment is accepted, scheduled and rolled out onto kwok nodes, whose
// simulated kubelets run no containers; the controller under test runs as a local
// process with the chart's ServiceAccount identity instead.
func installChart(t *testing.T, release, ns string) string {
	t.Helper()
	// The request namespace is the suite's own (main_test.go), shared by every test:
	// the release must neither create it nor, at cleanup, delete it.
	return installChartWith(t, release, ns, map[string]any{"trident": map[string]any{"namespace": tridentNS},
		"requestNamespace": map[string]any{"create": false}})
}

// installChartWith is installChart with the given values; every object it creates,
// a request Namespace included, is deleted at cleanup.
func installChartWith(t *testing.T, release, ns string, values map[string]any) string {
	t.Helper()
	ctx := context.Background()
	objs, err := helmchart.Render(release, ns, values)
	require.NoError(t, err)
	sa := ""
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			continue
		case "ServiceAccount":
			sa = o.GetName()
		}
		obj := o.DeepCopy()
		require.NoError(t, k8s.Create(ctx, obj), "applying rendered %s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		t.Cleanup(func() {
			_ = k8s.Delete(context.Background(), &unstructured.Unstructured{Object: obj.Object})
		})
	}
	require.NotEmpty(t, sa, "the chart rendered no ServiceAccount")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &appsv1.DeploymentList{}
		require.NoError(c, k8s.List(ctx, list, client.InNamespace(ns)))
		require.Len(c, list.Items, 1, "deployments in %s", ns)
		d := &list.Items[0]
		assert.Equal(c, *d.Spec.Replicas, d.Status.AvailableReplicas, "available replicas; status %+v", d.Status)
		assert.Equal(c, d.Generation, d.Status.ObservedGeneration, "observedGeneration; status %+v", d.Status)
	}, 60*time.Second, poll, "the chart's Deployment available")
	return sa
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a bound token from the TokenRequest API, so the real API
// server's RBAC authorizer judges every call the controller makes.
func serviceAccountKubeconfig(t *testing.T, ns, sa string) (string, kubernetes.Interface) {
	t.Helper()
	tr, err := clientset(t).CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	admin, err := clientcmd.LoadFromFile(kubeconfig)
	require.NoError(t, err)
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = cluster
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa, Namespace: ns}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	require.NoError(t, err)
	return path, kubernetes.NewForConfigOrDie(rc)
}

// TestLeastPrivilege runs the controller as the chart's ServiceAccount through
// incident A (a shut-down holder and a healthy one whose workload is moved) and
// incident B (the deregistered driver), then shows what that identity may not do.
func TestLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	release := namespace(t, "e2e-rbac-release")
	sa := installChart(t, "rbac-e2e", release)
	saKubeconfig, as := serviceAccountKubeconfig(t, release, sa)
	t.Cleanup(func() { simRestoreBaseline(t) })
	ctl := startController(t, "--kubeconfig", saKubeconfig, "--leader-elect", "--leader-election-namespace", release)

	ns := namespace(t, "e2e-rbac")
	down := extraNode(t, "e2e-rbac-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	downPV, _ := luksVolume(t, ns, down, 20*time.Minute, 1)
	_, claim := luksVolume(t, ns, "kwok-node-1", 40*time.Minute, 2)
	appPod(t, ns, "web-0", "kwok-node-1", claim, nil)
	deregisterEverywhere(t)

	requests := map[string]v1alpha1.RemediationRequestSpec{
		"node-shutdown": {Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: downPV},
			Reason: "holder powered off after a kernel panic during cryptsetup"},
		// Targeting the pod exercises the whole pod -> PVC -> PV -> Lease resolution.
		"healthy-move-workload": {Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: ns, Name: "web-0"}},
			Reason: "Lease retained after failed cryptsetup luksOpen on a healthy node"},
		"restart-node-plugin": {Remediation: v1alpha1.RemediationReregisterCSIDriver, Target: v1alpha1.Target{Node: "kwok-node-0"},
			Reason: "CSINode kwok-node-0 lost csi.trident.netapp.io after the DaemonSet was recreated"},
	}
	for playbook, spec := range requests {
		key := request(t, ns, spec)
		rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
		assert.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "%s: %s", playbook, describe(rr))
		if assert.NotNil(t, rr.Status.Decision, "%s: %s", playbook, describe(rr)) {
			assert.Equal(t, playbook, string(rr.Status.Decision.Playbook), "%s: %s", playbook, describe(rr))
		}
	}
	assert.False(t, strings.Contains(strings.ToLower(ctl.logs()), "forbidden"), "the controller was refused something it needs:\n%s", ctl.logs())

	// What the identity must not do. Destructive calls are dry runs: authorization
	// is decided before the dry run, so a Forbidden is the real answer, and a wrongly
	// allowed call still changes nothing.
	dry := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	denied := map[string]error{
		"list Secrets in the Trident namespace": func() error {
			_, err := as.CoreV1().Secrets(tridentNS).List(ctx, metav1.ListOptions{})
			return err
		}(),
		"get Secrets cluster-wide": func() error {
			_, err := as.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}(),
		"delete a Node": as.CoreV1().Nodes().Delete(ctx, "kwok-node-0", dry),
		"delete a node heartbeat Lease in kube-node-lease": as.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, "kwok-node-0", dry),
		"delete a Lease in another namespace": func() error {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-trident"}}
			require.NoError(t, k8s.Create(ctx, l))
			return as.CoordinationV1().Leases(ns).Delete(ctx, l.Name, dry)
		}(),
		"create a pod": func() error {
			_, err := as.CoreV1().Pods(tridentNS).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "escalate"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}(),
		"delete a pod directly (only the Eviction API is allowed)": func() error {
			pods, err := clientset(t).CoreV1().Pods(tridentNS).List(ctx, metav1.ListOptions{Limit: 1})
			require.NoError(t, err, "no pod to try")
			require.NotEmpty(t, pods.Items, "no pod to try")
			return as.CoreV1().Pods(tridentNS).Delete(ctx, pods.Items[0].Name, dry)
		}(),
	}
	for what, err := range denied {
		assert.True(t, apierrors.IsForbidden(err), "%s: err = %v, want Forbidden", what, err)
	}
	// The same checks pass for what the controller needs, so they can tell the
	// difference: a Lease in the Trident namespace may be deleted.
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: "pvc-rbac-e2e-probe"}}
	require.NoError(t, k8s.Create(ctx, l))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), l) })
	assert.NoError(t, as.CoordinationV1().Leases(tridentNS).Delete(ctx, l.Name, dry), "deleting a Lease in the Trident namespace (dry run): want allowed")
}
