package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/cluster"
	"github.com/remediator/remediator/test/harness/controllerproc"
	"github.com/remediator/remediator/test/stage"
)

type clientWithWatch = client.WithWatch

// preset sizes a run.
type preset struct {
	name            string
	latencyRequests int
	// stormSizes are the storm's sizes, smallest first: at each, the API server's
	// floor and then the storm, on fresh incidents and a fresh controller. The last
	// is the storm the summary and storm.svg show.
	stormSizes         []int
	kwokNodes          int
	pods               int
	stormTimeout       time.Duration
	disruptiveRequests int
	disruptiveTimeout  time.Duration
	memoryRequests     int
	memoryPods         [2]int
	// writes is how many requests carry each status the writes scenario measures.
	writes int
	// collapse is the bound under which the run fails: a storm not terminal within it.
	collapse time.Duration
}

var presets = map[string]preset{
	// The figures: storms of up to 1,000 requests over as many shut-down nodes
	// plus 1,000 kwok nodes carrying 20,000 pods; 100 disruptive requests; memory at
	// 2,000 and 20,000 pods.
	"full": {name: "full", latencyRequests: 20, stormSizes: []int{1, 100, 250, 500, 1000}, kwokNodes: 1000, pods: 20000, stormTimeout: 10 * time.Minute,
		disruptiveRequests: 100, disruptiveTimeout: 10 * time.Minute, memoryRequests: 100, memoryPods: [2]int{2000, 20000}, writes: 400, collapse: 10 * time.Minute},
	// make test's smoke run: under two minutes; it fails on a collapse, a broken
	// guarantee or the call budget exceeded, never on a missed goal.
	"small": {name: "small", latencyRequests: 20, stormSizes: []int{1, 100}, kwokNodes: 40, pods: 2000, stormTimeout: 120 * time.Second,
		disruptiveRequests: 12, disruptiveTimeout: 120 * time.Second, memoryRequests: 20, memoryPods: [2]int{200, 2000}, writes: 50, collapse: 120 * time.Second},
}

