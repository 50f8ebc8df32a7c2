//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

const acquiredLease = "successfully acquired lease"

// assertStepEventsOnce checks that each step the request did was recorded exactly
// once (want of them, with reason StepSucceeded: the last step's is merged into the
// outcome's Event): a step repeated after a restart or failover would show twice.
func assertStepEventsOnce(t *testing.T, ns string, key types.NamespacedName, want int) {
	t.Helper()
	events := &corev1.EventList{}
	require.NoError(t, k8s.List(context.Background(), events, client.InNamespace(ns)))
	count := map[string]int32{}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == key.Name && strings.HasPrefix(e.Reason, "Step") {
			count[e.Message] += max(e.Count, 1)
		}
	}
	for msg, n := range count {
		assert.Equal(t, int32(1), n, "times event %q was seen", msg)
	}
	assert.Len(t, count, want, "step events")
}

// waitStepEvents waits until the request's step Events number at least n. Events
// are sent after the status write, asynchronously: a test that kills the process as
// soon as status shows a step started may lose that step's Event with it, and
// assertStepEventsOnce would count one short.
func waitStepEvents(t *testing.T, ns string, key types.NamespacedName, n int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events := &corev1.EventList{}
		require.NoError(c, k8s.List(context.Background(), events, client.InNamespace(ns)))
		got := 0
		for _, e := range events.Items {
			if e.InvolvedObject.Name == key.Name && strings.HasPrefix(e.Reason, "Step") {
				got++
			}
		}
		assert.GreaterOrEqual(c, got, n, "step Events of %s", key)
	}, 30*time.Second, poll, "the step Events sent before the kill")
}

// TestLeaderFailover runs two controller processes with leader election. Only the
// leader acts; killing it mid-playbook hands the request to the other process, which
// resumes from the journal without repeating a step.
func TestLeaderFailover(t *testing.T) {
	ctx := context.Background()
	electionNS := namespace(t, "e2e-ha-election")
	args := []string{"--leader-elect", "--leader-election-namespace", electionNS}
	first := startController(t, args...)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, strings.Contains(first.Logs(), acquiredLease), "the first process's log has no %q yet", acquiredLease)
	}, 60*time.Second, poll, "the first process leading")
	second := startController(t, args...)

	h := heldAfterCordon(t, "e2e-ha", "kwok-node-1", "retained Lease on the db volume during a controller upgrade")
	ns, key, pv, pdb, cordonBefore := h.ns, h.key, h.pv, h.pdb, h.cordon
	l := second.Logs()
	for _, acted := range []string{acquiredLease, "Starting workers", "Accepted"} {
		require.NotContains(t, l, acted, "the standby process acted while the first one led")
	}

	// cordon succeeded (a step's start is journaled, not an Event).
	waitStepEvents(t, ns, key, 1)
	first.Kill()
	killed := time.Now()
	require.NoError(t, k8s.Delete(ctx, pdb))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, strings.Contains(second.Logs(), acquiredLease), "the standby's log has no %q yet", acquiredLease)
	}, 60*time.Second, poll, "the standby taking over the leader Lease")
	t.Logf("the standby took over %s after the leader was killed", time.Since(killed).Round(time.Second))
	rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.False(t, leaseExists(t, pv), "the Lease still exists: %s", describe(rr))
	cordonAfter := rr.Status.Steps[0]
	assert.True(t, cordonAfter.StartedAt.Equal(cordonBefore.StartedAt), "cordon re-ran after the failover: before %+v after %+v", cordonBefore, cordonAfter)
	assert.Equal(t, cordonBefore.ObjectResourceVersion, cordonAfter.ObjectResourceVersion, "cordon re-ran after the failover: before %+v after %+v", cordonBefore, cordonAfter)
	assertStepEventsOnce(t, ns, key, 4)
}

