package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/cluster"
	"github.com/remediator/remediator/test/stage"
)

const (
	requestNamespace = "remediator-chaos"
	appNamespace     = "remediator-chaos-apps"
	// fencingGate is the age gate of the campaign's policies for fenced holders:
	// the Lease's creationTimestamp cannot be backdated, and the runbook's 300 s
	// would make every fenced case wait five minutes.
	fencingGate = 15 * time.Second
)

type config struct {
	preset     string
	out        string
	kubeconfig string
	controller string
	campaigns  string
	seed       int64
}

// preset sizes the campaigns.
type preset struct {
	// R1: failpoint kills at every boundary of every step (or one per playbook), and
	// timed kills at random moments.
	everyBoundary bool
	timedKills    int
	// R2: requests through the fault proxy.
	faultRequests int
	// R4: requests, restarts.
	churnRequests, churnRestarts int
}

var presets = map[string]preset{
	"full":  {everyBoundary: true, timedKills: 24, faultRequests: 200, churnRequests: 500, churnRestarts: 5},
	"smoke": {everyBoundary: false, timedKills: 0, faultRequests: 20, churnRequests: 0, churnRestarts: 0},
}

// harness is one run: its clients, its staging and what it found.
type harness struct {
	cfg      config
	p        preset
	cs       kubernetes.Interface
	rest     *rest.Config
	k8s      client.Client
	audit    auditLog
	stager   *stager
	workDir  string
	policies string
	gate     time.Duration
	procSeq  int
	result   Result
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, p, root, err := parseFlags()
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if cfg.kubeconfig == "" {
		startedHere := !reachable(cluster.Kubeconfig(root))
		if cfg.kubeconfig, err = cluster.Up(ctx); err != nil {
			return fmt.Errorf("starting the local cluster: %w", err)
		}
		if startedHere && os.Getenv("CHAOS_KEEP_CLUSTER") == "" {
			defer func() { _ = cluster.Down(context.Background()) }()
		}
	}
	h, err := newHarness(ctx, cfg, p, root)
	if err != nil {
		return err
	}
	defer func() {
		if err := h.cleanup(context.Background()); err != nil {
			logf("Cleanup: %v", err)
		}
	}()
	campaigns := strings.Split(cfg.campaigns, ",")
	for _, c := range campaigns {
		start := time.Now()
		if err := h.campaign(ctx, c); err != nil {
			h.result.Aborted = fmt.Sprintf("campaign %s: %v", c, err)
			if werr := h.write(); werr != nil {
				logf("Writing the partial results: %v", werr)
			}
			return fmt.Errorf("campaign %s: %w", c, err)
		}
		logf("Campaign %s done in %s", c, time.Since(start).Round(time.Second))
	}
	if err := h.write(); err != nil {
		return err
	}
	if n := h.result.violations(); n > 0 {
		return fmt.Errorf("%d violations; see %s", n, filepath.Join(h.workDir, "summary.md"))
	}
	logf("No violations")
	return nil
}

// parseFlags reads the flags into a config with its paths made absolute, and
// returns it with its preset and the repository root.
func parseFlags() (config, preset, string, error) {
	var cfg config
	flag.StringVar(&cfg.preset, "preset", "full", "full (the figures of docs/reliability.md) or smoke (make test)")
	flag.StringVar(&cfg.out, "out", "", "directory for results.json and summary.md, relative to the repository root (empty: only the work directory)")
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig of the local cluster, relative to the repository root (default: bin/cluster/kubeconfig, started if not running)")
	flag.StringVar(&cfg.controller, "controller", "", "controller binary built with -tags failpoints, relative to the repository root (default: bin/remediator-failpoints)")
	flag.StringVar(&cfg.campaigns, "campaigns", "crash,faults,churn", "campaigns to run")
	flag.Int64Var(&cfg.seed, "seed", 0, "seed of the random kills and faults (0: from the clock; the results record it)")
	flag.Parse()
	p, ok := presets[cfg.preset]
	if !ok {
		return cfg, p, "", fmt.Errorf("unknown -preset %q (full or smoke)", cfg.preset)
	}
	if cfg.seed == 0 {
		cfg.seed = time.Now().UnixNano() % 1_000_000
	}
	root, err := cluster.Root()
	if err != nil {
		return cfg, p, "", err
	}
	if cfg.controller == "" {
		cfg.controller = filepath.Join(root, "bin", "remediator-failpoints")
	}
	// The harness runs from its own module's directory (test/harness): -out,
	// -kubeconfig and -controller name paths of the repository, such as docs/reliability.
	for _, p := range []*string{&cfg.out, &cfg.kubeconfig, &cfg.controller} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
	if _, err := os.Stat(cfg.controller); err != nil {
		return cfg, p, "", fmt.Errorf("%w (build it with make build-failpoints)", err)
	}
	return cfg, p, root, nil
}

// campaign runs the campaign named c; churn only in a preset with churn requests.
func (h *harness) campaign(ctx context.Context, c string) error {
	switch c {
	case "crash":
		return h.crash(ctx)
	case "faults":
		return h.faults(ctx)
	case "churn":
		if h.p.churnRequests > 0 {
			return h.churn(ctx)
		}
		return nil
	default:
		return fmt.Errorf("unknown campaign %q", c)
	}
}

