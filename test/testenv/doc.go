// Package testenv owns the envtest harness for integration tests: a real
// kube-apiserver and etcd (built into bin/ by `make bins`) with Remediator's CRDs
// installed, shared by every test in a package.
package testenv
