package sync

// What `remediator sync --interval` tells Prometheus: the last revision it synced and
// when, and how often it failed. A sync that silently stops syncing leaves reviewed
// requests unapplied in the middle of an incident, so its progress is alertable. And
// what it tells the kubelet's probes: whether its loop still turns.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/remediator/remediator/internal/gitsync"
)

// syncMetrics are the sync loop's metrics, on their own registry: sync is its own
// process, apart from the controller's metrics endpoint.
type syncMetrics struct {
	registry    *prometheus.Registry
	lastSuccess prometheus.Gauge
	revision    *prometheus.GaugeVec
	failures    prometheus.Counter
}

func newSyncMetrics() *syncMetrics {
	m := &syncMetrics{
		registry: prometheus.NewRegistry(),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "remediator_sync_last_success_timestamp_seconds",
			Help: "Unix time of the last sync that succeeded; 0 before the first.",
		}),
		revision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "remediator_sync_revision_info",
			Help: "Always 1; its commit label is the revision the last successful sync applied.",
		}, []string{"commit"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "remediator_sync_failures_total",
			Help: "Syncs that failed: a revision refused, the repository or the API server unreachable.",
		}),
	}
	m.registry.MustRegister(m.lastSuccess, m.revision, m.failures)
	return m
}

// record notes one sync's outcome.
func (m *syncMetrics) record(res *gitsync.Result, err error, at time.Time) {
	if err != nil {
		m.failures.Inc()
		return
	}
	m.lastSuccess.Set(float64(at.Unix()))
	if res != nil {
		m.revision.Reset()
		m.revision.WithLabelValues(res.Commit).Set(1)
	}
}

// serve serves /metrics on addr until ctx ends; "0" or "" serves nothing.
func (m *syncMetrics) serve(ctx context.Context, addr string) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	return serveHTTP(ctx, "--metrics-bind-address", addr, mux)
}

// syncHealth is what the kubelet's probes ask the sync agent. Ready: its cluster
// cache of RemediationRequests has started, so a sync can apply. Alive: the sync loop
// still turns, having begun a sync within twice --interval plus --timeout (a sync is
// bounded by --timeout, and the next begins --interval after the last began); a loop
// stuck past that is restarted by the kubelet. A sync that fails keeps the agent
// alive and ready: a failure is the metrics' and the RemediatorSyncStale alert's to
// report, and a restart would not fix an unreachable repository.
type syncHealth struct {
	started atomic.Bool
	// beat is the Unix nanoseconds of the last sync's start, or of the agent's start.
	beat  atomic.Int64
	stale time.Duration
	now   func() time.Time
}

func newSyncHealth(interval, timeout time.Duration, now func() time.Time) *syncHealth {
	h := &syncHealth{stale: 2 * (interval + timeout), now: now}
	h.beat.Store(now().UnixNano())
	return h
}

// syncing notes that a sync begins.
func (h *syncHealth) syncing() { h.beat.Store(h.now().UnixNano()) }

// cacheStarted notes that the cluster cache has started.
func (h *syncHealth) cacheStarted() { h.started.Store(true) }

func (h *syncHealth) alive(*http.Request) error {
	if since := h.now().Sub(time.Unix(0, h.beat.Load())); since > h.stale {
		return fmt.Errorf("no sync has begun for %s, longer than %s (twice --interval plus --timeout): the sync loop is stuck", since.Round(time.Second), h.stale)
	}
	return nil
}

func (h *syncHealth) ready(*http.Request) error {
	if !h.started.Load() {
		return errors.New("the cluster cache of RemediationRequests has not started yet")
	}
	return nil
}

// handler serves /healthz (the sync loop turns) and /readyz (the cache started) with
// controller-runtime's healthz, as the controller's manager does.
func (h *syncHealth) handler() http.Handler {
	mux := http.NewServeMux()
	for path, checks := range map[string]map[string]healthz.Checker{
		"/healthz": {"sync-loop": h.alive},
		"/readyz":  {"cache": h.ready},
	} {
		hz := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		mux.Handle(path, hz)
		mux.Handle(path+"/", hz)
	}
	return mux
}

// serve serves the probes on addr until stopped; "0" or "" serves nothing.
func (h *syncHealth) serve(ctx context.Context, addr string) (stop func(), err error) {
	return serveHTTP(ctx, "--health-probe-bind-address", addr, h.handler())
}

// serveHTTP serves handler on addr, which flag set, until stop is called; "0" or ""
// serves nothing.
func serveHTTP(ctx context.Context, flag, addr string, handler http.Handler) (stop func(), err error) {
	if addr == "" || addr == "0" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s %s: %w", flag, addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logSyncError(ctx, flag, err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
