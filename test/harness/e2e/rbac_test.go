//go:build e2e

package e2e

import (
	"context"
	"fmt"
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
	"github.com/remediator/remediator/test/harness/helmchart"
)

// installChart applies every object the chart renders into the release namespace
// (the CRDs are already installed by the cluster) and returns the ServiceAccount's
// name. The Deployment is accepted, scheduled and rolled out onto kwok nodes, whose
// simulated kubelets run no containers; the controller under test runs as a local
// process with the chart's ServiceAccount identity instead. (installOnRealNodes, in
// realchart_test.go, runs the chart's own pods on the real nodes.)
func installChart(t *testing.T, release, ns string) string {
	t.Helper()
	// The request namespace is the suite's own (main_test.go), shared by every test:
	// the release must neither create it nor, at cleanup, delete it.
	return installChartWith(t, release, ns, map[string]any{"trident": map[string]any{"namespace": tridentNS},
		"requestNamespace": map[string]any{"create": false}})
}

// installChartWith is installChart with the given values; every object it creates,
// a request Namespace included, is deleted at cleanup. It waits until every
// Deployment the chart made (the controller's, and the sync agent's with
// sync.enabled) is available.
func installChartWith(t *testing.T, release, ns string, values map[string]any) string {
	t.Helper()
	ctx := context.Background()
	objs, err := helmchart.Render(release, ns, values)
	require.NoError(t, err)
	sa, deployments := "", 0
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			continue
		case "ServiceAccount":
			if !strings.HasSuffix(o.GetName(), "-sync") {
				sa = o.GetName()
			}
		case "Deployment":
			deployments++
		}
		obj := o.DeepCopy()
		require.NoError(t, k8s.Create(ctx, obj), "applying rendered %s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		t.Cleanup(func() {
			_ = k8s.Delete(context.Background(), &unstructured.Unstructured{Object: obj.Object})
		})
	}
	require.NotEmpty(t, sa, "the chart rendered no ServiceAccount")
	if !assert.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &appsv1.DeploymentList{}
		require.NoError(c, k8s.List(ctx, list, client.InNamespace(ns)))
		require.Len(c, list.Items, deployments, "deployments in %s", ns)
		for i := range list.Items {
			d := &list.Items[i]
			if *d.Spec.Replicas != d.Status.AvailableReplicas || *d.Spec.Replicas != d.Status.UpdatedReplicas || d.Generation != d.Status.ObservedGeneration {
				assert.Fail(c, "not available", "Deployment %s: generation %d, status %+v", d.Name, d.Generation, d.Status)
			}
		}
	}, 90*time.Second, poll, "the chart's Deployments available") {
		require.FailNow(t, "the chart's Deployments are not available", "pods in %s:%s", ns, podStates(t, ns))
	}
	return sa
}

// podStates says where each pod in ns stands, for failure messages: a pod on a real
// node that cannot start says why (ErrImageNeverPull, CrashLoopBackOff, a failing
// probe), with the end of the log of a container that restarted.
func podStates(t *testing.T, ns string) string {
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n%s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Message)
			}
		}
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Waiting != nil:
				fmt.Fprintf(&b, " %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
			case c.State.Terminated != nil:
				fmt.Fprintf(&b, " %s terminated: %s %s", c.Name, c.State.Terminated.Reason, c.State.Terminated.Message)
			}
			if c.RestartCount > 0 {
				fmt.Fprintf(&b, " restarts %d", c.RestartCount)
				if out, err := clientset(t).CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: true,
					TailLines: ptr.To[int64](20)}).DoRaw(context.Background()); err == nil {
					fmt.Fprintf(&b, "; the previous container's log ends:\n%s", out)
				}
			}
		}
	}
	return b.String()
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
//
// On a cluster with real nodes (make cluster REAL_NODES=2; make test-e2e) the
// controller is the chart's own: its Deployment runs the image on the real nodes as
// the ServiceAccount and RBAC the chart installed, the requests come from the
// default Git writer (the chart's admission policy refuses anyone else), and the
// checks use a token bound to the leader pod, as the one the kubelet projects into
// it. Without real nodes the Deployment lands on kwok nodes, which run no
// containers, so a local controller process runs with a token of the chart's
// ServiceAccount instead.
func TestLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	release := namespace(t, "e2e-rbac-release")
	ns := namespace(t, "e2e-rbac")
	t.Cleanup(func() { simRestoreBaseline(t) })
	var (
		as   kubernetes.Interface
		logs func() string
	)
	writer := k8s
	if _, onReal := readyRealNodes(t, 2); onReal {
		rel := installOnRealNodes(t, "rbac-e2e", release, map[string]any{
			"requestNamespaces": []any{ns}, "requestNamespace": map[string]any{"create": false}})
		var leader *corev1.Pod
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			leader = nil
			name := rel.leader(c)
			for _, p := range rel.controllerPods(c) {
				if p.Name == name {
					leader = &p
				}
			}
			assert.NotNil(c, leader, "the Lease holder %s is none of the release's pods", name)
		}, 60*time.Second, poll, "a leader among the chart's pods")
		require.Equal(t, rel.sa, leader.Spec.ServiceAccountName, "the leader pod's ServiceAccount")
		t.Logf("the chart's controller runs on the real nodes: leader %s on %s as ServiceAccount %s/%s", leader.Name, leader.Spec.NodeName, release, rel.sa)
		as = tokenClientset(t, podToken(t, leader))
		// Who the API server takes the token for: the chart's ServiceAccount, in the
		// leader pod.
		who, err := as.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, "system:serviceaccount:"+release+":"+rel.sa, who.Status.UserInfo.Username, "the token's user")
		assert.Equal(t, authenticationv1.ExtraValue{leader.Name}, who.Status.UserInfo.Extra["authentication.kubernetes.io/pod-name"], "the token's pod")
		t.Logf("the checks run as %s (pod %v, node %v)", who.Status.UserInfo.Username,
			who.Status.UserInfo.Extra["authentication.kubernetes.io/pod-name"], who.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"])
		logs = func() string { return rel.controllerLogs(t) }
		writer = gitWriter(t, ns, rel.fullname)
	} else {
		sa := installChart(t, "rbac-e2e", release)
		saKubeconfig, c := serviceAccountKubeconfig(t, release, sa)
		ctl := startController(t, "--kubeconfig", saKubeconfig, "--leader-elect", "--leader-election-namespace", release,
			"--pause-configmap", release+"/remediator-pause") // as the chart passes it: its release namespace
		as, logs = c, ctl.Logs
	}

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
		key := createRequest(t, writer, ns, spec)
		rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
		assert.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "%s: %s", playbook, describe(rr))
		if assert.NotNil(t, rr.Status.Decision, "%s: %s", playbook, describe(rr)) {
			assert.Equal(t, playbook, string(rr.Status.Decision.Playbook), "%s: %s", playbook, describe(rr))
		}
	}
	controllerLog := logs()
	assert.False(t, strings.Contains(strings.ToLower(controllerLog), "forbidden"), "the controller was refused something it needs:\n%s", controllerLog)

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
