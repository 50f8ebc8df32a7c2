package cmdutil

// The flag set that the controller, plan and scan share: how to reach the cluster
// (kubectl's own connection flags), how fast to read it, and where Trident lives.
// One copy, so that the three cannot drift apart in what they accept.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/remediations"
)

// ConnectionFlags say how to reach the API server, and how fast to talk to it.
type ConnectionFlags struct {
	// kube is kubectl's flag set: --kubeconfig, --context, --cluster, --user, --as,
	// --as-group, --as-uid, --request-timeout, --server, the TLS and token flags,
	// and --namespace/-n where the command gives it a meaning.
	kube *genericclioptions.ConfigFlags

	qps   float32
	burst int
}

// ClusterFlags are the connection flags and where Trident lives: what the
// controller, plan and scan need to gather facts.
type ClusterFlags struct {
	ConnectionFlags

	tridentNamespace         string
	allowedTridentNamespaces []string
	driverName               string
	nodePluginSelector       string
	nodeLeaseGracePeriod     time.Duration

	floorUnreachableLeaseAge time.Duration
	floorHealthyLeaseAge     time.Duration
}

// NewConnectionFlags returns kubectl's connection flags; withNamespace keeps
// --namespace/-n, for the commands that give it a meaning (the controller has
// --request-namespaces, sync --namespaces).
func NewConnectionFlags(withNamespace bool) ConnectionFlags {
	kube := genericclioptions.NewConfigFlags(false)
	// Discovery is never used, so there is no cache to keep.
	kube.CacheDir = nil
	if !withNamespace {
		kube.Namespace = nil
	}
	return ConnectionFlags{kube: kube}
}

// NewClusterFlags returns the flags the controller, plan and scan share.
func NewClusterFlags(withNamespace bool) *ClusterFlags {
	return &ClusterFlags{ConnectionFlags: NewConnectionFlags(withNamespace)}
}

// AddFlags registers the connection flags; liveOnly marks, in the help, flags that
// matter only when facts are read live (plan can take saved ones).
func (c *ConnectionFlags) AddFlags(fs *pflag.FlagSet, liveOnly string) {
	c.kube.AddFlags(fs)
	fs.Float32Var(&c.qps, "kube-api-qps", 0,
		"Queries per second to the API server, a client-side limit; 0 sets none and leaves the pace to the API server's priority and fairness, as controller-runtime does"+liveOnly)
	fs.IntVar(&c.burst, "kube-api-burst", 100, "Burst of queries to the API server above --kube-api-qps, when it is set"+liveOnly)
}

// AddFlags registers the connection and Trident flags.
func (c *ClusterFlags) AddFlags(fs *pflag.FlagSet, liveOnly string) {
	c.ConnectionFlags.AddFlags(fs, liveOnly)
	fs.StringVar(&c.tridentNamespace, "trident-namespace", facts.DefaultTridentNamespace, "Namespace of Trident's Leases and node-plugin pods"+liveOnly)
	fs.StringSliceVar(&c.allowedTridentNamespaces, "allowed-trident-namespaces", nil,
		"Namespaces other than --trident-namespace that a request may name in spec.tridentNamespace (comma-separated): Trident namespaces of other installations. "+
			"A request naming any other namespace is rejected and nothing is read in it, so that no request can point a playbook at a tenant's pods or Leases")
	fs.StringVar(&c.driverName, "driver-name", facts.DefaultDriverName, "CSI driver name Trident registers on CSINodes"+liveOnly)
	fs.StringVar(&c.nodePluginSelector, "node-plugin-selector", facts.DefaultNodePluginSelector, "Label selector of Trident's node-plugin pods"+liveOnly)
	fs.DurationVar(&c.nodeLeaseGracePeriod, "node-lease-grace-period", facts.DefaultNodeLeaseGracePeriod,
		"Age of a node's last heartbeat (kube-node-lease renewal, Ready heartbeat) after which it counts as silent: unreachable, or, with a shutdown taint, shut down; match kube-controller-manager's --node-monitor-grace-period (50s since Kubernetes 1.32)"+liveOnly)
	fs.DurationVar(&c.floorUnreachableLeaseAge, "floor-unreachable-lease-age", remediations.DefaultFloor.UnreachableMinLeaseAge,
		"Safety floor: the age (from its creation or later acquisition) a Lease held by an unreachable or missing holder must reach before it is deleted, whatever the policy says; the runbook's 5m unless shortened for tests")
	fs.DurationVar(&c.floorHealthyLeaseAge, "floor-healthy-lease-age", remediations.DefaultFloor.HealthyStuckLeaseAge,
		"Safety floor: the age at which a healthy holder's Lease with no LeaseRetained Warning on it counts as stuck, whatever the policy says; the runbook's 10m unless shortened for tests")
}

