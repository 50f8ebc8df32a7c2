package remediationrequest

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
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
	remediationSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "remediator_remediation_duration_seconds",
		Help: "Seconds from a request's decision to its playbook's end (Succeeded or Failed), by remediation and outcome.",
		// A Lease release takes a second; a healthy holder's drain, or a wait for a
		// maintenance window, hours.
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400},
	}, []string{"remediation", "outcome"})
	buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "remediator_build_info",
		Help: "Always 1; its labels say which build of the controller runs.",
	}, []string{"version", "goversion"})
	decisionsFailedClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "remediator_decisions_failed_closed_total",
		Help: "Decisions rejected because the policy could not decide (policy-error: ambiguous rules, an incomplete or oversized decision; policy-timeout), chose a playbook that does not exist (unknown-playbook), or allowed what the safety floor refuses (safety-floor).",
	}, []string{"reason"})
)

// Reasons of remediator_decisions_failed_closed_total besides the rules.
const failClosedSafetyFloor = "safety-floor"

// failClosedRules are the rules of decisions the decision path makes when the policy
// fails, as failed-closed reasons.
var failClosedRules = []string{lifecycle.RulePolicyError, policies.RulePolicyTimeout, lifecycle.RuleUnknownPlaybook}

// safetyFloorProgressing starts the Progressing message of a request the safety floor
// refused (lifecycle.Transition.allowed). The rule alone cannot tell it: the floor's invariant
// driver-registered is also a policy rule.
const safetyFloorProgressing = "Rejected by the safety floor: "

// The gauges of the cluster's requests are collected at scrape time, so they are the
// cluster's truth, not a count a restart would lose. They read the requests from the
// manager's cache. Only the leader exports them: every replica's cache holds the same
// requests, so a sum over replicas would count each one once per replica.
var (
	activeDesc = prometheus.NewDesc("remediator_active_remediations",
		"Requests whose playbook is running now, by remediation (exported by the leader only).", []string{"remediation"}, nil)
	waitingDesc = prometheus.NewDesc("remediator_requests_waiting",
		"Requests in phase Waiting (for another remediation on the same node or Lease, a free slot, or their maintenance window), by remediation (exported by the leader only).",
		[]string{"remediation"}, nil)
	// The ages say how long, where the counts only say how many: a backlog that moves
	// is healthy, one request that has waited for hours, or a step that outlived its
	// timeout, is not.
	oldestWaitingDesc = prometheus.NewDesc("remediator_oldest_waiting_request_age_seconds",
		"Seconds the oldest request in phase Waiting has waited (since its Progressing condition last turned True, else since its creation), by remediation and the Progressing reason it waits with (WaitingForRemediationSlot, RemediationSlotGranted, Waiting, WaitingForMaintenanceWindow, MaintenanceWindowClosed, Paused); no series while none waits (exported by the leader only).",
		[]string{"remediation", "reason"}, nil)
	runningStepAgeDesc = prometheus.NewDesc("remediator_running_step_age_seconds",
		"Seconds the oldest running playbook step has run: since its startedAt, less the time a pause held it (pausedSince, pausedFor), as its timeout counts; by remediation and step, over the requests in phase Running; no series while none runs. Every step is bounded by its timeout (--step-timeout, --eviction-timeout, --pod-termination-timeout, --plugin-restart-timeout), so an age past it means the controller is not enforcing it (exported by the leader only).",
		[]string{"remediation", "step"}, nil)
)

type requestsCollector struct {
	reader client.Reader
	// elected is closed once this replica leads (the manager's Elected()).
	elected <-chan struct{}
	// now is the clock the ages are read on; nil means time.Now.
	now func() time.Time
}

func (c requestsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- activeDesc
	ch <- waitingDesc
	ch <- oldestWaitingDesc
	ch <- runningStepAgeDesc
}

func (c requestsCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.elected:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := requests.List(ctx, c.reader)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(activeDesc, err)
		ch <- prometheus.NewInvalidMetric(waitingDesc, err)
		return
	}
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	// The counts have a series per remediation, zero included; the ages, the oldest
	// of each, only while one waits or runs.
	count, since := map[series]float64{}, map[series]time.Time{}
	for _, r := range []v1alpha1.Remediation{v1alpha1.RemediationReleaseLUKSLease, v1alpha1.RemediationReregisterCSIDriver} {
		count[series{activeDesc, string(r), ""}], count[series{waitingDesc, string(r), ""}] = 0, 0
	}
	oldest := func(k series, t time.Time) {
		if old, ok := since[k]; !t.IsZero() && (!ok || t.Before(old)) {
			since[k] = t
		}
	}
	for i := range list {
		rr := &list[i]
		remediation := string(rr.Spec.Remediation)
		switch rr.Status.Phase {
		case v1alpha1.PhaseRunning:
			count[series{activeDesc, remediation, ""}]++
			if st := runningStep(rr.Status.Steps); st != nil {
				// The time a pause held the step is not its age: its timeout does not
				// count it either (remediations.RanFor).
				oldest(series{runningStepAgeDesc, remediation, st.Name}, now.Add(-remediations.RanFor(st, now)))
			}
		case v1alpha1.PhaseWaiting:
			count[series{waitingDesc, remediation, ""}]++
			reason, t := waitingSince(rr)
			oldest(series{oldestWaitingDesc, remediation, reason}, t)
		}
	}
	for k, n := range count {
		ch <- prometheus.MustNewConstMetric(k.desc, prometheus.GaugeValue, n, k.remediation)
	}
	for k, t := range since {
		ch <- prometheus.MustNewConstMetric(k.desc, prometheus.GaugeValue, max(now.Sub(t).Seconds(), 0), k.remediation, k.what)
	}
}

