package remediationrequest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

// value reads a counter or a gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.Write(&out))
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// TestFailedClosedDecisionsAreCounted: a persisted decision that failed closed is
// counted by reason, every time it is decided; a policy's own rejection is not.
// The outcomes come from lifecycle.Decide, so that the count follows what the decision path
// writes (the safety floor's Progressing message in particular).
func TestFailedClosedDecisionsAreCounted(t *testing.T) {
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	now := time.Date(2026, 11, 19, 12, 0, 0, 0, time.UTC)
	unreachable := &v1alpha1.Facts{
		GatheredAt: metav1.NewTime(now), TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
		Target: v1alpha1.TargetFacts{Ref: "PersistentVolume pvc-1", Found: true, PersistentVolume: "pvc-1"},
		Lease:  &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", Exists: true, HolderIdentity: "node-2", AgeSeconds: 3600},
		Node:   &v1alpha1.NodeFacts{Name: "node-2", Exists: true, State: v1alpha1.NodeUnreachable, StateReason: "test", LeaseRenewAgeSeconds: 600},
	}
	policyFrom := func(decision string) *policies.Engine {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "p.cue"), []byte("package policies\n#Policy: {input: _\n"+decision+"\n}\n"), 0o644))
		e, err := policies.FromDir(dir)
		require.NoError(t, err)
		return e
	}
	embedded, err := policies.Embedded()
	require.NoError(t, err)
	cases := []struct {
		name   string
		policy *policies.Engine
		reason string
	}{
		{"two rules disagree", policyFrom(`decision: {allowed: true, playbook: "fenced-unreachable", rule: "a", reasons: ["x"], message: "m"}
if input.facts.node.state == "Unreachable" {decision: {allowed: false}}`), lifecycle.RulePolicyError},
		{"computed playbook that does not exist", policyFrom(`decision: {allowed: true, playbook: "node-\(input.remediation)", rule: "computed", reasons: ["x"], message: "m"}`), lifecycle.RulePolicyError},
		{"allows everything", policyFrom(`decision: {allowed: true, playbook: "node-shutdown", rule: "allow-everything", reasons: ["x"], message: "m"}`), failClosedSafetyFloor},
		{"the policy's own rejection", embedded, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rr := &v1alpha1.RemediationRequest{
				ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "r", Generation: 1},
				Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
					Target: v1alpha1.Target{PersistentVolume: "pvc-1"}, Reason: "a test request", Mode: v1alpha1.ModeApply},
			}
			decide := func(at time.Time) *v1alpha1.RemediationRequest {
				o := lifecycle.Decide(tc.policy, playbooks, lifecycle.DecisionInput{Request: rr, Facts: unreachable, Now: at})
				require.Equal(t, v1alpha1.PhaseRejected, o.Phase, "%+v", o.Decision)
				after := rr.DeepCopy()
				after.Status.Phase, after.Status.Decision = o.Phase, &o.Decision
				after.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: o.Progressing.Status, Reason: o.Progressing.Reason, Message: o.Progressing.Message}}
				return after
			}
			count := func() float64 {
				if tc.reason == "" {
					sum := 0.0
					for _, r := range append(failClosedRules, failClosedSafetyFloor) {
						sum += value(t, decisionsFailedClosed.WithLabelValues(r))
					}
					return sum
				}
				return value(t, decisionsFailedClosed.WithLabelValues(tc.reason))
			}
			rejected := func() float64 {
				return value(t, requestsTotal.WithLabelValues(string(v1alpha1.RemediationReleaseLUKSLease), string(v1alpha1.PhaseRejected)))
			}
			before, rejectedBefore := count(), rejected()

			first := decide(now)
			observeTransitions(rr, first)
			want := 1.0
			if tc.reason == "" {
				want = 0
			}
			assert.Equal(t, before+want, count())
			assert.Equal(t, rejectedBefore+1, rejected())

			// Another write of the same decision (a step journal, a retried patch) is not
			// a new decision.
			observeTransitions(first, first.DeepCopy())
			assert.Equal(t, before+want, count())

			// Re-checked and rejected again: counted again, in both counters.
			again := decide(now.Add(time.Minute))
			observeTransitions(first, again)
			assert.Equal(t, before+2*want, count())
			assert.Equal(t, rejectedBefore+2, rejected(), "a rejection re-checked and rejected again counts again (remediator_requests_total's help)")
		})
	}
}
