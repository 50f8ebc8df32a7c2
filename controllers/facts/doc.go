// Package facts owns the read-only side of a remediation: it resolves a request's
// target the way the Trident runbook does (pod -> PVC -> PV -> Lease), reads the holder
// or target node, its kube-node-lease Lease, LeaseRetained events, CSINode drivers and
// node-plugin pods, and returns them as a plain v1alpha1.Facts value for the policy.
// ClassifyNode turns a Node and its heartbeat into one of the node states the policy
// decides on, and Scan finds stuck Leases and deregistered drivers for
// `remediator scan` with the same reads.
//
// It never writes, and a missing object is a fact rather than an error. It reads
// through an uncached client.Reader and lists pods only by node, so that the
// controller never holds every Pod of the cluster in memory.
package facts
