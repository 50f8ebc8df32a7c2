// Command remediator is the single Remediator binary: the controller manager and the
// operator-facing subcommands. This package holds flags and wiring only.
package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "remediator",
		Short:         "Declarative, policy-checked remediation of NetApp Trident storage incidents",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newControllerCommand(), newScanCommand(), newVersionCommand())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
