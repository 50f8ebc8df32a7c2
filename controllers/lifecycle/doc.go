// Package lifecycle is where a request's life is decided, with no client: the one
// decision path (Decide: the policy, then the safety floor, DryRun, the maintenance
// window and the line for a slot), which the reconciler and `remediator plan` both
// take, and where a request stands in admission's line, read from its status. The
// runnables (the reconciler, admission, plan) gather and write; this package only
// computes.
package lifecycle
