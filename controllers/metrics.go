package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/policies"
)

// Prometheus metrics, registered on controller-runtime's registry so that they are
// served on the manager's metrics endpoint next to controller-runtime's own.
var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "remediator_requests_total",
		Help: "Requests that reached an outcome (Succeeded, Failed, Rejected), by remediation and outcome. A request rejected, re-checked and rejected again counts once per rejection.",
	}, []string{"remediation", "outcome"})
	decisionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "remediator_decision_duration_seconds",
		Help:    "Time to gather a request's facts and evaluate the policy, by remediation.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"remediation"})
	stepSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "remediator_step_duration_seconds",
		Help:    "Time from a playbook step's start to its end (StartedAt to CompletedAt), by step and result.",
		Buckets: []float64{.1, .5, 1, 5, 15, 30, 60, 120, 300, 600, 1800},
	}, []string{"step", "result"})
	policyLoadErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "remediator_policy_load_errors_total",
		Help: "Failed attempts to reload the policies from --policies-dir; the previous policies stay in use.",
	})
	policyInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "remediator_policy_info",
		Help: "The policies in use: 1 for the current digest and source.",
	}, []string{"digest", "source"})
)

// activeDesc is collected at scrape time, so the gauge is the cluster's truth on
// every replica, not a count a restart would lose. It reads the running requests
// from the manager's cache, through the guards' index.
var activeDesc = prometheus.NewDesc("remediator_active_remediations",
	"Requests whose playbook is running now, by remediation.", []string{"remediation"}, nil)

type activeCollector struct{ reader client.Reader }

func (c activeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- activeDesc }

func (c activeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := ListRequests(ctx, c.reader, client.MatchingFields{IndexGuard: keyRunning})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(activeDesc, err)
		return
	}
	counts := map[string]float64{
		string(v1alpha1.RemediationReleaseLUKSLease): 0, string(v1alpha1.RemediationReregisterCSIDriver): 0,
	}
	for i := range list {
		if rr := &list[i]; rr.Status.Phase == v1alpha1.PhaseRunning {
			counts[string(rr.Spec.Remediation)]++
		}
	}
	for remediation, n := range counts {
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, n, remediation)
	}
}

// RegisterMetrics registers the metrics on controller-runtime's registry; reader
// serves the active-remediations gauge.
func RegisterMetrics(reader client.Reader, engine *policies.Engine) error {
	for _, c := range []prometheus.Collector{requestsTotal, decisionSeconds, stepSeconds, policyLoadErrors, policyInfo, activeCollector{reader: reader}} {
		if err := metrics.Registry.Register(c); err != nil {
			return err
		}
	}
	setPolicyInfo(engine)
	return nil
}

func setPolicyInfo(e *policies.Engine) {
	policyInfo.Reset()
	policyInfo.WithLabelValues(e.Digest(), e.Source()).Set(1)
}

// observeTransitions records what a persisted status patch changed: a new outcome
// and the steps that ended. Called only after the patch succeeded, so a retried
// reconcile does not count twice.
func observeTransitions(before, after *v1alpha1.RemediationRequest) {
	if after.Status.Phase != before.Status.Phase {
		switch after.Status.Phase {
		case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected:
			requestsTotal.WithLabelValues(string(after.Spec.Remediation), string(after.Status.Phase)).Inc()
		}
	}
	old := map[string]v1alpha1.StepState{}
	for _, st := range before.Status.Steps {
		old[st.Name] = st.State
	}
	for _, st := range after.Status.Steps {
		ended := st.State == v1alpha1.StepSucceeded || st.State == v1alpha1.StepFailed
		if !ended || old[st.Name] == st.State || st.StartedAt == nil || st.CompletedAt == nil {
			continue
		}
		stepSeconds.WithLabelValues(st.Name, string(st.State)).Observe(st.CompletedAt.Sub(st.StartedAt.Time).Seconds())
	}
}

// PolicyReloader re-reads --policies-dir periodically: a ConfigMap mounted there is
// updated in place by the kubelet, and the controller should decide with the policy
// that was reviewed and merged without a restart.
type PolicyReloader struct {
	Engine   *policies.Engine
	Interval time.Duration
}

// Start runs until ctx ends.
func (p *PolicyReloader) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("policy-reloader")
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		changed, err := p.Engine.Reload()
		switch {
		case err != nil:
			policyLoadErrors.Inc()
			log.Error(err, "Reloading policies failed; the previous policies stay in use", "source", p.Engine.Source(), "digest", p.Engine.Digest())
		case changed:
			setPolicyInfo(p.Engine)
			log.Info("Reloaded policies", "source", p.Engine.Source(), "digest", p.Engine.Digest())
		}
	}
}

// NeedLeaderElection is false: every replica must decide with the current policy
// once it becomes the leader.
func (p *PolicyReloader) NeedLeaderElection() bool { return false }
