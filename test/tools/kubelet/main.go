// Command kubelet wraps k8s.io/kubernetes/cmd/kubelet/app (as upstream cmd/kubelet does) so that
// the test tools module can build it offline; the local cluster's real nodes
// (make cluster REAL_NODES=N, test/realnode) run it on containerd.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	command := app.NewKubeletCommand(context.Background())
	code := cli.Run(command)
	os.Exit(code)
}
