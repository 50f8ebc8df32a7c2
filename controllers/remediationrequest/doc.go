// Package remediationrequest owns the RemediationRequest reconciler: it fetches a request,
// guards it with a finalizer, runs small phase functions (decide from freshly gathered
// facts, then advance the playbook one step) and writes the status back in one merge
// patch at the end of every reconcile.
//
// It also owns what surrounds a decision: the guards (one remediation per node and
// Lease); stopping a running playbook; metrics; and how the manager caches and reads.
// A request's states and transitions are package lifecycle's, and the one way to
// decide, which `remediator plan` takes too, package decider's. The runnables beside
// the reconciler (admission, detection, the pause watcher, the policy reload, the
// sweeper, the verification of fixes) have a package each; `remediator controller`
// wires them all in one place (internal/cmd/controller, addRunnables). It writes only requests
// (status, finalizer) and Events: every change to a Node, Pod or Lease is a step
// of package remediations, run through remediations.Advance and Restore.
package remediationrequest
