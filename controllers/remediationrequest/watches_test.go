package remediationrequest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestStoppedRunningWakesOnEveryStop: the wake-up of the requests waiting for a slot
// follows every stop of a request the cache sees, including one whose Running phase it
// never saw (a watch cut while it ran).
func TestStoppedRunningWakesOnEveryStop(t *testing.T) {
	withPhase := func(p v1alpha1.Phase) *v1alpha1.RemediationRequest {
		return &v1alpha1.RemediationRequest{Status: v1alpha1.RemediationRequestStatus{Phase: p}}
	}
	for _, tc := range []struct {
		old, cur v1alpha1.Phase
		want     bool
	}{
		{v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, true},
		{v1alpha1.PhaseRunning, v1alpha1.PhaseFailed, true},
		{v1alpha1.PhaseRunning, v1alpha1.PhaseWaiting, true},
		// The cache missed Running: a re-list after a cut watch.
		{"", v1alpha1.PhaseSucceeded, true},
		{v1alpha1.PhaseWaiting, v1alpha1.PhaseSucceeded, true},
		{v1alpha1.PhaseWaiting, v1alpha1.PhaseFailed, true},
		{v1alpha1.PhaseWaiting, v1alpha1.PhaseRejected, true},
		// Nothing stopped.
		{v1alpha1.PhaseRunning, v1alpha1.PhaseRunning, false},
		{"", v1alpha1.PhaseRunning, false},
		{v1alpha1.PhaseWaiting, v1alpha1.PhaseWaiting, false},
		{v1alpha1.PhaseSucceeded, v1alpha1.PhaseSucceeded, false},
	} {
		got := stoppedRunning.Update(event.UpdateEvent{ObjectOld: withPhase(tc.old), ObjectNew: withPhase(tc.cur)})
		assert.Equal(t, tc.want, got, "%q -> %q", tc.old, tc.cur)
	}
}
