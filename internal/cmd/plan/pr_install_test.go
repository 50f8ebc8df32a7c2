package plan

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestCIInstallsRemediatorFromSource runs the template's install step, in the GitHub
// Actions workflow and in the GitLab CI job, on a runner without remediator: it must
// build a working remediator from the source at REMEDIATOR_VERSION and put it on the
// PATH of what follows. (`go install module@version`, its first form, cannot work: the
// module's go.mod has replace directives, which go install refuses.) The source is a
// bare clone of this checkout's HEAD, tagged, standing in for REMEDIATOR_REPO.
func TestCIInstallsRemediatorFromSource(t *testing.T) {
	for _, tool := range []string{"bash", "git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	moduleRoot, err := filepath.Abs("../../..")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(moduleRoot, ".git")); err != nil {
		t.Skipf("not a Git checkout: %v", err)
	}
	tmp := t.TempDir()
	origin := filepath.Join(tmp, "remediator.git")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), gitEnv...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v:\n%s", args, out)
	}
	git(tmp, "clone", "--quiet", "--bare", "--no-tags", moduleRoot, origin)
	git(origin, "tag", "v0.0.0-ci-test", "HEAD")

	// A PATH without any remediator on it, so that the step must install one.
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "remediator")); err != nil {
			path = append(path, d)
		}
	}
	// script runs the lines as the CI's shell does, then `remediator version` with the
	// PATH the following steps get.
	script := func(t *testing.T, env []string, lines string, after string) string {
		t.Helper()
		cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", lines+"\n"+after)
		cmd.Dir = t.TempDir()
		cmd.Env = append(append(os.Environ(), gitEnv...), append([]string{"PATH=" + strings.Join(path, string(os.PathListSeparator)),
			"REMEDIATOR_REPO=file://" + origin, "REMEDIATOR_VERSION=v0.0.0-ci-test"}, env...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "the install step:\n%s\n%s", lines, out)
		return string(out)
	}

	t.Run("GitHub Actions", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(remediationRepo, ".github", "workflows", "check.yaml"))
		require.NoError(t, err)
		var wf ghWorkflow
		require.NoError(t, yaml.Unmarshal(data, &wf))
		var install string
		for _, job := range wf.Jobs {
			for _, st := range job.Steps {
				if strings.Contains(st.Run, "REMEDIATOR_VERSION") {
					install = st.Run
				}
			}
		}
		require.NotEmpty(t, install, "the workflow has no step installing remediator at REMEDIATOR_VERSION")
		for _, k := range []string{"REMEDIATOR_VERSION", "REMEDIATOR_REPO"} {
			require.NotEmpty(t, wf.Env[k], "the workflow sets %s", k)
		}
		runner := t.TempDir()
		githubPath := filepath.Join(runner, "github_path")
		// GitHub prepends each line of $GITHUB_PATH to the PATH of the later steps.
		out := script(t, []string{"RUNNER_TEMP=" + runner, "GITHUB_PATH=" + githubPath}, install,
			`while read -r d; do PATH="$d:$PATH"; done <"$GITHUB_PATH"; remediator version`)
		assert.Contains(t, out, "remediator")
	})

	t.Run("GitLab CI", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(remediationRepo, ".gitlab-ci.yml"))
		require.NoError(t, err)
		var jobs map[string]glJob
		require.NoError(t, yaml.Unmarshal(data, &jobs))
		require.Len(t, jobs, 1)
		for _, job := range jobs {
			for _, k := range []string{"REMEDIATOR_VERSION", "REMEDIATOR_REPO"} {
				require.NotEmpty(t, job.Variables[k], "the job sets %s", k)
			}
			var install []string
			for _, line := range job.Script {
				if !strings.Contains(line, "plan pull-request") {
					install = append(install, line)
				}
			}
			require.NotEmpty(t, install, "the job has no line installing remediator")
			// GitLab runs the script's lines in one shell: an export reaches the next.
			out := script(t, nil, strings.Join(install, "\n"), "remediator version")
			assert.Contains(t, out, "remediator")
		}
	})
}
