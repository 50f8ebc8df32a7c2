package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/harness/admissionwatch"
	"github.com/remediator/remediator/test/stage"
)

// The bench's namespaces: the application pods and claims, and the requests.
const (
	appNamespace     = "remediator-bench-apps"
	requestNamespace = "remediator-bench"
)

// bench is one run: its clients, its staging, and the carrier nodes it shares
// between scenarios.
type bench struct {
	cfg config
	p   preset
	s   *stage.Stager
	k8s clientWithWatch
	// fast and fastCS have no client-side rate limit: they make the storm's creates
	// and the floor's calls, which the API server must be what limits.
	fast    clientWithWatch
	fastCS  kubernetes.Interface
	rc      *rest.Config
	track   *tracker
	carrier []string // kwok node names
	pods    int      // carrier pods staged so far
	seq     int      // incident counter, for unique names
	// cpuUnreadable logs once that the control plane's CPU cannot be read.
	cpuUnreadable sync.Once
	// released is a request a storm's controller released, as it left it (writes).
	released *v1alpha1.RemediationRequest
}

func (b *bench) name(kind string, i int) string {
	return fmt.Sprintf("bench-%s-%s-%04d", b.s.RunID, kind, i)
}

// request builds a release-luks-lease request for an incident.
func (b *bench) request(name string, in stage.Incident, byPod bool) *v1alpha1.RemediationRequest {
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: requestNamespace,
		Labels: map[string]string{stage.Label: b.s.RunID}}}
	rr.Spec = v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, Reason: "make bench: " + in.Name}
	if byPod {
		rr.Spec.Target.Pod = &v1alpha1.ObjectReference{Namespace: appNamespace, Name: in.Pod}
	} else {
		rr.Spec.Target.PersistentVolume = in.Name
	}
	return rr
}

// newIncidents stages n incidents; holder(i) and podNode(i) place them.
func (b *bench) newIncidents(ctx context.Context, kind string, n int, holder, podNode func(i int) string, retained bool) ([]stage.Incident, error) {
	out := make([]stage.Incident, n)
	for i := range out {
		b.seq++
		base := b.name(kind, i)
		out[i] = stage.Incident{Name: fmt.Sprintf("pvc-%s", base), Claim: base + "-data", Pod: base + "-app", Holder: holder(i), PodNode: podNode(i)}
	}
	err := stage.Parallel(n, func(i int) error { return b.s.StageIncident(ctx, out[i], retained) })
	return out, err
}

func (b *bench) shutdownNodes(ctx context.Context, kind string, n int) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = b.name(kind+"-down", i)
	}
	return names, stage.Parallel(n, func(i int) error { return b.s.ShutdownNode(ctx, names[i]) })
}

// ensureNodes stages kwok nodes until there are n.
func (b *bench) ensureNodes(ctx context.Context, n int) error {
	from := len(b.carrier)
	if n <= from {
		return nil
	}
	names := make([]string, n-from)
	for i := range names {
		names[i] = b.name("kwok", from+i)
	}
	start := time.Now()
	if err := stage.Parallel(len(names), func(i int) error { return b.s.KwokNode(ctx, names[i]) }); err != nil {
		return err
	}
	if err := b.s.WaitNodesReady(ctx, names, 5*time.Minute); err != nil {
		return err
	}
	b.carrier = append(b.carrier, names...)
	logf("Staged kwok nodes %d..%d in %s", from, n, time.Since(start).Round(time.Second))
	return nil
}

// ensureCarriers stages all the preset's kwok nodes and spreads pods over them until
// the cluster carries pods pods.
func (b *bench) ensureCarriers(ctx context.Context, pods int) error {
	if err := b.ensureNodes(ctx, b.p.kwokNodes); err != nil {
		return err
	}
	if pods <= b.pods {
		return nil
	}
	start, from := time.Now(), b.pods
	err := stage.Parallel(pods-from, func(i int) error {
		j := from + i
		return b.s.CarrierPod(ctx, fmt.Sprintf("bench-%s-pod-%05d", b.s.RunID, j), b.carrier[j%len(b.carrier)])
	})
	if err != nil {
		return err
	}
	b.pods = pods
	logf("Staged pods %d..%d on %d kwok nodes in %s", from, pods, len(b.carrier), time.Since(start).Round(time.Second))
	return nil
}