func newHarness(ctx context.Context, cfg config, p preset, root string) (*harness, error) {
	utilruntime.Must(v1alpha1.AddToScheme(scheme.Scheme))
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 200, 400
	rc.UserAgent = "chaos-harness"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	k8s, err := client.New(rc, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	runID := strconv.FormatInt(time.Now().Unix()%1_000_000, 36)
	h := &harness{cfg: cfg, p: p, cs: cs, rest: rc, k8s: k8s, gate: fencingGate,
		audit:   auditLog{path: filepath.Join(cluster.WorkDir(cfg.kubeconfig), "logs", "audit.log")},
		workDir: filepath.Join(root, "bin", "chaos", runID)}
	h.result = Result{Preset: cfg.preset, Seed: cfg.seed, RunID: runID, Commit: gitDescribe(root), Started: time.Now().UTC()}
	if err := os.MkdirAll(h.workDir, 0o755); err != nil {
		return nil, err
	}
	if h.policies, err = shortGatePolicies(root, h.workDir, fencingGate); err != nil {
		return nil, err
	}
	if _, err := h.audit.size(); err != nil {
		return nil, err
	}
	st := &stage.Stager{CS: cs, RunID: runID, Apps: appNamespace, Requests: requestNamespace}
	h.stager = &stager{h: h, st: st, gate: fencingGate}
	if err := st.Namespaces(ctx); err != nil {
		return nil, err
	}
	if err := h.sweep(ctx); err != nil {
		return nil, err
	}
	h.stager.carrier = h.stager.next("carrier")
	if err := st.KwokNode(ctx, h.stager.carrier); err != nil {
		return nil, err
	}
	if err := st.WaitNodesReady(ctx, []string{h.stager.carrier}, 60*time.Second); err != nil {
		return nil, err
	}
	logf("Run %s, preset %s, seed %d, work directory %s", runID, cfg.preset, cfg.seed, h.workDir)
	return h, nil
}

// sweep ends what an interrupted earlier run left: its requests are deleted with
// a controller running, so that any of them caught mid-run restores what it
// changed (a cordon) through its finalizer, and then its staged objects go.
func (h *harness) sweep(ctx context.Context) error {
	list := &v1alpha1.RemediationRequestList{}
	if err := h.k8s.List(ctx, list, client.InNamespace(requestNamespace)); err != nil {
		return err
	}
	if len(list.Items) > 0 {
		logf("Sweeping %d requests an earlier run left", len(list.Items))
		p, err := h.start(procOpts{name: "sweep", kubeconfig: h.cfg.kubeconfig})
		if err != nil {
			return err
		}
		defer p.Stop()
		if err := h.k8s.DeleteAllOf(ctx, &v1alpha1.RemediationRequest{}, client.InNamespace(requestNamespace)); err != nil {
			return err
		}
		deadline := time.Now().Add(90 * time.Second)
		for {
			if err := h.k8s.List(ctx, list, client.InNamespace(requestNamespace)); err != nil {
				return err
			}
			if len(list.Items) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d requests of earlier runs still there after 90 s (finalizers %v)", len(list.Items), list.Items[0].Finalizers)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return h.stager.st.SweepOthers(ctx)
}

// shortGatePolicies copies the embedded policies with the fencing age gate
// shortened (a Lease's creationTimestamp cannot be backdated) and the age at
// which a healthy holder's Lease counts as stuck raised (see youngGate);
// everything else is the production policy.
func shortGatePolicies(root, workDir string, gate time.Duration) (string, error) {
	dir := filepath.Join(workDir, "policies")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	files, err := filepath.Glob(filepath.Join(root, "policies", "*.cue"))
	if err != nil {
		return "", err
	}
	re := regexp.MustCompile(`#UnreachableMinLeaseAgeSeconds:\s*300`)
	young := regexp.MustCompile(`#HealthyStuckLeaseAgeSeconds:\s*600`)
	found, foundYoung := false, false
	for _, f := range files {
		// The rules only: the schema is always the controller's own.
		if strings.HasSuffix(f, "_test.cue") || filepath.Base(f) == "schema.cue" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if re.Match(b) {
			found = true
			b = re.ReplaceAll(b, []byte(fmt.Sprintf("#UnreachableMinLeaseAgeSeconds: %d", int(gate.Seconds()))))
		}
		if young.Match(b) {
			foundYoung = true
			b = young.ReplaceAll(b, []byte(fmt.Sprintf("#HealthyStuckLeaseAgeSeconds: %d", int(youngGate.Seconds()))))
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			return "", err
		}
	}
	if !found || !foundYoung {
		return "", fmt.Errorf("policies/*.cue no longer set #UnreachableMinLeaseAgeSeconds: 300 and #HealthyStuckLeaseAgeSeconds: 600; update test/harness/chaos")
	}
	return dir, nil
}

func reachable(kubeconfig string) bool {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false
	}
	rc.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return false
	}
	_, err = cs.Discovery().ServerVersion()
	return err == nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[chaos %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (h *harness) write() error {
	h.result.Finished = time.Now().UTC()
	b, err := json.MarshalIndent(h.result, "", "  ")
	if err != nil {
		return err
	}
	summary := h.result.summary()
	dirs := []string{h.workDir}
	if h.cfg.out != "" {
		dirs = append(dirs, h.cfg.out)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "results.json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "summary.md"), []byte(summary), 0o644); err != nil {
			return err
		}
	}
	fmt.Print(summary)
	return nil
}
