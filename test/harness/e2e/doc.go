//go:build e2e

// Package e2e owns the end-to-end tests of Remediator on the local kwok cluster (test/cluster):
// a real control plane with kwok-simulated kubelets, and bin/remediator-controller
// running as its own process, the way an operator would run it.
package e2e
