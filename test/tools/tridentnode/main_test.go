package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// TestMain lets a test run the binary itself: with TRIDENTNODE_RUN_MAIN=1 the test binary
// is tridentnode (os.Args[1:] are its arguments), so signals can be sent to a real process.
func TestMain(m *testing.M) {
	if os.Getenv("TRIDENTNODE_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// syncBuffer is a log sink safe for the servers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testLog returns a logger whose output the test prints on failure, and the output.
func testLog(t *testing.T) (*slog.Logger, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(io.MultiWriter(buf), &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// sockDir is a short temporary directory: unix socket paths must stay under 108 bytes.
func sockDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// serveDriver serves d's Identity and Node services on a unix socket and returns its path.
func serveDriver(t *testing.T, d *Driver) string {
	t.Helper()
	path := filepath.Join(sockDir(t), "csi.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return path
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestSocketPath(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///var/lib/x/csi.sock": "/var/lib/x/csi.sock",
		"unix://plugin/csi.sock":     "/plugin/csi.sock", // Trident's manifests' form
		"/plugin/csi.sock":           "/plugin/csi.sock",
	} {
		got, err := socketPath(in)
		if err != nil || got != want {
			t.Errorf("socketPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"tcp://127.0.0.1:1", "unix://", ""} {
		if got, err := socketPath(in); err == nil {
			t.Errorf("socketPath(%q) = %q, want an error", in, got)
		}
	}
}

func TestProbeCommand(t *testing.T) {
	log, _ := testLog(t)
	path := serveDriver(t, &Driver{Name: DriverName, Log: log})
	if err := runProbe(context.Background(), []string{"--endpoint", "unix://" + path}); err != nil {
		t.Fatalf("probe of a serving plugin: %v", err)
	}
	if err := runProbe(context.Background(), []string{"--endpoint", filepath.Join(sockDir(t), "none.sock"), "--timeout", "300ms"}); err == nil {
		t.Fatal("probe of a missing socket succeeded")
	}
}

func TestCommandLineErrors(t *testing.T) {
	log, _ := testLog(t)
	if err := runPlugin(context.Background(), log, []string{"--node-id", ""}); err == nil || !strings.Contains(err.Error(), "node-id") {
		t.Errorf("plugin without a node ID: %v", err)
	}
	if err := runRegistrar(context.Background(), log, nil); err == nil || !strings.Contains(err.Error(), "kubelet-registration-path") {
		t.Errorf("registrar without --kubelet-registration-path: %v", err)
	}
}
