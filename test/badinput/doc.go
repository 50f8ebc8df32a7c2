// Package badinput owns the malformed RemediationRequests of the bad-input campaign
// (issue 12, R3) that admission must refuse: the CRD's schema and CEL rules, through
// a real kube-apiserver. api/v1alpha1's tests apply them alone; the controllers'
// tests apply them next to the requests only the controller can judge and a valid
// one, with the controller running, so that the campaign's figures come from one run.
// It is test support; nothing in the binary imports it.
package badinput
