//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/gitrepo"
)

// The template repository's Argo CD settings (argocd/settings.yaml) name these; the test
// points them at its own Git server and namespaces, the only edits a user makes.
const (
	templateRepoURL       = "https://git.example.com/platform/remediation.git"
	templateRequestNS     = "remediator"
	templateControllerNS  = "remediator-system"
	requestsApplication   = "remediation-requests"
	policiesApplication   = "remediation-policies"
	argoRepoUser          = "argocd"
	argoRepoPassword      = "e2e-read-only"
	argoHealthTimeout     = 90 * time.Second
	argoPolicySyncTimeout = 90 * time.Second
)

// TestArgoCDSyncsTheTemplate runs the template repository's Argo CD path on the real Argo
// CD (application-controller and repo-server v3.2.6, startArgoCD): the AppProjects and
// Applications of examples/remediation-repo/argocd/ built from its kustomization and
// applied as a user applies them (kubectl apply -k, settings.yaml edited), the
// health check installed in argocd-cm as the README says, the repository served over
// smart HTTP with credentials in an Argo CD repository Secret. Every health below is
// Argo CD's own, read from the Application's status:
//   - a merged request for a shut-down holder is synced and shows Progressing until the
//     controller runs it, then Healthy once it Succeeded;
//   - a request the policy rejects shows Degraded, and removing it from Git prunes it;
//   - a request waiting for its maintenance window shows Suspended;
//   - the policies Application builds policies/ with the repo-server's kustomize into the
//     controller's ConfigMap, and the digest each decision records is the one
//     `remediator plan --policies-dir policies` printed for that commit.
//
// Still a model here: the kubelet's projection of that ConfigMap into the controller's
// --policies-dir (projectConfigMap; the chart's mount is exercised on real nodes by
// TestChartOnRealNodes), and the webhook a Git host sends on push (a refresh annotation).
func TestArgoCDSyncsTheTemplate(t *testing.T) {
	ctx := context.Background()
	startArgoCD(t)
	ns := namespace(t, "e2e-argocd")
	system := namespace(t, "e2e-argocd-system")
	template := filepath.Join(root, "examples", "remediation-repo")

	// The remediation repository: the template without its example requests (they name
	// the demo's nodes), with the shipped policies overridden from Git as
	// policies/README.md sets it up.
	repo := gitrepo.New(t)
	for _, f := range []string{"README.md", "policies/README.md", "requests/README.md"} {
		data, err := os.ReadFile(filepath.Join(template, f))
		require.NoError(t, err)
		repo.Write(f, string(data))
	}
	shipped, err := filepath.Glob(filepath.Join(root, "policies", "*.cue"))
	require.NoError(t, err)
	for _, f := range shipped {
		// The schema is the controller's own: a policy directory holds the rules only.
		if filepath.Base(f) == "schema.cue" {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		repo.Write("policies/"+filepath.Base(f), string(data))
	}
	repo.Write("policies/kustomization.yaml", templateManifest(t, "policies-kustomization.yaml", system))
	url := repo.ServeSmartHTTP(t, argoRepoUser, argoRepoPassword)
	rev := repo.Commit("Remediation repository from the template, with policies")

	// Argo CD's repository credentials, as `argocd repo add URL --username --password`
	// stores them.
	kubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: remediation-repo
  namespace: %s
  labels:
    argocd.argoproj.io/secret-type: repository
stringData:
  type: git
  url: %s
  username: %s
  password: %s
`, argoNamespace, url, argoRepoUser, argoRepoPassword), "apply", "-f", "-")
	// kubectl apply -k argocd/, with policies.yaml listed: the AppProjects and the
	// Applications of the requests and of the policies.
	kubectl(t, templateArgoCD(t, url, system, ns), "apply", "-f", "-")

	// The policies reach the cluster through the repo-server's kustomize build, with the
	// digest plan prints for the commit.
	checkout := t.TempDir()
	planDigest := func(rev string) string {
		t.Helper()
		repo.Git(checkout, "clone", "--quiet", repo.Bare, rev)
		dir := filepath.Join(checkout, rev)
		repo.Git(dir, "checkout", "--quiet", rev)
		out, err := exec.Command(filepath.Join(root, "bin", "remediator"), "plan", "--policies-dir", filepath.Join(dir, "policies"),
			"--policies-configmap", system+"/remediator-policies", "-o", "json").Output()
		require.NoError(t, err, "plan --policies-dir policies at %.12s: %s", rev, out)
		var report struct {
			Policy struct{ Digest, ConfigMap string }
		}
		require.NoError(t, json.Unmarshal(out, &report), "%s", out)
		require.Equal(t, system+"/remediator-policies", report.Policy.ConfigMap, "plan names the ConfigMap Argo CD applies")
		return report.Policy.Digest
	}
	controllerDir := t.TempDir()
	policiesKey := types.NamespacedName{Namespace: system, Name: "remediator-policies"}
	syncPolicies := func(rev string) {
		t.Helper()
		refresh(t, policiesApplication)
		waitApp(t, policiesApplication, rev, "Healthy", argoPolicySyncTimeout)
		cm := projectConfigMap(t, policiesKey, controllerDir)
		managers := []string{}
		for _, f := range cm.ManagedFields {
			managers = append(managers, f.Manager)
		}
		assert.Contains(t, managers, "argocd-controller", "the ConfigMap was applied by Argo CD's controller")
	}
	digest := planDigest(rev)
	syncPolicies(rev)
	waitApp(t, requestsApplication, rev, "Healthy", argoHealthTimeout)

	// 1. A request for a shut-down holder: Progressing while no controller has decided it,
	// Healthy once it Succeeded.
	down := extraNode(t, "e2e-argo-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, ns, down, 20*time.Minute, 1)
	repo.Write("requests/release-lease-shutdown.yaml", shutdownRequestYAML(ns, pv, down, "INC-4711"))
	rev = repo.Commit("Release the Lease of " + pv)
	refresh(t, requestsApplication)
	s := waitApp(t, requestsApplication, rev, "Progressing", argoHealthTimeout)
	t.Logf("before the controller runs: %s", s)
	startController(t, "--policies-dir", controllerDir, "--policy-reload-interval", "1s", "--request-namespaces", ns)
	s = waitApp(t, requestsApplication, rev, "Healthy", argoHealthTimeout)
	t.Logf("after the playbook: %s", s)
	shutdown := waitPhase(t, types.NamespacedName{Namespace: ns, Name: "release-lease-shutdown"}, 5*time.Second, v1alpha1.PhaseSucceeded)
	assert.Equal(t, "node-shutdown", string(decision(t, shutdown).Playbook))
	assert.Equal(t, digest, decision(t, shutdown).PolicyDigest, "the decision was made with the policies plan checked at %.12s", rev)
	assert.False(t, leaseExists(t, pv), "the Lease still exists")

	// 2. A policy commit: Argo CD brings it to the controller, and the next decision
	// carries the digest plan printed for that commit.
	data, err := os.ReadFile(filepath.Join(repo.Work, "policies", "reregister_csi_driver.cue"))
	require.NoError(t, err)
	repo.Write("policies/reregister_csi_driver.cue", strings.Replace(string(data), "package policies", "package policies\n\n// Reviewed in PR #53.", 1))
	rev = repo.Commit("Policies: a reviewed comment")
	second := planDigest(rev)
	require.NotEqual(t, digest, second, "a policy commit changes the digest")
	syncPolicies(rev)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctrl, err := os.ReadFile(filepath.Join(controllerDir, "reregister_csi_driver.cue"))
		require.NoError(c, err)
		assert.Contains(c, string(ctrl), "Reviewed in PR #53")
	}, 10*time.Second, poll)
	time.Sleep(3 * time.Second) // the controller re-reads --policies-dir every second

	// 3. A request the policy rejects (its Lease is gone): Degraded, with the rejection in
	// the request; removing it from Git prunes it and the Application is Healthy again.
	gone, _ := csiVolume(t, ns, true)
	repo.Write("requests/release-lease-gone.yaml", strings.Replace(shutdownRequestYAML(ns, gone, down, "INC-4712"),
		"name: release-lease-shutdown", "name: release-lease-gone", 1))
	rev = repo.Commit("Release the Lease of " + gone)
	refresh(t, requestsApplication)
	s = waitApp(t, requestsApplication, rev, "Degraded", argoHealthTimeout)
	t.Logf("rejected: %s", s)
	rejected := waitPhase(t, types.NamespacedName{Namespace: ns, Name: "release-lease-gone"}, 5*time.Second, v1alpha1.PhaseRejected)
	assert.Equal(t, second, decision(t, rejected).PolicyDigest, "the decision after the policy commit carries its digest")
	repo.Remove("requests/release-lease-gone.yaml")
	rev = repo.Commit("Remove the rejected request")
	refresh(t, requestsApplication)
	waitApp(t, requestsApplication, rev, "Healthy", argoHealthTimeout)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "release-lease-gone"}, &v1alpha1.RemediationRequest{})
		assert.True(c, err != nil && strings.Contains(err.Error(), "not found"), "the pruned request: %v", err)
	}, argoHealthTimeout, poll, "Argo CD pruned the request removed from Git")

	// 4. A request allowed but outside its maintenance window: Suspended.
	down2 := extraNode(t, "e2e-argo-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv2, _ := luksVolume(t, ns, down2, 20*time.Minute, 1)
	opens := time.Now().UTC().Add(3 * time.Hour)
	windowed := strings.Replace(shutdownRequestYAML(ns, pv2, down2, "INC-4713"), "name: release-lease-shutdown", "name: release-lease-windowed", 1) +
		fmt.Sprintf("  maintenanceWindow:\n    schedule: \"CRON_TZ=UTC %d %d * * *\"\n    duration: 30m\n", opens.Minute(), opens.Hour())
	repo.Write("requests/release-lease-windowed.yaml", windowed)
	rev = repo.Commit("Release the Lease of " + pv2 + " in the next window")
	refresh(t, requestsApplication)
	s = waitApp(t, requestsApplication, rev, "Suspended", argoHealthTimeout)
	t.Logf("waiting for the window: %s", s)
	waiting := waitPhase(t, types.NamespacedName{Namespace: ns, Name: "release-lease-windowed"}, 5*time.Second, v1alpha1.PhaseWaiting)
	if c := condition(waiting, v1alpha1.ConditionProgressing); assert.NotNil(t, c) {
		assert.Equal(t, "WaitingForMaintenanceWindow", c.Reason, "%+v", c)
	}
	assert.True(t, leaseExists(t, pv2), "the Lease of a request waiting for its window is left alone")
}

// templateManifest returns the template's argocd/<name> with the controller namespace
// replaced, failing if the one it names is not there (a renamed field must not leave
// the test applying the template's own values).
func templateManifest(t *testing.T, name, system string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "examples", "remediation-repo", "argocd", name))
	require.NoError(t, err)
	s := string(data)
	re := regexp.MustCompile(`(?m)^namespace: ` + templateControllerNS + `$`)
	require.True(t, re.MatchString(s), "argocd/%s has no %s", name, re)
	return re.ReplaceAllLiteralString(s, "namespace: "+system)
}

// templateArgoCD builds the template's argocd/ as `kubectl apply -k argocd/` does, after
// the edits a user makes: the repository URL and the request and controller namespaces
// in settings.yaml, Argo CD's namespace and policies.yaml listed in kustomization.yaml.
// Each value the template ships must be there to be replaced.
func templateArgoCD(t *testing.T, url, system, ns string) string {
	t.Helper()
	src := filepath.Join(root, "examples", "remediation-repo", "argocd")
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		s := string(data)
		edit := func(from, to string) {
			require.Contains(t, s, from, "argocd/%s no longer holds what a user edits", e.Name())
			s = strings.Replace(s, from, to, 1)
		}
		switch e.Name() {
		case "settings.yaml":
			edit("repoURL: "+templateRepoURL+"\n", "repoURL: "+url+"\n")
			edit("requestNamespace: "+templateRequestNS+"\n", "requestNamespace: "+ns+"\n")
			edit("controllerNamespace: "+templateControllerNS+"\n", "controllerNamespace: "+system+"\n")
		case "kustomization.yaml":
			edit("\nnamespace: argocd\n", "\nnamespace: "+argoNamespace+"\n")
			edit("  # - policies.yaml\n", "  - policies.yaml\n")
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), []byte(s), 0o644))
	}
	var stderr strings.Builder
	cmd := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kustomize build argocd/: %s", stderr.String())
	for _, want := range []string{"name: remediation\n", "name: remediation-requests\n", "name: remediation-policies\n", "repoURL: " + url + "\n"} {
		require.Contains(t, string(out), want, "kustomize build argocd/")
	}
	return string(out)
}
