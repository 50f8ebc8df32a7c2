// Package cluster owns the local test cluster: a real control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler built into bin/) run by `kwokctl --runtime binary`,
// with kwok simulating the kubelets of three nodes and a stand-in for Trident's trident-csi
// node-plugin DaemonSet. The cluster itself is defined by up.sh, down.sh, kwokctl.yaml and
// manifests/ in this directory; this package only runs those scripts for Go e2e tests.
//
// The baseline after Up: nodes kwok-node-0..2 (annotated kwok.x-k8s.io/node=fake, so kwok keeps
// them Ready), DaemonSet trident/trident-csi with one Running/Ready pod per node, and each node's
// CSINode listing csi.trident.netapp.io, kept by the Trident simulator (test/sim) that up.sh runs
// in place of kubelet's plugin registration. Up re-applies the baseline when the cluster is
// already running, so tests may call it freely.
//
// Disconnect makes a node "control plane unreachable": about 22s later it is Ready=Unknown and
// tainted node.kubernetes.io/unreachable, and kwok stops acting for it (its pods stay as they
// are, deletions stay Terminating). Reconnect undoes it within seconds. Removing the kwok
// annotation from a node that kwok already manages does NOT work: kwok v0.7.0 filters nodes by
// annotation on its side, never sees the node leave, and keeps renewing its Lease.
package cluster
