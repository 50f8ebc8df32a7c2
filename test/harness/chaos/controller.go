package main

// The controller under test: bin/remediator-failpoints controller as its own
// process, killed with SIGKILL (by a failpoint or by the campaign) and started
// again, the way a node failure or an OOM kill ends a real one.

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
	"syscall"
	"time"
)

type proc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	metrics string
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

// procOpts are what differs between the campaign's controller processes.
type procOpts struct {
	name       string
	kubeconfig string   // the cluster's, or the fault proxy's
	failpoint  string   // REMEDIATOR_FAILPOINTS, empty for none
	extra      []string // more flags (leader election)
	// noWait returns as soon as the process started, without waiting for /readyz:
	// a failpoint may kill it before it is ready.
	noWait bool
}

// start starts a controller and, unless o.noWait, waits until it is ready.
func (h *harness) start(o procOpts) (*proc, error) {
	metrics, err := freePort()
	if err != nil {
		return nil, err
	}
	probe, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"controller", "--kubeconfig", o.kubeconfig,
		"--metrics-bind-address", metrics, "--health-probe-bind-address", probe,
		"--node-lease-grace-period", "20s", "--policies-dir", h.policies,
		// The floor's gate is shortened with the policies' (a policy can only be
		// stricter than the floor).
		"--floor-unreachable-lease-age", fencingGate.String(),
		"--request-namespaces", requestNamespace}
	args = append(args, o.extra...)
	h.procSeq++
	logPath := filepath.Join(h.workDir, fmt.Sprintf("%03d-%s.log", h.procSeq, o.name))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(h.cfg.controller, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = os.Environ()
	if o.failpoint != "" {
		cmd.Env = append(cmd.Env, "REMEDIATOR_FAILPOINTS="+o.failpoint)
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", h.cfg.controller, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), metrics: metrics, log: logPath}
	go func() { p.err = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	if o.noWait {
		return p, nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("controller exited before it was ready: %v (log %s)", p.err, logPath)
		default:
		}
		if resp, err := http.Get("http://" + probe + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("controller not ready after 60s (log %s)", logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// killedBySIGKILL reports whether the process ended by SIGKILL (a failpoint's).
func (p *proc) killedBySIGKILL() bool {
	if !p.exited() || p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop ends the process with SIGTERM, as a rolling update does.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.kill()
	}
}

// gauge reads one unlabelled sample from the metrics endpoint.
func (p *proc) gauge(ctx context.Context, name string) (float64, error) {
	return p.sample(ctx, name, func(n string) bool { return n == name })
}

// labelled reads the first sample of a labelled metric
// (leader_election_master_status{name="..."}).
func (p *proc) labelled(ctx context.Context, name string) (float64, error) {
	return p.sample(ctx, name, func(n string) bool { return strings.HasPrefix(n, name+"{") })
}

func (p *proc) sample(ctx context.Context, name string, match func(string) bool) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && match(f[0]) {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// rss reads the process's resident set size in MiB.
func (p *proc) rss() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", p.cmd.Process.Pid)
}
