// Package controllerproc starts the controller binary (bin/remediator-controller, or
// bin/remediator-failpoints for the chaos campaigns) as a process of its own against
// the local cluster, the way an operator runs it, for every harness that does: the
// e2e suite, the benchmark and the chaos campaigns. It is the one place that knows
// the command line the harnesses share, where the process logs, how readiness is
// awaited and how the process is stopped; what a harness needs beyond that (flags,
// environment, metrics or pprof ports, not waiting) is an Option.
package controllerproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NodeLeaseGracePeriod is the controller's --node-lease-grace-period against the
// local cluster: its kube-controller-manager's node-monitor grace period is 20s.
const NodeLeaseGracePeriod = 20 * time.Second

// readyTimeout bounds the wait for /readyz.
const readyTimeout = 60 * time.Second

// stopTimeout is how long Stop waits after SIGTERM before it kills the process (a
// variable for the test).
var stopTimeout = 20 * time.Second

// Options say how to run one controller process.
type Options struct {
	// Binary is the controller's binary.
	Binary string
	// Subcommand goes before the flags: "controller" for a remediator binary from
	// before the controller had a binary of its own (a benchmark's baseline, see
	// Subcommand), empty for remediator-controller.
	Subcommand string
	// Kubeconfig is --kubeconfig: the local cluster's, or a proxy's in front of it.
	Kubeconfig string
	// Args are more flags, after the ones Start passes (--kubeconfig,
	// --metrics-bind-address, --health-probe-bind-address, --node-lease-grace-period,
	// --pprof-bind-address): a flag given again here wins, as the last value of a
	// flag is the one the controller keeps.
	Args []string
	// Env is added to the harness's own environment (REMEDIATOR_FAILPOINTS=...).
	Env []string
	// Log is the file that receives the process's stdout and stderr; Start creates it.
	Log string
	// Metrics serves the metrics on a free port of 127.0.0.1 (Process.Metrics).
	// Without it they are off (--metrics-bind-address 0), unless Args say otherwise.
	Metrics bool
	// Pprof serves pprof on a free port of 127.0.0.1 (Process.Pprof).
	Pprof bool
	// NoWait returns as soon as the process started, without waiting for /readyz:
	// a failpoint may kill it before it is ready.
	NoWait bool
}

