//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestScanApplyOnAFreshInstall: scan's suggested requests (`remediator scan -o yaml`)
// apply right after the chart is installed with its defaults, as the Git writer
// applies them: scan suggests requests in the namespace the chart creates, and a
// plain `kubectl apply` by hand is refused (Git is the only writer). Before the
// install the same apply fails with `namespaces "remediator" not found`, the symptom
// a new user met.
func TestScanApplyOnAFreshInstall(t *testing.T) {
	ctx := context.Background()
	const requestNS = "remediator" // the chart's default requestNamespaces, and scan's --request-namespace
	err := k8s.Get(ctx, types.NamespacedName{Name: requestNS}, &corev1.Namespace{})
	require.True(t, apierrors.IsNotFound(err), "namespace %s exists before the install (%v): this test needs a cluster without it", requestNS, err)

	apps := namespace(t, "e2e-fresh-apps")
	down := extraNode(t, "e2e-fresh-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, apps, down, 25*time.Minute, 2)

	out, err := exec.Command(filepath.Join(root, "bin", "remediator"), "scan", "--kubeconfig", kubeconfig,
		"--node-lease-grace-period", "20s", "-o", "yaml").Output()
	// Findings are output, not a failure: scan exits 0 unless asked (--exit-code), so
	// that `set -o pipefail; remediator scan -o yaml | kubectl apply -f -` works.
	require.NoError(t, err, "scan with findings exits 0 without --exit-code\n%s", out)
	manifests := string(out)
	require.Contains(t, manifests, "namespace: "+requestNS)
	require.Contains(t, manifests, "persistentVolume: "+pv)

	apply := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", kubeconfig, "apply", "-f", "-"}, args...)...)
		cmd.Stdin = strings.NewReader(manifests)
		res, err := cmd.CombinedOutput()
		return string(res), err
	}
	res, err := apply("--dry-run=server")
	require.Error(t, err, "apply before the install:\n%s", res)
	assert.Contains(t, res, `namespaces "remediator" not found`)

	installChartWith(t, "fresh", namespace(t, "e2e-fresh-system"), map[string]any{"trident": map[string]any{"namespace": tridentNS}})
	// Git is the only writer: on a fresh install the chart's admission policy refuses
	// a request applied by hand, even by the cluster's admin, and says to open a pull
	// request; the same manifests committed to the remediation repository are applied
	// by Argo CD (here impersonated, with the chart's edit role bound to it).
	// The API server takes a moment to load a new admission policy: wait until a
	// server-side dry run is refused, then a real apply must be too.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res, err := apply("--dry-run=server")
		assert.Error(c, err, "a plain apply on a fresh install is refused:\n%s", res)
		assert.Contains(c, res, "Git is the only writer: open a pull request")
	}, 30*time.Second, poll, "the admission policy in force")
	res, err = apply()
	require.Error(t, err, "a plain apply on a fresh install is refused:\n%s", res)
	assert.Contains(t, res, "Git is the only writer: open a pull request")
	const argocd = "system:serviceaccount:argocd:argocd-application-controller"
	bind(t, requestNS, "fresh-remediator-edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "argocd", Name: "argocd-application-controller"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res, err = apply("--as", argocd, "--as-group", "system:serviceaccounts")
		assert.NoError(c, err, "kubectl apply of scan's requests as Argo CD on a fresh install:\n%s\n%s", res, manifests)
	}, 30*time.Second, poll)
	list := &v1alpha1.RemediationRequestList{}
	require.NoError(t, k8s.List(ctx, list, client.InNamespace(requestNS)))
	var targets []string
	for _, rr := range list.Items {
		targets = append(targets, string(rr.Spec.Remediation)+" "+rr.Spec.Target.PersistentVolume+rr.Spec.Target.Node)
	}
	assert.Contains(t, targets, "release-luks-lease "+pv, "the requests scan suggested are in the chart's request namespace")
}
