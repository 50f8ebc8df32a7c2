package cmdutil

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Main executes root with args and returns the exit code (Exit*), having printed the
// error to stderr unless the command's output already says why. Each binary's main
// is this, on its own command tree.
func Main(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	cmd, err := Execute(root)
	code, print := ExitCode(err)
	if print {
		fmt.Fprintln(stderr, "Error:", err)
		if code == ExitUsage {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return code
}

// NewVersionCommand is the version command of the binary program, which prints
// "<program> <version>": version as set at build time (-ldflags -X main.version=),
// or the module's version when the binary was built with `go install` (version
// "dev").
func NewVersionCommand(program, version string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version
			if info, ok := debug.ReadBuildInfo(); ok && v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
				v = info.Main.Version
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", program, v)
			return err
		},
	}
}
