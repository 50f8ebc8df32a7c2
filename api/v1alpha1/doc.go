// Package v1alpha1 owns the remediator.io/v1alpha1 API: the RemediationRequest
// type, its admission-time validation (kubebuilder and CEL markers), and the
// condition types and reasons that operators, Argo CD and the docs rely on.
//
// It imports nothing else of this module: every other package builds on it.
//
// +kubebuilder:object:generate=true
// +groupName=remediator.io
package v1alpha1
