// Command remediator-controller is the RemediationRequest controller manager, what
// the chart's Deployment runs (internal/cmd/controller). It is a binary of its own,
// apart from the remediator CLI, so that the controller's process neither maps nor
// initialises the CLI's packages (the sync agent's gitops-engine and kubectl, the
// printers): a smaller resident set for the process that runs all the time.
package main

import (
	"os"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/internal/cmd/controller"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(cmdutil.Main(controller.NewCommand(version), os.Args[1:], os.Stderr))
}
