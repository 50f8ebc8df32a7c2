package remediationrequest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/policies"
)

// warningEvent waits for the Warning Event of reason on the request named name whose
// message contains every one of want, and returns its message.
func warningEvent(t *testing.T, name, reason string, want ...string) string {
	t.Helper()
	var msg string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events := &corev1.EventList{}
		require.NoError(c, env.Client.List(context.Background(), events, client.InNamespace("remediator")))
		var seen []string
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name != name {
				continue
			}
			seen = append(seen, ev.Type+" "+ev.Reason+": "+ev.Message)
			if ev.Type != corev1.EventTypeWarning || ev.Reason != reason {
				continue
			}
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(ev.Message, w)
			}
			if ok {
				msg = ev.Message
				return
			}
		}
		assert.Failf(c, "no matching Event", "no Warning %s Event on %s containing %q; events: %q", reason, name, want, seen)
	}, 10*time.Second, 100*time.Millisecond)
	return msg
}

// TestBrokenPoliciesFailClosed: with a policy that cannot decide a request, the
// running controller rejects it (fails closed) and says why in the status, a Warning
// Event and (TestFailedClosedDecisionsAreCounted) the log and
// remediator_decisions_failed_closed_total. The Lease of the shut-down holder, which
// the reviewed policy would release at once, is kept.
func TestBrokenPoliciesFailClosed(t *testing.T) {
	cases := []struct {
		name, policy, rule string
		want               []string
		timeout            time.Duration
	}{
		// Two rules both match a shut-down holder, and disagree.
		{name: "ambiguous", rule: lifecycle.RulePolicyError, want: []string{"policy is ambiguous", "conflicting values"}, policy: `package policies
#Policy: {
	input: _
	if input.facts.node.state == "Shutdown" {
		decision: {allowed: true, playbook: "node-shutdown", rule: "holder-shutdown", reasons: ["down"], message: "release"}
	}
	if input.remediation == "release-luks-lease" {
		decision: {allowed: false, rule: "leases-need-a-human", reasons: ["policy"], message: "keep"}
	}
}
`},
		// Its message is larger than a status condition holds. The status patch used
		// to be refused, so the request stayed undecided, retried without end.
		{name: "oversized", rule: lifecycle.RulePolicyError, want: []string{"policy decision too large", "40000 bytes"}, policy: `package policies
import "strings"
#Policy: {input: _, decision: {allowed: false, rule: "verbose", reasons: ["x"], message: strings.Repeat("why ", 10000)}}
`},
		// The playbook is computed, so the load could not check it; the schema's
		// #Playbook refuses it when the decision is made.
		{name: "unknown-playbook", rule: lifecycle.RulePolicyError, want: []string{"names a playbook this controller does not have"}, policy: `package policies
#Policy: {input: _, decision: {allowed: true, playbook: "node-\(input.remediation)", rule: "computed", reasons: ["x"], message: "m"}}
`},
		// An evaluation that explodes in time: 64,000 iterations, seconds under -race.
		// The range reads the input so that only a decision evaluates it: an
		// input-independent one runs away in the policy's load as well, which this test
		// would wait for (the policies package covers a decision that compiles a copy).
		{name: "runaway", rule: policies.RulePolicyTimeout, timeout: 25 * time.Millisecond, want: []string{"took longer than 25ms"}, policy: `package policies
import "list"
#Policy: {
	input: _
	let l = list.Range(0, 40+len(input.conflicts), 1)
	let n = len([for a in l for b in l for c in l if a+b+c < 0 {1}])
	decision: {allowed: true, playbook: "node-shutdown", rule: "slow", reasons: ["\(n)"], message: "m"}
}
`},
	}
	env.EnsureNamespaces(t, "remediator", "trident")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(tc.policy), 0o600))
			e, err := policies.FromDir(dir)
			require.NoError(t, err, "the broken policy compiles: only a decision shows what is wrong")
			e.Timeout = tc.timeout
			startManager(t, func(r *remediationrequest.Reconciler) { r.Policy = e })

			node := "envtest-broken-" + tc.name
			shutdownNode(t, node)
			pv := "pvc-" + node
			leaseHeldBy(t, pv, node)
			key := requestFor(t, "broken-"+tc.name, v1alpha1.Target{PersistentVolume: pv}, nil)
			rr := waitFor(t, key, 20*time.Second, "a terminal phase", terminal)
			require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase)
			assert.Equal(t, tc.rule, rr.Status.Decision.Rule)
			assert.Equal(t, e.Digest(), rr.Status.Decision.PolicyDigest)
			c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionAccepted)
			require.NotNil(t, c)
			assert.Equal(t, metav1.ConditionFalse, c.Status)
			for _, w := range tc.want {
				assert.Contains(t, c.Message, w)
			}
			assert.LessOrEqual(t, len(c.Message), 32768)
			msg := warningEvent(t, key.Name, v1alpha1.EventRejected, append([]string{"Policy rule " + tc.rule}, tc.want...)...)
			t.Logf("Warning %s: %.300s", v1alpha1.EventRejected, msg)
			assert.True(t, leaseExists(t, pv), "a request the policy could not decide must not act")
		})
	}
}
