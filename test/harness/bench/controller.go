package main

// The controller under test: bin/remediator controller as its own process with the
// default flags, as a new user runs it, plus what the bench reads from it (its
// metrics endpoint and its memory in /proc).

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

type controllerProc struct {
	cmd     *exec.Cmd
	done    chan error
	metrics string
	pprof   string
	log     string
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// startController starts the controller and waits until it is ready. Only the
// addresses and the cluster's node-monitor grace period (the local cluster's
// kube-controller-manager uses 20s) differ from the defaults.
func startController(ctx context.Context, cfg config, name string, extra ...string) (*controllerProc, error) {
	metrics, err := freePort()
	if err != nil {
		return nil, err
	}
	probe, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"controller", "--kubeconfig", cfg.kubeconfig,
		"--metrics-bind-address", metrics, "--health-probe-bind-address", probe,
		"--node-lease-grace-period", "20s"}
	pprof := ""
	if cfg.profile {
		if pprof, err = freePort(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof-bind-address", pprof)
	}
	args = append(append(args, cfg.extraArgs...), extra...)
	logPath := filepath.Join(cfg.workDir, name+"-controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.controller, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", cfg.controller, err)
	}
	c := &controllerProc{cmd: cmd, done: make(chan error, 1), metrics: metrics, pprof: pprof, log: logPath}
	go func() { c.done <- cmd.Wait(); _ = logFile.Close() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-c.done:
			return nil, fmt.Errorf("controller exited before it was ready: %v (log %s)", err, logPath)
		default:
		}
		resp, err := http.Get("http://" + probe + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("controller not ready after 60s (log %s)", logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Ready means the manager runs; the informers' first lists are done once the
	// metrics show the first requests answered. Give the caches a moment to sync so
	// that start-up traffic is not counted against the first requests.
	time.Sleep(2 * time.Second)
	return c, nil
}

func (c *controllerProc) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done: //nolint:errcheck // the exit status of a stopped controller is not news
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done //nolint:errcheck // the exit status of a stopped or killed controller is not news
	}
}

// memory reads VmRSS and VmHWM (peak RSS) of the controller, in MiB.
func (c *controllerProc) memory() (rss, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak, s.Err()
}

// scrape is one reading of the controller's metrics.
type scrape struct {
	// calls counts rest_client_requests_total by method.
	calls map[string]float64
	// decisions is remediator_decision_duration_seconds' sample count.
	decisions float64
}

func (c *controllerProc) scrape() (scrape, error) {
	resp, err := http.Get("http://" + c.metrics + "/metrics")
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
	if c.pprof == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.pprof, int(d.Seconds())), nil)
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
