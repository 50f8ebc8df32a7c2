// Package decisiontest owns the decision table that both the controller's tests
// and `remediator plan`'s tests run: every case must give the same phase and rule
// through lifecycle.Decide and through plan, so that a PR check can never
// disagree with what the controller does once the request is merged. It is test
// support; nothing in the binary imports it.
package decisiontest
