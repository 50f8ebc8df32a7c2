package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// TestExitCodes: every command exits with the codes docs/cli.md documents, as main
// computes them: 0 done, 1 the command failed, 2 a wrong command line (cobra's usage
// errors included), 3 a refusal or a finding, printed by the command itself.
func TestExitCodes(t *testing.T) {
	// A kubeconfig that names no cluster: the commands that need one fail on it.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	savedUnreachable := []string{"--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-19T12:00:00Z"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		// stderr is in what main prints; empty: main prints nothing.
		stderr []string
	}{
		{name: "version", args: []string{"version"}, code: 0},
		{name: "help", args: []string{"--help"}, code: 0},
		{name: "no command shows the help", args: nil, code: 0},
		{name: "plan: allowed", args: []string{"plan", "-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml"}, code: 0},
		{name: "plan: would wait, valid and started later", args: append([]string{"plan", "-f", planTestdata + "fenced-window.yaml"}, savedUnreachable...), code: 0},
		{name: "plan: rejected", args: append([]string{"plan", "-f", planTestdata + "unreachable-not-fenced.yaml"}, savedUnreachable...), code: 3},
		{name: "plan: an invalid request", args: append([]string{"plan", "-f", planTestdata + "unknown-field.yaml"}, savedUnreachable...), code: 1},
		{name: "plan: unreadable file", args: []string{"plan", "-f", planTestdata + "missing.yaml", "--facts", planTestdata + "facts/shutdown.yaml"}, code: 1},
		{name: "scan: no cluster", args: []string{"scan", "--kubeconfig", kubeconfig}, code: 1, stderr: []string{"Error: "}},

		{name: "unknown command", args: []string{"sacn"}, code: 2,
			stderr: []string{`Error: unknown command "sacn" for "remediator"`, "Did you mean this?\n\tscan\n", "Run 'remediator --help' for usage."}},
		{name: "unknown flag", args: []string{"scan", "--bogus"}, code: 2,
			stderr: []string{"Error: unknown flag: --bogus", "Run 'remediator scan --help' for usage."}},
		{name: "bad flag value", args: []string{"plan", "--max-concurrent-remediations", "many", "-f", "x.yaml"}, code: 2,
			stderr: []string{`invalid argument "many"`}},
		{name: "arguments where none are taken", args: []string{"scan", "extra"}, code: 2, stderr: []string{`unknown command "extra" for "remediator scan"`}},
		{name: "unknown subcommand", args: []string{"plan", "pull-requests"}, code: 2, stderr: []string{`unknown command "pull-requests" for "remediator plan"`}},
		{name: "subcommand's unknown flag", args: []string{"plan", "pull-request", "--bogus"}, code: 2, stderr: []string{"unknown flag: --bogus"}},
		{name: "mutually exclusive flags", args: []string{"plan", "-f", "x.yaml", "--facts", "f.yaml", "--kubeconfig", kubeconfig}, code: 2,
			stderr: []string{"if any flags in the group [facts kubeconfig] are set none of the others can be"}},
		{name: "a required flag missing", args: []string{"sync"}, code: 2, stderr: []string{`required flag(s) "repo" not set`}},
		{name: "completion of an unknown shell", args: []string{"completion", "bash", "extra"}, code: 2},
		{name: "pause's unknown flag", args: []string{"resume", "--bogus"}, code: 2},
		{name: "pause without a reason", args: []string{"pause", "-n", "remediator-system"}, code: 2, stderr: []string{"--reason is required"}},
		{name: "resume's -n and --pause-configmap disagree", args: []string{"resume", "-n", "storage-system", "--pause-configmap", "remediator-system/remediator-pause"}, code: 2,
			stderr: []string{"disagree"}},
		{name: "pause: no cluster", args: []string{"pause", "--kubeconfig", kubeconfig, "--reason", "INC-1: array firmware"}, code: 1},
		{name: "a flag value the command refuses", args: []string{"scan", "--node-lease-grace-period", "0s"}, code: 2,
			stderr: []string{"--node-lease-grace-period must be positive"}},
		{name: "plan with nothing to plan", args: []string{"plan"}, code: 2, stderr: []string{"-f is required"}},
		{name: "the controller is a binary of its own", args: []string{"controller"}, code: 2, stderr: []string{`unknown command "controller" for "remediator"`}},
		{name: "sync's bad flag value", args: []string{"sync", "--repo", "https://git.example.com/r.git", "--timeout", "0s"}, code: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRootCommand("remediator")
			var out, stderr bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&stderr)
			code := cmdutil.Main(root, tc.args, &stderr)
			t.Logf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), stderr.String())
			assert.Equal(t, tc.code, code, "exit code")
			for _, w := range tc.stderr {
				assert.Contains(t, stderr.String(), w)
			}
			if tc.code == cmdutil.ExitFinding {
				assert.Empty(t, stderr.String(), "a refusal is explained by the output; main prints nothing more")
			}
		})
	}
}

// TestExitCodeConstants: the codes are the documented ones; a script tests numbers.
func TestExitCodeConstants(t *testing.T) {
	assert.Equal(t, []int{0, 1, 2, 3}, []int{cmdutil.ExitOK, cmdutil.ExitError, cmdutil.ExitUsage, cmdutil.ExitFinding})
}
