//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/cluster"
)

// releaseDistEnvVar names the release `make release-smoke` wrote (bin/release-smoke/dist),
// which `make test-e2e` sets; helmEnvVar the Helm binary that packaged its chart.
const (
	releaseDistEnvVar = "RELEASE_DIST"
	helmEnvVar        = "HELM"
	requestsCRD       = "remediationrequests.remediator.io"
)

// releaseArtifacts finds the chart and the image archive of the release in
// $RELEASE_DIST. Without the variable the test skips, unless the real nodes are
// required (E2E_REAL_NODES): then a missing release is a failure, as missing nodes are.
func releaseArtifacts(t *testing.T) (chartTgz, imageTar, version string) {
	t.Helper()
	dist := os.Getenv(releaseDistEnvVar)
	if dist == "" {
		if os.Getenv(realNodesEnvVar) != "" {
			require.FailNow(t, "no release", "%s is unset: run `make release-smoke` and set %s=bin/release-smoke/dist (make test-e2e does both)", releaseDistEnvVar, releaseDistEnvVar)
		}
		t.Skipf("%s unset: no release to install (make release-smoke)", releaseDistEnvVar)
	}
	one := func(pattern string) string {
		m, err := filepath.Glob(filepath.Join(dist, pattern))
		require.NoError(t, err)
		require.Len(t, m, 1, "%s in %s (make release-smoke writes it)", pattern, dist)
		return m[0]
	}
	chartTgz, imageTar = one("remediator-[0-9]*.tgz"), one("remediator-image_*.tar")
	version = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(imageTar), "remediator-image_"), ".tar")
	return chartTgz, imageTar, version
}