// scrape reads the controller's metrics endpoint. t is the test, or the
// *assert.CollectT of a require.EventuallyWithT condition.
func scrape(t require.TestingT, addr string) map[string]*dto.MetricFamily {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// metricValue returns the value of the series with exactly these labels (a counter,
// gauge, or a histogram's sample count), and whether it exists.
func metricValue(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(nonEmpty(got)) != fmt.Sprint(nonEmpty(labels)) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// nonEmpty drops the labels with an empty value: in Prometheus' data model an empty
// label is an absent one, whether or not the exposition wrote it.
func nonEmpty(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// TestMetricsReflectTheScenario scrapes a fresh controller process while it works:
// one request held mid-playbook, one Lease released, one request rejected.
func TestMetricsReflectTheScenario(t *testing.T) {
	addr := freeAddr(t)
	startController(t, "--metrics-bind-address", addr)
	ctx := context.Background()
	ns := namespace(t, "e2e-metrics")
	const lr = string(v1alpha1.RemediationReleaseLUKSLease)
	expect := func(name string, labels map[string]string, want float64) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got, ok := metricValue(scrape(c, addr), name, labels)
			require.True(c, ok, "no series %s%v", name, labels)
			assert.Equal(c, want, got, "%s%v", name, labels)
		}, 20*time.Second, poll, "%s%v = %v", name, labels, want)
	}

	// Held after cordon by a PodDisruptionBudget: one active remediation.
	heldPV, pdb := blockedWorkload(t, ns, "kwok-node-0")
	held := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: heldPV},
		Reason: "retained Lease on the db volume",
	})
	waitStep(t, held, "deleteAffectedPods", v1alpha1.StepRunning)
	expect("remediator_active_remediations", map[string]string{"remediation": lr}, 1)

	down := extraNode(t, "e2e-metrics-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	downPV, _ := luksVolume(t, ns, down, 20*time.Minute, 1)
	released := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: downPV},
		Reason: "holder powered off after a kernel panic",
	})
	cut := unreachableNode(t)
	cutPV, _ := luksVolume(t, ns, cut, 30*time.Minute, 0)
	rejected := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: cutPV},
		Reason: "holder lost the control plane, not fenced yet",
	})
	waitPhase(t, released, 60*time.Second, v1alpha1.PhaseSucceeded)
	rr := waitPhase(t, rejected, 60*time.Second, v1alpha1.PhaseRejected)

	expect("remediator_requests_total", map[string]string{"remediation": lr, "outcome": "Succeeded"}, 1)
	expect("remediator_requests_total", map[string]string{"remediation": lr, "outcome": "Rejected"}, 1)
	expect("remediator_step_duration_seconds", map[string]string{"step": "deleteLease", "result": "Succeeded"}, 1)
	expect("remediator_step_duration_seconds", map[string]string{"step": "cordon", "result": "Succeeded"}, 1)
	expect("remediator_policy_info", map[string]string{"digest": rr.Status.Decision.PolicyDigest, "source": "embedded"}, 1)
	expect("remediator_policy_load_errors_total", map[string]string{}, 0)
	expect("remediator_remediation_duration_seconds", map[string]string{"remediation": lr, "outcome": "Succeeded"}, 1)
	expect("remediator_requests_waiting", map[string]string{"remediation": lr}, 0)
	if build := scrape(t, addr)["remediator_build_info"]; assert.NotNil(t, build, "remediator_build_info") && assert.Len(t, build.GetMetric(), 1) {
		m := build.GetMetric()[0]
		assert.Equal(t, float64(1), m.GetGauge().GetValue())
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		assert.NotEmpty(t, labels["version"], "build_info's version")
		assert.Contains(t, labels["goversion"], "go1.", "build_info's goversion")
	}
	n, _ := metricValue(scrape(t, addr), "remediator_decision_duration_seconds", map[string]string{"remediation": lr})
	assert.GreaterOrEqual(t, n, float64(3), "decision latency observations, want at least one per request (3)")

	require.NoError(t, k8s.Delete(ctx, pdb))
	waitPhase(t, held, 60*time.Second, v1alpha1.PhaseSucceeded)
	expect("remediator_requests_total", map[string]string{"remediation": lr, "outcome": "Succeeded"}, 2)
	expect("remediator_step_duration_seconds", map[string]string{"step": "deleteLease", "result": "Succeeded"}, 2)
	expect("remediator_step_duration_seconds", map[string]string{"step": "uncordon", "result": "Succeeded"}, 1)
	expect("remediator_active_remediations", map[string]string{"remediation": lr}, 0)
}
