package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	tmp := t.TempDir()
	// The Makefile holds the generator arguments; only the output directories change.
	cmd := exec.Command("make", "-s", "-C", root, "generate", "manifests",
		"OBJECT_OUT="+filepath.Join(tmp, "object"),
		"CRD_DIR="+filepath.Join(tmp, "crds"),
		"RBAC_DIR="+filepath.Join(tmp, "rbac"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "running controller-gen:\n%s", out)
	pairs := map[string]string{
		"object/zz_generated.deepcopy.go":             "api/v1alpha1/zz_generated.deepcopy.go",
		"crds/remediator.io_remediationrequests.yaml": "charts/remediator/files/crds/remediator.io_remediationrequests.yaml",
		"rbac/role.yaml":                              "charts/remediator/files/rbac/role.yaml",
	}
	for fresh, committed := range pairs {
		want, err := os.ReadFile(filepath.Join(tmp, fresh))
		require.NoError(t, err, "controller-gen did not write %s", fresh)
		got, err := os.ReadFile(filepath.Join(root, committed))
		require.NoError(t, err, "reading %s", committed)
		// Compared as strings so that a stale file fails with a line diff.
		assert.Equal(t, string(want), string(got), "%s is stale: run `make generate manifests` and commit the result", committed)
	}
	entries, err := os.ReadDir(filepath.Join(tmp, "crds"))
	if assert.NoError(t, err) {
		assert.Len(t, entries, 1, "want exactly one generated CRD")
	}
}
