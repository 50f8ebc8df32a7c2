package main

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/cmd/controller"
	"github.com/remediator/remediator/internal/cmd/plan"
	"github.com/remediator/remediator/internal/cmd/scan"
	"github.com/remediator/remediator/internal/cmd/sync"
)

// The commands as the root command builds them, for the tests that cover several.
var (
	newControllerCommand = func() *cobra.Command { return controller.NewCommand(version) }
	newPlanCommand       = func() *cobra.Command { return plan.NewCommand(version) }
	newScanCommand       = scan.NewCommand
	newSyncCommand       = sync.NewCommand
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

// TestLogFormatFlagOnCommands: --log-format (component-base's --logging-format) and
// -v are there on both commands that log.
func TestLogFormatFlagOnCommands(t *testing.T) {
	for name, fs := range map[string]*pflag.FlagSet{"controller": newControllerCommand().Flags(), "sync": newSyncCommand().Flags()} {
		assert.NotNil(t, fs.Lookup("logging-format"), "%s --logging-format", name)
		assert.NotNil(t, fs.Lookup("log-format"), "%s --log-format", name)
		assert.NotNil(t, fs.Lookup("v"), "%s -v", name)
	}
}
