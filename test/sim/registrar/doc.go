// Package registrar owns the simulated kubelet plugin registration of a CSI driver (Trident's
// csi.trident.netapp.io) on the local test cluster, where kwok plays the kubelets and nothing
// really runs: it turns node-plugin pod lifecycle events into the CSINode driver entries a real
// kubelet would write, including seed B's bug. The Tracker is the pure decision logic; Syncer
// writes its decisions to CSINode objects; Run wires both to a pod informer.
//
// The bug being reproduced: csi-node-driver-registrar removes the node's one, shared
// registration socket (/var/lib/kubelet/plugins_registry/<driver>-reg.sock) when it gets
// SIGTERM, and kubelet's plugin watcher then deregisters the driver. So when two node-plugin
// pods overlap on a node and the older one terminates, the driver is gone although the newer
// pod keeps running and Ready; its registrar registered once at start and never again.
//
// Real nodes (RealNodeLabel=true) are left alone: there the real kubelet registers the driver
// from the real registration socket of test/tools/tridentnode, which has the same bug.
package registrar
