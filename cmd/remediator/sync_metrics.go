package main

// What `remediator sync --interval` tells Prometheus: the last revision it synced and
// when, and how often it failed. A sync that silently stops syncing leaves reviewed
// requests unapplied in the middle of an incident, so its progress is alertable.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/remediator/remediator/controllers/gitsync"
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
	if addr == "" || addr == "0" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on --metrics-bind-address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logSyncError(ctx, err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
