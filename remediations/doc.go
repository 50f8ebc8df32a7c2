// Package remediations owns acting: playbooks as data (playbooks.yaml), the step
// library they name (cordon, graceful pod eviction, waits, Lease deletion with
// preconditions, uncordon), the safety floor checked before every destructive step
// (floor.go), and the runner that advances a request's playbook one journaled step
// per reconcile so that a restart resumes without repeating a destructive call.
//
// It does not import controllers or controllers/facts: the steps read the cluster
// through the LiveView interface, which the controller implements with its facts
// gatherer. The floor is Go, not CUE, so that no policy can lift it.
package remediations
