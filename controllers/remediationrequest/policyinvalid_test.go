package remediationrequest_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/test/decisiontest"
)

// TestNoPolicyWaits: a controller that started on policy files that do not load
// decides nothing. Every case of the decision table, whatever its facts, waits with
// condition Accepted Unknown, reason PolicyInvalid and the load error, a Warning
// Event, and a recheck; nothing is allowed and nothing is rejected for good.
func TestNoPolicyWaits(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.cue"), []byte("package policies\n#Policy: {input: _, decision: \n"), 0o600))
	policy, err := policies.LoadOrWait(dir)
	require.NoError(t, err)
	_, playbooks := decisiontest.Deciders(t)
	for _, tc := range decisiontest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			o := lifecycle.Decide(policy, playbooks, lifecycle.DecisionInput{Request: tc.Request, Facts: tc.Facts, Others: tc.Others,
				MaxConcurrent: tc.MaxConcurrent, Now: tc.Now, Admitted: true})
			assert.Equal(t, v1alpha1.PhaseWaiting, o.Phase, o.Decision.Message)
			assert.False(t, o.Decision.Allowed)
			assert.Empty(t, o.Steps)
			assert.Equal(t, policies.RulePolicyInvalid, o.Decision.Rule)
			assert.Equal(t, policies.NoPolicy, o.Decision.PolicyDigest)
			assert.Equal(t, metav1.ConditionUnknown, o.Accepted.Status)
			assert.Equal(t, lifecycle.ReasonPolicyInvalid, o.Accepted.Reason)
			assert.Contains(t, o.Accepted.Message, "p.cue:2:")
			assert.Equal(t, corev1.EventTypeWarning, o.EventType)
			assert.Equal(t, v1alpha1.EventWaiting, o.EventReason)
			assert.Positive(t, o.RequeueAfter)
			assert.LessOrEqual(t, o.RequeueAfter, time.Minute)
		})
	}
}
