package main

// The controller under test: bin/remediator-controller as its own process with the
// default flags, as a new user runs it (controllerproc), plus what the bench reads
// from it (its metrics endpoint, its CPU and heap profiles and its memory in /proc).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/remediator/remediator/test/harness/controllerproc"
)

type controllerProc struct {
	*controllerproc.Process
}

// startController starts the controller and waits until it is ready and its
// start-up API calls have ended. Only the addresses and the cluster's node-monitor
// grace period (controllerproc's) differ from the defaults.
func startController(ctx context.Context, cfg config, name string, extra ...string) (*controllerProc, error) {
	p, err := controllerproc.Start(ctx, controllerproc.Options{
		Binary: cfg.controller,
		// A baseline may be a remediator binary from before the controller had its own.
		Subcommand: cfg.subcommands[cfg.controller],
		Kubeconfig: cfg.kubeconfig,
		Args:       append(append([]string{}, cfg.extraArgs...), extra...),
		Log:        filepath.Join(cfg.workDir, name+"-controller.log"),
		Metrics:    true,
		Pprof:      cfg.profile,
	})
	if err != nil {
		return nil, err
	}
	// Ready means the manager runs, not that the informers' first lists and watches
	// are done: wait for the start-up traffic to end, so that it is not counted
	// against the first requests. A list counts once answered, and a large one on a
	// busy API server takes a while: wait at least startupSettle.
	c := &controllerProc{p}
	if _, err := c.settle(ctx, startupSettle); err != nil {
		c.Stop()
		return nil, fmt.Errorf("waiting for the controller's start-up calls to end: %w", err)
	}
	// Detection's first scan lists each stuck Lease's pods once (settleBound). A scan
	// that fails goes quiet until the next, an interval later: a thousand lists on a
	// slow API server outlast a scan's bound, and the next scan's lists of the Leases
	// the first did not reach then fell within the storm. Wait for a scan that
	// succeeded, and for its calls to end.
	if err := c.waitDetected(ctx); err != nil {
		c.Stop()
		return nil, fmt.Errorf("waiting for the controller's first scan for incidents: %w", err)
	}
	if _, err := c.settle(ctx, 0); err != nil {
		c.Stop()
		return nil, fmt.Errorf("waiting for the controller's start-up calls to end: %w", err)
	}
	return c, nil
}

// waitDetected waits, up to settleBound, until the controller has exported a
// successful scan for incidents.
func (c *controllerProc) waitDetected(ctx context.Context) error {
	start := time.Now()
	for {
		cur, err := c.scrape()
		if err != nil {
			return err
		}
		if cur.detected {
			return nil
		}
		if time.Since(start) >= settleBound {
			logf("No scan for incidents succeeded within %s; going on", settleBound)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scrape is one reading of the controller's metrics.
type scrape struct {
	// calls counts rest_client_requests_total by method.
	calls map[string]float64
	// decisions is remediator_decision_duration_seconds' sample count.
	decisions float64
	// detected: a scan for incidents has succeeded (its last-success time is exported).
	detected bool
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
	if f := families["remediator_detection_last_success_timestamp_seconds"]; f != nil {
		out.detected = len(f.GetMetric()) > 0
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

// The controller's API calls have settled once rest_client_requests_total is
// unchanged for settleQuiet; settle gives up waiting after settleBound. After a
// start the wait is at least startupSettle. The bound covers a start next to a
// thousand stuck Leases: detection's first scan reads each one's pods once (a
// controller that has been running did that when the Leases got stuck, before
// anyone wrote a request), a minute on this machine.
const (
	settleQuiet   = time.Second
	settleBound   = 90 * time.Second
	startupSettle = 2 * time.Second
)

// settle waits, for at least atLeast, until the controller's API calls stop
// changing and returns that reading. After the start it keeps the start-up traffic (the informers' lists and
// watches) out of what a scenario counts; after a storm, it counts the Events
// client-go's broadcaster posts asynchronously, after the status write that ended a
// request.
// A controller still calling at settleBound (something periodic) is read as it is.
func (c *controllerProc) settle(ctx context.Context, atLeast time.Duration) (scrape, error) {
	last, err := c.scrape()
	if err != nil {
		return scrape{}, err
	}
	start, changed := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return scrape{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		cur, err := c.scrape()
		if err != nil {
			return scrape{}, err
		}
		if !maps.Equal(cur.calls, last.calls) {
			last, changed = cur, time.Now()
		}
		if time.Since(changed) >= settleQuiet && time.Since(start) >= atLeast {
			return last, nil
		}
		if time.Since(start) >= settleBound {
			logf("The controller's API calls still change after %s; reading them as they are", settleBound)
			return last, nil
		}
	}
}

// cpuChunk is the length of each CPU profile of a storm: pprof profiles a fixed
// number of seconds, and a storm's length is not known in advance.
const cpuChunk = 10 * time.Second

// cpuProfiles profiles the controller's CPU in consecutive chunks of cpuChunk until
// stop is closed, so that the profiles cover the whole storm however long it runs,
// and merges them into path. It returns once the chunk running when stop closed
// has ended.
func (c *controllerProc) cpuProfiles(ctx context.Context, stop <-chan struct{}, path string) error {
	if c.Pprof == "" {
		return nil
	}
	var parts []string
	for i := 0; ; i++ {
		part := fmt.Sprintf("%s.part%02d.pprof", strings.TrimSuffix(path, ".pprof"), i)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.Pprof, int(cpuChunk.Seconds()))
		if err := c.saveProfile(ctx, url, part); err != nil {
			return fmt.Errorf("CPU profile %d: %w", i, err)
		}
		parts = append(parts, part)
		select {
		case <-stop:
			return mergeProfiles(ctx, path, parts)
		default:
		}
	}
}

// mergeProfiles merges the profiles parts into path with the Go toolchain's pprof
// (the harness's module has no profile package of its own) and removes the parts;
// without a go command the parts stay, to be merged by hand.
func mergeProfiles(ctx context.Context, path string, parts []string) error {
	if len(parts) == 1 {
		return os.Rename(parts[0], path)
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("merging %d CPU profiles (they stay as %s.part*): %w", len(parts), strings.TrimSuffix(path, ".pprof"), err)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, gocmd, append([]string{"tool", "pprof", "-proto", "-symbolize=none"}, parts...)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	runErr := cmd.Run()
	if err := out.Close(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		_ = os.Remove(path)
		return fmt.Errorf("go tool pprof -proto %s: %w: %s", strings.Join(parts, " "), runErr, strings.TrimSpace(stderr.String()))
	}
	for _, p := range parts {
		_ = os.Remove(p)
	}
	return nil
}

// heapProfile saves the controller's heap profile into path.
func (c *controllerProc) heapProfile(ctx context.Context, path string) error {
	if c.Pprof == "" {
		return nil
	}
	return c.saveProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/heap", c.Pprof), path)
}

// saveProfile saves what url answers into path. It writes a temporary file and
// renames it, so that a profile saved again (the heap at each new peak) replaces
// the last one whole.
func (c *controllerProc) saveProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		// pprof answers in words, e.g. when a CPU profile is already running.
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(msg)))
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	// The profile is written: a failed close may have lost its end.
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