type config struct {
	root, kubeconfig, controller, out, workDir string
	// baseline is the earlier controller's binary (-baseline), empty for none;
	// baselineVersion what it says it is.
	baseline, baselineVersion string
	// subcommands is controllerproc.Subcommand of the controller and the baseline,
	// asked once, before anything is staged.
	subcommands map[string]string
	profile     bool
	// stagingPause is the pause after staging a floor's or a storm's incidents (-staging-pause).
	stagingPause time.Duration
	extraArgs    []string
	scenarios    map[string]bool
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, p, runID, err := configure()
	if err != nil {
		return err
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	// Use a cluster someone started (make cluster) and leave it running; start one
	// otherwise, and stop it afterwards.
	if !reachable(cfg.kubeconfig) {
		logf("Starting the local cluster")
		if _, err := cluster.Up(ctx); err != nil {
			return fmt.Errorf("starting the local cluster: %w", err)
		}
		defer func() {
			if err := cluster.Down(context.Background()); err != nil {
				logf("Stopping the local cluster: %v", err)
			}
		}()
	}
	b, err := newBench(ctx, cfg, p, runID)
	if err != nil {
		return err
	}
	// An interrupted run leaves its objects behind, in every informer of the
	// controller measured next.
	if err := b.sweepOthers(ctx); err != nil {
		logf("Deleting what earlier runs left: %v", err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go b.track.watchRequests(watchCtx, b.k8s, runID)
	go b.track.watchLeases(watchCtx, b.s.CS, runID)
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer ccancel()
		if err := b.cleanup(cctx); err != nil {
			logf("%v", err)
		}
	}()

	res := &Result{Preset: p.name, StartedAt: time.Now().UTC(), Commit: gitDescribe(cfg.root), Machine: machine(),
		Command: command(p.name, cfg.baselineVersion)}
	logf("Run %s, preset %s, work directory %s", runID, p.name, cfg.workDir)
	if err := b.scenarios(ctx, res); err != nil {
		return err
	}

	summary := summarise(res)
	fmt.Println(summary)
	for _, dir := range []string{cfg.workDir, cfg.out} {
		if dir == "" {
			continue
		}
		if err := write(res, summary, dir); err != nil {
			return err
		}
		logf("Wrote %s", dir)
	}
	return verdict(res, p)
}

// configure reads the flags into a config and a preset, and makes the run's
// work directory; it returns the run's ID too.
func configure() (config, preset, string, error) {
	root, err := cluster.Root()
	if err != nil {
		return config{}, preset{}, "", err
	}
	presetName := flag.String("preset", "small", "full (the issue's sizes) or small (make test's smoke run)")
	out := flag.String("out", "", "directory for results.json and the plots, relative to the repository root; empty writes them only into the work directory")
	scen := flag.String("scenarios", "latency,memory,storm,disruptive,writes", "scenarios to run, comma-separated (storm runs the API server's floor at each of its sizes; writes, what one status write costs the API server by what the request carries, takes the status from a request storm or memory released)")
	controller := flag.String("controller", filepath.Join(root, "bin", "remediator-controller"), "the controller binary to measure, relative to the repository root (a remediator binary from before the controller had its own runs as `remediator controller`)")
	extraArgs := flag.String("controller-args", "", "extra flags for the controller, space-separated (the default is its default flags)")
	baseline := flag.String("baseline", "", "an earlier controller binary, relative to the repository root (make bench BASELINE=<git ref> builds bin/remediator-baseline; one from before the controller had its own binary is a remediator binary, run as `remediator controller`): after the storm at the largest size, the same storm with it (and the same -controller-args), shown side by side and never checked against the call budget; empty runs none")
	sizes := flag.String("sizes", "", "the storm's sizes, comma-separated, smallest first, instead of the preset's (e.g. 1000 to measure one storm)")
	stagingPause := flag.Duration("staging-pause", 0, "a pause after staging the incidents of each floor and each storm, before it starts: the work their staging sets off in the cluster (claims bound, the new nodes seen by the node lifecycle controller) then ends before either is timed; 0 starts each at once")
	profile := flag.Bool("profile", false, "save the controller's CPU profile over the largest storm and its heap profiles at peak RSS and at the end, and kube-apiserver's CPU profile over the first 12 s of that floor and that storm (pprof), into the work directory")
	flag.Parse()
	p, ok := presets[*presetName]
	if !ok {
		return config{}, p, "", fmt.Errorf("unknown preset %q (full or small)", *presetName)
	}
	if *sizes != "" {
		p.stormSizes = nil
		for _, f := range strings.Split(*sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return config{}, p, "", fmt.Errorf("-sizes: %q is not a positive number", f)
			}
			p.stormSizes = append(p.stormSizes, n)
		}
		slices.Sort(p.stormSizes)
	}
	// The harness runs from its own module's directory (test/harness): -out and
	// -controller name paths of the repository, such as docs/benchmarks.
	if *out != "" && !filepath.IsAbs(*out) {
		*out = filepath.Join(root, *out)
	}
	if !filepath.IsAbs(*controller) {
		*controller = filepath.Join(root, *controller)
	}
	cfg := config{root: root, kubeconfig: cluster.Kubeconfig(root), controller: *controller,
		out: *out, profile: *profile, stagingPause: *stagingPause, scenarios: map[string]bool{}}
	cfg.extraArgs = strings.Fields(*extraArgs)
	if *baseline != "" {
		if !filepath.IsAbs(*baseline) {
			*baseline = filepath.Join(root, *baseline)
		}
		// Before anything is staged: a wrong path would otherwise fail the run at its end.
		if st, err := os.Stat(*baseline); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return cfg, p, "", fmt.Errorf("-baseline %s: not an executable file (make bench BASELINE=<git ref> builds one)", *baseline)
		}
		cfg.baseline, cfg.baselineVersion = *baseline, binaryVersion(*baseline)
	}
	// Before anything is staged: a binary that is neither controller build would
	// otherwise fail the run when its first storm starts.
	cfg.subcommands = map[string]string{}
	for _, bin := range []string{cfg.controller, cfg.baseline} {
		if bin == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sub, err := controllerproc.Subcommand(ctx, bin)
		cancel()
		if err != nil {
			return cfg, p, "", fmt.Errorf("%w (make build builds bin/remediator-controller)", err)
		}
		cfg.subcommands[bin] = sub
	}
	for _, s := range strings.Split(*scen, ",") {
		cfg.scenarios[strings.TrimSpace(s)] = true
	}
	runID := strconv.FormatInt(time.Now().Unix()%1_000_000, 36)
	cfg.workDir = filepath.Join(root, "bin", "bench", runID)
	if err := os.MkdirAll(cfg.workDir, 0o755); err != nil {
		return cfg, p, "", err
	}
	return cfg, p, runID, nil
}

