// Command remediator is the single Remediator binary: the controller manager and the
// operator-facing subcommands (controller, plan, scan, pause, resume, sync, version).
// This package holds the root command, main and the version only; each command lives
// in its package under internal/cmd, and what a command does lives in the packages
// it wires (controllers/..., internal/gitsync, policies, remediations), so that plan
// and the controller cannot disagree on a decision.
package main

// docs/cli-reference.md is generated from the command tree; TestCLIReference fails
// when it is stale.
//go:generate go test -run ^TestCLIReference$ -count=1 . -args -update
