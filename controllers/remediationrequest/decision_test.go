package remediationrequest_test

import (
	"fmt"
	"math"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/controllers/admission"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/test/decisiontest"
)

// TestDecide runs the decision table through the one decision path, without a
// cluster. internal/cmd/plan's TestPlanAgreesWithTheController runs the same table
// through plan.
func TestDecide(t *testing.T) {
	policy, playbooks := decisiontest.Deciders(t)
	for _, tc := range decisiontest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			o := lifecycle.Decide(policy, playbooks, lifecycle.DecisionInput{
				Request: tc.Request, Facts: tc.Facts, Others: tc.Others, MaxConcurrent: tc.MaxConcurrent, Now: tc.Now,
				Admitted: admission.WouldAdmit(tc.Request, tc.Others, tc.MaxConcurrent, playbooks, tc.Now),
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

// TestDecideCapsTheRecheck: an override policy asking to decide again in 10^12 s (or
// more than time.Duration holds) is decided again within a day, never at a time that
// overflowed into the past.
func TestDecideCapsTheRecheck(t *testing.T) {
	_, playbooks := decisiontest.Deciders(t)
	tc := decisiontest.Cases()[0]
	// A recheck gathers live facts again: a policy's 1 s would make every waiting
	// request re-read the cluster every second, so rechecks are at least 10 s apart.
	for _, after := range []int64{1, 9, 10, 30, 86_400, 1_000_000_000_000, math.MaxInt64} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			policy, err := policies.FromFS(fstest.MapFS{"p.cue": &fstest.MapFile{Data: []byte(fmt.Sprintf(`package policies
#Policy: {input: _, decision: {allowed: false, rule: "later", reasons: ["asked"], message: "Later.", recheckAfterSeconds: %d}}
`, after))}})
			require.NoError(t, err)
			o := lifecycle.Decide(policy, playbooks, lifecycle.DecisionInput{Request: tc.Request, Facts: tc.Facts, Now: tc.Now})
			require.Equal(t, "later", o.Decision.Rule, o.Decision.Message)
			require.NotNil(t, o.Decision.RecheckAt)
			want := 24 * time.Hour
			if after < int64(want/time.Second) {
				want = max(time.Duration(after)*time.Second, 10*time.Second)
			}
			assert.Equal(t, want, o.RequeueAfter)
			assert.Equal(t, tc.Now.Add(want), o.Decision.RecheckAt.Time)
		})
	}
}
