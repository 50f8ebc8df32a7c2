package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/remediator/remediator/test/sim/registrar"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trident-sim:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		kubeconfig = flag.String("kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config or in-cluster)")
		namespace  = flag.String("namespace", "trident", "namespace of the node-plugin pods")
		selector   = flag.String("selector", "app=node.csi.trident.netapp.io", "label selector of the node-plugin pods")
		driver     = flag.String("driver-name", "csi.trident.netapp.io", "CSI driver name registered on CSINodes")
	)
	flag.Parse()

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "trident-sim"
	// client-go's default 5 QPS would delay each CSINode write behind the previous node's; a
	// test watching for the driver should see it change as soon as kubelet would change it.
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return registrar.Run(ctx, registrar.Config{
		Client:    cs,
		Namespace: *namespace,
		Selector:  *selector,
		Driver:    *driver,
	})
}
