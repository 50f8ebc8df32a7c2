package lifecycle

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestCurrentStep: kubectl's Step column shows where a playbook is.
func TestCurrentStep(t *testing.T) {
	steps := func(states ...v1alpha1.StepState) []v1alpha1.StepStatus {
		names := []string{v1alpha1.StepCordon, v1alpha1.StepDeleteAffectedPods, v1alpha1.StepWaitPodsGone, v1alpha1.StepDeleteLease, v1alpha1.StepUncordon}
		out := make([]v1alpha1.StepStatus, len(states))
		for i, s := range states {
			out[i] = v1alpha1.StepStatus{Name: names[i], State: s}
		}
		return out
	}
	const (
		ok   = v1alpha1.StepSucceeded
		run  = v1alpha1.StepRunning
		pend = v1alpha1.StepPending
		fail = v1alpha1.StepFailed
	)
	cases := []struct {
		name  string
		phase v1alpha1.Phase
		steps []v1alpha1.StepStatus
		want  string
	}{
		{"running step", v1alpha1.PhaseRunning, steps(ok, run, pend, pend, pend), "2/5 deleteAffectedPods"},
		{"between steps, the next one", v1alpha1.PhaseRunning, steps(ok, ok, pend, pend, pend), "3/5 waitPodsGone"},
		{"waiting for its window, the first one", v1alpha1.PhaseWaiting, steps(pend, pend, pend, pend, pend), "1/5 cordon"},
		{"a DryRun plan is not a position", v1alpha1.PhasePending, steps(pend, pend, pend, pend, pend), ""},
		{"succeeded", v1alpha1.PhaseSucceeded, steps(ok, ok, ok, ok, ok), ""},
		{"failed, restoring the uncordon", v1alpha1.PhaseFailed, steps(ok, ok, fail, v1alpha1.StepSkipped, run), "5/5 uncordon"},
		{"failed and restored", v1alpha1.PhaseFailed, steps(ok, ok, fail, v1alpha1.StepSkipped, ok), ""},
		{"rejected, no steps", v1alpha1.PhaseRejected, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, CurrentStep(v1alpha1.RemediationRequestStatus{Phase: tc.phase, Steps: tc.steps}))
		})
	}
}
