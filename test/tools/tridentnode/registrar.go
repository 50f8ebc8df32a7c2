package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Registrar is the driver-registrar container: it answers kubelet's plugin watcher on
// <registration dir>/<driver>-reg.sock, telling it where the driver's CSI socket is.
//
// It behaves as the upstream node-driver-registrar (kubernetes-csi/node-driver-registrar,
// cmd/csi-node-driver-registrar/node_register.go) does in the two ways seed 000 turns on:
//   - at start it removes whatever socket file is at that path (util.CleanupSocketFile) and
//     listens there, so a second registrar on the node replaces the first one's socket;
//   - on SIGTERM it removes the socket at that path (removeRegSocket: signal.Notify(SIGTERM),
//     os.Remove(socketPath), os.Exit(0)), whoever created it. kubelet's plugin watcher sees
//     the removal and deregisters the driver (csi_plugin.go DeRegisterPlugin), even though
//     the other registrar still runs: the seed's two overlapping trident-csi pods.
type Registrar struct {
	// DriverName is the registered name; the CSI driver's GetPluginInfo gives it.
	DriverName string
	// Endpoint is the driver's CSI socket as kubelet sees it (--kubelet-registration-path).
	Endpoint string
	// SocketPath is the registration socket, <registration dir>/<driver>-reg.sock.
	SocketPath string
	// Versions are the supported CSI versions kubelet validates; default ["1.0.0"].
	Versions []string
	Log      *slog.Logger
	// RegistrationFailed is called when kubelet reports that the registration failed.
	// Upstream exits 1 there so that kubelet restarts the container; nil does so too.
	RegistrationFailed func(reason string)
}

// Run serves the registration API until ctx ends (the SIGTERM), then removes the socket.
// ready, if not nil, is closed once the socket accepts connections.
func (r *Registrar) Run(ctx context.Context, ready chan<- struct{}) error {
	lis, err := listenUnix(r.SocketPath)
	if err != nil {
		return err
	}
	// Upstream exits without closing its listener; removing the file is removeRegSocket's
	// job alone, below.
	lis.SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registrationServer{r: r})
	r.Log.Info("Registration Server started", "socketPath", r.SocketPath, "driver", r.DriverName, "endpoint", r.Endpoint)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	if ready != nil {
		close(ready)
	}
	select {
	case err := <-served:
		return fmt.Errorf("registration server stopped: %w", err)
	case <-ctx.Done():
	}
	r.removeRegSocket()
	srv.Stop()
	return nil
}

// removeRegSocket is upstream's removeRegSocket: remove the socket at the path, whether this
// process created it or another registrar replaced it since.
func (r *Registrar) removeRegSocket() {
	err := os.Remove(r.SocketPath)
	if err != nil && !os.IsNotExist(err) {
		r.Log.Error("Failed to remove socket with error", "socket", r.SocketPath, "err", err)
		return
	}
	r.Log.Info("Received SIGTERM: removed the registration socket, as node-driver-registrar does", "socket", r.SocketPath)
}

type registrationServer struct {
	registerapi.UnimplementedRegistrationServer
	r *Registrar
}

func (s *registrationServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	s.r.Log.Info("Received GetInfo call", "driver", s.r.DriverName)
	versions := s.r.Versions
	if len(versions) == 0 {
		versions = []string{"1.0.0"}
	}
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.r.DriverName,
		Endpoint:          s.r.Endpoint,
		SupportedVersions: versions,
	}, nil
}

func (s *registrationServer) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.r.Log.Info("Received NotifyRegistrationStatus call", "pluginRegistered", st.PluginRegistered, "error", st.Error)
	if !st.PluginRegistered {
		s.r.Log.Error("Registration process failed, restarting registration container", "error", st.Error)
		if s.r.RegistrationFailed != nil {
			s.r.RegistrationFailed(st.Error)
		} else {
			os.Exit(1)
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// driverNameFrom asks the CSI driver at path for its name, retrying until it answers or ctx
// ends, as the upstream registrar waits for its driver before it registers it.
func driverNameFrom(ctx context.Context, log *slog.Logger, path string) (string, error) {
	conn, err := dialUnix(path)
	if err != nil {
		return "", err
	}
	defer conn.Close() //nolint:errcheck
	id := csi.NewIdentityClient(conn)
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := id.GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil && info.GetName() != "" {
			log.Info("CSI driver name", "csiDriverName", info.GetName(), "csiAddress", path)
			return info.GetName(), nil
		}
		if attempt%10 == 0 {
			log.Info("Still connecting to the CSI driver", "csiAddress", path, "err", err)
		}
		if !sleepCtx(ctx, time.Second) {
			return "", fmt.Errorf("no answer from the CSI driver at %s: %w", path, ctx.Err())
		}
	}
}

func runRegistrar(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("registrar", flag.ContinueOnError)
	csiAddress := fs.String("csi-address", "/plugin/csi.sock", "the CSI driver's socket inside this container (unix:// prefix optional)")
	regPath := fs.String("kubelet-registration-path", "", "the CSI driver's socket as kubelet sees it on the host (required)")
	regDir := fs.String("registration-dir", "/registration", "kubelet's plugin registration directory inside this container")
	driverName := fs.String("driver-name", "", "skip asking the driver for its name and register this one")
	_ = fs.Int("v", 0, "ignored (the upstream registrar's klog verbosity)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *regPath == "" {
		return errors.New("--kubelet-registration-path is required")
	}
	name := *driverName
	if name == "" {
		addr, err := socketPath(*csiAddress)
		if err != nil {
			return err
		}
		if name, err = driverNameFrom(ctx, log, addr); err != nil {
			return err
		}
	}
	endpoint, err := socketPath(*regPath)
	if err != nil {
		return err
	}
	r := &Registrar{
		DriverName: name,
		Endpoint:   endpoint,
		SocketPath: filepath.Join(*regDir, name+"-reg.sock"),
		Log:        log,
	}
	return r.Run(ctx, nil)
}
