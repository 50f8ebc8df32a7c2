package plan

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// releaseDist returns the release directory the template's CI installs remediator from
// in these tests, and its version. RELEASE_DIST names a dist/ written by `make release`
// or `make release-smoke` (bin/release-smoke/dist), RELEASE_VERSION its version
// (default v0.0.0-smoke, release-smoke's): the test then fails when that directory lacks
// the host's archive or checksums.txt. Without RELEASE_DIST the test writes a dist/ of
// its own in the same layout, whose remediator is this package's plan (helperRemediator),
// so that the install and the check still run on every `go test`.
func releaseDist(t *testing.T) (dir, version string) {
	t.Helper()
	archive := func(version string) string {
		return fmt.Sprintf("remediator_%s_%s_%s.tar.gz", version, runtime.GOOS, runtime.GOARCH)
	}
	if dir = os.Getenv("RELEASE_DIST"); dir != "" {
		version = os.Getenv("RELEASE_VERSION")
		if version == "" {
			version = "v0.0.0-smoke"
		}
		require.FileExists(t, filepath.Join(dir, "checksums.txt"), "RELEASE_DIST=%s is no release directory: run make release-smoke", dir)
		require.FileExists(t, filepath.Join(dir, archive(version)), "RELEASE_DIST=%s has no archive of RELEASE_VERSION=%s for this platform", dir, version)
		t.Logf("installing from RELEASE_DIST=%s, version %s", dir, version)
		return dir, version
	}
	t.Logf("RELEASE_DIST is not set: installing from a release directory of this package's plan")
	version = "v0.0.0-ci-test"
	dir = t.TempDir()
	helper := helperRemediator(t, t.TempDir())
	// `remediator version` prints the release's version, as a released binary does.
	bin := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = version ]; then echo 'remediator %s'; exit 0; fi\nexec %q \"$@\"\n", version, helper)
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name, content string
		mode          int64
	}{{"remediator", bin, 0o755}, {"LICENSE", "license\n", 0o644}} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.content)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(f.content))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	writeFile(t, filepath.Join(dir, archive(version)), tgz.String(), 0o644)
	// checksums.txt lists other files too, some of them not downloaded.
	other := "remediator.yaml"
	writeFile(t, filepath.Join(dir, other), "krew\n", 0o644)
	writeFile(t, filepath.Join(dir, "checksums.txt"), fmt.Sprintf("%x  %s\n%x  %s\n%x  completions/remediator.bash\n",
		sha256.Sum256([]byte("krew\n")), other, sha256.Sum256(tgz.Bytes()), archive(version), sha256.Sum256(nil)), 0o644)
	return dir, version
}

// serveRelease serves the files of dir as GitHub serves those of release version, and returns
// the release's download URL.
func serveRelease(t *testing.T, dir, version string) string {
	t.Helper()
	prefix := "/remediator/remediator/releases/download/" + version
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", http.StripPrefix(prefix, http.FileServer(http.Dir(dir))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + prefix
}

// tamperedRelease copies the release's archive and checksums.txt to a new directory and
// changes it with edit.
func tamperedRelease(t *testing.T, dist, version string, edit func(archive, checksums []byte) ([]byte, []byte)) string {
	t.Helper()
	name := fmt.Sprintf("remediator_%s_%s_%s.tar.gz", version, runtime.GOOS, runtime.GOARCH)
	archive, err := os.ReadFile(filepath.Join(dist, name))
	require.NoError(t, err)
	checksums, err := os.ReadFile(filepath.Join(dist, "checksums.txt"))
	require.NoError(t, err)
	archive, checksums = edit(archive, checksums)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, name), string(archive), 0o644)
	writeFile(t, filepath.Join(dir, "checksums.txt"), string(checksums), 0o644)
	return dir
}

