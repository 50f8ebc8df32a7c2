// Package realnode holds the scripts that run real kubelet nodes beside the local cluster's
// kwok nodes (make cluster REAL_NODES=N; docs/realnodes.md): deps.sh installs containerd, the
// CNI plugins and busybox-static, images.sh builds the node images without docker, node.sh
// brings nodes up, powers them off, partitions them, brings them back and removes them (the host
// restored), and hoststate.sh records the host state they change. host_test.go (build tag
// realnode, make test-realnode-host) checks that `make cluster-down` leaves the host as found.
package realnode