// Process is a running (or ended) controller process.
type Process struct {
	// Metrics and Pprof are the host:port of the metrics and pprof endpoints, empty
	// when Options did not ask for them.
	Metrics, Pprof string
	// Probe is the host:port of the health probes (/readyz, /healthz).
	Probe string
	// Log is the file the process logs to.
	Log string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit status, once done is closed
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// Start starts `<Binary> [<Subcommand>]` with o and, unless o.NoWait, waits until its
// /readyz answers 200, and with o.Metrics its /metrics too. A process that exits
// first, or is not ready within a minute, is an error that names the log (the
// process is stopped in the second case).
func Start(ctx context.Context, o Options) (*Process, error) {
	if o.Binary == "" || o.Kubeconfig == "" || o.Log == "" {
		return nil, errors.New("controllerproc: Binary, Kubeconfig and Log are required")
	}
	// FreeAddr's port is free only until it is closed: any process's outgoing
	// connection may take it as its source port before the controller binds it (the
	// e2e suite opens thousands). A process that exits because its address was taken
	// is started again on other ports.
	for attempt := 1; ; attempt++ {
		p, err := start(ctx, o)
		switch {
		case err == nil:
			return p, nil
		case attempt == startAttempts || !p.lostItsPort():
			return nil, err
		}
	}
}

// startAttempts bounds the restarts of a process whose port was taken.
const startAttempts = 3

// lostItsPort reports whether the process exited because a port it was given was
// bound by another by then.
func (p *Process) lostItsPort() bool {
	return p != nil && p.Exited() && strings.Contains(p.Logs(), "address already in use")
}

func start(ctx context.Context, o Options) (*Process, error) {
	p := &Process{Log: o.Log, done: make(chan struct{})}
	var err error
	if p.Probe, err = FreeAddr(); err != nil {
		return nil, err
	}
	metrics := "0"
	if o.Metrics {
		if p.Metrics, err = FreeAddr(); err != nil {
			return nil, err
		}
		metrics = p.Metrics
	}
	var args []string
	if o.Subcommand != "" {
		args = append(args, o.Subcommand)
	}
	args = append(args, "--kubeconfig", o.Kubeconfig,
		"--metrics-bind-address", metrics, "--health-probe-bind-address", p.Probe,
		"--node-lease-grace-period", NodeLeaseGracePeriod.String())
	if o.Pprof {
		if p.Pprof, err = FreeAddr(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof-bind-address", p.Pprof)
	}
	args = append(args, o.Args...)

	logFile, err := os.Create(o.Log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(o.Binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.Env = append(os.Environ(), o.Env...)
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (build it with make build or make build-failpoints): %w", o.Binary, err)
	}
	go func() { p.err = p.cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	if o.NoWait {
		return p, nil
	}
	if err := p.waitReady(ctx); err != nil {
		return p, err
	}
	return p, nil
}

func (p *Process) waitReady(ctx context.Context) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("controller exited before it was ready: %v (log %s)", p.err, p.Log)
		default:
		}
		if answers(hc, "http://"+p.Probe+"/readyz") && (p.Metrics == "" || answers(hc, "http://"+p.Metrics+"/metrics")) {
			return nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return fmt.Errorf("controller not ready after %s (log %s)", readyTimeout, p.Log)
		}
		select {
		case <-ctx.Done():
			p.Stop()
			return fmt.Errorf("waiting for the controller to be ready: %w (log %s)", ctx.Err(), p.Log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// answers reports whether url answers 200. The manager starts its probe and metrics
// servers each on its own: /readyz may answer before the metrics endpoint listens,
// and a reader of the metrics right after the start then found the port closed.
func answers(hc *http.Client, url string) bool {
	resp, err := hc.Get(url)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit status once it has ended (nil before, and for exit 0).
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// KilledBySIGKILL reports whether the process ended by SIGKILL (a failpoint's, or
// Kill's).
func (p *Process) KilledBySIGKILL() bool {
	if !p.Exited() || p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Kill ends the process at once with SIGKILL, as a crash, a node failure or an OOM
// kill would, and waits for it.
func (p *Process) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop ends the process with SIGTERM, as a rolling update does, and waits for it;
// one still running 20 seconds later is killed.
func (p *Process) Stop() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.Kill()
	}
}

// Logs returns what the process has logged so far.
func (p *Process) Logs() string {
	out, _ := os.ReadFile(p.Log)
	return string(out)
}

// Memory reads the process's resident set size (VmRSS) and its peak (VmHWM), in MiB.
func (p *Process) Memory() (rss, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	var found bool
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "VmRSS:":
			kb, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				return 0, 0, fmt.Errorf("VmRSS of pid %d: %w", p.cmd.Process.Pid, err)
			}
			rss, found = kb/1024, true
		case "VmHWM:":
			kb, _ := strconv.ParseFloat(fields[1], 64)
			peak = kb / 1024
		}
	}
	if err := s.Err(); err != nil {
		return 0, 0, err
	}
	if !found {
		return 0, 0, fmt.Errorf("no VmRSS for pid %d", p.cmd.Process.Pid)
	}
	return rss, peak, nil
}

// Subcommand is the Subcommand that binary needs: "controller" when it is a
// remediator binary from before the controller had its own (its version command
// prints "remediator <version>"), empty for remediator-controller ("remediator-controller
// <version>"). A benchmark's baseline may be built from either side of that change.
func Subcommand(ctx context.Context, binary string) (string, error) {
	out, err := exec.CommandContext(ctx, binary, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w", binary, err)
	}
	switch program, _, _ := strings.Cut(strings.TrimSpace(string(out)), " "); program {
	case "remediator-controller":
		return "", nil
	case "remediator":
		// The CLI of today has no controller command: say so now, not when the
		// controller fails to start.
		if err := exec.CommandContext(ctx, binary, "controller", "--help").Run(); err != nil {
			return "", fmt.Errorf("%s has no controller command (%w): the controller is bin/remediator-controller", binary, err)
		}
		return "controller", nil
	default:
		return "", fmt.Errorf("%s version printed %q: neither remediator-controller nor remediator", binary, out)
	}
}
