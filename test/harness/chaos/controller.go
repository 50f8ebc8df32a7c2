package main

// The controller under test: bin/remediator-failpoints as its own
// process (controllerproc), killed with SIGKILL (by a failpoint or by the campaign)
// and started again, the way a node failure or an OOM kill ends a real one.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/remediator/remediator/test/harness/controllerproc"
)

type proc struct {
	*controllerproc.Process
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
	args := []string{"--policies-dir", h.policies,
		// The floor's gate is shortened with the policies' (a policy can only be
		// stricter than the floor).
		"--floor-unreachable-lease-age", fencingGate.String(),
		"--request-namespaces", requestNamespace}
	var env []string
	if o.failpoint != "" {
		env = append(env, "REMEDIATOR_FAILPOINTS="+o.failpoint)
	}
	h.procSeq++
	p, err := controllerproc.Start(context.Background(), controllerproc.Options{
		Binary:     h.cfg.controller,
		Kubeconfig: o.kubeconfig,
		Args:       append(args, o.extra...),
		Env:        env,
		Log:        filepath.Join(h.workDir, fmt.Sprintf("%03d-%s.log", h.procSeq, o.name)),
		Metrics:    true,
		NoWait:     o.noWait,
	})
	if err != nil {
		return nil, err
	}
	return &proc{p}, nil
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Metrics+"/metrics", nil)
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
	rss, _, err := p.Memory()
	return rss, err
}
