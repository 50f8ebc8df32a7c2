package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKubectlPlugin: installed as kubectl-remediator the binary is a kubectl plugin,
// and its help names the command as kubectl users type it.
func TestKubectlPlugin(t *testing.T) {
	help := func(argv0 string, args ...string) string {
		root := newRootCommand(argv0)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--help"))
		require.NoError(t, root.Execute())
		return out.String()
	}
	assert.Contains(t, help("/usr/local/bin/kubectl-remediator", "scan"), "kubectl remediator scan [flags]")
	assert.Contains(t, help("/usr/local/bin/remediator", "scan"), "remediator scan [flags]")
	assert.NotContains(t, help("/usr/local/bin/remediator", "scan"), "kubectl remediator")
}
