// Package remediationrequest owns the RemediationRequest reconciler: it fetches a
// request, guards it with a finalizer, runs small phase functions (decide from
// freshly gathered facts, then advance the playbook one step) and writes the status
// back in one merge patch at the end of every reconcile. It also owns the guards (one
// remediation per node and Lease), stopping a running playbook, and the metrics.
// States and transitions are package lifecycle's; the one way to decide, which
// `remediator plan` takes too, package decider's; the runnables beside it have a
// package each, wired in internal/cmd/controller. It writes only requests (status,
// finalizer) and Events: every change to a Node, Pod or Lease is a step of package
// remediations, run through remediations.Advance and Restore.
package remediationrequest
