package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/remediator/remediator/internal/cmd/controller"
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
		// main prints errors itself: scan's findings are an exit code, not an error.
		SilenceErrors: true,
	}
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == "kubectl-remediator" {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl remediator"}
	}
	root.AddCommand(controller.NewCommand(version), scan.NewCommand(), sync.NewCommand(), plan.NewCommand(version), pause.NewCommand(), pause.NewResumeCommand(), newVersionCommand())
	return root
}

func main() {
	root := newRootCommand(os.Args[0])
	if err := root.Execute(); err != nil {
		if code, ok := scan.ExitCode(err); ok { // the findings are the output
			os.Exit(code)
		}
		if code, ok := plan.ExitCode(err); ok { // plan's report already says why
			os.Exit(code)
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
