package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/remediator/remediator/api/v1alpha1"
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

// logLines captures a logger's output, one entry per line.
type logLines struct{ lines []string }

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) { l.lines = append(l.lines, prefix+" "+args) }, funcr.Options{Verbosity: 0})
}

func (l *logLines) take() []string {
	out := l.lines
	l.lines = nil
	return out
}

// reviewedPolicies copies the embedded policy files into a fresh directory.
func reviewedPolicies(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../policies/*.cue")
	require.NoError(t, err)
	for _, f := range files {
		// The schema is the controller's own: a policy directory holds the rules only.
		if filepath.Base(f) == "schema.cue" {
			continue
		}
		if strings.HasSuffix(f, "_test.cue") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644))
	}
	return dir
}

func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestPolicyReloaderSaysWhichPolicyIsKept: a reload that fails keeps the last good
// policy and says so, with the reason and the digest kept, in the log, the metrics
// and a Warning Event on the controller's Pod; once, not on every attempt while the
// files stay broken. A fixed policy is taken and announced.
func TestPolicyReloaderSaysWhichPolicyIsKept(t *testing.T) {
	dir := reviewedPolicies(t)
	e, err := policies.FromDir(dir)
	require.NoError(t, err)
	good := e.Digest()
	setPolicyInfo(e)
	rec := record.NewFakeRecorder(10)
	pod := &corev1.ObjectReference{Kind: "Pod", Namespace: "remediator-system", Name: "remediator-7d9f-x2"}
	p := &PolicyReloader{Engine: e, Interval: 30 * time.Second, Recorder: rec, Pod: pod}
	var logs logLines
	errorsBefore := value(t, policyLoadErrors)
	policy := filepath.Join(dir, "release_luks_lease.cue")
	src, err := os.ReadFile(policy)
	require.NoError(t, err)

	p.reload(logs.logger())
	assert.Empty(t, logs.take(), "an unchanged directory is not news")
	assert.Empty(t, drain(rec.Events))

	steps := []struct {
		name, src, reason string
	}{
		{"syntax error", string(src) + "\n#Policy: {", policies.LoadReasonSyntax},
		{"unknown playbook", strings.Replace(string(src), `playbook: "node-shutdown"`, `playbook: "node-shutdwn"`, 1), policies.LoadReasonUnknownPlaybook},
	}
	for i, st := range steps {
		require.NotEqual(t, string(src), st.src)
		require.NoError(t, os.WriteFile(policy, []byte(st.src), 0o644))
		for attempt := range 3 {
			p.reload(logs.logger())
			assert.Equal(t, errorsBefore+float64(3*i+attempt+1), value(t, policyLoadErrors), "%s: every attempt counts", st.name)
			for _, r := range policies.LoadReasons {
				want := 0.0
				if r == st.reason {
					want = 1
				}
				assert.Equal(t, want, value(t, policyReloadFailing.WithLabelValues(r)), "%s: remediator_policy_reload_failing{reason=%q}", st.name, r)
			}
			assert.Equal(t, 1.0, value(t, policyInfo.WithLabelValues(good, dir)), "%s: remediator_policy_info shows the policy in use", st.name)
			assert.Equal(t, good, e.Digest())

			lines, events := logs.take(), drain(rec.Events)
			if attempt > 0 {
				assert.Empty(t, lines, "%s: a failure that persists is logged once", st.name)
				assert.Empty(t, events, "%s: and evented once", st.name)
				continue
			}
			require.Len(t, lines, 1, "%s", st.name)
			assert.Contains(t, lines[0], `"msg"="Reloading policies failed; the last good policy stays in use"`)
			assert.Contains(t, lines[0], fmt.Sprintf(`"reason"=%q`, st.reason))
			assert.Contains(t, lines[0], fmt.Sprintf(`"digestKept"=%q`, good))
			require.Len(t, events, 1, "%s", st.name)
			assert.True(t, strings.HasPrefix(events[0], "Warning "+EventPolicyReloadFailed+" The policies in "+dir+" were refused ("+st.reason+": "), events[0])
			assert.Contains(t, events[0], "the last good policy "+good+" stays in use")
		}
	}

	require.NoError(t, os.WriteFile(policy, append(src, "// reviewed again\n"...), 0o644))
	p.reload(logs.logger())
	fixed := e.Digest()
	require.NotEqual(t, good, fixed)
	for _, r := range policies.LoadReasons {
		assert.Zero(t, value(t, policyReloadFailing.WithLabelValues(r)), r)
	}
	assert.Equal(t, 1.0, value(t, policyInfo.WithLabelValues(fixed, dir)))
	assert.Zero(t, value(t, policyInfo.WithLabelValues(good, dir)), "the old digest is gone from remediator_policy_info")
	lines := logs.take()
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], `"msg"="Reloaded policies"`)
	assert.Equal(t, []string{"Normal " + EventPolicyReloaded + " Reloaded the policies in " + dir + ": now deciding with policy " + fixed + "."}, drain(rec.Events))

	// Without the Pod there is no Event; the log and the metrics still say it.
	require.NoError(t, os.WriteFile(policy, []byte(steps[0].src), 0o644))
	p.Pod = nil
	p.reload(logs.logger())
	assert.Len(t, logs.take(), 1)
	assert.Empty(t, drain(rec.Events))
	assert.Equal(t, 1.0, value(t, policyReloadFailing.WithLabelValues(policies.LoadReasonSyntax)))
}

// TestFailedClosedDecisionsAreCounted: a persisted decision that failed closed is
// counted by reason, every time it is decided; a policy's own rejection is not.
// The outcomes come from Decide, so that the count follows what the decision path
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
if input.facts.node.state == "Unreachable" {decision: {allowed: false}}`), RulePolicyError},
		{"computed playbook that does not exist", policyFrom(`decision: {allowed: true, playbook: "node-\(input.remediation)", rule: "computed", reasons: ["x"], message: "m"}`), RulePolicyError},
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
				o := Decide(tc.policy, playbooks, DecisionInput{Request: rr, Facts: unreachable, Now: at})
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
