package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/internal/cmd/controller"
)

// TestExitCodes: remediator-controller exits with the codes docs/cli.md documents,
// as main computes them; it fails on its command line before it connects anywhere.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr []string
	}{
		{name: "version", args: []string{"version"}, code: 0, stdout: "remediator-controller dev\n"},
		{name: "help", args: []string{"--help"}, code: 0},
		{name: "bad flag value", args: []string{"--max-concurrent-reconciles", "0"}, code: 2},
		{name: "unknown flag", args: []string{"--bogus"}, code: 2,
			stderr: []string{"Error: unknown flag: --bogus", "Run 'remediator-controller --help' for usage."}},
		{name: "an argument where none is taken", args: []string{"controller"}, code: 2,
			stderr: []string{`unknown command "controller" for "remediator-controller"`}},
		{name: "no completion command", args: []string{"completion", "bash"}, code: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := controller.NewCommand(version)
			var out, stderr bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&stderr)
			code := cmdutil.Main(root, tc.args, &stderr)
			t.Logf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), stderr.String())
			assert.Equal(t, tc.code, code, "exit code")
			if tc.stdout != "" {
				assert.Equal(t, tc.stdout, out.String())
			}
			for _, w := range tc.stderr {
				assert.Contains(t, stderr.String(), w)
			}
		})
	}
}
