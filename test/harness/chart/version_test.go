package chart_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/test/harness/helmchart"
)

// chartMetadata is Chart.yaml's.
func chartMetadata(t *testing.T) *chart.Metadata {
	t.Helper()
	c, err := helmchart.Load()
	require.NoError(t, err)
	return c.Metadata
}

// TestChartVersionMovesWithTheChart: when the chart (its values, schema, templates, CRDs
// or files; its README aside) differs from the last release tag's, so does its version.
// Without a tag (a clone without tags, a shallow clone) there is nothing to compare with.
func TestChartVersionMovesWithTheChart(t *testing.T) {
	dir, err := filepath.Abs(helmchart.Dir())
	require.NoError(t, err)
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	tag, err := git("describe", "--tags", "--abbrev=0", "--match", "v[0-9]*")
	if err != nil || tag == "" {
		t.Skip("no release tag to compare the chart with")
	}
	prefix, err := git("rev-parse", "--show-prefix")
	require.NoError(t, err)
	old, err := git("show", tag+":"+prefix+"Chart.yaml")
	if err != nil {
		t.Skipf("the chart is not in %s", tag)
	}
	// git diff --quiet exits 1 when the chart differs from the tag's (worktree included).
	err = exec.Command("git", "-C", dir, "diff", "--quiet", tag, "--", ".", ":(exclude)README.md").Run()
	if err == nil {
		return
	}
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "git diff %s -- %s", tag, dir)
	var was chart.Metadata
	require.NoError(t, yaml.Unmarshal([]byte(old), &was))
	require.NotEqual(t, was.Version, chartMetadata(t).Version,
		"the chart changed since %s but its version did not: bump Chart.yaml's version (and say so in CHANGELOG.md)", tag)
}
