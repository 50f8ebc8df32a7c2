// Package policies owns the decision: CUE policies (embedded from this directory, or
// loaded from --policies-dir) that turn a request's facts into either an allowed
// playbook or a rejection telling the operator what to do next. Evaluation is pure: it
// needs no client, and the same facts always give the same decision.
//
// The *_test.cue files next to the policies hold the cases `make policy-test` runs with
// `cue vet`.
//
// It imports only the API types, never controllers: the controller and `remediator
// plan` decide through the same Engine, on facts alone.
package policies
