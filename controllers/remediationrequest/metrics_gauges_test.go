package remediationrequest

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// listed is the manager's cache as the collector reads it: a List of these requests.
type listed struct {
	client.Reader
	requests []v1alpha1.RemediationRequest
}

func (l listed) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*v1alpha1.RemediationRequestList).Items = append([]v1alpha1.RemediationRequest(nil), l.requests...)
	return nil
}

func collect(c prometheus.Collector) map[string]float64 {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	names := map[*prometheus.Desc]string{activeDesc: "remediator_active_remediations", waitingDesc: "remediator_requests_waiting"}
	out := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			out[names[m.Desc()]+" error"] = 1
			continue
		}
		var lv string
		for _, l := range d.GetLabel() {
			lv += l.GetValue()
		}
		out[names[m.Desc()]+"{"+lv+"}"] = d.GetGauge().GetValue()
	}
	return out
}

// TestRequestGaugesOnlyOnTheLeader: every replica's cache holds the same requests,
// so only the leader exports the gauges of them; a sum over replicas then counts
// each request once.
func TestRequestGaugesOnlyOnTheLeader(t *testing.T) {
	rr := func(name string, r v1alpha1.Remediation, p v1alpha1.Phase) v1alpha1.RemediationRequest {
		return v1alpha1.RemediationRequest{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RemediationRequest"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name},
			Spec:       v1alpha1.RemediationRequestSpec{Remediation: r}, Status: v1alpha1.RemediationRequestStatus{Phase: p}}
	}
	reader := listed{requests: []v1alpha1.RemediationRequest{
		rr("a", v1alpha1.RemediationReleaseLUKSLease, v1alpha1.PhaseRunning),
		rr("b", v1alpha1.RemediationReleaseLUKSLease, v1alpha1.PhaseWaiting),
		rr("c", v1alpha1.RemediationReleaseLUKSLease, v1alpha1.PhaseWaiting),
		rr("d", v1alpha1.RemediationReregisterCSIDriver, v1alpha1.PhaseRunning),
		rr("e", v1alpha1.RemediationReregisterCSIDriver, v1alpha1.PhaseSucceeded),
	}}
	elected := make(chan struct{})
	c := requestsCollector{reader: reader, elected: elected}
	assert.Empty(t, collect(c), "a replica that does not lead exports no request gauges")

	close(elected)
	assert.Equal(t, map[string]float64{
		"remediator_active_remediations{release-luks-lease}":    1,
		"remediator_active_remediations{reregister-csi-driver}": 1,
		"remediator_requests_waiting{release-luks-lease}":       2,
		"remediator_requests_waiting{reregister-csi-driver}":    0,
	}, collect(c))
}

func TestRemediationDuration(t *testing.T) {
	decided := metav1.NewTime(time.Date(2026, 11, 19, 6, 30, 0, 0, time.UTC))
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(decided.Add(d)); return &t }
	rr := &v1alpha1.RemediationRequest{Status: v1alpha1.RemediationRequestStatus{
		Phase:    v1alpha1.PhaseSucceeded,
		Decision: &v1alpha1.Decision{DecidedAt: decided},
		Steps: []v1alpha1.StepStatus{{Name: v1alpha1.StepCordon, CompletedAt: at(time.Second)},
			{Name: v1alpha1.StepUncordon, CompletedAt: at(90 * time.Second)}},
	}}
	d, ok := remediationDuration(rr)
	require.True(t, ok)
	assert.Equal(t, 90*time.Second, d, "from the decision to the last step's end")

	rr.Status.Phase = v1alpha1.PhaseRejected
	_, ok = remediationDuration(rr)
	assert.False(t, ok, "a rejected request ran no playbook")
	rr.Status.Phase, rr.Status.Steps = v1alpha1.PhaseFailed, nil
	_, ok = remediationDuration(rr)
	assert.False(t, ok, "no step ended")
}
