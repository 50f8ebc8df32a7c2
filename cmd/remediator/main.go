package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:          "remediator",
		Short:        "Declarative, policy-checked remediation of NetApp Trident storage incidents",
		SilenceUsage: true,
		// main prints errors itself: scan's findings are an exit code, not an error.
		SilenceErrors: true,
	}
	root.AddCommand(newControllerCommand(), newScanCommand(), newSyncCommand(), newPlanCommand(), newVersionCommand())
	if err := root.Execute(); err != nil {
		var f findingsError
		if errors.As(err, &f) {
			os.Exit(ExitFindings)
		}
		if code, ok := planExitCode(err); ok { // plan's report already says why
			os.Exit(code)
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
