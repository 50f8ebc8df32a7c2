//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestArgoCDPoliciesReachTheController: on the Argo CD path, the remediation
// repository's policies/ holds the template's kustomization (from
// argocd/policies-kustomization.yaml); what `kustomize build policies/` generates is
// server-side applied, as Argo CD's ServerSideApply=true sync does, and the chart's
// policiesConfigMap mounts it. The digest a decision records is the one
// `remediator plan --policies-dir policies` printed in the pull request, and a policy
// commit changes the next decision's digest. Argo CD itself cannot run here (no
// container runtime); its kustomize is the kustomize/api library used below.
func TestArgoCDPoliciesReachTheController(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-argopolicies-system")
	ns := namespace(t, "e2e-argopolicies")

	// The pull request's checkout: policies/ as policies/README.md sets it up, with
	// the kustomization's namespace set to this cluster's controller namespace.
	checkout := t.TempDir()
	dir := filepath.Join(checkout, "policies")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	shipped, err := filepath.Glob(filepath.Join(root, "policies", "*.cue"))
	require.NoError(t, err)
	for _, f := range shipped {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o600))
	}
	kustomization, err := os.ReadFile(filepath.Join(root, "examples", "remediation-repo", "argocd", "policies-kustomization.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(kustomization), "namespace: remediator-system\n")
	kustomization = []byte(strings.Replace(string(kustomization), "namespace: remediator-system\n", "namespace: "+system+"\n", 1))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), kustomization, 0o600))

	// The pull request's check: plan --policies-dir policies, as ci/check.sh runs it.
	planDigest := func() string {
		out, err := exec.Command(filepath.Join(root, "bin", "remediator"), "plan", "--policies-dir", dir, "-o", "json").Output()
		require.NoError(t, err, "plan --policies-dir: %s", out)
		var report struct {
			Policy struct{ Digest, ConfigMap string }
		}
		require.NoError(t, json.Unmarshal(out, &report), "%s", out)
		assert.Equal(t, system+"/remediator-policies", report.Policy.ConfigMap, "plan names the ConfigMap Argo CD applies")
		return report.Policy.Digest
	}
	// Argo CD's sync: kustomize build, then server-side apply of what it generates.
	key := types.NamespacedName{Namespace: system, Name: "remediator-policies"}
	controllerDir := t.TempDir()
	argoSync := func() {
		resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		require.NoError(t, err, "kustomize build policies/")
		require.Equal(t, 1, resources.Size())
		r := resources.Resources()[0]
		require.Equal(t, "ConfigMap", r.GetKind())
		require.Equal(t, key, types.NamespacedName{Namespace: r.GetNamespace(), Name: r.GetName()})
		cm := corev1ac.ConfigMap(key.Name, key.Namespace).WithData(r.GetDataMap())
		_, err = clientset(t).CoreV1().ConfigMaps(key.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "argocd-controller", Force: true})
		require.NoError(t, err)
		projectConfigMap(t, key, controllerDir)
	}
	dryRun := func(name, node string) types.NamespacedName {
		rr := &v1alpha1.RemediationRequest{}
		rr.Namespace, rr.Name = ns, name
		rr.Spec = v1alpha1.RemediationRequestSpec{Mode: v1alpha1.ModeDryRun, Remediation: v1alpha1.RemediationReregisterCSIDriver,
			Target: v1alpha1.Target{Node: node}, Reason: "CSINode " + node + " lost csi.trident.netapp.io after the DaemonSet was recreated."}
		create(t, rr)
		return client.ObjectKeyFromObject(rr)
	}

	first := planDigest()
	argoSync()
	startController(t, "--policies-dir", controllerDir, "--policy-reload-interval", "1s", "--request-namespaces", ns)
	assert.Equal(t, first, decidedDigest(t, dryRun("check-a", "kwok-node-0")), "the decision was made with the policies plan checked")

	// A reviewed policy change, merged: the next decision carries its digest.
	name := filepath.Join(dir, "reregister_csi_driver.cue")
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(name, []byte(strings.Replace(string(data), "package policies", "package policies\n\n// Reviewed in PR #53.", 1)), 0o600))
	second := planDigest()
	require.NotEqual(t, first, second, "a policy commit changes the digest")
	argoSync()
	time.Sleep(3 * time.Second) // the controller re-reads --policies-dir every second
	assert.Equal(t, second, decidedDigest(t, dryRun("check-b", "kwok-node-1")), "the next decision carries the new digest")
}
