// Package controller is `remediator-controller`: the RemediationRequest controller
// manager, a binary of its own (cmd/remediator-controller) so that its process
// neither maps nor initialises the CLI's packages (the sync agent's gitops-engine
// and kubectl, the printers). What it runs lives in controllers; this package
// reads its flags and wires the manager.
package controller

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/remediator/remediator/controllers/detection"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/pause"
	"github.com/remediator/remediator/controllers/policyreload"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/controllers/setup"
	"github.com/remediator/remediator/controllers/verification"
	"github.com/remediator/remediator/controllers/wiring"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

// Options are the controller's flags, and what Complete and Validate derive from them.
type Options struct {
	// version is the binary's, for the start-up log line and remediator_build_info.
	version               string
	cluster               *cmdutil.ClusterFlags
	logging               *cmdutil.LoggingFlags
	metricsSecure         bool
	metricsAddr           string
	probeAddr             string
	leaderElect           bool
	leaderElectionNS      string
	requestNamespaces     []string
	policiesDir           string
	stepTimeout           time.Duration
	evictionTimeout       time.Duration
	podTerminationTimeout time.Duration
	pluginRestartTimeout  time.Duration
	verifyFixFor          time.Duration
	maxConcurrent         int
	pauseConfigMap        string
	policyReloadInterval  time.Duration
	workers               int
	pprofAddr             string
	detectInterval        time.Duration

	// Set by Validate.
	facts facts.Config
	gates remediations.Floor
}

// NewOptions returns the controller's options with the cluster flags; version is
// the binary's.
func NewOptions(version string) *Options {
	return &Options{version: version, cluster: cmdutil.NewClusterFlags(false)}
}

// NewCommand returns the command of the remediator-controller binary, which runs
// the controller manager and has one subcommand, version; version is the binary's.
func NewCommand(version string) *cobra.Command {
	o := NewOptions(version)
	cmd := &cobra.Command{
		Use:   "remediator-controller",
		Short: "Run the RemediationRequest controller manager",
		Args:  cobra.NoArgs,
		// main prints errors itself (cmdutil.Main).
		SilenceUsage:  true,
		SilenceErrors: true,
		// A binary for Deployments, not for a shell: no completion command.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Stops at SIGINT or SIGTERM, or when the command's context ends (tests).
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return cmdutil.Usage(err) // the flags alone are wrong: nothing was done
			}
			return o.Run(ctx)
		},
	}
	o.addFlags(cmd.Flags())
	cmd.AddCommand(cmdutil.NewVersionCommand(cmd.Name(), version))
	cmdutil.MarkUsageErrors(cmd)
	return cmd
}

// addFlags registers the controller's flags on f.
func (o *Options) addFlags(f *pflag.FlagSet) {
	o.cluster.AddFlags(f, "")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it")
	f.BoolVar(&o.metricsSecure, "metrics-secure", false,
		"Serve metrics over HTTPS (a self-signed certificate), only to clients the API server authenticates (TokenReview) and authorizes to get /metrics (SubjectAccessReview), as kubebuilder's scaffold does; the chart turns it on")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles")
	f.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty means the pod's namespace")
	f.StringSliceVar(&o.requestNamespaces, "request-namespaces", nil, "Namespaces whose RemediationRequests are reconciled; empty means all")
	f.StringVar(&o.policiesDir, "policies-dir", "", "Directory of CUE policies to use instead of the embedded ones (e.g. a ConfigMap synced from Git)")
	f.DurationVar(&o.stepTimeout, "step-timeout", remediations.DefaultTimeouts.Step,
		"How long a step that writes once (cordon, deleteLease, uncordon), and the restore after a failure, may keep failing before the playbook fails (deleteLease's wait for a shut-down holder's volume to detach included); a write the API server refuses for good (admission, RBAC: a 4xx other than 409 and 429) fails it at once")
	f.DurationVar(&o.evictionTimeout, "eviction-timeout", remediations.DefaultTimeouts.Eviction, "How long evictions refused by a PodDisruptionBudget are retried before the playbook fails")
	f.DurationVar(&o.podTerminationTimeout, "pod-termination-timeout", remediations.DefaultTimeouts.PodTermination, "How long to wait for evicted pods to terminate, and the holder's kubelet to stop listing the volume in use, before the playbook fails")
	f.DurationVar(&o.pluginRestartTimeout, "plugin-restart-timeout", remediations.DefaultTimeouts.PluginRestart, "How long to wait for a replacement node-plugin pod, and then for the driver to be registered again")
	f.DurationVar(&o.verifyFixFor, "verify-fix-for", verification.DefaultVerifyFixFor,
		"How long after a request Succeeded the controller watches its Lease or node for the incident coming back, and a released volume's pods for coming back Running and Ready without a FailedMount (condition FixHeld, a Warning Event, remediator_fix_not_held_total); it only reads. 0 turns verification off")
	f.IntVar(&o.maxConcurrent, "max-concurrent-remediations", 2,
		"Disruptive playbooks (cordon, evict, node-plugin restart) that may run at once across the cluster; more allowed requests wait (phase Waiting) and start, oldest first, when one finishes. Lease releases for holders proven down are not capped. 0 means no cap")
	// A release spends its reconcile in three calls in a row, so in a storm the
	// workers, not the API server, set the pace when they are few: on the local
	// cluster a storm of 1,000 took 38.7 s with 10 (4.3x the API server's floor) and
	// 28.5 s with 32 (2.1x), the floor's own number of workers (docs/benchmarks.md).
	f.IntVar(&o.workers, "max-concurrent-reconciles", 32,
		"Requests reconciled at once. One request is never reconciled twice at once, and the guards stay exact across workers")
	f.StringVar(&o.pauseConfigMap, "pause-configmap", pause.DefaultConfigMap.String(),
		"namespace/name of the pause ConfigMap that `kubectl remediator pause` writes: while it says paused, no playbook and no step starts")
	f.DurationVar(&o.detectInterval, "detect-interval", detection.DefaultInterval,
		"How often the leader scans its informers for stuck Trident Leases and deregistered CSI drivers, as `remediator scan` does, and exports them as remediator_detected_* metrics; 0 disables it")
	f.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address the Go pprof endpoints (/debug/pprof) bind to; 0 disables them")
	f.DurationVar(&o.policyReloadInterval, "policy-reload-interval", 30*time.Second,
		"How often --policies-dir is re-read (a mounted ConfigMap changes in place); a policy that fails to load is not used: the last good one stays, or at start none (nothing is decided, requests wait with reason PolicyInvalid, /readyz fails), and the log, remediator_policy_load_errors_total, remediator_policy_reload_failing{reason} and a Warning Event on the controller's Pod say why. 0 disables reloading")
	o.logging = cmdutil.AddLoggingFlags(f)
}

