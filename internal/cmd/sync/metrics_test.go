package sync

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/gitsync"
)

// TestSyncMetrics: a sync's outcome is on /metrics: the revision and time of the last
// success, and the failures since.
func TestSyncMetrics(t *testing.T) {
	m := newSyncMetrics()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	stop, err := m.serve(context.Background(), addr)
	require.NoError(t, err)
	defer stop()
	scrape := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}
	assert.Contains(t, scrape(), "remediator_sync_last_success_timestamp_seconds 0")

	at := time.Unix(1795000000, 0)
	m.record(&gitsync.Result{Commit: "3f9c2a1b7e5d4c6a8b0e1f2d3c4b5a697887e6d5"}, nil, at)
	m.record(nil, errors.New("revision refused"), at.Add(time.Minute))
	m.record(&gitsync.Result{Commit: "9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"}, nil, at.Add(2*time.Minute))
	m.record(nil, errors.New("repository unreachable"), at.Add(3*time.Minute))
	out := scrape()
	assert.Contains(t, out, "remediator_sync_last_success_timestamp_seconds 1.79500012e+09")
	assert.Contains(t, out, `remediator_sync_revision_info{commit="9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"} 1`)
	assert.NotContains(t, out, "3f9c2a1b7e5d", "only the last successful revision")
	assert.Contains(t, out, "remediator_sync_failures_total 2")

	off, err := newSyncMetrics().serve(context.Background(), "0")
	require.NoError(t, err, "0 disables the endpoint")
	off()
}

// TestSyncHealth: /readyz once the cluster cache started; /healthz while the sync loop
// turns, failing once no sync has begun for twice --interval plus --timeout.
func TestSyncHealth(t *testing.T) {
	// The clock is read by the server's goroutine: atomic, for the race detector.
	var clock atomic.Int64
	clock.Store(time.Unix(1795000000, 0).UnixNano())
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	h := newSyncHealth(time.Minute, 5*time.Minute, func() time.Time { return time.Unix(0, clock.Load()) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	stop, err := h.serve(context.Background(), addr)
	require.NoError(t, err)
	defer stop()
	probe := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	code, _ := probe("/readyz")
	assert.Equal(t, http.StatusInternalServerError, code, "not ready before the cache started")
	code, _ = probe("/healthz")
	assert.Equal(t, http.StatusOK, code, "alive while starting")

	h.cacheStarted()
	code, _ = probe("/readyz")
	assert.Equal(t, http.StatusOK, code, "ready once the cache started")

	h.syncing()
	advance(12 * time.Minute)
	code, _ = probe("/healthz")
	assert.Equal(t, http.StatusOK, code, "a sync began 12m ago: within 2 x (1m + 5m)")
	advance(time.Second)
	code, body := probe("/healthz?verbose")
	assert.Equal(t, http.StatusInternalServerError, code, "no sync began for longer than 2 x (1m + 5m)")
	assert.Contains(t, body, "sync-loop")
	code, _ = probe("/healthz/sync-loop")
	assert.Equal(t, http.StatusInternalServerError, code, "the check by name")
	code, _ = probe("/readyz")
	assert.Equal(t, http.StatusOK, code, "a stuck loop stays ready: liveness restarts it")

	h.syncing()
	code, _ = probe("/healthz")
	assert.Equal(t, http.StatusOK, code, "a new sync began")

	off, err := newSyncHealth(0, time.Minute, time.Now).serve(context.Background(), "0")
	require.NoError(t, err, "0 disables the probes")
	off()
}

// TestSyncServesOnlyWhenItLoops: a single sync exits when done, so it binds neither
// the metrics nor the probe address (the chart's arguments, run once by hand or by a
// test, take no port); with --interval both are served.
func TestSyncServesOnlyWhenItLoops(t *testing.T) {
	o := Options{metricsAddr: ":8080", probeAddr: ":8081"}
	m, p := o.listenAddrs()
	assert.Equal(t, []string{"0", "0"}, []string{m, p}, "once")
	o.interval = time.Minute
	m, p = o.listenAddrs()
	assert.Equal(t, []string{":8080", ":8081"}, []string{m, p}, "with --interval")
}
