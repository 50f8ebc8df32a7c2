package main

// The controller under test: bin/remediator controller as its own process with the
// default flags, as a new user runs it (controllerproc), plus what the bench reads
// from it (its metrics endpoint, its CPU profile and its memory in /proc).

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/remediator/remediator/test/harness/controllerproc"
)

type controllerProc struct {
	*controllerproc.Process
}

// startController starts the controller and waits until it is ready. Only the
// addresses and the cluster's node-monitor grace period (controllerproc's) differ
// from the defaults.
func startController(ctx context.Context, cfg config, name string, extra ...string) (*controllerProc, error) {
	p, err := controllerproc.Start(ctx, controllerproc.Options{
		Binary:     cfg.controller,
		Kubeconfig: cfg.kubeconfig,
		Args:       append(append([]string{}, cfg.extraArgs...), extra...),
		Log:        filepath.Join(cfg.workDir, name+"-controller.log"),
		Metrics:    true,
		Pprof:      cfg.profile,
	})
	if err != nil {
		return nil, err
	}
	// Ready means the manager runs; the informers' first lists are done once the
	// metrics show the first requests answered. Give the caches a moment to sync so
	// that start-up traffic is not counted against the first requests.
	time.Sleep(2 * time.Second)
	return &controllerProc{p}, nil
}

// scrape is one reading of the controller's metrics.
type scrape struct {
	// calls counts rest_client_requests_total by method.
	calls map[string]float64
	// decisions is remediator_decision_duration_seconds' sample count.
	decisions float64
}

func (c *controllerProc) scrape() (scrape, error) {
	resp, err := http.Get("http://" + c.Metrics + "/metrics")
	if err != nil {
		return scrape{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return scrape{}, fmt.Errorf("parsing metrics: %w", err)
	}
	out := scrape{calls: map[string]float64{}}
	if f := families["rest_client_requests_total"]; f != nil {
		for _, m := range f.GetMetric() {
			out.calls[label(m, "method")] += m.GetCounter().GetValue()
		}
	}
	if f := families["remediator_decision_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			out.decisions += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// callsSince is the API calls made between two scrapes: the total, and by method.
func callsSince(before, after scrape) (float64, map[string]int) {
	total := 0.0
	by := map[string]int{}
	for method, v := range after.calls {
		d := v - before.calls[method]
		if d > 0 {
			by[method] = int(d)
			total += d
		}
	}
	return total, by
}

// cpuProfile saves a CPU profile of the controller over d into path.
func (c *controllerProc) cpuProfile(ctx context.Context, d time.Duration, path string) error {
	if c.Pprof == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.Pprof, int(d.Seconds())), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	// The profile is written: a failed close may have lost its end.
	return f.Close()
}