// Complete applies the logging flags, first, so that everything after logs as asked.
func (o *Options) Complete() error {
	if err := o.logging.Apply(); err != nil {
		return err
	}
	ctrl.SetLogger(klog.NewKlogr())
	return nil
}

// Validate checks the flags that need neither the policies nor the cluster.
func (o *Options) Validate() error {
	var err error
	if o.facts, err = o.cluster.FactsConfig(); err != nil {
		return err
	}
	if o.gates, err = o.cluster.Floor(); err != nil {
		return err
	}
	if o.workers < 1 {
		return fmt.Errorf("--max-concurrent-reconciles must be 1 or more, got %d", o.workers)
	}
	if err := o.checkTimeouts(); err != nil {
		return err
	}
	if o.maxConcurrent < 0 {
		return fmt.Errorf("--max-concurrent-remediations must be 0 (no cap) or more, got %d", o.maxConcurrent)
	}
	return nil
}

// Run loads the policies, builds the manager and runs it until ctx ends.
func (o *Options) Run(ctx context.Context) error {
	log := ctrl.Log.WithName("setup")
	gogc := defaultGCPercent(os.Getenv)
	policy, err := o.loadPolicy(log)
	if err != nil {
		return err
	}
	playbooks, err := remediations.DefaultPlaybooks()
	if err != nil {
		return err
	}
	cfg, err := o.cluster.RESTConfig()
	if err != nil {
		return err
	}
	namespaces := trimmed(o.requestNamespaces)
	pause, err := cmdutil.ParsePauseConfigMap(o.pauseConfigMap)
	if err != nil {
		return err
	}
	if o.detectInterval < 0 {
		return fmt.Errorf("--detect-interval must be 0 (no detection) or positive, got %s", o.detectInterval)
	}
	mgr, err := o.newManager(cfg, namespaces, pause)
	if err != nil {
		return err
	}
	marks, err := wiring.PrepareCache(ctx, mgr)
	if err != nil {
		return err
	}
	serverClock, err := addServerClock(ctx, mgr, cfg)
	if err != nil {
		return err
	}
	if err := o.addRunnables(mgr, o.reconciler(mgr, marks, policy, playbooks, namespaces, pause, serverClock), policy, serverClock); err != nil {
		return err
	}
	log.Info("Starting manager", "version", o.version, "tridentNamespace", o.facts.TridentNamespace,
		"driver", o.facts.DriverName, "policyDigest", policy.Digest(), "requestNamespaces", o.requestNamespaces, "leaderElect", o.leaderElect,
		"GOGC", gogc)
	return mgr.Start(ctx)
}