// helmCmd runs the Helm CLI against the local cluster, with its cache, configuration
// and data in the test's temporary directory rather than the user's home.
func helmCmd(t *testing.T, home string, args ...string) string {
	t.Helper()
	bin := os.Getenv(helmEnvVar)
	if bin == "" {
		bin = filepath.Join(root, "bin", "helm")
	}
	cmd := exec.Command(bin, append(args, "--kubeconfig", kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "helm %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// TestReleaseInstallUpgradeUninstall follows docs/install.md with the release `make
// release-smoke` wrote: the image archive imported into each real node's containerd,
// the packaged chart installed with `helm install` on a cluster without the CRD, the
// controller deciding and running a request; `helm upgrade` to a package whose CRD changed updates the CRD;
// and `helm uninstall`, once nothing holds the restore finalizer, leaves no node
// cordoned, no request on a finalizer, the CRD and the requests kept.
func TestReleaseInstallUpgradeUninstall(t *testing.T) {
	nodes, ok := readyRealNodes(t, 2)
	if !ok {
		t.Skipf("needs 2 Ready real nodes (make cluster REAL_NODES=2; found %v); set %s to make their absence a failure", nodes, realNodesEnvVar)
	}
	chartTgz, imageTar, version := releaseArtifacts(t)
	ctx := context.Background()
	start := time.Now()
	for _, n := range nodes {
		require.NoError(t, cluster.ImportImage(ctx, n, imageTar), "importing %s into %s", imageTar, n)
	}
	const release = "released"
	fullname := release + "-remediator"
	system := namespace(t, "e2e-release-system")
	apps := namespace(t, "e2e-release-apps")
	requestNS := "e2e-release-" + rand.String(5)
	home := t.TempDir()

	// A first install: the release creates the CRD (the bring-up applied one for the
	// other tests, which is deleted here once no request is left, and put back after).
	handCRDToTheRelease(t)
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: requestNS}})
	})

	// The chart's defaults but for what this cluster needs (realChartValues less the image:
	// the release's own, at the chart's appVersion).
	values := realChartValues(t)
	delete(values, "image")
	values["requestNamespaces"] = []any{requestNS}
	valuesFile := filepath.Join(home, "values.yaml")
	data, err := yaml.Marshal(values)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(valuesFile, data, 0o600))

	helmCmd(t, home, "install", release, chartTgz, "-n", system, "-f", valuesFile, "--wait", "--timeout", "3m")
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			helmCmd(t, home, "uninstall", release, "-n", system, "--wait", "--timeout", "2m")
		}
	})
	rel := realRelease{name: release, namespace: system, sa: fullname, fullname: fullname}
	t.Logf("installed %s from %s after %s", version, filepath.Base(chartTgz), time.Since(start).Round(time.Second))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller logs:\n%s", tail(rel.controllerLogs(t), 20000))
		}
	})
	wantImage := "ghcr.io/remediator/remediator:" + version
	pods := rel.controllerPods(t)
	require.Len(t, pods, 2, "controller pods")
	for _, p := range pods {
		assert.Contains(t, nodes, p.Spec.NodeName, "pod %s is not on a real node", p.Name)
		require.Len(t, p.Status.ContainerStatuses, 1, "pod %s containers", p.Name)
		assert.Equal(t, wantImage, p.Status.ContainerStatuses[0].Image, "pod %s runs the release's image", p.Name)
		assert.True(t, chartPodReady(&p), "pod %s Ready", p.Name)
	}

	// The controller decides and runs a request.
	decideOne := func(incident string) types.NamespacedName {
		t.Helper()
		down := extraNode(t, "e2e-release-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		pv, _ := luksVolume(t, apps, down, 20*time.Minute, 1)
		key := createRequest(t, gitWriter(t, requestNS, fullname), requestNS, v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: pv},
			Reason: down + " was powered off after a kernel panic during cryptsetup luksOpen (" + incident + ")",
		})
		rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
		require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
		assert.False(t, leaseExists(t, pv), "the Lease still exists after the request Succeeded")
		return key
	}
	first := decideOne("INC-5201")
	t.Logf("%s Succeeded after %s", first, time.Since(start).Round(time.Second))

	// A new chart whose CRD gained a printer column: `helm upgrade` updates the CRD.
	upgraded := repackageWithCRDChange(t, home, chartTgz)
	helmCmd(t, home, "upgrade", release, upgraded, "-n", system, "--reuse-values", "--wait", "--timeout", "3m")
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, crdClient(t).Get(ctx, types.NamespacedName{Name: requestsCRD}, crd))
	var columns []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		columns = append(columns, c.Name)
	}
	assert.Contains(t, columns, upgradeColumn, "helm upgrade did not update the CRD")
	assert.Equal(t, "keep", crd.Annotations["helm.sh/resource-policy"], "the CRD is kept on uninstall")
	second := decideOne("INC-5202")
	t.Logf("upgraded; %s Succeeded after %s", second, time.Since(start).Round(time.Second))

	// Uninstall as docs/install.md says: nothing holds the restore finalizer, then uninstall.
	assert.Empty(t, strings.TrimSpace(kubectl(t, "", "get", "rr", "-A", "-o",
		`jsonpath={range .items[?(@.metadata.finalizers)]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}`)),
		"requests holding the restore finalizer before the uninstall")
	helmCmd(t, home, "uninstall", release, "-n", system, "--wait", "--timeout", "2m")
	uninstalled = true
	assert.Empty(t, strings.TrimSpace(kubectl(t, "", "get", "nodes", "-o",
		`jsonpath={range .items[?(@.metadata.annotations.remediator\.io/cordoned-by)]}{.metadata.name}{"\n"}{end}`)),
		"nodes the controller cordoned, after the uninstall")
	for _, key := range []types.NamespacedName{first, second} {
		rr := &v1alpha1.RemediationRequest{}
		require.NoError(t, k8s.Get(ctx, key, rr), "the requests stay after the uninstall")
		assert.Empty(t, rr.Finalizers, "request %s", key)
		// Nothing is left to remove them: deleting one must not wait on a controller. (The
		// API server's admission stops enforcing the release's policies a moment after
		// they are deleted.)
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.NoError(c, k8s.Delete(ctx, rr)) },
			30*time.Second, poll, "deleting request %s after the uninstall", key)
		require.Eventually(t, func() bool { return apierrors.IsNotFound(k8s.Get(ctx, key, &v1alpha1.RemediationRequest{})) },
			10*time.Second, poll, "request %s deleted after the uninstall", key)
	}
	require.NoError(t, crdClient(t).Get(ctx, types.NamespacedName{Name: requestsCRD}, crd), "the CRD is kept")
	deployments := &appsv1.DeploymentList{}
	require.NoError(t, k8s.List(ctx, deployments, client.InNamespace(system)))
	assert.Empty(t, deployments.Items, "Deployments left in %s", system)
	for _, gvk := range []schema.GroupVersionKind{
		rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
		{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		require.NoError(t, k8s.List(ctx, list, client.MatchingLabels{"app.kubernetes.io/instance": release}))
		for _, o := range list.Items {
			assert.Fail(t, "left after the uninstall", "%s %s", gvk.Kind, o.GetName())
		}
	}
	t.Logf("uninstalled after %s", time.Since(start).Round(time.Second))
}

