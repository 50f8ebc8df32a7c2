package plan

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// remediationRepo is the template operators copy (examples/remediation-repo). Its
// requests/ and facts/ ship empty; the example requests for the demo's kwok nodes and
// their saved facts are in exampleRequests and exampleFacts, which a user copies in.
const (
	remediationRepo = "../../../examples/remediation-repo"
	exampleRequests = remediationRepo + "/examples/requests"
	exampleFacts    = remediationRepo + "/examples/facts"
)

// examplePlaybooks is what the policy must choose for each template request on its
// saved facts; the files' comment headers say the same in words.
var examplePlaybooks = map[string]struct{ rule, playbook string }{
	"release-lease-shutdown-kwok-node-3":           {"holder-shutdown", "node-shutdown"},
	"release-lease-fenced-unreachable-kwok-node-2": {"unreachable-fenced", "fenced-unreachable"},
	"release-lease-healthy-kwok-node-1-app-data":   {"healthy-lease-stuck", "healthy-move-workload"},
	"reregister-csi-driver-kwok-node-0":            {"driver-deregistered", "restart-node-plugin"},
}

func TestExampleRequestsChooseTheirPlaybooks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(exampleRequests, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no example requests found")
	var names []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		names = append(names, name)
		t.Run(name, func(t *testing.T) {
			want, ok := examplePlaybooks[name]
			require.True(t, ok, "%s has no expected playbook in examplePlaybooks", f)
			out, code, err := runPlanCommand(t, "", "-o", "json", "-f", f, "--facts", filepath.Join(exampleFacts, name+".yaml"))
			require.Equal(t, 0, code, "exit code (%v), want 0:\n%s", err, out)
			var r planReport
			require.NoError(t, json.Unmarshal([]byte(out), &r))
			require.NotEmpty(t, r.Requests, "the report has no request")
			res := r.Requests[0]
			assert.Equal(t, name, res.Request.Name, "the file must be named after the request")
			assert.Equal(t, "remediator", res.Request.Namespace, "the request must be in namespace remediator")
			assert.Equal(t, want.rule, res.Decision.Rule, "decision rule")
			assert.Equal(t, want.playbook, res.Decision.Playbook, "decision playbook")
			assert.Equal(t, "Running", string(res.Decision.Phase), "decision phase")
			assert.NotEmpty(t, res.Steps, "no steps planned")
		})
	}
	for name := range examplePlaybooks {
		assert.Contains(t, names, name, "examplePlaybooks names %s, which has no examples/requests/%s.yaml", name, name)
	}
}

// TestExamplesShowTheVolumeEvidence: the reviewer of a Lease release sees, from the
// saved facts alone, whether the holder still has the volume, and for a healthy holder
// what its Trident log said.
func TestExamplesShowTheVolumeEvidence(t *testing.T) {
	for name := range examplePlaybooks {
		if !strings.HasPrefix(name, "release-lease-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			out, code, err := runPlanCommand(t, "", "-f", filepath.Join(exampleRequests, name+".yaml"), "--facts", filepath.Join(exampleFacts, name+".yaml"))
			require.Equal(t, 0, code, "exit code (%v):\n%s", err, out)
			assert.Regexp(t, `volume    on kwok-node-\d: inUse=false \(kubelet [^)]+\), VolumeAttachment absent, attachRequired=true`, out)
		})
	}
	// A healthy holder's Lease goes only on its Trident log: the example shows what was read.
	out, code, err := runPlanCommand(t, "", "-f", filepath.Join(exampleRequests, "release-lease-healthy-kwok-node-1-app-data.yaml"),
		"--facts", filepath.Join(exampleFacts, "release-lease-healthy-kwok-node-1-app-data.yaml"))
	require.Equal(t, 0, code, "exit code (%v):\n%s", err, out)
	assert.Contains(t, out, "logs      trident/trident-csi-7xk2p -c trident-main since 2026-11-19T05:49:00Z: Failed (6144 bytes read, truncated=false)")
	assert.Contains(t, out, `could not open LUKS device; exit status 5`)
}