// series is one gauge series: its remediation, and for an age the waiting reason or
// the step.
type series struct {
	desc              *prometheus.Desc
	remediation, what string
}

// waitingSince is the Progressing reason a waiting request waits with and when it
// began to wait: when its Progressing condition last turned True (joining the line,
// or a rejection re-checked into a wait), else its creation. A wait after a
// maintenance window closed mid-playbook keeps the time the playbook started: its
// condition stayed True.
func waitingSince(rr *v1alpha1.RemediationRequest) (string, time.Time) {
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	if c == nil {
		return v1alpha1.ReasonWaiting, rr.CreationTimestamp.Time
	}
	if c.Status != metav1.ConditionTrue || c.LastTransitionTime.IsZero() {
		return c.Reason, rr.CreationTimestamp.Time
	}
	return c.Reason, c.LastTransitionTime.Time
}

// runningStep is the step a running playbook is in: the one Running, else a Pending
// step whose restore attempt started (the restore is recorded on uncordon and bounded
// by --step-timeout from its first attempt); nil when none has started.
func runningStep(steps []v1alpha1.StepStatus) *v1alpha1.StepStatus {
	started := func(state v1alpha1.StepState) func(v1alpha1.StepStatus) bool {
		return func(st v1alpha1.StepStatus) bool {
			return st.State == state && st.StartedAt != nil && !st.StartedAt.IsZero()
		}
	}
	i := slices.IndexFunc(steps, started(v1alpha1.StepRunning))
	if i < 0 {
		i = slices.IndexFunc(steps, started(v1alpha1.StepPending))
	}
	if i < 0 {
		return nil
	}
	return &steps[i]
}

// RegisterMetrics registers the metrics on controller-runtime's registry; reader
// serves the gauges of the cluster's requests, which only a replica whose elected
// channel is closed (the manager's Elected(): the leader, or every replica without
// leader election) exports; version labels remediator_build_info.
func RegisterMetrics(reader client.Reader, elected <-chan struct{}, version string) error {
	buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	for _, c := range []prometheus.Collector{requestsTotal, decisionSeconds, stepSeconds, remediationSeconds, buildInfo,
		decisionsFailedClosed, requestsCollector{reader: reader, elected: elected}} {
		if err := metrics.Registry.Register(c); err != nil {
			return err
		}
	}
	// Every series exists from the start, so that an alert on an increase sees the first one.
	for _, r := range append(failClosedRules, failClosedSafetyFloor) {
		decisionsFailedClosed.WithLabelValues(r)
	}
	return nil
}

// observeTransitions records what a persisted status patch changed: a new outcome
// and the steps that ended. Called only after the patch succeeded, so a retried
// reconcile does not count twice.
func observeTransitions(before, after *v1alpha1.RemediationRequest) {
	decided := lifecycle.NewDecision(before, after)
	if after.Status.Phase != before.Status.Phase || decided && after.Status.Phase == v1alpha1.PhaseRejected {
		switch after.Status.Phase {
		case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected:
			requestsTotal.WithLabelValues(string(after.Spec.Remediation), string(after.Status.Phase)).Inc()
		}
		if d, ok := remediationDuration(after); ok {
			remediationSeconds.WithLabelValues(string(after.Spec.Remediation), string(after.Status.Phase)).Observe(d.Seconds())
		}
	}
	if decided {
		observeFailedClosed(after)
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

// observeFailedClosed counts and logs a persisted rejection that failed closed (not
// one the policy itself decided). The decision path records the Warning Event
// (v1alpha1.EventRejected, naming the rule and why); the log line here is the one an
// operator greps for, with the policy digest that failed.
func observeFailedClosed(rr *v1alpha1.RemediationRequest) {
	d := rr.Status.Decision
	if rr.Status.Phase != v1alpha1.PhaseRejected || d == nil {
		return
	}
	reason := d.Rule
	if !slices.Contains(failClosedRules, d.Rule) {
		c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || !strings.HasPrefix(c.Message, safetyFloorProgressing) {
			return
		}
		reason = failClosedSafetyFloor
	}
	decisionsFailedClosed.WithLabelValues(reason).Inc()
	ctrl.Log.WithName("decision").Info("Failed closed: the request is rejected and nothing is changed",
		"remediationRequest", klog.KObj(rr), "reason", reason, "rule", d.Rule, "policyDigest", d.PolicyDigest, "message", d.Message)
}

// remediationDuration is how long a finished playbook took from its decision to its
// last step's end; ok is false for a request that did not finish a playbook.
func remediationDuration(rr *v1alpha1.RemediationRequest) (time.Duration, bool) {
	if !rr.Status.Phase.PlaybookEnded() || rr.Status.Decision == nil || rr.Status.Decision.DecidedAt.IsZero() {
		return 0, false
	}
	var end time.Time
	for _, st := range rr.Status.Steps {
		if st.CompletedAt != nil && st.CompletedAt.After(end) {
			end = st.CompletedAt.Time
		}
	}
	if end.IsZero() {
		return 0, false
	}
	return end.Sub(rr.Status.Decision.DecidedAt.Time), true
}