// DefaultGCPercent is the controller's garbage-collection target when GOGC is not
// set: a collection when the heap has grown by half since the last one, not Go's
// doubling. Most of the heap is the informers' caches, which live for the whole run,
// and a storm's work waits on the API server, not on the CPU: at Go's default the
// process holds about as much garbage as cache. In a storm of 1,000 releases this
// lowers the peak RSS markedly for CPU the storm does not miss (docs/benchmarks.md).
// Prometheus sets its own default (75) the same way.
const DefaultGCPercent = 50

// defaultGCPercent sets the garbage collector's target to DefaultGCPercent unless
// the GOGC environment variable is set, which the runtime has then already applied
// (an empty one counts as unset, as for the runtime; one it cannot parse it reads as
// 100). It returns the GOGC the process runs with, for the start-up log. A GOMEMLIMIT
// in the environment (the chart's extraEnv) bounds the heap either way.
func defaultGCPercent(getenv func(string) string) string {
	if v := getenv("GOGC"); v != "" {
		return v
	}
	debug.SetGCPercent(DefaultGCPercent)
	return strconv.Itoa(DefaultGCPercent)
}

// loadPolicy loads the policies.
//
// Policy files from Git that do not load do not stop the controller: it would
// read the same files at every restart. It starts, decides nothing, and says why
// (requests' conditions, /readyz, the reloader's log, Event and alert) until a
// reload brings files that load.
func (o *Options) loadPolicy(log logr.Logger) (*policies.Engine, error) {
	policy, err := policies.LoadOrWait(o.policiesDir)
	if err != nil {
		return nil, fmt.Errorf("loading policies: %w", err)
	}
	if lerr := policy.LoadFailure(); lerr != nil {
		if o.policyReloadInterval <= 0 {
			return nil, fmt.Errorf("loading policies: %w; with --policy-reload-interval=0 they are never read again, so nothing could be decided: fix them or turn reloading on", lerr)
		}
		log.Error(lerr, "The policies do not load: starting without a policy; nothing is decided until they do", "source", policy.Source(),
			"reloadInterval", o.policyReloadInterval)
	}
	return policy, nil
}

// newManager builds the manager: its cache holds what the controller reads.
func (o *Options) newManager(cfg *rest.Config, namespaces []string, pause types.NamespacedName) (ctrl.Manager, error) {
	cacheOpts, clientOpts := wiring.CacheOptions(o.facts, namespaces, pause, wiring.Runs{Detect: o.detectInterval > 0, VerifyFixes: o.verifyFixFor > 0})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  cmdutil.NewScheme(),
		Cache:                   cacheOpts,
		Client:                  clientOpts,
		NewClient:               newClient,
		Metrics:                 metricsOptions(o),
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "remediator.remediator.io",
		LeaderElectionNamespace: o.leaderElectionNS,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// newClient is the manager's client (controller-runtime's, cache-backed for reads)
// with remediations.FieldManager as the field manager of every write through it
// (Events and the leader-election Lease go through clients of their own), so that the
// managedFields of what the controller writes (a request's status, a node's cordon)
// name it by one name. Without it the API server would take the name from the User-Agent,
// that is the binary's name: the controller's status entries were "remediator" when it
// ran as `remediator controller`, and a request in flight across that change would
// carry an entry of each name.
func newClient(cfg *rest.Config, opts client.Options) (client.Client, error) {
	c, err := client.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	return client.WithFieldOwner(c, remediations.FieldManager), nil
}

// addServerClock measures the API server's clock and keeps it measured.
//
// The runbook's ages are counted on the API server's clock (facts.ServerClock):
// measured once now, so that the first decision reads it, then every minute.
func addServerClock(ctx context.Context, mgr ctrl.Manager, cfg *rest.Config) (*facts.ServerClock, error) {
	serverClock, err := facts.NewServerClock(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("measuring the API server's clock: %w", err)
	}
	if err := mgr.Add(serverClock); err != nil {
		return nil, fmt.Errorf("adding the server clock: %w", err)
	}
	if err := metrics.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "remediator_server_clock_offset_seconds",
		Help: "The API server's clock (last measured, carried forward on this process's monotonic clock, at most a second and a round trip low) minus this process's wall clock; the controller counts the runbook's ages on the server's, so a step of the wall clock shows here and moves no age.",
	}, func() float64 { return serverClock.Offset().Seconds() })); err != nil {
		return nil, fmt.Errorf("registering the clock offset metric: %w", err)
	}
	return serverClock, nil
}

