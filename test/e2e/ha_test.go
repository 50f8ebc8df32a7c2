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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

const acquiredLease = "successfully acquired lease"

// assertStepEventsOnce checks that each step transition of the request was recorded
// exactly once: a step repeated after a restart or failover would show twice.
func assertStepEventsOnce(t *testing.T, ns string, key types.NamespacedName, want int) {
	t.Helper()
	events := &corev1.EventList{}
	if err := k8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	count := map[string]int32{}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == key.Name && strings.HasPrefix(e.Reason, "Step") {
			count[e.Message] += max(e.Count, 1)
		}
	}
	for msg, n := range count {
		if n != 1 {
			t.Errorf("event %q seen %d times", msg, n)
		}
	}
	if len(count) != want {
		t.Errorf("want %d step events, got %d: %v", want, len(count), count)
	}
}

// TestLeaderFailover runs two controller processes with leader election. Only the
// leader acts; killing it mid-playbook hands the request to the other process, which
// resumes from the journal without repeating a step.
func TestLeaderFailover(t *testing.T) {
	ctx := context.Background()
	electionNS := namespace(t, "e2e-ha-election")
	args := []string{"--leader-elect", "--leader-election-namespace", electionNS}
	first := startController(t, args...)
	eventually(t, 60*time.Second, "the first process leading", func() (bool, string) {
		return strings.Contains(first.logs(), acquiredLease), "not yet"
	})
	second := startController(t, args...)

	h := heldAfterCordon(t, "e2e-ha", "kwok-node-1", "retained Lease on the db volume during a controller upgrade")
	ns, key, pv, pdb, cordonBefore := h.ns, h.key, h.pv, h.pdb, h.cordon
	if l := second.logs(); strings.Contains(l, acquiredLease) || strings.Contains(l, "Starting workers") || strings.Contains(l, "Accepted") {
		t.Fatalf("the standby process acted while the first one led:\n%s", l)
	}

	first.kill()
	killed := time.Now()
	if err := k8s.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the standby taking over the leader Lease", func() (bool, string) {
		return strings.Contains(second.logs(), acquiredLease), "not yet"
	})
	t.Logf("the standby took over %s after the leader was killed", time.Since(killed).Round(time.Second))
	rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	if rr.Status.Phase != v1alpha1.PhaseSucceeded || leaseExists(t, pv) {
		t.Fatalf("phase %s steps %+v", rr.Status.Phase, rr.Status.Steps)
	}
	cordonAfter := rr.Status.Steps[0]
	if !cordonAfter.StartedAt.Equal(cordonBefore.StartedAt) || cordonAfter.ObjectResourceVersion != cordonBefore.ObjectResourceVersion {
		t.Errorf("cordon re-ran after the failover: before %+v after %+v", cordonBefore, cordonAfter)
	}
	assertStepEventsOnce(t, ns, key, 10)
}

// scrape reads the controller's metrics endpoint.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
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
		if fmt.Sprint(got) != fmt.Sprint(labels) {
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
		eventually(t, 20*time.Second, fmt.Sprintf("%s%v = %v", name, labels, want), func() (bool, string) {
			got, ok := metricValue(scrape(t, addr), name, labels)
			return ok && got == want, fmt.Sprintf("%v (present=%v)", got, ok)
		})
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
	if n, _ := metricValue(scrape(t, addr), "remediator_decision_duration_seconds", map[string]string{"remediation": lr}); n < 3 {
		t.Errorf("decision latency observed %v times, want at least one per request (3)", n)
	}

	if err := k8s.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, held, 60*time.Second, v1alpha1.PhaseSucceeded)
	expect("remediator_requests_total", map[string]string{"remediation": lr, "outcome": "Succeeded"}, 2)
	expect("remediator_step_duration_seconds", map[string]string{"step": "deleteLease", "result": "Succeeded"}, 2)
	expect("remediator_step_duration_seconds", map[string]string{"step": "uncordon", "result": "Succeeded"}, 1)
	expect("remediator_active_remediations", map[string]string{"remediation": lr}, 0)
}
