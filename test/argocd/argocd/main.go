// Command argocd runs the parts of Argo CD that the Argo CD e2e tests need, chosen as Argo
// CD's all-in-one binary chooses (cmd/main.go): by $ARGOCD_BINARY_NAME, else by the first
// argument here. Only these are compiled, not the API server, the CLI, dex, notifications or
// the embedded UI:
//
//   - application-controller and repo-server;
//   - git-ask-pass, which the repo-server's git runs through GIT_ASKPASS=argocd with
//     ARGOCD_BINARY_NAME=argocd-git-ask-pass to read a repository's credentials, so this
//     binary must be on the repo-server's PATH under the name argocd.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	controller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	askpass "github.com/argoproj/argo-cd/v3/cmd/argocd-git-ask-pass/commands"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"application-controller": controller.NewCommand,
		"repo-server":            reposerver.NewCommand,
		"git-ask-pass":           askpass.NewCommand,
	}
	args := os.Args[1:]
	var name string
	switch os.Getenv("ARGOCD_BINARY_NAME") {
	case "argocd-git-ask-pass":
		name = "git-ask-pass"
	case "":
		if len(args) > 0 {
			name, args = args[0], args[1:]
		}
	}
	newCommand := commands[name]
	if newCommand == nil {
		fmt.Fprintln(os.Stderr, "usage: argocd application-controller|repo-server [flags] (or ARGOCD_BINARY_NAME=argocd-git-ask-pass)")
		os.Exit(2)
	}
	cmd := newCommand()
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
