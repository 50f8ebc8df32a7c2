package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// socketPath turns a CSI endpoint into a file path: unix:///abs/path and unix://rel/path (the
// form Trident's manifests use, meaning /rel/path) and plain paths.
func socketPath(endpoint string) (string, error) {
	p := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		p = "/" + strings.TrimLeft(rest, "/")
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q: only unix sockets are supported", endpoint)
	}
	if p == "" || p == "/" {
		return "", fmt.Errorf("endpoint %q names no socket", endpoint)
	}
	return p, nil
}

// cleanupSocketFile removes a stale socket file left at path by an earlier process, as the
// upstream registrar's util.CleanupSocketFile does before it listens: the socket a second
// process creates at a shared path replaces the first one's.
func cleanupSocketFile(path string) error {
	fi, err := os.Lstat(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	return nil
}

// listenUnix creates path's directory, replaces a stale socket there and listens on it.
func listenUnix(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(dirOf(path), 0o750); err != nil {
		return nil, err
	}
	if err := cleanupSocketFile(path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

func dirOf(path string) string {
	i := strings.LastIndex(path, "/")
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

// dialUnix opens a gRPC client connection to the unix socket at path (it connects lazily).
func dialUnix(path string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// sleepCtx sleeps for d or until ctx ends, and reports whether it slept the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
