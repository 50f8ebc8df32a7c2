package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/remediator/remediator/controllers"
	"github.com/remediator/remediator/controllers/detection"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/pause"
	"github.com/remediator/remediator/controllers/policyreload"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

type controllerOptions struct {
	cluster               *clusterFlags
	logging               *loggingFlags
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
}

func newControllerCommand() *cobra.Command {
	o := controllerOptions{cluster: newClusterFlags(false)}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the RemediationRequest controller manager",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Stops at SIGINT or SIGTERM, or when the command's context ends (tests).
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runController(ctx, o)
		},
	}
	f := cmd.Flags()
	o.cluster.addFlags(f, "")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it")
	f.BoolVar(&o.metricsSecure, "metrics-secure", false,
		"Serve metrics over HTTPS (a self-signed certificate), only to clients the API server authenticates (TokenReview) and authorizes to get /metrics (SubjectAccessReview), as kubebuilder's scaffold does; the chart turns it on")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles")
	f.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty means the pod's namespace")
	f.StringSliceVar(&o.requestNamespaces, "request-namespaces", nil, "Namespaces whose RemediationRequests are reconciled; empty means all")
	f.StringVar(&o.policiesDir, "policies-dir", "", "Directory of CUE policies to use instead of the embedded ones (e.g. a ConfigMap synced from Git)")
	f.DurationVar(&o.stepTimeout, "step-timeout", remediations.DefaultTimeouts.Step,
		"How long a step that writes once (cordon, deleteLease, uncordon), and the restore after a failure, may keep failing before the playbook fails; a write the API server refuses for good (admission, RBAC: a 4xx other than 409 and 429) fails it at once")
	f.DurationVar(&o.evictionTimeout, "eviction-timeout", remediations.DefaultTimeouts.Eviction, "How long evictions refused by a PodDisruptionBudget are retried before the playbook fails")
	f.DurationVar(&o.podTerminationTimeout, "pod-termination-timeout", remediations.DefaultTimeouts.PodTermination, "How long to wait for evicted pods to terminate before the playbook fails")
	f.DurationVar(&o.pluginRestartTimeout, "plugin-restart-timeout", remediations.DefaultTimeouts.PluginRestart, "How long to wait for a replacement node-plugin pod, and then for the driver to be registered again")
	f.DurationVar(&o.verifyFixFor, "verify-fix-for", controllers.DefaultVerifyFixFor,
		"How long after a request Succeeded the controller watches its Lease or node for the incident coming back (condition FixHeld, a Warning Event, remediator_fix_not_held_total); it only reads. 0 turns verification off")
	f.IntVar(&o.maxConcurrent, "max-concurrent-remediations", 2,
		"Disruptive playbooks (cordon, evict, node-plugin restart) that may run at once across the cluster; more allowed requests wait (phase Waiting) and start, oldest first, when one finishes. Lease releases for holders proven down are not capped. 0 means no cap")
	f.IntVar(&o.workers, "max-concurrent-reconciles", 10,
		"Requests reconciled at once. One request is never reconciled twice at once, and the guards stay exact across workers")
	f.StringVar(&o.pauseConfigMap, "pause-configmap", pause.DefaultConfigMap.String(),
		"namespace/name of the pause ConfigMap that `kubectl remediator pause` writes: while it says paused, no playbook and no step starts")
	f.DurationVar(&o.detectInterval, "detect-interval", detection.DefaultInterval,
		"How often the leader scans its informers for stuck Trident Leases and deregistered CSI drivers, as `remediator scan` does, and exports them as remediator_detected_* metrics; 0 disables it")
	f.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address the Go pprof endpoints (/debug/pprof) bind to; 0 disables them")
	f.DurationVar(&o.policyReloadInterval, "policy-reload-interval", 30*time.Second,
		"How often --policies-dir is re-read (a mounted ConfigMap changes in place); a policy that fails to load is not used: the last good one stays, or at start none (nothing is decided, requests wait with reason PolicyInvalid, /readyz fails), and the log, remediator_policy_load_errors_total, remediator_policy_reload_failing{reason} and a Warning Event on the controller's Pod say why. 0 disables reloading")
	o.logging = addLoggingFlags(f)
	return cmd
}

