package plan

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/test/testenv"
)

// ghWorkflow is what this test reads of a GitHub Actions workflow.
type ghWorkflow struct {
	// On is the workflow's on:, which YAML 1.1 (sigs.k8s.io/yaml) reads as the key true.
	On   map[string]any    `json:"true"`
	Env  map[string]string `json:"env"`
	Jobs map[string]struct {
		Steps []struct {
			Uses string            `json:"uses"`
			Run  string            `json:"run"`
			Env  map[string]string `json:"env"`
		} `json:"steps"`
	} `json:"jobs"`
}

// glJob is what this test reads of a GitLab CI job.
type glJob struct {
	Rules     []map[string]any  `json:"rules"`
	Variables map[string]string `json:"variables"`
	Script    []string          `json:"script"`
}

// TestPullRequestCheckInCI runs the template's GitHub Actions workflow and GitLab CI
// job as those CIs run them: their run:/script: lines in a fresh shallow checkout
// made as actions/checkout (the pull request's merge commit, depth 1) and GitLab's
// runner (the merge request's head, GIT_DEPTH 20) make it, with their environment and
// remediator on PATH, planning on live facts (envtest). The base branch is not in
// either checkout: the check must fetch it, and deepen the GitHub one. main holds a
// request that already Succeeded and whose Lease is gone: planned on live facts it
// would be rejected (no-lease), so it must not fail later pull requests.
func TestPullRequestCheckInCI(t *testing.T) {
	for _, tool := range []string{"bash", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	env := testenv.StartT(t)
	kubeconfig := cmdtest.WriteKubeconfig(t, env.Config)
	ctx := context.Background()
	w := &cmdtest.World{T: t, C: env.Client}
	for _, ns := range []string{"trident", "app", "remediator", "remediator-system"} {
		w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	require.NoError(t, env.Client.Create(ctx, chartObject(t, "defaults", "ConfigMap", "remediator-settings").DeepCopy()))
	// The old incident: app/data's Lease stuck on healthy kwok-node-1; its request
	// Succeeded and the Lease is gone.
	const (
		healthy  = "release-lease-healthy-kwok-node-1-app-data"
		shutdown = "release-lease-shutdown-kwok-node-3"
		fenced   = "release-lease-fenced-unreachable-kwok-node-2"
	)
	w.Node("kwok-node-1", corev1.ConditionTrue, nil, time.Second)
	w.Volume("pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", "app", "data", "kwok-node-1", 0)
	require.NoError(t, env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"}}))
	old := &v1alpha1.RemediationRequest{}
	src, err := os.ReadFile(filepath.Join(exampleRequests, healthy+".yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(src, old))
	require.NoError(t, env.Client.Create(ctx, old))
	old.Status = v1alpha1.RemediationRequestStatus{Phase: v1alpha1.PhaseSucceeded, Decision: &v1alpha1.Decision{Rule: "healthy-lease-stuck", DecidedAt: metav1.Now()}}
	require.NoError(t, env.Client.Status().Update(ctx, old))
	// The new incidents: kwok-node-3 shut down, kwok-node-2 cut off the control plane.
	w.Node("kwok-node-3", corev1.ConditionUnknown, []string{v1alpha1.TaintOutOfService, v1alpha1.TaintUnreachable}, -1)
	w.Volume("pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30", "app", "archive", "kwok-node-3", 0)
	w.Node("kwok-node-2", corev1.ConditionUnknown, []string{v1alpha1.TaintUnreachable}, 3*time.Minute)
	w.Volume("pvc-3f1c2a9e-5b7d-4c1e-9a0f-2d6b8e4c7a15", "app", "reports", "kwok-node-2", 0)

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	helperRemediator(t, bin)
	run := func(t *testing.T, dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), gitEnv...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%v:\n%s", args, out)
		return strings.TrimSpace(string(out))
	}

	// origin: main has the template, the old request and two later commits; each
	// pull request branches off main and GitHub's refs/pull/N/merge merges it into main.
	work := filepath.Join(tmp, "work")
	copyTree(t, remediationRepo, work)
	require.NoError(t, os.RemoveAll(filepath.Join(work, "requests")))
	writeFile(t, filepath.Join(work, "requests", "README.md"), "requests\n", 0o644)
	writeFile(t, filepath.Join(work, "requests", healthy+".yaml"), string(src), 0o644)
	git := func(args ...string) string { return run(t, work, append([]string{"git"}, args...)...) }
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "template, and the app/data request")
	for i := range 2 {
		writeFile(t, filepath.Join(work, "facts", "README.md"), strings.Repeat("saved facts\n", i+1), 0o644)
		git("add", ".")
		git("commit", "-q", "-m", "facts notes")
	}
	fencedSrc, err := os.ReadFile(filepath.Join(exampleRequests, fenced+".yaml"))
	require.NoError(t, err)
	shutdownSrc, err := os.ReadFile(filepath.Join(exampleRequests, shutdown+".yaml"))
	require.NoError(t, err)
	branch := func(name, file, content string) {
		git("checkout", "-q", "-b", name, "main")
		writeFile(t, filepath.Join(work, file), content, 0o644)
		git("add", ".")
		git("commit", "-q", "-m", name)
		git("checkout", "-q", "main")
	}
	branch("add-shutdown", "requests/"+shutdown+".yaml", string(shutdownSrc))
	branch("add-unfenced", "requests/"+fenced+".yaml",
		strings.Replace(string(fencedSrc), "  fencing:\n    confirmed: true\n    method: NodeShutdown\n    node: kwok-node-2\n", "", 1))
	branch("touch-old", "requests/"+healthy+".yaml", strings.Replace(string(src), "(INC-4711)", "(INC-4711, closed)", 1))
	require.NotContains(t, string(src), "(INC-4711, closed)")
	for i, b := range []string{"add-shutdown", "add-unfenced", "touch-old"} {
		git("checkout", "-q", "--detach", "main")
		git("merge", "-q", "--no-ff", "-m", "Merge "+b+" into main", b)
		git("update-ref", "refs/pull/"+string(rune('1'+i))+"/merge", "HEAD")
	}
	git("checkout", "-q", "main")
	origin := filepath.Join(tmp, "origin.git")
	run(t, tmp, "git", "clone", "-q", "--bare", work, origin)
	run(t, origin, "git", "fetch", "-q", work, "+refs/pull/*:refs/pull/*")
	originURL := "file://" + origin

	// ci runs a job's script lines, as one bash script stopping at the first failure.
	ci := func(t *testing.T, dir string, env []string, script string) (string, int) {
		t.Helper()
		cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), gitEnv...), append([]string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBECONFIG="}, env...)...)
		return runExitCode(t, cmd)
	}

	t.Run("GitHub Actions", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(remediationRepo, ".github", "workflows", "check.yaml"))
		require.NoError(t, err)
		var wf ghWorkflow
		require.NoError(t, yaml.Unmarshal(data, &wf))
		require.Contains(t, wf.On, "pull_request", "the workflow runs on pull requests")
		require.Len(t, wf.Jobs, 1)
		var job string
		for name := range wf.Jobs {
			job = name
		}
		secrets := map[string]string{"REMEDIATOR_KUBECONFIG": string(must(os.ReadFile(kubeconfig)))}
		// github runs the workflow on pull request n: actions/checkout's default is
		// its merge commit at depth 1; the run: steps follow.
		github := func(t *testing.T, n int, headRef string) (string, int) {
			t.Helper()
			checkout := filepath.Join(t.TempDir(), "checkout")
			require.NoError(t, os.MkdirAll(checkout, 0o755))
			ref := "refs/pull/" + string(rune('0'+n)) + "/merge"
			var out strings.Builder
			code := 0
			runnerTemp := t.TempDir()
			// remediator is on PATH: the install step must leave it at that.
			defer func() {
				assert.NoDirExists(t, filepath.Join(runnerTemp, "remediator"), "remediator was installed again")
			}()
			for _, st := range wf.Jobs[job].Steps {
				switch {
				case strings.HasPrefix(st.Uses, "actions/checkout@"):
					git := func(args ...string) { run(t, checkout, append([]string{"git"}, args...)...) }
					git("init", "-q")
					git("remote", "add", "origin", originURL)
					git("fetch", "-q", "--no-tags", "--prune", "--depth=1", "origin", "+"+ref+":refs/remotes/pull/"+string(rune('0'+n))+"/merge")
					git("checkout", "-q", "--detach", "refs/remotes/pull/"+string(rune('0'+n))+"/merge")
					require.Equal(t, "true", run(t, checkout, "git", "rev-parse", "--is-shallow-repository"))
				case st.Uses != "":
					t.Fatalf("the workflow uses %s, which this test does not emulate", st.Uses)
				case st.Run != "":
					env := []string{"CI=true", "GITHUB_ACTIONS=true", "GITHUB_EVENT_NAME=pull_request", "GITHUB_BASE_REF=main",
						"GITHUB_HEAD_REF=" + headRef, "GITHUB_REF=" + ref, "GITHUB_WORKSPACE=" + checkout, "RUNNER_TEMP=" + runnerTemp}
					for _, m := range []map[string]string{wf.Env, st.Env} {
						for k, v := range m {
							for name, secret := range secrets {
								v = strings.ReplaceAll(v, "${{ secrets."+name+" }}", secret)
							}
							require.NotContains(t, v, "${{", "env %s: an expression this test does not emulate", k)
							env = append(env, k+"="+v)
						}
					}
					o, c := ci(t, checkout, env, st.Run)
					out.WriteString(o)
					if code = c; c != 0 {
						return out.String(), code
					}
				}
			}
			return out.String(), code
		}

		t.Run("a pull request adding a request passes beside one that already ran", func(t *testing.T) {
			out, code := github(t, 1, "add-shutdown")
			assert.Equal(t, 0, code, "exit code")
			for _, want := range []string{
				"fetching the base: git fetch --no-tags origin +refs/heads/main:refs/remotes/origin/main\n",
				"the checkout is shallow and has no merge base with origin/main yet: git fetch --no-tags --deepen=50 origin",
				"==> Base: origin/main (GITHUB_BASE_REF), merge base",
				"1 request file(s) added, changed or renamed since origin/main\n",
				"Facts: live, gathered read-only from the cluster in the kubeconfig ",
				"settings:  trident-namespace=trident (configmap remediator-system/remediator-settings)\n",
				"ALLOWED by rule holder-shutdown: playbook node-shutdown",
				"OK: 1 request(s) checked, 0 prune(s)",
			} {
				assert.Contains(t, out, want)
			}
			assert.NotContains(t, out, "plan -f requests/"+healthy+".yaml", "the request main already had was planned")
			assert.NotContains(t, out, "no-lease")
		})
		t.Run("a pull request adding a request the controller would reject fails", func(t *testing.T) {
			out, code := github(t, 2, "add-unfenced")
			assert.Equal(t, 3, code, "exit code: a refusal, as plan's")
			for _, want := range []string{
				"==> Base: origin/main (GITHUB_BASE_REF), merge base",
				"1 request file(s) added, changed or renamed since origin/main\n",
				"REJECTED by rule unreachable-not-fenced",
				"FAILED: requests/" + fenced + ".yaml (rejected)",
			} {
				assert.Contains(t, out, want)
			}
			assert.NotContains(t, out, "no-lease", "the request main already had was planned")
		})
		t.Run("a pull request touching the request that already ran passes", func(t *testing.T) {
			out, code := github(t, 3, "touch-old")
			assert.Equal(t, 0, code, "exit code")
			assert.Contains(t, out, "1 request file(s) added, changed or renamed since origin/main\n")
			assert.Contains(t, out, "decision:  ALREADY RAN: Succeeded; not planned on today's facts\n")
			assert.Contains(t, out, "the controller will not run it again")
			assert.NotContains(t, out, "no-lease")
		})
	})

	t.Run("GitLab CI", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(remediationRepo, ".gitlab-ci.yml"))
		require.NoError(t, err)
		var jobs map[string]glJob
		require.NoError(t, yaml.Unmarshal(data, &jobs))
		require.Len(t, jobs, 1)
		var job glJob
		for _, j := range jobs {
			job = j
		}
		require.NotEmpty(t, job.Rules)
		assert.Equal(t, `$CI_PIPELINE_SOURCE == "merge_request_event"`, job.Rules[0]["if"], "the job runs on merge requests")
		// GitLab's runner fetches the merge request's branch at GIT_DEPTH (20) and
		// checks out its head; a File variable KUBECONFIG holds the kubeconfig's path.
		gitlab := func(t *testing.T, iid int, branch string) (string, int) {
			t.Helper()
			checkout := filepath.Join(t.TempDir(), "checkout")
			require.NoError(t, os.MkdirAll(checkout, 0o755))
			g := func(args ...string) { run(t, checkout, append([]string{"git"}, args...)...) }
			g("init", "-q")
			g("remote", "add", "origin", originURL)
			g("fetch", "-q", "--no-tags", "--prune", "--depth", "20", "origin", "+refs/heads/"+branch+":refs/remotes/origin/"+branch)
			g("checkout", "-q", "--detach", "refs/remotes/origin/"+branch)
			env := []string{"CI=true", "GITLAB_CI=true", "CI_PIPELINE_SOURCE=merge_request_event", fmt.Sprintf("CI_MERGE_REQUEST_IID=%d", iid),
				"CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main", "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME=" + branch, "CI_PROJECT_DIR=" + checkout,
				"KUBECONFIG=" + kubeconfig}
			keys := make([]string, 0, len(job.Variables))
			for k := range job.Variables {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				env = append(env, k+"="+job.Variables[k])
			}
			return ci(t, checkout, env, strings.Join(job.Script, "\n"))
		}
		t.Run("a merge request adding a request passes beside one that already ran", func(t *testing.T) {
			out, code := gitlab(t, 1, "add-shutdown")
			assert.Equal(t, 0, code, "exit code")
			for _, want := range []string{
				"fetching the base: git fetch --no-tags origin +refs/heads/main:refs/remotes/origin/main\n",
				"==> Base: origin/main (CI_MERGE_REQUEST_TARGET_BRANCH_NAME), merge base",
				"1 request file(s) added, changed or renamed since origin/main\n",
				"settings:  trident-namespace=trident (configmap remediator-system/remediator-settings)\n",
				"ALLOWED by rule holder-shutdown: playbook node-shutdown",
				"OK: 1 request(s) checked, 0 prune(s)",
			} {
				assert.Contains(t, out, want)
			}
			assert.NotContains(t, out, "no-lease", "the request main already had was planned")
		})
		t.Run("a merge request adding a request the controller would reject fails", func(t *testing.T) {
			out, code := gitlab(t, 2, "add-unfenced")
			assert.Equal(t, 3, code, "exit code: a refusal, as plan's")
			for _, want := range []string{
				"fetching the base: git fetch --no-tags origin +refs/heads/main:refs/remotes/origin/main\n",
				"==> Base: origin/main (CI_MERGE_REQUEST_TARGET_BRANCH_NAME), merge base",
				"1 request file(s) added, changed or renamed since origin/main\n",
				"REJECTED by rule unreachable-not-fenced",
				"FAILED: requests/" + fenced + ".yaml (rejected)",
			} {
				assert.Contains(t, out, want)
			}
			assert.NotContains(t, out, "no-lease", "the request main already had was planned")
		})
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
