package policies

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoadingReadsNoHostPath: policies are compiled from memory, never from the host path
// they are named under. In the chart's image /remediator is a binary, and
// loading through the host's /remediator/policies crashed every start ("readDir: open
// /remediator/policies: not a directory"). Here the host has a file where the policy root's
// parent would be, as in the image.
func TestLoadingReadsNoHostPath(t *testing.T) {
	host := t.TempDir()
	binary := filepath.Join(host, "remediator")
	require.NoError(t, os.WriteFile(binary, []byte("\x7fELF"), 0o755))
	old := policyRoot
	policyRoot = filepath.Join(binary, "policies")
	t.Cleanup(func() { policyRoot = old })

	_, err := Embedded()
	require.NoError(t, err, "embedded policies, with a file at the policy root's parent")

	dir := t.TempDir()
	writePolicy(t, dir, "p.cue", "package remediator\n\n#Policy: {\n")
	_, err = Load(dir)
	require.ErrorContains(t, err, "p.cue:", "a syntax error still names the user's file")
	require.NotContains(t, err.Error(), "not a directory")
}
