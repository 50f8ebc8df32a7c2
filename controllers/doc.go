// Package controllers owns the RemediationRequest reconciler: it fetches a request,
// guards it with a finalizer, runs small phase functions (decide from freshly gathered
// facts, then advance the playbook one step) and writes the status back in one merge
// patch at the end of every reconcile.
//
// It also owns what surrounds a decision: the one decision path Decide, which
// `remediator plan` takes too; the guards (one remediation per node and Lease, the
// cluster-wide cap); maintenance windows; stopping a running playbook; the policy
// reload; metrics; and how the manager caches and reads. It writes only requests
// (status, finalizer) and Events: every change to a Node, Pod or Lease is a step
// of package remediations, run through remediations.Advance and Restore.
package controllers
