// Package api_test checks that the artifacts controller-gen derives from the API
// types and RBAC markers (deepcopy code, the CRD, the ClusterRole) are committed
// up to date, so that a changed marker cannot ship with a stale CRD.
package api_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	// The Makefile holds the generator arguments; only the output directories change.
	cmd := exec.Command("make", "-s", "-C", root, "generate", "manifests",
		"OBJECT_OUT="+filepath.Join(tmp, "object"),
		"CRD_DIR="+filepath.Join(tmp, "crds"),
		"RBAC_DIR="+filepath.Join(tmp, "rbac"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("running controller-gen: %v\n%s", err, out)
	}
	pairs := map[string]string{
		"object/zz_generated.deepcopy.go":             "api/v1alpha1/zz_generated.deepcopy.go",
		"crds/remediator.io_remediationrequests.yaml": "charts/remediator/crds/remediator.io_remediationrequests.yaml",
		"rbac/role.yaml":                              "charts/remediator/files/rbac/role.yaml",
	}
	for fresh, committed := range pairs {
		want, err := os.ReadFile(filepath.Join(tmp, fresh))
		if err != nil {
			t.Fatalf("controller-gen did not write %s: %v", fresh, err)
		}
		got, err := os.ReadFile(filepath.Join(root, committed))
		if err != nil {
			t.Fatalf("reading %s: %v", committed, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate manifests` and commit the result", committed)
		}
	}
	entries, err := os.ReadDir(filepath.Join(tmp, "crds"))
	if err != nil || len(entries) != 1 {
		t.Errorf("want exactly one generated CRD, got %d (%v)", len(entries), err)
	}
}