// ParsePauseConfigMap reads --pause-configmap, namespace/name, for the controller and
// for pause and resume.
func ParsePauseConfigMap(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, fmt.Errorf("--pause-configmap must be namespace/name, got %q", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// Floor is the safety floor's minimums the flags set.
func (c *ClusterFlags) Floor() (remediations.Floor, error) {
	if c.floorUnreachableLeaseAge <= 0 || c.floorHealthyLeaseAge <= 0 {
		return remediations.Floor{}, fmt.Errorf("--floor-unreachable-lease-age and --floor-healthy-lease-age must be positive, got %s and %s",
			c.floorUnreachableLeaseAge, c.floorHealthyLeaseAge)
	}
	fc := facts.Config{TridentNamespace: c.tridentNamespace, AllowedTridentNamespaces: c.allowedTridentNamespaces}
	return remediations.Floor{UnreachableMinLeaseAge: c.floorUnreachableLeaseAge, HealthyStuckLeaseAge: c.floorHealthyLeaseAge,
		HeartbeatGrace: c.nodeLeaseGracePeriod, DriverName: c.driverName, TridentNamespaces: fc.TridentNamespaces()}, nil
}

// FactsConfig checks the Trident flags and returns the gatherer's configuration.
func (c *ClusterFlags) FactsConfig() (facts.Config, error) {
	sel, err := labels.Parse(c.nodePluginSelector)
	if err != nil {
		return facts.Config{}, fmt.Errorf("parsing --node-plugin-selector %q: %w", c.nodePluginSelector, err)
	}
	if c.nodeLeaseGracePeriod <= 0 {
		return facts.Config{}, fmt.Errorf("--node-lease-grace-period must be positive, got %s", c.nodeLeaseGracePeriod)
	}
	for _, ns := range append([]string{c.tridentNamespace}, c.allowedTridentNamespaces...) {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return facts.Config{}, fmt.Errorf("--trident-namespace and --allowed-trident-namespaces take namespace names, got %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	return facts.Config{
		TridentNamespace:         c.tridentNamespace,
		AllowedTridentNamespaces: c.allowedTridentNamespaces,
		DriverName:               c.driverName,
		NodePluginSelector:       sel,
		NodeLeaseGracePeriod:     c.nodeLeaseGracePeriod,
		RetainedEventReason:      facts.DefaultRetainedEventReason,
	}, nil
}

// RESTConfig loads the kubeconfig the flags name (else $KUBECONFIG or
// ~/.kube/config, else the in-cluster config), with the rate limit.
//
// By default there is no client-side limit. The API server's priority and fairness
// queues and sheds load per client, fairly, which a token bucket in each client
// cannot; and a bucket sized for a quiet day paces a storm: 50 queries a second held
// a storm of 1,000 releases, two status writes each, to 40 s where the API server
// allowed 24 (docs/benchmarks.md).
func (c *ConnectionFlags) RESTConfig() (*rest.Config, error) {
	if c.qps < 0 || (c.qps > 0 && c.burst <= 0) {
		return nil, fmt.Errorf("--kube-api-qps must be 0 (no client-side limit) or positive, with a positive --kube-api-burst; got %v and %d", c.qps, c.burst)
	}
	cfg, err := c.kube.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = c.qps, c.burst
	if c.qps == 0 {
		// client-go reads 0 as its default of 5 a second; a negative QPS is none.
		cfg.QPS = -1
	}
	return cfg, nil
}

// Namespace is --namespace/-n as given; empty when it was not.
func (c *ConnectionFlags) Namespace() string {
	if c.kube.Namespace == nil {
		return ""
	}
	return *c.kube.Namespace
}

// NewScheme holds the built-in types and RemediationRequest.
func NewScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	return scheme
}

// Reader is the live, uncached client plan and scan read through; they never write.
func (c *ConnectionFlags) Reader() (client.Reader, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return readerFor(cfg)
}

func readerFor(cfg *rest.Config) (client.Reader, error) {
	cl, err := client.New(cfg, client.Options{Scheme: NewScheme()})
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return cl, nil
}

// Gatherer reads facts live through a new reader, as the controller gathers them.
//
// Its ages are measured on the API server's clock (facts.ServerClock), as the
// controller's are: a laptop whose clock runs ahead must not see a Lease older than
// the controller will.
func (c *ClusterFlags) Gatherer(ctx context.Context) (client.Reader, *facts.Gatherer, error) {
	fc, err := c.FactsConfig()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	r, err := readerFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	sc, err := facts.NewServerClock(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return r, &facts.Gatherer{Reader: r, Config: fc, Clock: sc}, nil
}

// LogReader reads pods' logs through the cluster: what a decision reads of the
// holder's Trident log (facts.Gatherer.Logs).
func (c *ClusterFlags) LogReader() (facts.LogReader, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a client for pods' logs: %w", err)
	}
	return facts.ClientsetLogs{Client: cs}, nil
}