func runController(ctx context.Context, o controllerOptions) error {
	if err := o.logging.apply(); err != nil {
		return err
	}
	ctrl.SetLogger(klog.NewKlogr())
	log := ctrl.Log.WithName("setup")

	fc, err := o.cluster.factsConfig()
	if err != nil {
		return err
	}
	gates, err := o.cluster.gates()
	if err != nil {
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
	// Policy files from Git that do not load do not stop the controller: it would
	// read the same files at every restart. It starts, decides nothing, and says why
	// (requests' conditions, /readyz, the reloader's log, Event and alert) until a
	// reload brings files that load.
	policy, err := policies.LoadOrWait(o.policiesDir)
	if err != nil {
		return fmt.Errorf("loading policies: %w", err)
	}
	if lerr := policy.LoadFailure(); lerr != nil {
		if o.policyReloadInterval <= 0 {
			return fmt.Errorf("loading policies: %w; with --policy-reload-interval=0 they are never read again, so nothing could be decided: fix them or turn reloading on", lerr)
		}
		log.Error(lerr, "The policies do not load: starting without a policy; nothing is decided until they do", "source", policy.Source(),
			"reloadInterval", o.policyReloadInterval)
	}
	playbooks, err := remediations.DefaultPlaybooks()
	if err != nil {
		return err
	}
	cfg, err := o.cluster.restConfig()
	if err != nil {
		return err
	}
	namespaces := trimmed(o.requestNamespaces)
	pause, err := parsePauseConfigMap(o.pauseConfigMap)
	if err != nil {
		return err
	}
	if o.detectInterval < 0 {
		return fmt.Errorf("--detect-interval must be 0 (no detection) or positive, got %s", o.detectInterval)
	}
	cacheOpts, clientOpts := controllers.CacheOptions(fc, namespaces, pause, o.detectInterval > 0)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  newScheme(),
		Cache:                   cacheOpts,
		Client:                  clientOpts,
		Metrics:                 metricsOptions(o),
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "remediator.remediator.io",
		LeaderElectionNamespace: o.leaderElectionNS,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}

	if err := controllers.PrepareCache(ctx, mgr); err != nil {
		return err
	}
	// The runbook's ages are counted on the API server's clock (facts.ServerClock):
	// measured once now, so that the first decision reads it, then every minute.
	serverClock, err := facts.NewServerClock(ctx, cfg)
	if err != nil {
		return fmt.Errorf("measuring the API server's clock: %w", err)
	}
	if err := mgr.Add(serverClock); err != nil {
		return fmt.Errorf("adding the server clock: %w", err)
	}
	if err := metrics.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "remediator_server_clock_offset_seconds",
		Help: "The API server's clock (last measured, carried forward on this process's monotonic clock, at most a second and a round trip low) minus this process's wall clock; the controller counts the runbook's ages on the server's, so a step of the wall clock shows here and moves no age.",
	}, func() float64 { return serverClock.Offset().Seconds() })); err != nil {
		return fmt.Errorf("registering the clock offset metric: %w", err)
	}
	decide, recheck, recheckRelease := controllers.Gatherers(mgr, fc)
	if err := (&controllers.RemediationRequestReconciler{
		Client:         mgr.GetClient(),
		Reader:         controllers.LiveReader(mgr),
		Gatherer:       decide,
		Recheck:        recheck,
		RecheckRelease: recheckRelease,
		Workers:        o.workers,
		Policy:         policy,
		Playbooks:      playbooks,
		MaxConcurrent:  o.maxConcurrent,
		Gates:          gates,
		Namespaces:     namespaces,
		Pause:          pause,
		Timeouts: remediations.Timeouts{Step: o.stepTimeout, Eviction: o.evictionTimeout, PodTermination: o.podTerminationTimeout,
			PluginRestart: o.pluginRestartTimeout},
		Recorder:     mgr.GetEventRecorderFor("remediator"),
		VerifyFixFor: o.verifyFixFor,
		Clock:        serverClock,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the RemediationRequest controller: %w", err)
	}
	if err := controllers.RegisterMetrics(mgr.GetClient(), policy, mgr.Elected(), version); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if o.detectInterval > 0 {
		g := controllers.DetectGatherer(mgr, fc)
		g.Clock = serverClock
		d := &detection.Detector{Gatherer: g, Interval: o.detectInterval, LeaseAge: gates.HealthyStuckLeaseAge}
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

	log.Info("Starting manager", "version", version, "tridentNamespace", fc.TridentNamespace,
		"driver", fc.DriverName, "policyDigest", policy.Digest(), "requestNamespaces", o.requestNamespaces, "leaderElect", o.leaderElect)
	return mgr.Start(ctx)
}

// checkTimeouts refuses a step timeout that is not positive: every step is bounded,
// and a zero would read as "no bound" to whoever set it.
func (o controllerOptions) checkTimeouts() error {
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
func metricsOptions(o controllerOptions) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.metricsAddr}
	if o.metricsSecure {
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}
