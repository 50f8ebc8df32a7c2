// Package sync is `remediator sync`: the built-in GitOps agent that applies the
// RemediationRequests of a Git repository (internal/gitsync), once or in a loop
// with metrics and probes.
package sync

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/internal/gitsync"
)

// Options are sync's flags.
type Options struct {
	conn    cmdutil.ConnectionFlags
	logging *cmdutil.LoggingFlags
	gitsync.Options
	interval          time.Duration
	timeout           time.Duration
	metricsAddr       string
	probeAddr         string
	policiesConfigMap string
}

// NewOptions returns sync's options with the connection flags.
func NewOptions() *Options {
	return &Options{conn: cmdutil.NewConnectionFlags(false)}
}

// NewCommand returns `remediator sync`.
func NewCommand() *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "Sync RemediationRequests from a Git repository into the cluster (gitops-engine)",
		Long: `sync is the built-in GitOps agent for clusters without Argo CD. It clones or fetches
--repo with go-git (no git binary needed), reads the manifests under --path at --revision, and applies them with
gitops-engine, the engine Argo CD uses. Requests deleted from Git are pruned; a
request that is mid-run finishes its restore steps first (its finalizer).

--repo must be read over an encrypted transport (https://, ssh://, git@host:path) or
be local (a path, file://): the agent is the only writer of requests, and whoever can
rewrite what it fetches decides what is remediated. An http:// or git:// repository is
refused at start unless --allow-insecure-transport is given.

Only remediator.io RemediationRequests in --namespaces are accepted. A revision with
any other object, a malformed manifest, or a request in another namespace is refused
whole: nothing of it is applied or pruned, and the sync fails. So is a request that
sets metadata.finalizers or metadata.ownerReferences (they are the controller's and
the API server's), a hook annotation (argocd.argoproj.io/hook, helm.sh/hook) or the
sync options Replace=true or Force=true (argocd.argoproj.io/sync-options).

Each applied request carries the annotations remediator.io/git-commit (the last
commit that changed its file) and remediator.io/git-path.

Without --interval it syncs once: exit code 0 when the sync succeeded, 1 otherwise.
With --interval it loops until interrupted; a failed sync is logged and retried at
the next interval, and --metrics-bind-address serves /metrics (the last successful
sync's time and revision, the failures) and --health-probe-bind-address /readyz (the
cluster cache started) and /healthz (a sync began within twice --interval plus
--timeout).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			// Validate first: the flags' bounds are refused before the logging flags
			// apply, as they always were.
			if err := o.Validate(); err != nil {
				return cmdutil.Usage(err) // the flags alone are wrong: nothing was done
			}
			if err := o.Complete(); err != nil {
				return err
			}
			return o.Run(ctx, cmd.OutOrStdout())
		},
	}
	o.addFlags(cmd)
	return cmd
}

// addFlags registers sync's flags on cmd.
func (o *Options) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	o.conn.AddFlags(f, "")
	f.StringVar(&o.Repo, "repo", "", "Repository URL (https://, ssh://, git@host:path, file://) or local path; fetched in-process, no git binary needed")
	f.BoolVar(&o.AllowInsecureTransport, "allow-insecure-transport", false,
		"Accept a --repo read over an unencrypted transport (http://, git://), which anyone on the network path can rewrite; refused without it")
	f.StringVar(&o.GitUsername, "git-username", "git", "User for --git-password-file (git for token auth), or for an SSH URL without one")
	f.StringVar(&o.GitPasswordFile, "git-password-file", "", "File holding the HTTPS token or password (e.g. a mounted Secret key); read at every fetch")
	f.StringVar(&o.GitSSHKeyFile, "git-ssh-key-file", "", "File holding the PEM private key for an SSH --repo; needs --git-known-hosts-file")
	f.StringVar(&o.GitKnownHostsFile, "git-known-hosts-file", "", "known_hosts file the SSH host key is verified against (required with --git-ssh-key-file)")
	f.StringVar(&o.Revision, "revision", "HEAD", "Branch, tag or commit to sync; HEAD is the repository's default branch")
	f.StringVar(&o.Path, "path", ".", "Directory in the repository holding the requests")
	f.StringSliceVar(&o.Namespaces, "namespaces", []string{"remediator"}, "Namespaces requests may be synced into; the first is the default for manifests without one")
	f.BoolVar(&o.Prune, "prune", true, "Delete synced requests that were removed from Git")
	f.StringVar(&o.WorkDir, "work-dir", "", "Directory for the bare clone (default: $TMPDIR/remediator-sync)")
	f.DurationVar(&o.interval, "interval", 0, "Sync every interval until interrupted; 0 syncs once")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "Upper bound for one sync, including waiting for pruned requests to finish restoring")
	f.StringVar(&o.PoliciesPath, "policies-path", "", "Directory of CUE policies in the repository to sync too, into --policies-configmap (the controller's --policies-dir); empty syncs requests only")
	f.StringVar(&o.policiesConfigMap, "policies-configmap", "", "The ConfigMap (namespace/name) the policies of --policies-path are written into")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "Address /metrics (the last synced revision and its time, failures) binds to, with --interval; 0 disables it")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", "0", "Address the probes bind to, with --interval: /healthz (the sync loop turns) and /readyz (the cluster cache started); 0 disables them")
	_ = cmd.MarkFlagRequired("repo")
	o.logging = cmdutil.AddLoggingFlags(f)
}

// Validate refuses an interval or a timeout out of bounds.
func (o *Options) Validate() error {
	if o.interval < 0 || o.timeout <= 0 {
		return fmt.Errorf("--interval must be >= 0 and --timeout > 0")
	}
	return nil
}

// Complete applies the logging flags and reads --policies-configmap.
func (o *Options) Complete() error {
	if err := o.logging.Apply(); err != nil {
		return err
	}
	o.Log = klog.NewKlogr().WithName("sync")
	if o.PoliciesPath != "" {
		ns, name, ok := strings.Cut(o.policiesConfigMap, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--policies-path needs --policies-configmap as namespace/name, got %q", o.policiesConfigMap)
		}
		o.PoliciesConfigMap = types.NamespacedName{Namespace: ns, Name: name}
	}
	return nil
}

// Run syncs once, or with --interval until ctx ends, printing each result to out.
func (o *Options) Run(ctx context.Context, out io.Writer) error {
	log := o.Log
	cfg, err := o.conn.RESTConfig()
	if err != nil {
		return err
	}
	s, err := gitsync.New(cfg, o.Options)
	if err != nil {
		return err
	}
	// The probes and the metrics answer while the cache starts.
	metricsAddr, probeAddr := o.listenAddrs()
	health := newSyncHealth(o.interval, o.timeout, time.Now)
	stopProbes, err := health.serve(ctx, probeAddr)
	if err != nil {
		return err
	}
	defer stopProbes()
	metrics := newSyncMetrics()
	stopMetrics, err := metrics.serve(ctx, metricsAddr)
	if err != nil {
		return err
	}
	defer stopMetrics()
	stop, err := s.Start()
	if err != nil {
		return err
	}
	defer stop()
	health.cacheStarted()

	once := func() error {
		health.syncing()
		sctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		res, err := s.Sync(sctx)
		metrics.record(res, err, time.Now())
		// A refused or failed revision prints only what was done before it failed.
		if res != nil && (err == nil || len(res.Applied)+len(res.Pruned) > 0) {
			if perr := printSync(out, res); perr != nil && err == nil {
				err = fmt.Errorf("printing the sync result: %w", perr)
			}
		}
		return err
	}
	if o.interval == 0 {
		return once()
	}
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		if err := once(); err != nil {
			log.Error(err, "Sync failed; retrying at the next interval", "interval", o.interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// listenAddrs are the addresses the metrics and the probes are served on: none for a
// single sync (no --interval), which exits when done, so nothing would scrape or probe
// it, and a sync run once by hand with the chart's arguments binds no port.
func (o *Options) listenAddrs() (metrics, probe string) {
	if o.interval == 0 {
		return "0", "0"
	}
	return o.metricsAddr, o.probeAddr
}

func printSync(w io.Writer, r *gitsync.Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "COMMIT\tACTION\tREQUEST: RESULT\n")
	for _, a := range r.Applied {
		fmt.Fprintf(tw, "%s\tapply\t%s\n", gitsync.ShortRevision(r.Commit), a)
	}
	for _, p := range r.Pruned {
		fmt.Fprintf(tw, "%s\tprune\t%s\n", gitsync.ShortRevision(r.Commit), p)
	}
	if r.PolicyDigest != "" {
		fmt.Fprintf(tw, "%s\tpolicies\t%s\n", gitsync.ShortRevision(r.Commit), r.PolicyDigest)
	}
	if len(r.Applied)+len(r.Pruned) == 0 {
		fmt.Fprintf(tw, "%s\t-\tnothing to sync\n", gitsync.ShortRevision(r.Commit))
	}
	return tw.Flush()
}

// logSyncError logs an error of the metrics or probe server, which has no caller to
// return it to.
func logSyncError(_ context.Context, flag string, err error) {
	klog.NewKlogr().WithName("sync").Error(err, "Serving failed", "flag", flag)
}