// latency is scenario 1: sequential shut-down-holder requests, then the same
// incidents handled by the kubectl runbook script.
func (b *bench) latency(ctx context.Context) (*Latency, error) {
	n := b.p.latencyRequests
	logf("Latency: %d sequential requests for shut-down holders, then the kubectl runbook", n)
	// One incident at a time on an ordinary cluster: the storms measure the load.
	if err := b.ensureNodes(ctx, min(b.p.kwokNodes, b.p.disruptiveRequests)); err != nil {
		return nil, err
	}
	down, err := b.shutdownNodes(ctx, "lat", 2*n)
	if err != nil {
		return nil, err
	}
	incidents, err := b.newIncidents(ctx, "lat", 2*n, func(i int) string { return down[i] },
		func(i int) string { return b.carrier[i%len(b.carrier)] }, false)
	if err != nil {
		return nil, err
	}
	c, err := startController(ctx, b.cfg, "latency")
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	before, err := c.scrape()
	if err != nil {
		return nil, err
	}
	res := &Latency{Requests: n, ScriptCalls: 8}
	for i := 0; i < n; i++ {
		in := incidents[i]
		rr := b.request(b.name("lat", i), in, true)
		start := time.Now()
		b.track.created(rr.Name, start)
		if err := b.k8s.Create(ctx, rr); err != nil {
			return nil, fmt.Errorf("creating request %s: %w", rr.Name, err)
		}
		var gone time.Time
		if !b.track.waitFor(ctx, 30*time.Second, func() bool {
			gone = b.track.leaseGone[in.Name]
			e := b.track.requests[rr.Name]
			return !gone.IsZero() && e != nil && terminal(e.phase)
		}) {
			return nil, fmt.Errorf("request %s: Lease %s not deleted and request not terminal within 30s", rr.Name, in.Name)
		}
		if p := b.track.requests[rr.Name].phase; p != v1alpha1.PhaseSucceeded {
			return nil, fmt.Errorf("request %s ended %s, want Succeeded", rr.Name, p)
		}
		res.ControllerMs = append(res.ControllerMs, ms(gone.Sub(start)))
	}
	// The last requests' Events are posted after they ended.
	after, err := c.settle(ctx, 0)
	if err != nil {
		return nil, err
	}
	total, by := callsSince(before, after)
	res.APICallsPerRequest, res.APICallsByKind = total/float64(n), by

	script := filepath.Join(b.cfg.root, "test", "harness", "bench", "runbook.sh")
	kubectl := filepath.Join(b.cfg.root, "bin", "kubectl")
	for i := n; i < 2*n; i++ {
		in := incidents[i]
		start := time.Now()
		out, err := exec.CommandContext(ctx, "bash", script, kubectl, b.cfg.kubeconfig, appNamespace, in.Pod, stage.TridentNamespace).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("runbook script for %s: %w\n%s", in.Pod, err, out)
		}
		res.ScriptMs = append(res.ScriptMs, ms(time.Since(start)))
	}
	res.P50Ms, res.P99Ms = percentile(res.ControllerMs, 50), percentile(res.ControllerMs, 99)
	res.ScriptP50Ms, res.ScriptP99Ms = percentile(res.ScriptMs, 50), percentile(res.ScriptMs, 99)
	if res.P50Ms > 0 {
		res.Ratio = res.ScriptP50Ms / res.P50Ms
	}
	return res, nil
}