// TestTemplateShipsNoRequests: whatever is in the template's requests/ is applied as soon
// as Argo CD, Flux or remediator sync watches a copy of it, so it holds only its README,
// and facts/ only its own.
func TestTemplateShipsNoRequests(t *testing.T) {
	for _, dir := range []string{"requests", "facts"} {
		entries, err := os.ReadDir(filepath.Join(remediationRepo, dir))
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		assert.Equal(t, []string{"README.md"}, names, "the template's %s/", dir)
	}
}

// copyExamples copies the example requests and their saved facts into the remediation
// repository at repo, as examples/README.md tells a user on the demo cluster to.
func copyExamples(t *testing.T, repo string) {
	t.Helper()
	for from, to := range map[string]string{exampleRequests: "requests", exampleFacts: "facts"} {
		files, err := filepath.Glob(filepath.Join(from, "*.yaml"))
		require.NoError(t, err)
		require.Len(t, files, len(examplePlaybooks), "%s", from)
		for _, f := range files {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			writeFile(t, filepath.Join(repo, to, filepath.Base(f)), string(data), 0o644)
		}
	}
}

// TestPlanHelperProcess is not a test: the pull-request check's tests put this test
// binary on PATH as the remediator binary that CI runs, so that the check is tested
// against this package's plan without building the whole binary.
func TestPlanHelperProcess(t *testing.T) {
	if os.Getenv("REMEDIATOR_PLAN_HELPER") != "1" {
		t.Skip("only runs as CI's remediator binary")
	}
	args := os.Args
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[i+1:]
	}
	root := &cobra.Command{Use: "remediator", SilenceUsage: true, SilenceErrors: true}
	// The version command, as main's prints it in a test binary.
	version := &cobra.Command{Use: "version", RunE: func(cmd *cobra.Command, _ []string) error {
		_, err := fmt.Fprintln(cmd.OutOrStdout(), "remediator dev")
		return err
	}}
	root.AddCommand(NewCommand("dev"), version)
	root.SetArgs(args)
	cmdutil.MarkUsageErrors(root)
	err := root.Execute()
	code, print := cmdutil.ExitCode(err)
	if print {
		fmt.Fprintln(os.Stderr, "Error:", err)
	}
	if code != cmdutil.ExitOK {
		os.Exit(code)
	}
}

// helperRemediator writes a remediator command into dir that runs this test binary
// as remediator (TestPlanHelperProcess), and returns it.
func helperRemediator(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	p := filepath.Join(dir, "remediator")
	writeFile(t, p, fmt.Sprintf("#!/bin/sh\nREMEDIATOR_PLAN_HELPER=1 exec %q -test.run='^TestPlanHelperProcess$' -- \"$@\"\n", self), 0o755)
	return p
}

// runExitCode runs cmd and returns its combined output and exit code, failing the
// test only when it could not run at all.
func runExitCode(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("%s: exit code %d:\n%s", filepath.Base(cmd.Path), code, out)
	return string(out), code
}

// gitEnv is a Git environment without the user's configuration: git diff detects
// renames (diff.renames defaults to true), as in a CI job.
var gitEnv = []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
	"GIT_AUTHOR_NAME=ci", "GIT_AUTHOR_EMAIL=ci@example.com", "GIT_COMMITTER_NAME=ci", "GIT_COMMITTER_EMAIL=ci@example.com"}

