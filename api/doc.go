// Package api owns the remediator API's versions (api/v1alpha1, the only one
// today) and the check, in its test, that the artifacts controller-gen derives
// from the API types and RBAC markers (deepcopy code, the CRD, the ClusterRole) are
// committed up to date, so that a changed marker cannot ship with a stale CRD. It
// has no code of its own.
package api
