// Package facts owns the read-only side of a remediation: it resolves a request's
// target as the Trident runbook does (pod -> PVC -> PV -> Lease), reads the holder or
// target node, its node Lease, LeaseRetained events, CSINode drivers and node-plugin
// pods, and the evidence of whether the holder still has the volume (its Node's
// volumesInUse, the VolumeAttachment, the CSIDriver) into a plain v1alpha1.Facts for
// the policy, and Scan finds the incidents for `remediator scan` with the same reads.
// It never writes; a missing object is a fact, not an error. Pods are listed only by
// node, never all cached.
package facts
