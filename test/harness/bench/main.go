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
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/cluster"
	"github.com/remediator/remediator/test/stage"
)

type clientWithWatch = client.WithWatch

// preset sizes a run.
type preset struct {
	name               string
	latencyRequests    int
	stormRequests      int
	kwokNodes          int
	pods               int
	stormTimeout       time.Duration
	disruptiveRequests int
	disruptiveTimeout  time.Duration
	memoryRequests     int
	memoryPods         [2]int
	// collapse is the bound under which the run fails: a storm not terminal within it.
	collapse time.Duration
}

var presets = map[string]preset{
	// The figures: 1,000 requests over 1,000 shut-down nodes plus 1,000 kwok
	// nodes carrying 20,000 pods; 100 disruptive requests; memory at 2,000 and 20,000 pods.
	"full": {name: "full", latencyRequests: 20, stormRequests: 1000, kwokNodes: 1000, pods: 20000, stormTimeout: 10 * time.Minute,
		disruptiveRequests: 100, disruptiveTimeout: 10 * time.Minute, memoryRequests: 100, memoryPods: [2]int{2000, 20000}, collapse: 10 * time.Minute},
	// make test's smoke run: under two minutes, and it fails only on a collapse.
	"small": {name: "small", latencyRequests: 20, stormRequests: 100, kwokNodes: 40, pods: 2000, stormTimeout: 120 * time.Second,
		disruptiveRequests: 12, disruptiveTimeout: 120 * time.Second, memoryRequests: 20, memoryPods: [2]int{200, 2000}, collapse: 120 * time.Second},
}

type config struct {
	root, kubeconfig, controller, out, workDir string
	profile                                    bool
	extraArgs                                  []string
	scenarios                                  map[string]bool
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
		Command: "make bench BENCH=" + p.name}
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
	scen := flag.String("scenarios", "latency,memory,storm,disruptive", "scenarios to run, comma-separated")
	controller := flag.String("controller", filepath.Join(root, "bin", "remediator"), "the remediator binary to measure, relative to the repository root")
	extraArgs := flag.String("controller-args", "", "extra flags for the controller, space-separated (the default is its default flags)")
	profile := flag.Bool("profile", false, "save a CPU profile of the controller during the storm (pprof) into the work directory")
	flag.Parse()
	p, ok := presets[*presetName]
	if !ok {
		return config{}, p, "", fmt.Errorf("unknown preset %q (full or small)", *presetName)
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
		out: *out, profile: *profile, scenarios: map[string]bool{}}
	cfg.extraArgs = strings.Fields(*extraArgs)
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
	b := &bench{cfg: cfg, p: p, s: &stage.Stager{CS: cs, RunID: runID, Apps: appNamespace, Requests: requestNamespace}, k8s: k8s, rc: rc, track: newTracker()}
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
		logf("Storm: %d requests at once for shut-down holders, %d pods on %d kwok nodes", p.stormRequests, b.pods, len(b.carrier))
		if res.Storm, err = b.storm(ctx, "storm", p.stormRequests, p.stormTimeout); err != nil {
			return fmt.Errorf("storm: %w", err)
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

// verdict fails the run on a collapse or a broken guarantee, never on a missed goal:
// the machines are shared and noisy, and goals are reported in the summary.
func verdict(res *Result, p preset) error {
	var problems []string
	if s := res.Storm; s != nil {
		if s.TerminalSeconds == 0 || s.TerminalSeconds > p.collapse.Seconds() {
			problems = append(problems, fmt.Sprintf("storm of %d not terminal within %s", s.Requests, p.collapse))
		}
		if s.Succeeded != s.Requests {
			problems = append(problems, fmt.Sprintf("storm: %d of %d Succeeded", s.Succeeded, s.Requests))
		}
	}
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
	// Requests first, while no controller runs: a finalizer left on one (a disruptive
	// playbook's) would hold it.
	list := &v1alpha1.RemediationRequestList{}
	sel := client.MatchingLabels{stage.Label: b.s.RunID}
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
	return b.s.Cleanup(ctx)
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
