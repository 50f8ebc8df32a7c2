package controllers_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/remediator/remediator/controllers"
	"github.com/remediator/remediator/controllers/decisiontest"
)

// TestDecide runs the decision table through the one decision path, without a
// cluster. cmd/remediator's TestPlanAgreesWithTheController runs the same table
// through plan.
func TestDecide(t *testing.T) {
	policy, playbooks := decisiontest.Deciders(t)
	for _, tc := range decisiontest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			o := controllers.Decide(policy, playbooks, controllers.DecisionInput{
				Request: tc.Request, Facts: tc.Facts, Others: tc.Others, MaxConcurrent: tc.MaxConcurrent, Now: tc.Now,
			})
			assert.Equal(t, tc.WantPhase, o.Phase, o.Decision.Message)
			assert.Equal(t, tc.WantRule, o.Decision.Rule, o.Decision.Message)
			assert.NotEmpty(t, o.Decision.Message)
			assert.NotEmpty(t, o.Accepted.Reason)
			assert.NotEmpty(t, o.Progressing.Reason)
			assert.Equal(t, tc.Request.Generation, o.Decision.Generation)
			switch o.Phase {
			case "Running", "Pending":
				assert.NotEmpty(t, o.Steps, "an allowed playbook has steps")
			case "Rejected":
				assert.Empty(t, o.Steps)
				assert.False(t, o.Decision.Allowed)
			}
		})
	}
}
