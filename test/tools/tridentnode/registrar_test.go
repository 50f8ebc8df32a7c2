package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// startRegistrar runs a Registrar until the returned stop is called; stop returns Run's error.
func startRegistrar(t *testing.T, r *Registrar) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, ready) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("registrar did not start: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("registrar did not start in 10s")
	}
	var stopped bool
	var err error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("registrar did not stop in 10s")
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// getInfo calls GetInfo on the registration socket at path, as kubelet's plugin watcher does.
func getInfo(t *testing.T, path string) (*registerapi.PluginInfo, error) {
	t.Helper()
	conn, err := dialUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close() //nolint:errcheck
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
}

// TestRegistrarServesKubelet registers over a real unix socket with kubelet's
// pluginregistration client, and stopping (SIGTERM in the binary) removes the socket.
func TestRegistrarServesKubelet(t *testing.T) {
	log, _ := testLog(t)
	dir := sockDir(t)
	sock := filepath.Join(dir, DriverName+"-reg.sock")
	var failed []string
	r := &Registrar{DriverName: DriverName, Endpoint: "/var/lib/remediator-nodes/real-1/kubelet/plugins/csi.trident.netapp.io/csi.sock",
		SocketPath: sock, Log: log, RegistrationFailed: func(reason string) { failed = append(failed, reason) }}
	stop := startRegistrar(t, r)

	info, err := getInfo(t, sock)
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != DriverName || info.Endpoint != r.Endpoint ||
		len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
		t.Errorf("GetInfo = %+v", info)
	}
	conn, err := dialUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close() //nolint:errcheck
	rc := registerapi.NewRegistrationClient(conn)
	ctx := context.Background()
	if _, err := rc.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Errorf("NotifyRegistrationStatus(registered): %v", err)
	}
	if len(failed) != 0 {
		t.Errorf("a successful registration was taken for a failure: %v", failed)
	}
	if _, err := rc.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "bad version"}); err != nil {
		t.Errorf("NotifyRegistrationStatus(failed): %v", err)
	}
	if len(failed) != 1 || failed[0] != "bad version" {
		t.Errorf("a failed registration was not acted on (upstream exits 1): %v", failed)
	}

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if exists(sock) {
		t.Fatal("the registration socket is still there after the shutdown")
	}
}

// TestRegistrarOverlap is seed 000's overlap: a second registrar on the node replaces the
// first one's socket at the shared path, and the first one's shutdown then removes the
// second one's socket although the second runs on: kubelet's watcher sees the driver go.
func TestRegistrarOverlap(t *testing.T) {
	log, _ := testLog(t)
	sock := filepath.Join(sockDir(t), DriverName+"-reg.sock")
	old := &Registrar{DriverName: DriverName, Endpoint: "/old/csi.sock", SocketPath: sock, Log: log.With("pod", "old")}
	stopOld := startRegistrar(t, old)
	if info, err := getInfo(t, sock); err != nil || info.Endpoint != "/old/csi.sock" {
		t.Fatalf("old registrar: %+v, %v", info, err)
	}

	young := &Registrar{DriverName: DriverName, Endpoint: "/new/csi.sock", SocketPath: sock, Log: log.With("pod", "new")}
	stopNew := startRegistrar(t, young)
	if info, err := getInfo(t, sock); err != nil || info.Endpoint != "/new/csi.sock" {
		t.Fatalf("the second registrar did not replace the socket: %+v, %v", info, err)
	}

	if err := stopOld(); err != nil {
		t.Fatalf("old Run: %v", err)
	}
	if exists(sock) {
		t.Fatal("the old registrar's SIGTERM left the socket: seed 000's deregistration would not happen")
	}
	if _, err := getInfo(t, sock); err == nil {
		t.Fatal("GetInfo still answers at the removed path")
	}
	if err := stopNew(); err != nil {
		t.Errorf("new Run (its socket already gone): %v", err)
	}
}

// TestRegistrarBinarySIGTERM runs the registrar as a process, as the driver-registrar
// container does: it waits for the CSI driver's name, registers, and on a real SIGTERM
// removes the socket and exits 0.
func TestRegistrarBinarySIGTERM(t *testing.T) {
	log, _ := testLog(t)
	csiSock := serveDriver(t, &Driver{Name: DriverName, Version: DefaultVersion, Log: log})
	regDir := sockDir(t)
	sock := filepath.Join(regDir, DriverName+"-reg.sock")
	cmd := exec.Command(os.Args[0], "registrar", "--csi-address", "unix://"+csiSock,
		"--kubelet-registration-path", "/var/lib/remediator-nodes/real-1/kubelet/plugins/csi.trident.netapp.io/csi.sock",
		"--registration-dir", regDir, "--v=2")
	cmd.Env = append(os.Environ(), "TRIDENTNODE_RUN_MAIN=1")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("registrar output:\n%s", out.String())
		}
	})
	waitFor(t, "the registration socket", 10*time.Second, func() bool {
		info, err := getInfo(t, sock)
		return err == nil && info.Name == DriverName
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("registrar exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("registrar did not exit within 10s of SIGTERM")
	}
	if exists(sock) {
		t.Fatal("the registration socket survived SIGTERM")
	}
}
