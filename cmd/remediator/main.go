package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/internal/cmd/pause"
	"github.com/remediator/remediator/internal/cmd/plan"
	"github.com/remediator/remediator/internal/cmd/scan"
	"github.com/remediator/remediator/internal/cmd/sync"
)

// newRootCommand is the remediator command. Installed on PATH as kubectl-remediator
// (argv0), it is a kubectl plugin: `kubectl remediator scan`, and its help says so.
func newRootCommand(argv0 string) *cobra.Command {
	root := &cobra.Command{
		Use:          "remediator",
		Short:        "Declarative, policy-checked remediation of NetApp Trident storage incidents",
		SilenceUsage: true,
		// main prints errors itself: a plan's refusal and scan's findings are an exit
		// code, already explained by the output, not an error to print again.
		SilenceErrors: true,
	}
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == "kubectl-remediator" {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl remediator"}
	}
	root.AddCommand(scan.NewCommand(), sync.NewCommand(), plan.NewCommand(version), pause.NewCommand(), pause.NewResumeCommand(), cmdutil.NewVersionCommand("remediator", version))
	// The completion command now, not when the root executes, so that its usage
	// errors exit 2 too.
	root.InitDefaultCompletionCmd()
	cmdutil.MarkUsageErrors(root)
	return root
}

func main() {
	os.Exit(cmdutil.Main(newRootCommand(os.Args[0]), os.Args[1:], os.Stderr))
}