// newBench makes the run's clients of the cluster and its namespaces.
func newBench(ctx context.Context, cfg config, p preset, runID string) (*bench, error) {
	utilruntime.Must(v1alpha1.AddToScheme(scheme.Scheme))
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading %s (start the cluster with make cluster): %w", cfg.kubeconfig, err)
	}
	// Staging must not be what limits the run.
	rc.QPS, rc.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	k8s, err := client.NewWithWatch(rc, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	// A negative QPS turns client-go's rate limiter off: the floor must measure the
	// API server, not a token bucket the bench chose, and the storm's creates must
	// not be spread out by one the staging just drained.
	unlimited := rest.CopyConfig(rc)
	unlimited.QPS = -1
	fastCS, err := kubernetes.NewForConfig(unlimited)
	if err != nil {
		return nil, err
	}
	fast, err := client.NewWithWatch(unlimited, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, p: p, s: &stage.Stager{CS: cs, RunID: runID, Apps: appNamespace, Requests: requestNamespace},
		k8s: k8s, fast: fast, fastCS: fastCS, rc: rc, track: newTracker()}
	if err := b.s.Namespaces(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// scenarios runs the scenarios the flags chose, into res.
func (b *bench) scenarios(ctx context.Context, res *Result) error {
	cfg, p := b.cfg, b.p
	var err error
	if cfg.scenarios["latency"] {
		if res.Latency, err = b.latency(ctx); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	// The disruptive storm runs before the cluster grows to the full node count: its
	// holders must stay healthy, and kwok's simulated kubelets, all on this machine,
	// renew a thousand node Leases late enough under load that the node lifecycle
	// controller marks some unreachable.
	if cfg.scenarios["disruptive"] {
		if res.Disruptive, err = b.disruptive(ctx); err != nil {
			return fmt.Errorf("disruptive: %w", err)
		}
	}
	if cfg.scenarios["memory"] {
		if res.Memory, err = b.memory(ctx); err != nil {
			return fmt.Errorf("memory: %w", err)
		}
	}
	if cfg.scenarios["storm"] {
		if err := b.ensureCarriers(ctx, p.pods); err != nil {
			return err
		}
		if err := b.scale(ctx, res); err != nil {
			return fmt.Errorf("storm: %w", err)
		}
	}
	if cfg.scenarios["writes"] {
		if res.Writes, err = b.writes(ctx, p.writes); err != nil {
			return fmt.Errorf("writes: %w", err)
		}
	}
	return nil
}

// write saves results.json, summary.txt and the plots into dir.
func write(res *Result, summary, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(summary+"\n"), 0o644); err != nil {
		return err
	}
	_, err = writePlots(res, dir)
	return err
}

// verdict fails the run on a collapse, a broken guarantee or a storm size over the
// call budget, never on a missed goal: the machines are shared and noisy, and goals
// are reported in the summary. A count of API calls is not noisy.
func verdict(res *Result, p preset) error {
	var problems []string
	storms := res.Scale
	if len(storms) == 0 && res.Storm != nil {
		s := res.Storm
		storms = []ScalePoint{{Requests: s.Requests, TerminalSeconds: s.TerminalSeconds, Succeeded: s.Succeeded}}
	}
	for _, s := range storms {
		if s.TerminalSeconds == 0 || s.TerminalSeconds > p.collapse.Seconds() {
			problems = append(problems, fmt.Sprintf("storm of %d not terminal within %s", s.Requests, p.collapse))
		}
		if s.Succeeded != s.Requests {
			problems = append(problems, fmt.Sprintf("storm of %d: %d of %d Succeeded", s.Requests, s.Succeeded, s.Requests))
		}
	}
	problems = append(problems, overBudget(res)...)
	if d := res.Disruptive; d != nil {
		if d.TerminalSeconds == 0 {
			problems = append(problems, fmt.Sprintf("disruptive storm of %d not terminal within %s", d.Requests, p.disruptiveTimeout))
		}
		if d.Succeeded != d.Requests {
			problems = append(problems, fmt.Sprintf("disruptive storm: %d of %d Succeeded", d.Succeeded, d.Requests))
		}
		if d.MaxConcurrent > d.Cap {
			problems = append(problems, fmt.Sprintf("disruptive storm: %d playbooks ran at once, cap %d", d.MaxConcurrent, d.Cap))
		}
		if !d.FIFO {
			problems = append(problems, fmt.Sprintf("disruptive storm: slots not handed out in FIFO order: %v", d.OutOfOrder))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

func (b *bench) cleanup(ctx context.Context) error {
	b.deleteRequests(ctx, client.MatchingLabels{stage.Label: b.s.RunID})
	return b.s.Cleanup(ctx)
}

// sweepOthers deletes the requests and the objects earlier runs left.
func (b *bench) sweepOthers(ctx context.Context) error {
	sel, err := labels.Parse(stage.Label + "," + stage.Label + "!=" + b.s.RunID)
	if err != nil {
		return err
	}
	b.deleteRequests(ctx, client.MatchingLabelsSelector{Selector: sel})
	return b.s.SweepOthers(ctx)
}

// deleteRequests deletes the requests sel selects, finalizers first, while no
// controller runs: a finalizer left on one (a disruptive playbook's) would hold it.
func (b *bench) deleteRequests(ctx context.Context, sel interface {
	client.ListOption
	client.DeleteAllOfOption
}) {
	list := &v1alpha1.RemediationRequestList{}
	if err := b.k8s.List(ctx, list, client.InNamespace(requestNamespace), sel); err == nil {
		_ = stage.Parallel(len(list.Items), func(i int) error {
			rr := &list.Items[i]
			if len(rr.Finalizers) == 0 {
				return nil
			}
			patch := client.MergeFrom(rr.DeepCopy())
			rr.Finalizers = nil
			return client.IgnoreNotFound(b.k8s.Patch(ctx, rr, patch))
		})
	}
	if err := b.k8s.DeleteAllOf(ctx, &v1alpha1.RemediationRequest{}, client.InNamespace(requestNamespace), sel); err != nil {
		logf("Deleting requests: %v", err)
	}
}

func reachable(kubeconfig string) bool {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false
	}
	rc.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return false
	}
	_, err = cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{Limit: 1})
	return err == nil
}

// binaryVersion is what `binary version` prints, "remediator-controller v0.4.0" or
// "remediator a9f3949" (a build from before the controller had its own binary); binary's
// path when it prints nothing or fails (a build from before the version command).
func binaryVersion(binary string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "version").Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" && !strings.Contains(v, "\n") {
		return v
	}
	return binary
}

// command is the make command that reproduces the run. The baseline's git ref is
// its version when the version is a clean git describe ("remediator a9f3949", or
// "remediator-controller v0.4.0" from a baseline with the controller's own binary).
func command(preset, baselineVersion string) string {
	c := "make bench BENCH=" + preset
	if baselineVersion == "" {
		return c
	}
	program, ref, ok := strings.Cut(baselineVersion, " ")
	ok = ok && (program == "remediator" || program == "remediator-controller")
	if !ok || ref == "dev" || strings.HasSuffix(ref, "-dirty") || strings.ContainsAny(ref, " /") {
		return c + " BASELINE=<the baseline's git ref>"
	}
	return c + " BASELINE=" + ref
}

// relToRoot is path relative to the repository root when it lies inside it.
func relToRoot(root, path string) string {
	if rel, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}

func gitDescribe(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func machine() Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version()}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.Atoi(f[1])
				m.MemTotalMiB = kb / 1024
			}
		}
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	return m
}
