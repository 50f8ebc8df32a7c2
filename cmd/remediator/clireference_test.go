package main

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/cmd/clidoc"
)

// cliReference is the generated command-line reference.
const cliReference = "../../docs/cli-reference.md"

var updateReference = flag.Bool("update", false, "rewrite "+cliReference+" from the command tree (make cli-reference)")

// TestCLIReference: the committed reference is what the generator writes from the
// command tree, so that a flag added, renamed or re-described without regenerating
// fails here. make cli-reference (go generate ./cmd/remediator) rewrites it.
func TestCLIReference(t *testing.T) {
	var b bytes.Buffer
	// As installed as remediator, not kubectl-remediator: the help names commands so.
	require.NoError(t, clidoc.Write(&b, newRootCommand("remediator"), newControllerCommand()))
	if *updateReference {
		require.NoError(t, os.WriteFile(cliReference, b.Bytes(), 0o644))
		return
	}
	committed, err := os.ReadFile(cliReference)
	require.NoError(t, err, "run make cli-reference")
	assert.Equal(t, string(committed), b.String(), "%s is not what the commands say: run make cli-reference", cliReference)

	// Generated twice, the same: nothing in it depends on the machine or the day.
	var again bytes.Buffer
	require.NoError(t, clidoc.Write(&again, newRootCommand("remediator"), newControllerCommand()))
	assert.Equal(t, b.String(), again.String())
}
