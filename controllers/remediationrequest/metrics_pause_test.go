package remediationrequest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestRunningStepAgeStopsWhilePaused: a step a pause holds does not age, so that
// RemediationStuck (a step past its timeout) does not fire for a pause: a step held
// for hours has run only the time before the pause, and after a resume the time
// since, not the pause.
func TestRunningStepAgeStopsWhilePaused(t *testing.T) {
	now := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	running := func(name string, st v1alpha1.StepStatus) v1alpha1.RemediationRequest {
		return v1alpha1.RemediationRequest{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RemediationRequest"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name, CreationTimestamp: *ago(5 * time.Hour)},
			Spec:       v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease},
			Status:     v1alpha1.RemediationRequestStatus{Phase: v1alpha1.PhaseRunning, Steps: []v1alpha1.StepStatus{st}}}
	}
	cases := []struct {
		name string
		st   v1alpha1.StepStatus
		want float64
	}{
		{"held by the pause for hours", v1alpha1.StepStatus{Name: v1alpha1.StepDeleteAffectedPods, State: v1alpha1.StepRunning,
			StartedAt: ago(4 * time.Hour), PausedSince: ago(4*time.Hour - 2*time.Minute)}, 120},
		{"resumed after a long pause", v1alpha1.StepStatus{Name: v1alpha1.StepDeleteAffectedPods, State: v1alpha1.StepRunning,
			StartedAt: ago(4 * time.Hour), PausedFor: &metav1.Duration{Duration: 3*time.Hour + 55*time.Minute}}, 300},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			elected := make(chan struct{})
			close(elected)
			c := requestsCollector{reader: listed{requests: []v1alpha1.RemediationRequest{running("held", tc.st)}}, elected: elected, now: func() time.Time { return now }}
			assert.Equal(t, map[string]float64{
				"remediator_running_step_age_seconds{remediation=release-luks-lease,step=deleteAffectedPods}": tc.want,
			}, collectAgeSeries(t, c))
		})
	}
}