// TestPullRequestCheck runs remediator plan pull-request in a Git copy of the
// template the way a pull request's CI job would, against a local base branch: the
// added, changed and renamed requests are planned, on their saved facts (labelled an
// offline review, with a warning when the pull request changed them) or, with a
// kubeconfig, on live ones only; a deleted request is listed as a prune; a rejected
// one fails the job; and override policies are tested with CUE.
func TestPullRequestCheck(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git not found: %v", err)
	}
	moduleRoot, err := filepath.Abs("../../..")
	require.NoError(t, err)
	tmp := t.TempDir()
	remediator := helperRemediator(t, filepath.Join(tmp, "bin"))

	repo := filepath.Join(tmp, "repo")
	copyTree(t, remediationRepo, repo)
	copyExamples(t, repo)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), gitEnv...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v:\n%s", args, out)
	}
	check := func(t *testing.T, flags []string, env ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(remediator, append([]string{"plan", "pull-request", "--base", "base"}, flags...)...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), append(append([]string{"KUBECONFIG="}, gitEnv...), env...)...)
		return runExitCode(t, cmd)
	}
	expect := func(t *testing.T, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			assert.Contains(t, out, w, "plan pull-request output")
		}
	}

	// The base branch has everything but the requests; the pull request adds them.
	git("init", "-q", "-b", "main")
	git("add", "README.md", ".github", ".gitlab-ci.yml", "argocd", "flux", "examples", "policies", "facts", "requests/README.md")
	git("commit", "-q", "-m", "template")
	git("branch", "base")
	git("add", "requests")
	git("commit", "-q", "-m", "requests")

	t.Run("the template's requests pass", func(t *testing.T) {
		out, code := check(t, nil)
		assert.Equal(t, 0, code, "exit code")
		expect(t, out, "4 request file(s) added, changed or renamed since base", "policies/ has no .cue files",
			"Facts: saved, from facts/ (KUBECONFIG is not set). This is an OFFLINE REVIEW ONLY",
			"(planned on saved facts facts/release-lease-shutdown-kwok-node-3.yaml, for offline review only)\n",
			"ALLOWED by rule holder-shutdown: playbook node-shutdown", "ALLOWED by rule driver-deregistered: playbook restart-node-plugin",
			"facts: saved, from facts/: an offline review only", "OK: 4 request(s) checked, 0 prune(s)")
		assert.NotContains(t, out, "WARNING", "the pull request changes no facts")
	})

	// The controller's settings reach plan as flags: with the floor's minimum for an
	// unreachable holder's Lease at an hour, the fenced request's 40-minute-old Lease
	// is refused, as that controller would refuse it.
	t.Run("plan takes the controller's settings", func(t *testing.T) {
		out, code := check(t, []string{"--floor-unreachable-lease-age=1h", "--max-concurrent-remediations=2"})
		assert.Equal(t, 3, code, "exit code: a refusal, as plan's")
		expect(t, out, "--floor-unreachable-lease-age=1h", "REJECTED by rule lease-too-young", "FAILED: requests/release-lease-fenced-unreachable-kwok-node-2.yaml (rejected)")
	})

	// A pull request that drops the fencing statement: only that request is planned,
	// and the policy's rejection fails the job.
	fenced := filepath.Join(repo, "requests", "release-lease-fenced-unreachable-kwok-node-2.yaml")
	src, err := os.ReadFile(fenced)
	require.NoError(t, err)
	writeFile(t, fenced, strings.Replace(string(src), "  fencing:\n    confirmed: true\n    method: NodeShutdown\n    node: kwok-node-2\n", "", 1), 0o644)
	git("commit", "-q", "-a", "-m", "unfenced")
	git("branch", "-f", "base", "HEAD~1")
	t.Run("a rejected request fails the job", func(t *testing.T) {
		out, code := check(t, nil)
		assert.Equal(t, 3, code, "exit code: a refusal, as plan's")
		expect(t, out, "1 request file(s) added, changed or renamed since base", "REJECTED by rule unreachable-not-fenced",
			"FAILED: requests/release-lease-fenced-unreachable-kwok-node-2.yaml (rejected)")
	})
	git("checkout", "-q", "HEAD~1", "--", "requests")
	git("commit", "-q", "-a", "-m", "fenced again")

	// The next pull requests are branches off main, which is their base.
	pullRequest := func(name string) {
		git("checkout", "-q", "-b", name, "main")
		git("branch", "-f", "base", "main")
	}
	edit := func(rel, from, to string) {
		t.Helper()
		p := filepath.Join(repo, rel)
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Contains(t, string(src), from, "%s no longer contains what this test edits", rel)
		writeFile(t, p, strings.Replace(string(src), from, to, 1), 0o644)
	}

	// A request merged as a DryRun, then renamed and switched to Apply in one pull
	// request: git diff sees a rename, which --diff-filter=AM used to skip, so the
	// request that acts was never planned.
	const (
		shutdown = "release-lease-shutdown-kwok-node-3"
		renamed  = shutdown + "-apply"
	)
	pullRequest("rename")
	edit("requests/"+shutdown+".yaml", "spec:\n", "spec:\n  mode: DryRun\n")
	git("commit", "-q", "-a", "-m", "shutdown as a DryRun")
	git("branch", "-f", "base", "HEAD")
	git("mv", "requests/"+shutdown+".yaml", "requests/"+renamed+".yaml")
	git("mv", "facts/"+shutdown+".yaml", "facts/"+renamed+".yaml")
	edit("requests/"+renamed+".yaml", "  mode: DryRun\n", "  mode: Apply\n")
	edit("requests/"+renamed+".yaml", "name: "+shutdown+"\n", "name: "+renamed+"\n")
	git("commit", "-q", "-a", "-m", "shutdown for real")
	t.Run("a renamed request switched to mode: Apply is planned", func(t *testing.T) {
		out, code := check(t, nil)
		assert.Equal(t, 0, code, "exit code")
		expect(t, out, "1 request file(s) added, changed or renamed since base",
			" plan -f requests/"+renamed+".yaml --facts facts/"+renamed+".yaml\n",
			"ALLOWED by rule holder-shutdown: playbook node-shutdown",
			"prune: requests/"+shutdown+".yaml — the request is deleted from the cluster; a running one restores first",
			"OK: 1 request(s) checked, 1 prune(s)")
	})
	git("checkout", "-q", "main")

	// A pull request that removes a finished request.
	pullRequest("delete")
	git("rm", "-q", "requests/reregister-csi-driver-kwok-node-0.yaml")
	git("commit", "-q", "-m", "csi driver re-registered")
	t.Run("a deleted request is listed as a prune", func(t *testing.T) {
		out, code := check(t, nil)
		assert.Equal(t, 0, code, "exit code")
		expect(t, out, "0 request file(s) added, changed or renamed since base", "No request to check",
			"prune: requests/reregister-csi-driver-kwok-node-0.yaml — the request is deleted from the cluster; a running one restores first",
			"OK: 0 request(s) checked, 1 prune(s)")
	})
	git("checkout", "-q", "main")

	// A pull request that changes a request and, with it, the saved facts it is planned
	// on: offline, that is a warning; with a kubeconfig, facts/ is not read at all.
	const healthy = "release-lease-healthy-kwok-node-1-app-data"
	pullRequest("facts")
	edit("requests/"+healthy+".yaml", "reason: >-\n", "reason: >-\n    Still stuck after the maintenance window (INC-4801).\n")
	edit("facts/"+healthy+".yaml", "gatheredAt:", "# refreshed by the pull request\ngatheredAt:")
	git("commit", "-q", "-a", "-m", "healthy: new reason, new facts")
	t.Run("a pull request changing the facts it is planned on warns", func(t *testing.T) {
		out, code := check(t, nil)
		assert.Equal(t, 0, code, "exit code")
		expect(t, out, "this pull request changes facts/: facts/"+healthy+".yaml",
			"(planned on saved facts facts/"+healthy+".yaml, for offline review only; WARNING: this pull request itself changed facts/"+healthy+".yaml)",
			"ALLOWED by rule healthy-lease-stuck",
			"!!! WARNING: this pull request changes the saved facts that its own requests were planned against:\n"+
				"!!!   requests/"+healthy+".yaml (facts/"+healthy+".yaml)\n",
			"OK: 1 request(s) checked")
	})
	t.Run("with a kubeconfig, requests are planned on live facts only", func(t *testing.T) {
		// No cluster answers here: the plan fails, but it was a live one.
		kubeconfig := filepath.Join(tmp, "kubeconfig")
		writeFile(t, kubeconfig, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n"+
			"contexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\n", 0o600)
		out, code := check(t, []string{"--request-timeout=5s"}, "KUBECONFIG="+kubeconfig)
		assert.Equal(t, 1, code, "exit code")
		expect(t, out, "Facts: live, gathered read-only from the cluster in the kubeconfig "+kubeconfig+"; facts/ is not read",
			"==> remediator plan -f requests/"+healthy+".yaml --kubeconfig "+kubeconfig+" --request-timeout=5s\n",
			"(planned on live facts from the cluster)", "facts: live, from the cluster in the kubeconfig",
			"this pull request changes facts/: saved facts are for offline review only; they were not used")
		assert.NotContains(t, out, "--facts", "planned on saved facts")
		assert.NotContains(t, out, "!!! WARNING", "saved facts were not used")

		// A kubeconfig the job cannot read fails the job instead of falling back to facts/.
		out, code = check(t, nil, "KUBECONFIG="+filepath.Join(tmp, "missing"))
		assert.Equal(t, 1, code, "exit code")
		expect(t, out, "is not a readable file")
		assert.NotContains(t, out, "--facts", "fell back to saved facts")
	})
	git("checkout", "-q", "main")

	// Argo CD's policies kustomization (argocd/policies-kustomization.yaml) copied
	// into policies/ before the policies themselves: Argo CD could build nothing.
	kustomization, err := os.ReadFile(filepath.Join(repo, "argocd", "policies-kustomization.yaml"))
	require.NoError(t, err)
	argoKustomization := filepath.Join(repo, "policies", "kustomization.yaml")
	writeFile(t, argoKustomization, string(kustomization), 0o644)
	t.Run("a policies kustomization without policies fails the job", func(t *testing.T) {
		out, code := check(t, nil)
		assert.Equal(t, 1, code, "exit code")
		expect(t, out, "policies/kustomization.yaml is there for Argo CD, but policies/ has no .cue files")
	})
	require.NoError(t, os.Remove(argoKustomization))

	// Override policies: their CUE cases run first, and plan uses them.
	policies, _ := filepath.Glob(filepath.Join(moduleRoot, "policies", "*.cue"))
	for _, p := range policies {
		// The schema is the controller's own: a policy directory holds the rules only.
		if filepath.Base(p) == "schema.cue" {
			continue
		}
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		writeFile(t, filepath.Join(repo, "policies", filepath.Base(p)), string(data), 0o644)
	}
	t.Run("override policies are tested and used", func(t *testing.T) {
		git("branch", "-f", "base", "HEAD~3") // the template commit: every request is new again
		out, code := check(t, nil)
		assert.Equal(t, 0, code, "exit code")
		expect(t, out, "Testing the override policies in policies/", "cue vet -c <the controller's schema> policies/*.cue - < policies/release_luks_lease_test.cue",
			"--policies-dir "+filepath.Join(repo, "policies"), "OK: 4 request(s) checked")
	})
	// With Argo CD's kustomization, plan checks that the ConfigMap it generates holds
	// exactly the policies it evaluates, even in a pull request that changes no request.
	writeFile(t, argoKustomization, string(kustomization), 0o644)
	t.Run("a policies-only pull request is checked against Argo CD's ConfigMap", func(t *testing.T) {
		git("branch", "-f", "base", "HEAD")
		out, code := check(t, nil)
		assert.Equal(t, 0, code, "exit code")
		expect(t, out, "Checking the override policies: ", "configmap: remediator-system/remediator-policies, generated by kustomization.yaml",
			"policy: sha256:", "No request to check")
	})
	t.Run("a kustomization leaving a policy out fails the job", func(t *testing.T) {
		writeFile(t, argoKustomization, strings.Replace(string(kustomization), "      - reregister_csi_driver.cue\n", "", 1), 0o644)
		out, code := check(t, nil)
		assert.Equal(t, 1, code, "exit code")
		expect(t, out, "reregister_csi_driver.cue is missing: plan evaluates it", "the policies in policies/ cannot be used")
	})
	require.NoError(t, os.Remove(argoKustomization))
	t.Run("a failing policy case fails the job", func(t *testing.T) {
		cases := filepath.Join(repo, "policies", "release_luks_lease_test.cue")
		src, err := os.ReadFile(cases)
		require.NoError(t, err)
		const from = `want: {allowed: true, playbook: "fenced-unreachable", rule: "unreachable-fenced"}`
		require.Contains(t, string(src), from, "release_luks_lease_test.cue no longer contains the case this test edits")
		writeFile(t, cases, strings.Replace(string(src), from, `want: {allowed: false, rule: "unreachable-lease-too-young"}`, 1), 0o644)
		out, code := check(t, nil)
		assert.Equal(t, 1, code, "exit code")
		expect(t, out, "policy cases in policies/release_luks_lease_test.cue failed")
		assert.NotContains(t, out, "remediator plan", "requests were planned with failing policies")
		assert.NotContains(t, out, "== RemediationRequest", "requests were planned with failing policies")
	})
}

func writeFile(t *testing.T, p, content string, mode fs.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, info.Mode().Perm())
	})
	require.NoError(t, err, "copying %s", from)
}
