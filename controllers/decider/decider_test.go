package decider_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/decider"
	"github.com/remediator/remediator/test/decisiontest"
)

// TestDecideWeighsWhatIsInjected: the decider decides on the facts and the others
// it is given, asks whether the request holds a slot with those others, and says
// which read failed when one does.
func TestDecideWeighsWhatIsInjected(t *testing.T) {
	policy, playbooks := decisiontest.Deciders(t)
	var c decisiontest.Case
	for _, tc := range decisiontest.Cases() {
		if tc.Name == "cap reached" {
			c = tc
		}
	}
	require.NotNil(t, c.Request)
	var sawOthers int
	d := &decider.Decider{Policy: policy, Playbooks: playbooks, MaxConcurrent: c.MaxConcurrent,
		Gather: func(context.Context, *v1alpha1.RemediationRequest) (*v1alpha1.Facts, error) { return c.Facts, nil },
		Others: func(context.Context, *v1alpha1.Facts) ([]v1alpha1.RemediationRequest, error) { return c.Others, nil },
		Admitted: func(_ *v1alpha1.RemediationRequest, others []v1alpha1.RemediationRequest) bool {
			sawOthers = len(others)
			return false
		}}
	got, err := d.Decide(context.Background(), c.Request, c.Now, "")
	require.NoError(t, err)
	assert.Equal(t, c.WantPhase, got.Phase)
	assert.Equal(t, v1alpha1.WaitingForSlot, got.WaitingFor)
	assert.Same(t, c.Facts, got.Facts)
	assert.Equal(t, len(c.Others), sawOthers)

	d.Admitted = func(*v1alpha1.RemediationRequest, []v1alpha1.RemediationRequest) bool { return true }
	got, err = d.Decide(context.Background(), c.Request, c.Now, "")
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.PhaseRunning, got.Phase, "admitted: it starts")

	d.Others = func(context.Context, *v1alpha1.Facts) ([]v1alpha1.RemediationRequest, error) {
		return nil, errors.New("list refused")
	}
	_, err = d.Decide(context.Background(), c.Request, c.Now, "")
	assert.EqualError(t, err, "list refused")
	d.Gather = func(context.Context, *v1alpha1.RemediationRequest) (*v1alpha1.Facts, error) {
		return nil, errors.New("forbidden")
	}
	_, err = d.Decide(context.Background(), c.Request, c.Now, "")
	assert.EqualError(t, err, "gathering facts: forbidden")
}
