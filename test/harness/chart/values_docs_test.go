package chart_test

// This file owns docs/values.md, the reference of every chart value: helm-docs (a
// `go tool` of this module) generates it from the `# --` comments in values.yaml and
// the template docs/values.md.gotmpl, and `make values-docs` refreshes it.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helmDocsArgs are `make values-docs`'s flags but the paths, which the Makefile gives
// relative to test/harness.
var helmDocsArgs = []string{"--sort-values-order=file", "--log-level=warning"}

// TestValuesReferenceIsGenerated: docs/values.md is what helm-docs generates now, so
// that a value added or changed without `make values-docs` fails here, and every
// value has a description (helm-docs leaves it empty for a value without a `# --`
// comment, or whose comment it cannot read: a continuation line that starts with
// "--", or a first line with " --" in it).
func TestValuesReferenceIsGenerated(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command runs helm-docs")
	chartDir, err := filepath.Abs(".")
	require.NoError(t, err)
	repo := filepath.Join(chartDir, "..", "..")
	args := append([]string{"-C", filepath.Join(repo, "test", "harness"), "tool", "helm-docs",
		"--chart-search-root=" + chartDir,
		"--template-files=" + filepath.Join(repo, "docs", "values.md.gotmpl"),
		"--dry-run"}, helmDocsArgs...)
	cmd := exec.Command(goBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	generated, err := cmd.Output()
	require.NoError(t, err, "go tool helm-docs: %s", stderr.String())
	committed, err := os.ReadFile(filepath.Join(repo, "docs", "values.md"))
	require.NoError(t, err)
	if string(generated) != string(committed) {
		// The lines that differ, rather than two copies of the whole page.
		gen, com := strings.Split(string(generated), "\n"), strings.Split(string(committed), "\n")
		t.Errorf("docs/values.md is not what values.yaml's comments generate: run make values-docs and commit it\nonly generated:\n%s\nonly committed:\n%s",
			strings.Join(without(gen, com), "\n"), strings.Join(without(com, gen), "\n"))
	}

	rows := 0
	for line := range strings.SplitSeq(string(generated), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		rows++
		cells := strings.Split(strings.TrimSuffix(line, " |"), " | ")
		require.Len(t, cells, 4, "a row of key, type, default and description: %s", line)
		key := strings.Trim(cells[0], "| `")
		assert.NotEmpty(t, strings.TrimSpace(cells[3]),
			"value %s has no description: give it a `# --` comment in values.yaml (a continuation line may not start with --)", key)
	}
	assert.Greater(t, rows, 50, "the reference lists the values")
}

// without returns the lines of a that b does not hold.
func without(a, b []string) []string {
	var out []string
	for _, line := range a {
		if !slices.Contains(b, line) {
			out = append(out, line)
		}
	}
	return out
}
