package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	// apiTimeout bounds each call to the API server.
	apiTimeout = 10 * time.Second
	// pollInterval is how often a hanging cryptsetup looks at its hook file.
	pollInterval = 200 * time.Millisecond
	// DefaultProbeEndpoint is the plugin's second, private socket for the readiness probe.
	DefaultProbeEndpoint = "unix:///tmp/tridentnode-probe.sock"
)

func runPlugin(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("plugin", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "unix:///plugin/csi.sock", "the CSI socket kubelet calls (the registrar's --csi-address)")
	probeEndpoint := fs.String("probe-endpoint", DefaultProbeEndpoint,
		"a second socket serving the same API, inside the container's own filesystem, for the readiness probe; empty: none")
	nodeID := fs.String("node-id", os.Getenv("KUBE_NODE_NAME"), "this node's name: NodeGetInfo's node ID and the holderIdentity of LUKS Leases")
	volumesDir := fs.String("volumes-dir", "/var/lib/remediator-nodes/volumes", "where each volume's directory <volume handle> lives")
	namespace := fs.String("namespace", envOr("POD_NAMESPACE", "trident"), "the Trident namespace, where the LUKS Leases live")
	name := fs.String("driver-name", DriverName, "the CSI driver name")
	version := fs.String("version", DefaultVersion, "the vendor version GetPluginInfo reports")
	duration := fs.Duration("cryptsetup-duration", 500*time.Millisecond, "how long the simulated cryptsetup step of a LUKS volume takes")
	closeDuration := fs.Duration("luks-close-duration", 3*time.Second, "how long unstaging a LUKS volume takes (luksClose and the device's removal), after the pod has gone")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for the API server; empty: in-cluster config (KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount token)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodeID == "" {
		return errors.New("--node-id (or $KUBE_NODE_NAME) is required")
	}
	path, err := socketPath(*endpoint)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*volumesDir, 0o755); err != nil {
		return err
	}

	// Trident's lines go to the same stream as the plugin's own, so that the container's log
	// keeps their order.
	d := &Driver{Name: *name, Version: *version, NodeID: *nodeID, VolumesDir: *volumesDir, Mounter: sysMounter{}, Log: log,
		Trident: &TridentLog{W: os.Stderr}}
	sim := &cryptsetupSim{volumesDir: *volumesDir, node: *nodeID, duration: *duration, closeDuration: *closeDuration, log: log}
	d.Cryptsetup = sim.run
	if cs, err := client(*kubeconfig); err != nil {
		// Without the API, staging a LUKS volume fails (Unavailable): it cannot take the Lease.
		log.Error("No Kubernetes API access: LUKS volumes cannot be staged", "err", err)
	} else {
		d.Gate = &LeaseGate{Client: cs, Namespace: *namespace, Node: *nodeID, Log: log}
	}

	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls(log)))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	// Like any Go gRPC server's (Trident's too), the listener unlinks its socket file when it
	// closes.
	lis, err := listenUnix(path)
	if err != nil {
		return err
	}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(lis) }()
	if *probeEndpoint != "" {
		pp, err := socketPath(*probeEndpoint)
		if err != nil {
			return err
		}
		// The readiness probe must not go through the CSI socket: that path is shared with any
		// other plugin pod on the node, and seed 000's overlap leaves it dangling while this
		// pod runs on, Ready, as the real plugin pods did.
		plis, err := listenUnix(pp)
		if err != nil {
			return err
		}
		go func() { served <- srv.Serve(plis) }()
	}
	log.Info("CSI node plugin serving", "driver", *name, "version", *version, "node", *nodeID, "endpoint", path,
		"volumesDir", *volumesDir, "namespace", *namespace, "leases", d.Gate != nil)
	select {
	case err := <-served:
		return fmt.Errorf("CSI server stopped: %w", err)
	case <-ctx.Done():
	}
	log.Info("Shutting down the CSI node plugin")
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func client(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "trident-node"
	cfg.Timeout = apiTimeout
	return kubernetes.NewForConfig(cfg)
}

// logCalls logs every gRPC call and its outcome, as trident-main's debug log does.
func logCalls(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		switch info.FullMethod {
		case "/csi.v1.Identity/Probe", "/csi.v1.Identity/GetPluginInfo":
			if err == nil {
				return resp, nil // the probes: every few seconds
			}
		}
		if err != nil {
			log.Warn("GRPC call failed", "method", info.FullMethod, "code", status.Code(err).String(), "err", status.Convert(err).Message(), "duration", time.Since(start))
		} else {
			log.Info("GRPC call", "method", info.FullMethod, "duration", time.Since(start))
		}
		return resp, err
	}
}

// runProbe checks a plugin (CSI Probe) or a registrar (GetInfo) socket, for exec probes.
func runProbe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	endpoint := fs.String("endpoint", DefaultProbeEndpoint, "a plugin socket to call Probe on")
	regSocket := fs.String("registration-socket", "", "a registration socket to call GetInfo on instead")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *regSocket != "" {
		conn, err := dialUnix(*regSocket)
		if err != nil {
			return err
		}
		defer conn.Close() //nolint:errcheck
		info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
		if err != nil {
			return fmt.Errorf("GetInfo on %s: %w", *regSocket, err)
		}
		fmt.Printf("registration socket %s: %s %s -> %s\n", *regSocket, info.Type, info.Name, info.Endpoint)
		return nil
	}
	path, err := socketPath(*endpoint)
	if err != nil {
		return err
	}
	conn, err := dialUnix(path)
	if err != nil {
		return err
	}
	defer conn.Close() //nolint:errcheck
	resp, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return fmt.Errorf("probe %s: %w", path, err)
	}
	if r := resp.GetReady(); r != nil && !r.GetValue() {
		return fmt.Errorf("plugin at %s is not ready", path)
	}
	return nil
}