// follow samples the requests' progress every 250 ms from start until all are
// terminal or timeout has passed, calling sample (if set) with each point. It returns
// the points and the seconds until all were terminal, 0 if they never were.
func (b *bench) follow(kind string, names []string, start time.Time, timeout time.Duration, sample func(Point)) ([]Point, float64) {
	var progress []Point
	deadline := start.Add(timeout)
	for {
		p := b.track.counts(names)
		p.Seconds = time.Since(start).Seconds()
		progress = append(progress, p)
		if sample != nil {
			sample(p)
		}
		if p.Terminal == len(names) {
			return progress, p.Seconds
		}
		if time.Now().After(deadline) {
			logf("%s: %d of %d terminal after %s", kind, p.Terminal, len(names), timeout)
			return progress, 0
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// stormIncidents stages n shut-down-holder incidents: each PV's Lease held by a
// shut-down node of its own, its pod on a carrier. It returns them and the nodes.
func (b *bench) stormIncidents(ctx context.Context, kind string, n int) ([]stage.Incident, []string, error) {
	down, err := b.shutdownNodes(ctx, kind, n)
	if err != nil {
		return nil, nil, err
	}
	incidents, err := b.newIncidents(ctx, kind, n, func(i int) string { return down[i] },
		func(i int) string { return b.carrier[i%len(b.carrier)] }, false)
	return incidents, down, err
}

// storm creates n shut-down-holder requests at once and follows them to the end.
// It returns the progress and the controller's figures, and the incidents and
// shut-down nodes it staged. With profile (and -profile) it saves CPU profiles
// covering the storm from the first create to terminal, and heap profiles at the
// highest RSS sampled and at terminal.
func (b *bench) storm(ctx context.Context, kind string, n int, timeout time.Duration, profile bool) (*Storm, []stage.Incident, []string, error) {
	incidents, down, err := b.stormIncidents(ctx, kind, n)
	if err != nil {
		return nil, incidents, down, err
	}
	res, err := b.stormOn(ctx, kind, b.cfg.controller, incidents, timeout, profile && b.cfg.profile, false)
	return res, incidents, down, err
}

// stormOn is storm on incidents already staged, with the controller binary (the
// one under test, or the baseline's). profile saves the controller's profiles;
// profileAPIServer profiles kube-apiserver over the storm's first seconds too.
func (b *bench) stormOn(ctx context.Context, kind, binary string, incidents []stage.Incident, timeout time.Duration, profile, profileAPIServer bool) (*Storm, error) {
	n := len(incidents)
	cfg := b.cfg
	cfg.controller = binary
	c, err := startController(ctx, cfg, kind)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	// startController waited for the start-up calls to end.
	before, err := c.scrape()
	if err != nil {
		return nil, err
	}
	names := make([]string, n)
	rrs := make([]*v1alpha1.RemediationRequest, n)
	for i := range rrs {
		rrs[i] = b.request(b.name(kind, i), incidents[i], false)
		names[i] = rrs[i].Name
	}
	res := &Storm{Requests: n, ShutdownNodes: n, KwokNodes: len(b.carrier), Pods: b.pods}
	prof := b.profiler(ctx, c, kind, profile)
	defer b.apiServerProfile(ctx, profileAPIServer, filepath.Join(b.cfg.workDir, kind+"-apiserver-cpu.pprof"))()
	cpu := b.controlPlane()
	start := time.Now()
	if err := stage.Parallel(n, func(i int) error {
		b.track.created(rrs[i].Name, time.Now())
		return b.fast.Create(ctx, rrs[i])
	}); err != nil {
		prof.finish(ctx)
		return nil, fmt.Errorf("creating requests: %w", err)
	}
	res.Progress, res.TerminalSeconds = b.follow(kind, names, start, timeout, func(p Point) {
		if p.Decided == n && res.DecidedSeconds == 0 {
			res.DecidedSeconds = p.Seconds
		}
		if rss, peak, err := c.Memory(); err == nil {
			res.PeakRSSMiB = max(res.PeakRSSMiB, peak)
			prof.sampled(ctx, rss)
		}
	})
	if res.TerminalSeconds > 0 {
		// To the last terminal request; the Events client-go posts after it are not in it.
		res.ControlPlane = b.cpuSince(cpu)
	}
	prof.finish(ctx)
	after, err := c.settle(ctx, 0)
	if err != nil {
		return nil, err
	}
	// All of the controller's metrics as the storm left them (reconcile and queue
	// times, decisions, calls by method), for reading where the time went.
	if err := c.saveProfile(ctx, "http://"+c.Metrics+"/metrics", filepath.Join(b.cfg.workDir, kind+"-metrics.txt")); err != nil {
		logf("Saving the controller's metrics after the storm: %v", err)
	}
	total, by := callsSince(before, after)
	res.APICallsPerRequest, res.APICallsByKind = total/float64(n), by
	res.RSSMiB, res.PeakRSSMiB, _ = c.Memory()
	b.track.mu.Lock()
	for _, nm := range names {
		if e := b.track.requests[nm]; e != nil && e.phase == v1alpha1.PhaseSucceeded {
			res.Succeeded++
		}
	}
	b.track.mu.Unlock()
	b.keepReleased(ctx, names)
	return res, nil
}

// stormProfiler saves a storm's profiles; its methods do nothing when it is off.
type stormProfiler struct {
	on   bool
	c    *controllerProc
	base string // the profiles' path without ".pprof"
	// stop ends the CPU profiles, cpuDone reports their error.
	stop    chan struct{}
	cpuDone chan error
	// peakRSS is the highest RSS sampled; heapBusy is set while a heap profile of a
	// new peak is being saved, heapWG waits for it.
	peakRSS  float64
	heapBusy atomic.Bool
	heapWG   sync.WaitGroup
}

// profiler starts the storm's CPU profiles when on, before the first create.
func (b *bench) profiler(ctx context.Context, c *controllerProc, kind string, on bool) *stormProfiler {
	p := &stormProfiler{on: on, c: c, base: filepath.Join(b.cfg.workDir, kind), stop: make(chan struct{}), cpuDone: make(chan error, 1)}
	if !on {
		return p
	}
	go func() { p.cpuDone <- c.cpuProfiles(ctx, p.stop, p.base+"-cpu.pprof") }()
	// Let the first profile start before the creates: the storm's first moments are
	// its busiest.
	time.Sleep(100 * time.Millisecond)
	return p
}

// sampled saves a heap profile when rss is the highest sampled so far, in the
// background (the sampling must keep its pace), skipping peaks while one is saved.
func (p *stormProfiler) sampled(ctx context.Context, rss float64) {
	if !p.on || rss <= p.peakRSS {
		return
	}
	p.peakRSS = rss
	if !p.heapBusy.CompareAndSwap(false, true) {
		return
	}
	p.heapWG.Add(1)
	go func() {
		defer p.heapWG.Done()
		defer p.heapBusy.Store(false)
		if err := p.c.heapProfile(ctx, p.base+"-heap-peak.pprof"); err != nil {
			logf("Heap profile at peak RSS: %v", err)
		}
	}()
}

// finish saves the heap profile at terminal, ends the CPU profiles and waits for
// all of them.
func (p *stormProfiler) finish(ctx context.Context) {
	if !p.on {
		return
	}
	if err := p.c.heapProfile(ctx, p.base+"-heap.pprof"); err != nil {
		logf("Heap profile at terminal: %v", err)
	}
	close(p.stop)
	p.heapWG.Wait()
	if err := <-p.cpuDone; err != nil {
		logf("CPU profiles: %v", err)
		return
	}
	logf("Profiles of the storm: %s-{cpu,heap,heap-peak}.pprof", p.base)
}

// memory is scenario 4: a fresh controller handles the same number of requests
// with few and with many pods in the cluster.
func (b *bench) memory(ctx context.Context) (*Memory, error) {
	res := &Memory{}
	for i, pods := range []int{b.p.memoryPods[0], b.p.memoryPods[1]} {
		if err := b.ensureCarriers(ctx, pods); err != nil {
			return nil, err
		}
		logf("Memory: %d requests with %d pods in the cluster", b.p.memoryRequests, b.pods)
		st, _, _, err := b.storm(ctx, fmt.Sprintf("mem%d", i), b.p.memoryRequests, 2*time.Minute, true)
		if err != nil {
			return nil, err
		}
		res.Samples = append(res.Samples, MemorySample{Pods: b.pods, Requests: b.p.memoryRequests, RSSMiB: st.RSSMiB, PeakRSSMiB: st.PeakRSSMiB})
	}
	small, large := res.Samples[0].PeakRSSMiB, res.Samples[1].PeakRSSMiB
	if small > 0 {
		res.DiffPercent = 100 * abs(large-small) / small
	}
	return res, nil
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// disruptive is scenario 3: healthy-holder requests under the default cap. Each
// holder is its own kwok node, whose application pod must be evicted before the
// Lease goes.
func (b *bench) disruptive(ctx context.Context) (*Disruptive, error) {
	n, capacity := b.p.disruptiveRequests, 2 // the controller's --max-concurrent-remediations default
	logf("Disruptive storm: %d healthy-holder requests, cap %d", n, capacity)
	if err := b.ensureNodes(ctx, n); err != nil {
		return nil, err
	}
	if len(b.carrier) < n {
		return nil, fmt.Errorf("disruptive storm needs %d kwok nodes, have %d", n, len(b.carrier))
	}
	incidents, err := b.newIncidents(ctx, "dis", n, func(i int) string { return b.carrier[i] },
		func(i int) string { return b.carrier[i] }, true)
	if err != nil {
		return nil, err
	}
	c, err := startController(ctx, b.cfg, "disruptive")
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	before, err := c.scrape()
	if err != nil {
		return nil, err
	}
	playbooks, err := remediations.DefaultPlaybooks()
	if err != nil {
		return nil, err
	}
	watcher, err := admissionwatch.Start(ctx, b.rc, capacity, playbooks.Disruptive)
	if err != nil {
		return nil, err
	}
	names := make([]string, n)
	start := time.Now()
	// One after the other, so that creation order is name order (the controller
	// serves waiting requests oldest first, by creationTimestamp and then name).
	for i := 0; i < n; i++ {
		rr := b.request(b.name("dis", i), incidents[i], true)
		names[i] = rr.Name
		b.track.created(rr.Name, time.Now())
		if err := b.k8s.Create(ctx, rr); err != nil {
			return nil, fmt.Errorf("creating request %s: %w", rr.Name, err)
		}
	}
	res := &Disruptive{Requests: n, Cap: capacity}
	res.Progress, res.TerminalSeconds = b.follow("disruptive", names, start, b.p.disruptiveTimeout, nil)
	after, err := c.scrape()
	if err != nil {
		return nil, err
	}
	res.Decisions = int(after.decisions - before.decisions)
	res.ExtraDecisions = res.Decisions - 2*n
	report := watcher.Stop()
	res.OutOfOrder, res.MaxHeld = report.Violations, report.MaxHeld
	if report.Err != nil {
		res.OutOfOrder = append(res.OutOfOrder, "the watch could not follow every change: "+report.Err.Error())
	}

	spans := b.spans(names, res)
	res.FIFO = len(res.OutOfOrder) == 0 && len(spans) == n
	res.MaxConcurrent = maxConcurrent(spans)
	handovers := handoverSeconds(spans, capacity)
	if len(handovers) > 0 {
		res.MaxHandoverSeconds = slices.Max(handovers)
		res.P50HandoverSeconds = percentile(handovers, 50)
	}
	return res, nil
}

// runSpan is when one request of the disruptive storm ran: from Running to
// terminal (zero if it never got there).
type runSpan struct {
	name       string
	start, end time.Time
}

// spans are the runs of the requests named that reached Running, in the order
// they started; it counts those that Succeeded into res.
func (b *bench) spans(names []string, res *Disruptive) []runSpan {
	b.track.mu.Lock()
	var spans []runSpan
	for _, nm := range names {
		e := b.track.requests[nm]
		if e == nil || e.running.IsZero() {
			continue
		}
		if e.phase == v1alpha1.PhaseSucceeded {
			res.Succeeded++
		}
		spans = append(spans, runSpan{name: nm, start: e.running, end: e.terminal})
	}
	b.track.mu.Unlock()
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	return spans
}

// maxConcurrent is the concurrency: the most spans overlapping at any start.
func maxConcurrent(spans []runSpan) int {
	most := 0
	for _, s := range spans {
		running := 0
		for _, o := range spans {
			if !o.start.After(s.start) && (o.end.IsZero() || o.end.After(s.start)) {
				running++
			}
		}
		most = max(most, running)
	}
	return most
}

// handoverSeconds are the seconds each slot stood free between requests, for spans
// in the order they started.
func handoverSeconds(spans []runSpan, capacity int) []float64 {
	// Handover: the k-th start after the first cap ones takes the slot the
	// (k-cap)-th terminal request freed.
	var ends []time.Time
	for _, s := range spans {
		if !s.end.IsZero() {
			ends = append(ends, s.end)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	var handovers []float64
	for k := capacity; k < len(spans); k++ {
		if k-capacity < len(ends) {
			handovers = append(handovers, max(0, spans[k].start.Sub(ends[k-capacity]).Seconds()))
		}
	}
	return handovers
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