// handCRDToTheRelease deletes the CRD the cluster's bring-up applied, so that the
// release installs its own as on a new cluster, and applies it again as the bring-up did
// when the test ends (after the release's uninstall, which keeps the CRD).
func handCRDToTheRelease(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	crdFile := filepath.Join(root, "charts", "remediator", "files", "crds", "remediator.io_remediationrequests.yaml")
	t.Cleanup(func() {
		c := crdClient(t)
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, types.NamespacedName{Name: requestsCRD}, crd); err == nil {
			// Kept by the uninstall, with the release's labels and Helm's field manager:
			// replace it by the bring-up's.
			require.NoError(t, c.Delete(ctx, crd))
			require.Eventually(t, func() bool {
				return apierrors.IsNotFound(c.Get(ctx, types.NamespacedName{Name: requestsCRD}, crd))
			}, 60*time.Second, poll, "the release's CRD deleted")
		}
		kubectl(t, "", "apply", "--server-side", "--force-conflicts", "--field-manager=remediator-test-cluster", "-f", crdFile)
		kubectl(t, "", "wait", "--for=condition=Established", "--timeout=30s", "crd/"+requestsCRD)
	})
	// The other tests' requests go with their namespaces; deleting the CRD with one still
	// there would delete it without its restore.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &v1alpha1.RemediationRequestList{}
		require.NoError(c, k8s.List(ctx, list))
		for _, rr := range list.Items {
			assert.Fail(c, "a request is left", "%s/%s", rr.Namespace, rr.Name)
		}
	}, 90*time.Second, poll, "no request left in the cluster before the CRD goes")
	c := crdClient(t)
	require.NoError(t, c.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: requestsCRD}}))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, types.NamespacedName{Name: requestsCRD}, &apiextensionsv1.CustomResourceDefinition{}))
	}, 60*time.Second, poll, "the bring-up's CRD deleted")
}

// upgradeColumn is the printer column the upgraded chart's CRD adds.
const upgradeColumn = "Upgraded"

// repackageWithCRDChange unpacks the release's chart, adds a printer column to its CRD
// and raises its version, as a later release would, and packages it with Helm.
func repackageWithCRDChange(t *testing.T, home, chartTgz string) string {
	t.Helper()
	src := filepath.Join(home, "upgrade")
	require.NoError(t, os.MkdirAll(src, 0o755))
	out, err := exec.Command("tar", "-xzf", chartTgz, "-C", src).CombinedOutput()
	require.NoError(t, err, "tar: %s", out)
	dir := filepath.Join(src, "remediator")

	crdFile := filepath.Join(dir, "files", "crds", "remediator.io_remediationrequests.yaml")
	data, err := os.ReadFile(crdFile)
	require.NoError(t, err)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.Unmarshal(data, crd))
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].AdditionalPrinterColumns = append(crd.Spec.Versions[i].AdditionalPrinterColumns,
			apiextensionsv1.CustomResourceColumnDefinition{Name: upgradeColumn, Type: "date", JSONPath: ".metadata.creationTimestamp"})
	}
	data, err = yaml.Marshal(crd)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(crdFile, data, 0o644))

	meta := map[string]any{}
	chartYAML := filepath.Join(dir, "Chart.yaml")
	data, err = os.ReadFile(chartYAML)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &meta))
	meta["version"] = meta["version"].(string) + "-crdchange"
	data, err = yaml.Marshal(meta)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(chartYAML, data, 0o644))

	helmCmd(t, home, "package", dir, "-d", home)
	return filepath.Join(home, "remediator-"+meta["version"].(string)+".tgz")
}

// crdClient is a client whose scheme knows CustomResourceDefinitions.
func crdClient(t *testing.T) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	c, err := client.New(chartRestConfig(t), client.Options{Scheme: s})
	require.NoError(t, err)
	return c
}
