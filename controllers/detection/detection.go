// Package detection is continuous detection: the leader scans the cluster for the two
// incidents from the controller's informers and exports what it finds as metrics, for
// the alerts. It never writes; acting on a finding is a request reviewed in Git.
package detection

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/remediator/remediator/controllers/facts"
)

// DefaultInterval is how often the controller looks for the two incidents.
const DefaultInterval = 30 * time.Second

// Detector runs `remediator scan` continuously and exports what it finds: the stuck
// Leases (with their holder's state and age), the nodes whose CSINode lacks the
// driver, and their symptoms.
//
// It runs on the leader only, so that an alert's max by (...) never sees two
// opinions. Between scans the metrics show the last one: a scrape never waits for the
// API server.
type Detector struct {
	// Gatherer reads as the controller's decisions do: the cache, and live for pods.
	Gatherer *facts.Gatherer
	// Interval between two scans; the first runs once the cache has synced.
	Interval time.Duration
	// LeaseAge is the safety floor's HealthyStuckLeaseAge, so that what the detector
	// reports is what a request could act on.
	LeaseAge time.Duration
	// Now is the clock of the last-success metric; nil means time.Now.
	Now func() time.Time

	mu sync.Mutex
	// symptoms remembers each stuck Lease's symptoms between scans, so that a scan
	// during a power-loss storm reads no pods again for Leases that did not change.
	symptoms facts.SymptomsSeen
	// daemonSets is what the last successful scan saw of the node-plugin DaemonSets,
	// to see one recreated; a detector that starts (a restart, a new leader) starts
	// from nothing, and the scan then counts a young DaemonSet as recreated.
	daemonSets *facts.DaemonSetsSeen
	// findings of the last successful scan, keyed for the log's "detected"/"cleared".
	findings map[string]facts.Finding
	// lastSuccess is zero until a scan succeeds, and then no series is exported, so
	// that RemediatorDetectionFailing's absent() sees it as a detector never running.
	lastSuccess time.Time
	running     bool
}

// The node-plugin DaemonSets, cached for the detector to see one recreated.
// +kubebuilder:rbac:groups=apps,namespace=trident,resources=daemonsets,verbs=list;watch

var _ manager.LeaderElectionRunnable = &Detector{}

// NeedLeaderElection is true: only the leader scans and exports.
func (d *Detector) NeedLeaderElection() bool { return true }

// The detection metrics, collected from the last scan at scrape time.
var (
	detectedIncidentDesc = prometheus.NewDesc("remediator_detected_incident",
		"1 for each incident the last scan found (kind StuckLease, DeregisteredDriver, OverlappingPluginPods or OldPluginPodOverlap), by the node (a stuck Lease's holder), its state (Healthy, Unknown, Unreachable, Shutdown, NotFound), for a stuck Lease its namespace and name (the PV's), and for a DeregisteredDriver its cause when seen too (OldPluginPodOverlap), else empty. Exported by the leader, from its informers, every --detect-interval.",
		[]string{"kind", "node", "node_state", "lease_namespace", "lease", "cause"}, nil)
	detectedLeaseAgeDesc = prometheus.NewDesc("remediator_detected_stuck_lease_age_seconds",
		"Age of each stuck Lease the last scan found (server time, from the later of its creation and acquisition), by Lease and holder node.",
		[]string{"lease_namespace", "lease", "node"}, nil)
	detectedSymptomsDesc = prometheus.NewDesc("remediator_detected_symptoms",
		"The workload's signs of each incident the last scan found, by incident and symptom: for FailedMount, the occurrences of kubelet's events (their counts summed); for ContainerCreating and Terminating, the pods of a stuck Lease's volume waiting or stuck.",
		[]string{"kind", "node", "lease_namespace", "lease", "symptom"}, nil)
	detectionLastSuccessDesc = prometheus.NewDesc("remediator_detection_last_success_timestamp_seconds",
		"When the last scan for incidents succeeded (unix seconds); no series until one has. Exported by the leader.",
		nil, nil)
	detectionFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "remediator_detection_failures_total",
		Help: "Scans for incidents that failed (the API server did not answer a read); the previous scan's findings stay exported.",
	})
)

// SetupWithManager registers the metrics and runs the detector with the manager; a
// second detector per process is an error, not one whose findings go nowhere.
func (d *Detector) SetupWithManager(mgr ctrl.Manager) error {
	if err := metrics.Registry.Register(detectionFailures); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return fmt.Errorf("registering the detection metrics: %w", err)
	}
	if err := metrics.Registry.Register(d); err != nil {
		return fmt.Errorf("registering the detector's metrics: %w", err)
	}
	if err := mgr.Add(d); err != nil {
		return fmt.Errorf("adding the detector: %w", err)
	}
	return nil
}

func (d *Detector) now() time.Time {
	if d.Now == nil {
		return time.Now()
	}
	return d.Now()
}

