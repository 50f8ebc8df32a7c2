package remediationrequest

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// collectAgeSeries returns the age series a collector sends, as
// "name{label=value,...}" (labels sorted by name) -> value.
func collectAgeSeries(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	names := map[*prometheus.Desc]string{
		oldestWaitingDesc:  "remediator_oldest_waiting_request_age_seconds",
		runningStepAgeDesc: "remediator_running_step_age_seconds",
	}
	out := map[string]float64{}
	for m := range ch {
		name, ok := names[m.Desc()]
		if !ok {
			continue
		}
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var lv string
		for i, l := range d.GetLabel() {
			if i > 0 {
				lv += ","
			}
			lv += l.GetName() + "=" + l.GetValue()
		}
		out[name+"{"+lv+"}"] = d.GetGauge().GetValue()
	}
	return out
}

// TestMetricAgesOfWaitingRequestsAndRunningSteps: the oldest waiting request's wait
// and the oldest running step's age, by remediation and reason or step, so that an
// alert can tell a request that waits too long, or a step past its timeout, from a
// backlog that moves.
func TestMetricAgesOfWaitingRequestsAndRunningSteps(t *testing.T) {
	now := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	rr := func(name string, r v1alpha1.Remediation, p v1alpha1.Phase, created time.Duration) v1alpha1.RemediationRequest {
		return v1alpha1.RemediationRequest{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RemediationRequest"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name, CreationTimestamp: *ago(created)},
			Spec:       v1alpha1.RemediationRequestSpec{Remediation: r}, Status: v1alpha1.RemediationRequestStatus{Phase: p}}
	}
	progressing := func(r v1alpha1.RemediationRequest, status metav1.ConditionStatus, reason string, since time.Duration) v1alpha1.RemediationRequest {
		r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: status,
			Reason: reason, LastTransitionTime: *ago(since)})
		return r
	}
	steps := func(r v1alpha1.RemediationRequest, s ...v1alpha1.StepStatus) v1alpha1.RemediationRequest {
		r.Status.Steps = s
		return r
	}
	const luks, csi = v1alpha1.RemediationReleaseLUKSLease, v1alpha1.RemediationReregisterCSIDriver
	reader := listed{requests: []v1alpha1.RemediationRequest{
		// In line for a slot: since joining it, not since creation.
		progressing(rr("slot-old", luks, v1alpha1.PhaseWaiting, 3*time.Hour), metav1.ConditionTrue, v1alpha1.ReasonWaitingForSlot, 40*time.Minute),
		progressing(rr("slot-new", luks, v1alpha1.PhaseWaiting, time.Hour), metav1.ConditionTrue, v1alpha1.ReasonWaitingForSlot, 5*time.Minute),
		// A window far away: its own reason, which an alert can leave out.
		progressing(rr("window", luks, v1alpha1.PhaseWaiting, 2*time.Hour), metav1.ConditionTrue, v1alpha1.ReasonWaitingForWindow, 2*time.Hour),
		// No condition yet: since creation.
		rr("fresh", csi, v1alpha1.PhaseWaiting, 90*time.Second),
		// Running: the step in progress, not those done or pending.
		steps(rr("drain", luks, v1alpha1.PhaseRunning, time.Hour),
			v1alpha1.StepStatus{Name: v1alpha1.StepCordon, State: v1alpha1.StepSucceeded, StartedAt: ago(20 * time.Minute), CompletedAt: ago(19 * time.Minute)},
			v1alpha1.StepStatus{Name: v1alpha1.StepDeleteAffectedPods, State: v1alpha1.StepRunning, StartedAt: ago(19 * time.Minute)},
			v1alpha1.StepStatus{Name: v1alpha1.StepUncordon, State: v1alpha1.StepPending}),
		steps(rr("drain-2", luks, v1alpha1.PhaseRunning, time.Hour),
			v1alpha1.StepStatus{Name: v1alpha1.StepDeleteAffectedPods, State: v1alpha1.StepRunning, StartedAt: ago(2 * time.Minute)}),
		// A restore retried on uncordon after a failed step.
		steps(rr("restore", csi, v1alpha1.PhaseRunning, time.Hour),
			v1alpha1.StepStatus{Name: v1alpha1.StepCordon, State: v1alpha1.StepSucceeded, StartedAt: ago(30 * time.Minute), CompletedAt: ago(30 * time.Minute)},
			v1alpha1.StepStatus{Name: v1alpha1.StepDeletePluginPod, State: v1alpha1.StepFailed, StartedAt: ago(20 * time.Minute), CompletedAt: ago(10 * time.Minute)},
			v1alpha1.StepStatus{Name: v1alpha1.StepUncordon, State: v1alpha1.StepPending, StartedAt: ago(10 * time.Minute)}),
		// Between two steps (held at a boundary): no step runs.
		steps(rr("between", csi, v1alpha1.PhaseRunning, time.Hour),
			v1alpha1.StepStatus{Name: v1alpha1.StepCordon, State: v1alpha1.StepSucceeded, StartedAt: ago(time.Hour), CompletedAt: ago(time.Hour)},
			v1alpha1.StepStatus{Name: v1alpha1.StepDeletePluginPod, State: v1alpha1.StepPending}),
		// Over: neither waits nor runs.
		progressing(steps(rr("done", luks, v1alpha1.PhaseSucceeded, 5*time.Hour),
			v1alpha1.StepStatus{Name: v1alpha1.StepDeleteLease, State: v1alpha1.StepSucceeded, StartedAt: ago(5 * time.Hour), CompletedAt: ago(5 * time.Hour)}),
			metav1.ConditionFalse, v1alpha1.ReasonPlaybookCompleted, 5*time.Hour),
	}}
	elected := make(chan struct{})
	c := requestsCollector{reader: reader, elected: elected, now: func() time.Time { return now }}
	assert.Empty(t, collectAgeSeries(t, c), "a replica that does not lead exports no ages")

	close(elected)
	assert.Equal(t, map[string]float64{
		"remediator_oldest_waiting_request_age_seconds{reason=WaitingForRemediationSlot,remediation=release-luks-lease}":   2400,
		"remediator_oldest_waiting_request_age_seconds{reason=WaitingForMaintenanceWindow,remediation=release-luks-lease}": 7200,
		"remediator_oldest_waiting_request_age_seconds{reason=Waiting,remediation=reregister-csi-driver}":                  90,
		"remediator_running_step_age_seconds{remediation=release-luks-lease,step=deleteAffectedPods}":                      1140,
		"remediator_running_step_age_seconds{remediation=reregister-csi-driver,step=uncordon}":                             600,
	}, collectAgeSeries(t, c))

	t.Run("none waiting or running: no series", func(t *testing.T) {
		c := requestsCollector{reader: listed{}, elected: elected, now: func() time.Time { return now }}
		assert.Empty(t, collectAgeSeries(t, c))
	})
}
