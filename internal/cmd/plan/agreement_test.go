package plan

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/test/decisiontest"
)

// TestPlanAgreesWithTheController: for every case of the controller's decision
// table (controllers.TestDecide), plan reports the same phase and rule, with the
// same other requests and cap. Plan once ignored the cap; now both take one path.
func TestPlanAgreesWithTheController(t *testing.T) {
	policy, playbooks := decisiontest.Deciders(t)
	for _, tc := range decisiontest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			p := &planner{policy: policy, playbooks: playbooks, at: tc.Now, maxConcurrent: tc.MaxConcurrent, others: tc.Others,
				saved: []savedFacts{{from: "decision table", facts: tc.Facts}}}
			res := p.plan(context.Background(), planInput{source: "table", doc: 1, rr: tc.Request})
			require.Empty(t, res.Errors)
			require.NotNil(t, res.Decision)
			assert.Equal(t, tc.WantPhase, res.Decision.Phase, res.Decision.Message)
			assert.Equal(t, tc.WantRule, res.Decision.Rule, res.Decision.Message)
		})
	}
}