// Start scans every Interval until ctx ends; then the detector exports nothing: a
// finding it no longer checks must not stay on a dashboard.
func (d *Detector) Start(ctx context.Context) error {
	if d.Interval <= 0 {
		return fmt.Errorf("detection interval must be positive, got %s", d.Interval)
	}
	d.mu.Lock()
	d.running, d.daemonSets = true, &facts.DaemonSetsSeen{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.running, d.findings, d.lastSuccess, d.daemonSets = false, nil, time.Time{}, nil
		d.mu.Unlock()
	}()
	wait.UntilWithContext(ctx, d.Scan, d.Interval)
	return nil
}

// Scan runs one scan and records it; a failed one keeps the previous findings and
// counts a failure. The log says when an incident is first seen and when it clears.
func (d *Detector) Scan(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx).WithName("detector")
	// Bounded, so that a hung read does not stop detection.
	scanCtx, cancel := context.WithTimeout(ctx, max(d.Interval, 30*time.Second))
	defer cancel()
	d.mu.Lock()
	seen := d.daemonSets
	d.mu.Unlock()
	if seen == nil {
		// Scan called without Start: one look, from nothing.
		seen = &facts.DaemonSetsSeen{}
	}
	res, err := d.Gatherer.ScanWithHeld(scanCtx, facts.ScanOptions{LeaseAge: d.LeaseAge,
		Warn:       func(msg string) { log.Info("Scanning for incidents: " + msg) },
		DaemonSets: seen, RecreatedWithin: d.Interval, Symptoms: &d.symptoms})
	if err != nil {
		if ctx.Err() == nil {
			detectionFailures.Inc()
			log.Error(err, "Scanning for incidents failed; the previous findings stay exported")
		}
		return
	}
	found := res.Findings
	for _, r := range res.Recreated {
		log.Info("The node-plugin DaemonSet was recreated; its old pods' registrars may deregister the driver where they overlap the new ones", "daemonSet", r)
	}
	next := make(map[string]facts.Finding, len(found))
	for _, f := range found {
		next[findingKey(f)] = f
	}
	d.mu.Lock()
	prev := d.findings
	d.findings, d.lastSuccess, d.daemonSets = next, d.now(), res.DaemonSets
	d.mu.Unlock()
	for _, f := range found {
		before, seen := prev[findingKey(f)]
		switch {
		case !seen:
			log.Info("Detected an incident; `remediator scan -o yaml` prints the request that would remediate it, to review and commit",
				"kind", f.Kind, "node", f.Node, "nodeState", f.NodeState, "lease", f.Lease, "cause", f.Cause, "evidence", f.Evidence, "symptoms", symptomStrings(f.Symptoms))
		case before.NodeState != f.NodeState:
			log.Info("A detected incident's node changed state", "kind", f.Kind, "node", f.Node, "lease", f.Lease,
				"from", before.NodeState, "to", f.NodeState, "evidence", f.Evidence)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(prev)) {
		if _, still := next[k]; !still {
			f := prev[k]
			log.Info("An incident is no longer detected", "kind", f.Kind, "node", f.Node, "lease", f.Lease)
		}
	}
}

func findingKey(f facts.Finding) string { return f.Kind + "\x00" + f.Node + "\x00" + f.Lease }

func symptomStrings(s []facts.Symptom) []string {
	out := make([]string, 0, len(s))
	for _, x := range s {
		out = append(out, x.String())
	}
	return out
}

// Describe implements prometheus.Collector.
func (d *Detector) Describe(ch chan<- *prometheus.Desc) {
	ch <- detectedIncidentDesc
	ch <- detectedLeaseAgeDesc
	ch <- detectedSymptomsDesc
	ch <- detectionLastSuccessDesc
}

// Collect implements prometheus.Collector: the last scan's findings. A replica that
// does not lead, and so does not scan, exports none of them.
func (d *Detector) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.running {
		return
	}
	if !d.lastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(detectionLastSuccessDesc, prometheus.GaugeValue, float64(d.lastSuccess.Unix()))
	}
	for _, f := range d.findings {
		leaseNS, lease, _ := strings.Cut(f.Lease, "/")
		ch <- prometheus.MustNewConstMetric(detectedIncidentDesc, prometheus.GaugeValue, 1, f.Kind, f.Node, string(f.NodeState), leaseNS, lease, f.Cause)
		if f.Kind == facts.FindingStuckLease {
			ch <- prometheus.MustNewConstMetric(detectedLeaseAgeDesc, prometheus.GaugeValue, float64(f.AgeSeconds), leaseNS, lease, f.Node)
		}
		counts := map[string]float64{}
		for _, s := range f.Symptoms {
			counts[s.Kind] += float64(s.Count)
		}
		for symptom, n := range counts {
			ch <- prometheus.MustNewConstMetric(detectedSymptomsDesc, prometheus.GaugeValue, n, f.Kind, f.Node, leaseNS, lease, symptom)
		}
	}
}