// TestCIInstallsTheRelease runs the template's GitHub Actions workflow and GitLab CI job
// on a runner without remediator, as a pull request runs them: the install step
// downloads the release's archive for the runner's platform and checksums.txt from
// REMEDIATOR_RELEASE_URL (here a local server holding a release directory, see
// releaseDist), verifies it, and puts remediator on the PATH of the check that follows,
// which plans the request the pull request adds on its saved facts. A tampered archive,
// or one checksums.txt does not list, is refused before anything of it runs.
func TestCIInstallsTheRelease(t *testing.T) {
	for _, tool := range []string{"bash", "git", "curl", "tar", "sha256sum", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	dist, version := releaseDist(t)
	releaseURL := serveRelease(t, dist, version)

	// A PATH without any remediator on it, so that the step must install one.
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "remediator")); err != nil {
			path = append(path, d)
		}
	}
	tmp := t.TempDir()
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), gitEnv...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%v:\n%s", args, out)
		return string(out)
	}

	// origin: main holds the template as a user copies it, with the saved facts of the
	// request pull request 1 adds. GitHub's refs/pull/1/merge merges it into main.
	const shutdown = "release-lease-shutdown-kwok-node-3"
	work := filepath.Join(tmp, "work")
	copyTree(t, remediationRepo, work)
	writeFile(t, filepath.Join(work, "facts", shutdown+".yaml"), string(must(os.ReadFile(filepath.Join(exampleFacts, shutdown+".yaml")))), 0o644)
	git := func(args ...string) string { return run(work, append([]string{"git"}, args...)...) }
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "Remediation repository from the template")
	git("checkout", "-q", "-b", "add-shutdown")
	writeFile(t, filepath.Join(work, "requests", shutdown+".yaml"), string(must(os.ReadFile(filepath.Join(exampleRequests, shutdown+".yaml")))), 0o644)
	git("add", ".")
	git("commit", "-q", "-m", "Release the Lease of kwok-node-3")
	git("checkout", "-q", "--detach", "main")
	git("merge", "-q", "--no-ff", "-m", "Merge add-shutdown into main", "add-shutdown")
	git("update-ref", "refs/pull/1/merge", "HEAD")
	git("checkout", "-q", "main")
	origin := filepath.Join(tmp, "origin.git")
	run(tmp, "git", "clone", "-q", "--bare", work, origin)
	run(origin, "git", "fetch", "-q", work, "+refs/pull/*:refs/pull/*")

	// checkout makes a shallow checkout of ref, as actions/checkout (the pull request's
	// merge commit) and GitLab's runner (the merge request's head) do.
	checkout := func(t *testing.T, ref string, depth int) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "checkout")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		g := func(args ...string) { run(dir, append([]string{"git"}, args...)...) }
		g("init", "-q")
		g("remote", "add", "origin", "file://"+origin)
		g("fetch", "-q", "--no-tags", "--prune", fmt.Sprintf("--depth=%d", depth), "origin", "+"+ref+":refs/remotes/checkout")
		g("checkout", "-q", "--detach", "refs/remotes/checkout")
		return dir
	}
	// shell runs script as the CI's bash does, stopping at the first failure.
	shell := func(t *testing.T, dir string, env []string, script string) (string, int) {
		t.Helper()
		cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), gitEnv...), env...)
		return runExitCode(t, cmd)
	}
	// The check on the pull request, planned on the saved facts main holds.
	passes := func(t *testing.T, out string, code int, baseFrom string) {
		t.Helper()
		assert.Equal(t, 0, code, "exit code")
		for _, want := range []string{
			"remediator " + version + "\n",
			"==> Base: origin/main (" + baseFrom + "), merge base",
			"1 request file(s) added, changed or renamed since origin/main\n",
			"Facts: saved, from facts/ (KUBECONFIG is not set). This is an OFFLINE REVIEW ONLY",
			"ALLOWED by rule holder-shutdown: playbook node-shutdown",
			"OK: 1 request(s) checked, 0 prune(s)",
		} {
			assert.Contains(t, out, want)
		}
	}
	tampered := tamperedRelease(t, dist, version, func(archive, checksums []byte) ([]byte, []byte) {
		archive = slices.Clone(archive)
		archive[len(archive)/2] ^= 0xff
		return archive, checksums
	})
	unlisted := tamperedRelease(t, dist, version, func(archive, checksums []byte) ([]byte, []byte) {
		var kept []string
		for _, line := range strings.SplitAfter(string(checksums), "\n") {
			if !strings.Contains(line, "remediator_"+version+"_") {
				kept = append(kept, line)
			}
		}
		return archive, []byte(strings.Join(kept, ""))
	})
	// refused checks a run against a tampered release: the install fails, says why, and
	// nothing of the download runs.
	refused := func(t *testing.T, out string, code int, why string) {
		t.Helper()
		assert.NotEqual(t, 0, code, "exit code")
		assert.Contains(t, out, why)
		assert.NotContains(t, out, "remediator "+version+"\n", "the download ran")
		assert.NotContains(t, out, "==> Base:", "the check ran")
	}

	t.Run("GitHub Actions", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(remediationRepo, ".github", "workflows", "check.yaml"))
		require.NoError(t, err)
		// Every action is pinned by its full commit, with the version it is as a comment.
		uses := regexp.MustCompile(`(?m)^\s*(?:-\s+)?uses:\s*(.*)$`).FindAllStringSubmatch(string(data), -1)
		require.NotEmpty(t, uses)
		for _, u := range uses {
			assert.Regexp(t, `^[\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$`, u[1], "an action not pinned by commit")
		}
		var wf ghWorkflow
		require.NoError(t, yaml.Unmarshal(data, &wf))
		require.Len(t, wf.Jobs, 1)
		for _, k := range []string{"REMEDIATOR_VERSION", "REMEDIATOR_RELEASE_URL"} {
			require.Contains(t, wf.Env, k, "the workflow sets %s", k)
		}
		assert.Regexp(t, `^v\d+\.\d+\.\d+$`, wf.Env["REMEDIATOR_VERSION"], "REMEDIATOR_VERSION pins a release")
		var steps []ghStep
		for _, job := range wf.Jobs {
			for _, st := range job.Steps {
				steps = append(steps, ghStep{st.Uses, st.Run, st.Env})
			}
		}
		// github runs the workflow on pull request 1 as GitHub does: actions/checkout,
		// then each run: step in bash, with the workflow's env (REMEDIATOR_VERSION and
		// REMEDIATOR_RELEASE_URL set as a user sets them there), the step's (no secret
		// REMEDIATOR_KUBECONFIG), and the PATH each earlier step added to $GITHUB_PATH.
		// only, if set, runs the checkout and the step whose run: contains it alone.
		github := func(t *testing.T, url, only string) (string, int, string) {
			t.Helper()
			runnerTemp := t.TempDir()
			githubPath := filepath.Join(t.TempDir(), "github_path")
			githubEnv := filepath.Join(t.TempDir(), "github_env")
			for _, f := range []string{githubPath, githubEnv} {
				writeFile(t, f, "", 0o644)
			}
			dir := ""
			var out strings.Builder
			for _, st := range steps {
				switch {
				case strings.HasPrefix(st.uses, "actions/checkout@"):
					dir = checkout(t, "refs/pull/1/merge", 1)
				case st.uses != "":
					t.Fatalf("the workflow uses %s, which this test does not emulate", st.uses)
				case only != "" && !strings.Contains(st.run, only):
				default:
					require.NotEmpty(t, dir, "a run: step before the checkout")
					added := strings.Fields(string(must(os.ReadFile(githubPath))))
					slices.Reverse(added)
					env := []string{"CI=true", "GITHUB_ACTIONS=true", "GITHUB_EVENT_NAME=pull_request", "GITHUB_BASE_REF=main",
						"GITHUB_HEAD_REF=add-shutdown", "GITHUB_REF=refs/pull/1/merge", "GITHUB_WORKSPACE=" + dir,
						"GITHUB_PATH=" + githubPath, "GITHUB_ENV=" + githubEnv, "RUNNER_TEMP=" + runnerTemp, "RUNNER_OS=Linux",
						"PATH=" + strings.Join(append(added, path...), string(os.PathListSeparator)), "KUBECONFIG="}
					env = append(env, ciVariables(wf.Env, version, url)...)
					for k, v := range st.env {
						v = strings.ReplaceAll(v, "${{ secrets.REMEDIATOR_KUBECONFIG }}", "")
						require.NotContains(t, v, "${{", "env %s: an expression this test does not emulate", k)
						env = append(env, k+"="+v)
					}
					o, code := shell(t, dir, env, st.run)
					out.WriteString(o)
					if code != 0 {
						return out.String(), code, runnerTemp
					}
				}
			}
			return out.String(), 0, runnerTemp
		}

		t.Run("a pull request adding a request installs the release and passes", func(t *testing.T) {
			out, code, runnerTemp := github(t, releaseURL, "")
			passes(t, out, code, "GITHUB_BASE_REF")
			assert.FileExists(t, filepath.Join(runnerTemp, "remediator", "bin", "remediator"))
		})
		t.Run("a tampered archive is refused", func(t *testing.T) {
			out, code, runnerTemp := github(t, serveRelease(t, tampered, version), "REMEDIATOR_VERSION")
			refused(t, out, code, "FAILED")
			assert.NoFileExists(t, filepath.Join(runnerTemp, "remediator", "bin", "remediator"), "the tampered archive was extracted")
		})
		t.Run("an archive checksums.txt does not list is refused", func(t *testing.T) {
			out, code, runnerTemp := github(t, serveRelease(t, unlisted, version), "REMEDIATOR_VERSION")
			refused(t, out, code, "does not list remediator_"+version+"_")
			assert.NoFileExists(t, filepath.Join(runnerTemp, "remediator", "bin", "remediator"), "the unlisted archive was extracted")
		})
		t.Run("a release that is not there fails the check", func(t *testing.T) {
			out, code, _ := github(t, releaseURL+"-missing", "")
			refused(t, out, code, "404")
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
		for _, k := range []string{"REMEDIATOR_VERSION", "REMEDIATOR_RELEASE_URL"} {
			require.Contains(t, job.Variables, k, "the job sets %s", k)
		}
		assert.Regexp(t, `^v\d+\.\d+\.\d+$`, job.Variables["REMEDIATOR_VERSION"], "REMEDIATOR_VERSION pins a release")
		// gitlab runs the job's script in one shell, in GitLab's checkout of the merge
		// request's head (GIT_DEPTH 20), with the job's variables.
		gitlab := func(t *testing.T, url string) (string, int) {
			t.Helper()
			dir := checkout(t, "refs/heads/add-shutdown", 20)
			env := []string{"CI=true", "GITLAB_CI=true", "CI_PIPELINE_SOURCE=merge_request_event", "CI_MERGE_REQUEST_IID=1",
				"CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main", "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME=add-shutdown", "CI_PROJECT_DIR=" + dir,
				"PATH=" + strings.Join(path, string(os.PathListSeparator)), "KUBECONFIG=", "TMPDIR=" + t.TempDir()}
			env = append(env, ciVariables(job.Variables, version, url)...)
			return shell(t, dir, env, strings.Join(job.Script, "\n"))
		}
		t.Run("a merge request adding a request installs the release and passes", func(t *testing.T) {
			out, code := gitlab(t, releaseURL)
			passes(t, out, code, "CI_MERGE_REQUEST_TARGET_BRANCH_NAME")
		})
		t.Run("a tampered archive is refused", func(t *testing.T) {
			out, code := gitlab(t, serveRelease(t, tampered, version))
			refused(t, out, code, "FAILED")
		})
		t.Run("an archive checksums.txt does not list is refused", func(t *testing.T) {
			out, code := gitlab(t, serveRelease(t, unlisted, version))
			refused(t, out, code, "does not list remediator_"+version+"_")
		})
	})
}

// ghStep is one step of a GitHub Actions job, as TestCIInstallsTheRelease runs it.
type ghStep struct {
	uses, run string
	env       map[string]string
}

// ciVariables are the variables a CI file sets, as KEY=value, with the release's
// version and URL pointed at the one the test serves.
func ciVariables(vars map[string]string, version, url string) []string {
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		switch k {
		case "REMEDIATOR_VERSION":
			v = version
		case "REMEDIATOR_RELEASE_URL":
			v = url
		}
		out = append(out, k+"="+v)
	}
	return out
}
