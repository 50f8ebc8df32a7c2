package main

// R2: API faults. The controller reaches the API server only through
// test/faultproxy, which answers a share of its calls with 5xx, resets them before
// they reach the server, forwards them and drops the reply (the write happened,
// the controller does not know), answers writes with 409 Conflict and cuts
// watches. 200 requests across every branch of both incidents must still end as
// the runbook says, with no unsafe delete and no destructive call made twice, and
// the controller must be back at its goroutine and memory baseline afterwards.

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/remediator/remediator/test/faultproxy"
	"github.com/remediator/remediator/test/stage"
)

// mix is how many requests of each branch R2 drives per 100. The plugin branch is
// limited by the three baseline nodes that run trident-csi: two are restarted,
// the third answers "driver registered".
var mix = []struct {
	b   *branch
	per int
}{
	{brShutdown, 30}, {brFenced, 15}, {brMove, 15}, {brUnfenced, 10}, {brYoung, 10},
	{brNotFound, 8}, {brNoLease, 6}, {brRegistered, 5},
}

// mixed stages n subjects across the branches, and up to plugins restarts of the
// node plugin.
func (h *harness) mixed(ctx context.Context, n, plugins int) ([]*subject, error) {
	var plan []*branch
	for _, m := range mix {
		plan = append(plan, m.b) // every branch at least once, even in a small run
	}
	for _, m := range mix {
		for i := 0; i < n*m.per/100; i++ {
			plan = append(plan, m.b)
		}
	}
	for len(plan) < n-plugins {
		plan = append(plan, brShutdown)
	}
	plan = plan[:n-plugins]
	subs := make([]*subject, len(plan))
	err := stage.Parallel(len(plan), func(i int) error {
		node := ""
		if plan[i] == brRegistered {
			node = pluginNodes[2]
		}
		s, err := h.stager.stage(ctx, plan[i], node)
		subs[i] = s
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := 0; i < plugins && i < 2; i++ {
		s, err := h.stager.stage(ctx, brPlugin, pluginNodes[i])
		if err != nil {
			return nil, err
		}
		subs = append(subs, s)
	}
	return subs, nil
}

func (h *harness) faults(ctx context.Context) error {
	res := &Faults{Injected: map[string]int64{}}
	h.result.Faults = res
	offset, err := h.audit.size()
	if err != nil {
		return err
	}
	subs, err := h.mixed(ctx, h.p.faultRequests, 2)
	if err != nil {
		return err
	}
	// While the controller starts, only its watches draw faults: a start-up that
	// fails is a restart, which R1 covers, and R2 is about a controller at work.
	// Its watches are opened during start-up and live for minutes, so they must
	// draw their cuts then.
	var starting atomic.Bool
	starting.Store(true)
	fp, kubeconfig, err := h.faultProxy(&starting)
	if err != nil {
		return err
	}
	defer func() { _ = fp.Close() }()
	back, err := h.holderBackUnderFaults(ctx, kubeconfig, &starting)
	if err != nil {
		return err
	}
	starting.Store(true)
	p, err := h.start(procOpts{name: "faults", kubeconfig: kubeconfig})
	if err != nil {
		return err
	}
	defer p.Stop()
	time.Sleep(3 * time.Second) // the caches' first lists
	if res.GoroutinesBefore, err = p.gauge(ctx, "go_goroutines"); err != nil {
		return err
	}
	if res.RSSBefore, err = p.rss(); err != nil {
		return err
	}
	starting.Store(false)
	start := time.Now()
	for _, s := range subs {
		if err := h.k8s.Create(ctx, s.RR); err != nil {
			return err
		}
	}
	logf("R2 %d requests created through faults", len(subs))
	if err := h.waitTerminal(ctx, subs, 15*time.Minute); err != nil {
		return fmt.Errorf("%w (log %s)", err, p.Log)
	}
	logf("R2 all terminal in %s", time.Since(start).Round(time.Second))
	fp.Pause()
	st := fp.Stats()
	recordFaults(res, st, fp.DroppedReplies())
	if err := backAtBaseline(ctx, res, p); err != nil {
		return err
	}
	// Judged after the settling: a call made after a request ended counts too.
	if res.Verdict, err = h.judge(ctx, append(subs, back...), offset); err != nil {
		return err
	}
	if h.p.faultRequests >= 200 {
		for _, k := range faultproxy.Kinds {
			if st.Injected[k] == 0 {
				res.Missing = append(res.Missing, string(k))
			}
		}
	}
	return nil
}

// faultProxy starts the fault proxy in front of the API server, drawing no
// faults but on watches while starting is set, and writes a kubeconfig that
// reaches the server through it. The caller closes the proxy.
func (h *harness) faultProxy(starting *atomic.Bool) (*faultproxy.Proxy, string, error) {
	up := rest.CopyConfig(h.rest)
	up.UserAgent = "" // the proxy passes the controller's own User-Agent on
	up.QPS, up.Burst = 0, 0
	fc := faultproxy.DefaultConfig(uint64(h.cfg.seed))
	fc.Exclude = func(r *http.Request) bool {
		w := r.URL.Query().Get("watch")
		return starting.Load() && w != "true" && w != "1"
	}
	fp, err := faultproxy.New(up, fc)
	if err != nil {
		return nil, "", err
	}
	kubeconfig := filepath.Join(h.workDir, "faultproxy.kubeconfig")
	if err := fp.WriteKubeconfig(kubeconfig); err != nil {
		_ = fp.Close()
		return nil, "", err
	}
	return fp, kubeconfig, nil
}

// recordFaults puts the faults injected, the calls forwarded and the destructive
// calls whose replies were dropped in res.
func recordFaults(res *Faults, st faultproxy.Stats, dropped []faultproxy.DroppedReply) {
	for k, v := range st.Injected {
		res.Injected[string(k)] = int64(v)
	}
	res.Forwarded = int64(st.Clean + st.Skipped)
	var destructiveDropped []string
	for _, d := range dropped {
		if d.Method == "DELETE" || strings.Contains(d.RequestURI, "/eviction") || (d.Method == "PATCH" && d.Resource == "nodes") {
			destructiveDropped = append(destructiveDropped, d.Method+" "+d.RequestURI)
		}
	}
	res.DestructiveRepliesDropped = len(destructiveDropped)
}

// backAtBaseline measures the controller p once the faults are off and says in
// res whether its goroutines and memory are back at their baseline.
func backAtBaseline(ctx context.Context, res *Faults, p *proc) error {
	var err error
	// Back at baseline: the faults are off and nothing is left to do; give
	// client-go's backoffs and the cut watches' re-lists time to end.
	time.Sleep(30 * time.Second)
	if res.GoroutinesAfter, err = p.gauge(ctx, "go_goroutines"); err != nil {
		return err
	}
	if res.RSSAfter, err = p.rss(); err != nil {
		return err
	}
	// A leak of one goroutine per fault would be thousands; a few more watches
	// or idle HTTP/2 streams than at the start are not a leak. RSS grows with the
	// 200 requests in the cache and the Go heap's high-water mark.
	gLimit := res.GoroutinesBefore*1.1 + 10
	mLimit := res.RSSBefore*1.5 + 32
	switch {
	case res.GoroutinesAfter > gLimit:
		res.Baseline = fmt.Sprintf("NOT back: goroutines %.0f > %.0f (before x1.1 + 10)", res.GoroutinesAfter, gLimit)
	case res.RSSAfter > mLimit:
		res.Baseline = fmt.Sprintf("NOT back: RSS %.0f MiB > %.0f MiB (before x1.5 + 32)", res.RSSAfter, mLimit)
	default:
		res.Baseline = fmt.Sprintf("back at baseline (goroutines within before x1.1 + 10 = %.0f, RSS within before x1.5 + 32 MiB = %.0f MiB)", gLimit, mLimit)
	}
	logf("R2 %s", res.Baseline)
	return nil
}

// holderBackUnderFaults runs, before the mixed batch, the subject in which a fenced
// unreachable holder comes back in the middle of its playbook while the faults go
// on. Nothing outside the controller can time a heartbeat into the moment between
// the release's journal write and its delete, so a controller behind the proxy is
// armed with a failpoint there and killed; the holder's kubelet then renews its
// node Lease (and, before the delete, posts Ready too), and a clean controller
// behind the same proxy must fail the playbook without deleting the Lease. The
// subjects are judged with the batch.
func (h *harness) holderBackUnderFaults(ctx context.Context, kubeconfig string, starting *atomic.Bool) ([]*subject, error) {
	res := h.result.Faults
	var subs []*subject
	for _, back := range h.holderBackCycles() {
		if back.b != brFencedBack {
			continue
		}
		// The failpoint fires when the journal write returns; a fault that drops its
		// reply (the write landed, the controller saw an error) lets the next
		// reconcile go on past it, so the controller is never killed and the holder
		// never comes back. That subject is then an ordinary fenced release, judged
		// as one, and the cycle is tried again with a new subject.
		killed := false
		for attempt := 1; attempt <= holderBackAttempts && !killed; attempt++ {
			sub, k, p, err := h.failpointRun(ctx, back.b, back.fp, "", cycleOpts{kubeconfig: kubeconfig, starting: starting, whileDown: back.whileDown})
			if err != nil {
				return nil, fmt.Errorf("%s at %s: %w", back.label, back.fp, err)
			}
			p.Stop() // the batch's controller must be the only one; the judge reads the audit log at the end
			killed = k
			if !killed {
				sub.Branch = brFenced
			}
			subs = append(subs, sub)
			logf("R2 %s through faults, %s, attempt %d: killed %v", back.label, back.fp, attempt, killed)
		}
		if killed {
			res.HolderBack = append(res.HolderBack, back.label+" "+back.fp)
		} else {
			res.HolderBackMissed = append(res.HolderBackMissed, back.label+" "+back.fp)
		}
	}
	return subs, nil
}

// holderBackAttempts bounds the tries of a holder-back cycle whose failpoint a
// dropped reply skipped: a fault on the journal write is about one in three calls,
// so three misses in a row are a failpoint that no longer fires.
const holderBackAttempts = 3
