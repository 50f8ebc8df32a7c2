// Command trident-sim plays kubelet's plugin-watcher part for Trident's CSI node plugin on the
// local test cluster (test/cluster), where kwok simulates the kubelets and no registrar runs:
// it watches the node-plugin pods and keeps each node's CSINode driver list the way kubelet
// would, including seed B's bug (a terminating plugin pod deregisters the driver even while
// another plugin pod on the node is Running). The logic lives in test/sim/registrar.
//
// Nodes labelled node.remediator.io/real=true (make cluster REAL_NODES=N) run a real kubelet
// and the project's node plugin test/tools/tridentnode: their kubelet's plugin watcher owns
// their CSINode, and the simulator leaves them alone.
//
// test/cluster/up.sh builds, starts and restarts it; down.sh stops it.
package main
