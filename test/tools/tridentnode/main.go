// Command tridentnode stands in for Trident's CSI node plugin on the real kubelet nodes of the
// local cluster (make cluster REAL_NODES=N, test/realnode): Trident itself and the CSI
// sidecars cannot be fetched here (the module proxy refuses node-driver-registrar), so the
// project runs this small binary in the trident-csi DaemonSet instead, one mode per container:
//
//	tridentnode plugin    (container trident-main) CSI Identity and Node services for
//	                      csi.trident.netapp.io: NodeStage/NodePublish bind-mount the
//	                      volume's directory <volumes-dir>/<volume handle>; staging a LUKS
//	                      volume takes the PV-named Lease in the Trident namespace for the
//	                      "cryptsetup" step, as Trident does (seed 003).
//	tridentnode registrar (container driver-registrar) kubelet's plugin registration API on
//	                      <registration-dir>/csi.trident.netapp.io-reg.sock; on SIGTERM it
//	                      removes that socket as the upstream node-driver-registrar does,
//	                      which is what deregisters the driver in seed 000.
//	tridentnode attacher  (container csi-attacher) marks the node's VolumeAttachments of
//	                      csi.trident.netapp.io attached, as external-attacher does, so
//	                      that the driver attaches as Trident's does (attachRequired).
//	tridentnode probe     a readiness check for the containers' exec probes.
//
// docs/realnodes-csi.md describes the deployment and what was seen on real kubelets.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

const (
	// DriverName is Trident's CSI driver name.
	DriverName = "csi.trident.netapp.io"
	// DefaultVersion is what GetPluginInfo reports as the vendor version.
	DefaultVersion = "25.06.0+remediator"
)

func usage() {
	fmt.Fprintf(os.Stderr, `usage: tridentnode plugin|registrar|probe [flags]
  plugin     CSI Identity+Node server for %[1]s (run with -h for its flags)
  registrar  kubelet plugin registration server for %[1]s
  attacher   marks this node's VolumeAttachments of %[1]s attached
  probe      check a plugin or registrar socket; exit 0 when it answers
`, DriverName)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// SIGTERM is what kubelet sends when the pod is deleted; SIGINT for a terminal.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "plugin":
		err = runPlugin(ctx, log.With("mode", "plugin"), os.Args[2:])
	case "registrar":
		err = runRegistrar(ctx, log.With("mode", "registrar"), os.Args[2:])
	case "attacher":
		err = runAttacher(ctx, log.With("mode", "attacher"), os.Args[2:])
	case "probe":
		err = runProbe(ctx, os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}
