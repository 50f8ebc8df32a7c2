package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// waiting sets the Progressing condition a Waiting request carries.
func waiting(rr *v1alpha1.RemediationRequest, reason string) *v1alpha1.RemediationRequest {
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason, Message: "waiting"})
	return rr
}

func TestNeedsDecision(t *testing.T) {
	now := time.Date(2026, 11, 19, 6, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(d)); return &t }
	rr := func(phase v1alpha1.Phase, gen, observed int64, d *v1alpha1.Decision) *v1alpha1.RemediationRequest {
		r := &v1alpha1.RemediationRequest{}
		r.Generation, r.Status.ObservedGeneration, r.Status.Phase, r.Status.Decision = gen, observed, phase, d
		return r
	}
	cases := []struct {
		name string
		rr   *v1alpha1.RemediationRequest
		want bool
	}{
		{"new request", rr("", 1, 0, nil), true},
		{"rejection stands", rr(v1alpha1.PhaseRejected, 1, 1, &v1alpha1.Decision{}), false},
		{"spec changed after rejection", rr(v1alpha1.PhaseRejected, 2, 1, &v1alpha1.Decision{}), true},
		{"recheck due", rr(v1alpha1.PhaseRejected, 1, 1, &v1alpha1.Decision{RecheckAt: at(-time.Second)}), true},
		{"recheck at this instant", rr(v1alpha1.PhaseWaiting, 1, 1, &v1alpha1.Decision{RecheckAt: at(0)}), true},
		{"recheck not yet due", rr(v1alpha1.PhaseWaiting, 1, 1, &v1alpha1.Decision{RecheckAt: at(time.Second)}), false},
		{"dry run plan stands", rr(v1alpha1.PhasePending, 1, 1, &v1alpha1.Decision{Allowed: true}), false},
		{"running ignores spec changes", rr(v1alpha1.PhaseRunning, 2, 1, &v1alpha1.Decision{Allowed: true}), false},
		{"succeeded is final", rr(v1alpha1.PhaseSucceeded, 2, 1, &v1alpha1.Decision{}), false},
		{"failed is final", rr(v1alpha1.PhaseFailed, 1, 1, &v1alpha1.Decision{RecheckAt: at(-time.Hour)}), false},
		{"in line for a slot stands until granted one", waiting(rr(v1alpha1.PhaseWaiting, 1, 1, &v1alpha1.Decision{Allowed: true}), v1alpha1.ReasonWaitingForSlot), false},
		{"granted a slot is decided again", waiting(rr(v1alpha1.PhaseWaiting, 1, 1, &v1alpha1.Decision{Allowed: true}), v1alpha1.ReasonAdmitted), true},
		{"waiting on another request re-decides when woken", waiting(rr(v1alpha1.PhaseWaiting, 1, 1, &v1alpha1.Decision{RecheckAt: at(time.Minute)}), v1alpha1.ReasonWaiting), true},
		{"waiting for the window only at its opening", waiting(rr(v1alpha1.PhaseWaiting, 1, 1, &v1alpha1.Decision{RecheckAt: at(time.Hour)}), v1alpha1.ReasonWaitingForWindow), false},
		{"window closed mid-playbook waits for the next one", waiting(rr(v1alpha1.PhaseWaiting, 1, 1, &v1alpha1.Decision{RecheckAt: at(time.Hour)}), v1alpha1.ReasonWindowClosed), false},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, NeedsDecision(tc.rr, now), "%s: NeedsDecision", tc.name)
	}
}