// reconciler is the RemediationRequest reconciler the flags configure.
func (o *Options) reconciler(mgr ctrl.Manager, marks *facts.Watermarks, policy *policies.Engine, playbooks remediations.Playbooks, namespaces []string,
	pause types.NamespacedName, serverClock *facts.ServerClock) *remediationrequest.Reconciler {
	decide, fresh, freshRelease := wiring.Gatherers(mgr, o.facts, marks)
	return &remediationrequest.Reconciler{
		Client:        mgr.GetClient(),
		Reader:        wiring.LiveReader(mgr),
		Gatherer:      decide,
		Fresh:         fresh,
		FreshRelease:  freshRelease,
		Workers:       o.workers,
		Policy:        policy,
		Playbooks:     playbooks,
		MaxConcurrent: o.maxConcurrent,
		Floor:         o.gates,
		Namespaces:    namespaces,
		Pause:         pause,
		Timeouts: remediations.Timeouts{Step: o.stepTimeout, Eviction: o.evictionTimeout, PodTermination: o.podTerminationTimeout,
			PluginRestart: o.pluginRestartTimeout},
		Recorder: mgr.GetEventRecorderFor("remediator"),
		Clock:    serverClock,
	}
}

// verifier verifies the fixes of the requests r makes Succeed (--verify-fix-for), on
// r's namespaces and clock.
func (o *Options) verifier(mgr ctrl.Manager, r *remediationrequest.Reconciler) *verification.Reconciler {
	return &verification.Reconciler{
		Client:        mgr.GetClient(),
		Gatherer:      wiring.VerifyGatherer(mgr, o.facts),
		StuckLeaseAge: o.gates.HealthyStuckLeaseAge,
		Window:        o.verifyFixFor,
		Namespaces:    r.Namespaces,
		Recorder:      mgr.GetEventRecorderFor("remediator"),
		Clock:         r.Clock,
		Workers:       o.workers,
	}
}

// addRunnables wires every runnable of the controller to the manager: the request
// reconciler r and those that share its settings (package setup, as the envtests
// do), the detector and the policy reloader, with the metrics and the probes.
func (o *Options) addRunnables(mgr ctrl.Manager, r *remediationrequest.Reconciler, policy *policies.Engine, serverClock *facts.ServerClock) error {
	if err := setup.Runnables(mgr, r, o.verifier(mgr, r)); err != nil {
		return err
	}
	if err := remediationrequest.RegisterMetrics(mgr.GetClient(), mgr.Elected(), o.version); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if err := policyreload.RegisterMetrics(policy); err != nil {
		return fmt.Errorf("registering the policy's metrics: %w", err)
	}
	if err := verification.RegisterMetrics(); err != nil {
		return fmt.Errorf("registering the verification's metrics: %w", err)
	}
	if o.detectInterval > 0 {
		g := wiring.DetectGatherer(mgr, o.facts)
		g.Clock = serverClock
		d := &detection.Detector{Gatherer: g, Interval: o.detectInterval, LeaseAge: o.gates.HealthyStuckLeaseAge}
		if err := d.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if o.policiesDir != "" && o.policyReloadInterval > 0 {
		reloader := &policyreload.Reloader{Engine: policy, Interval: o.policyReloadInterval,
			Recorder: mgr.GetEventRecorderFor("remediator"), Pod: ownPod()}
		if err := mgr.Add(reloader); err != nil {
			return fmt.Errorf("adding the policy reloader: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("policy", policyReadiness(policy, ctrl.Log.WithName("readiness"))); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	return nil
}

// checkTimeouts refuses a step timeout that is not positive: every step is bounded,
// and a zero would read as "no bound" to whoever set it.
func (o *Options) checkTimeouts() error {
	for _, t := range []struct {
		flag string
		d    time.Duration
	}{{"--step-timeout", o.stepTimeout}, {"--eviction-timeout", o.evictionTimeout},
		{"--pod-termination-timeout", o.podTerminationTimeout}, {"--plugin-restart-timeout", o.pluginRestartTimeout}} {
		if t.d <= 0 {
			return fmt.Errorf("%s must be positive: every step is bounded, got %s", t.flag, t.d)
		}
	}
	if o.verifyFixFor < 0 {
		return fmt.Errorf("--verify-fix-for must be 0 (off) or positive, got %s", o.verifyFixFor)
	}
	return nil
}

// ownPod is the controller's Pod, from the downward API environment the chart sets
// (POD_NAME, POD_NAMESPACE, POD_UID), for the policy reloader's Events; nil when the
// controller runs outside a Pod.
func ownPod() *corev1.ObjectReference {
	name, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || ns == "" {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name, UID: types.UID(os.Getenv("POD_UID"))}
}

// trimmed drops blanks around and between comma-separated flag values.
func trimmed(vals []string) []string {
	var out []string
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// metricsOptions serves metrics over plain HTTP, or with --metrics-secure over HTTPS
// behind the API server's authentication and authorization.
func metricsOptions(o *Options) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.metricsAddr}
	if o.metricsSecure {
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}
