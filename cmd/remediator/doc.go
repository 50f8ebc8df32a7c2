// Command remediator is the operator-facing CLI, also a kubectl plugin: plan, scan,
// pause, resume, sync (the Git sync agent the chart runs) and version. The
// controller manager is a binary of its own, cmd/remediator-controller. This
// package holds the root command, main and the version only; each command lives in
// its package under internal/cmd, and what a command does lives in the packages it
// wires (controllers/..., internal/gitsync, policies, remediations), so that plan
// and the controller cannot disagree on a decision.
package main

// docs/cli-reference.md is generated from both binaries' command trees;
// TestCLIReference fails when it is stale.
//go:generate go test -run ^TestCLIReference$ -count=1 . -args -update
