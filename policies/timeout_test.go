package policies

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/remediator/remediator/api/v1alpha1"
)

// slowPolicy decides quickly for a short input.conflicts and takes time cubic in its
// length otherwise: the comprehension visits every triple and keeps none, so it
// burns CPU without growing memory much. 60 conflicts take about half a second on a
// development machine, far over the tests' 25ms bound, and still end so that the
// abandoned evaluation does not outlive the test.
const slowPolicy = `package policies

#Policy: {
	input: _
	let l = input.conflicts
	let n = len([for a in l for b in l for c in l if a+b+c == "" {1}])
	decision: {
		allowed: false
		wait:    false
		rule:    "slow"
		reasons: ["visited no triple: \(n)"]
		message: "the slow policy decided"
	}
}
`

const (
	testTimeout = 25 * time.Millisecond
	// slack is what a loaded CI machine (and -race) may add to the bound.
	slack = 2 * time.Second
	// slowConflicts makes slowPolicy run for well over testTimeout.
	slowConflicts = 60
)

func slowEngine(t *testing.T) *Engine {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "slow.cue"), []byte(slowPolicy), 0o644))
	e, err := FromDir(dir)
	require.NoError(t, err)
	e.Timeout = testTimeout
	return e
}

func input(conflicts int) Input {
	in := Input{Remediation: v1alpha1.RemediationReleaseLUKSLease, Facts: &v1alpha1.Facts{}, Conflicts: []string{}}
	for i := range conflicts {
		in.Conflicts = append(in.Conflicts, fmt.Sprintf("remediator/request-%d", i))
	}
	return in
}

// decide times one decision.
func decide(t *testing.T, e *Engine, in Input) (Decision, time.Duration) {
	t.Helper()
	start := time.Now()
	d, err := e.Decide(in)
	require.NoError(t, err, "a timeout is a decision, not an error")
	return d, time.Since(start)
}

// waitForRunaways waits until the abandoned evaluations end, so that they do not
// take CPU from the tests that follow.
func waitForRunaways(t *testing.T, e *Engine) {
	t.Helper()
	waitForCompiledRunaways(t, e.current())
}

// waitForCompiledRunaways waits until the abandoned evaluations of policy c end, also
// after a Reload replaced it.
func waitForCompiledRunaways(t *testing.T, c *compiledPolicy) {
	t.Helper()
	require.Eventually(t, func() bool { return c.runaway.Load() == 0 }, 2*time.Minute, 10*time.Millisecond,
		"the abandoned evaluations never ended")
}

func assertTimedOut(t *testing.T, e *Engine, d Decision) {
	t.Helper()
	assert.Equal(t, RulePolicyTimeout, d.Rule)
	assert.Equal(t, VerdictReject, d.Verdict, "a timed-out policy must not allow anything, nor wait")
	assert.Empty(t, d.Playbook)
	assert.Equal(t, int64(60), d.RecheckAfterSeconds)
	assert.Equal(t, e.Digest(), d.Digest)
	assert.Equal(t, []string{"policy evaluation exceeded 25ms"}, d.Reasons)
	assert.Contains(t, d.Message, "longer than 25ms")
	assert.Contains(t, d.Message, "check policy "+e.Digest()+" ("+e.Source()+")")
}

func TestDecideTimesOut(t *testing.T) {
	e := slowEngine(t)
	t.Cleanup(func() { waitForRunaways(t, e) })

	// The policy itself works: a short input decides.
	d, _ := decide(t, e, input(2))
	require.Equal(t, "slow", d.Rule)

	d, took := decide(t, e, input(slowConflicts))
	assertTimedOut(t, e, d)
	assert.Less(t, took, testTimeout+slack, "Decide waited for the runaway evaluation")
	assert.Equal(t, "Policy evaluation took longer than 25ms and was abandoned. Nothing is allowed until the policy decides in time: check policy "+
		e.Digest()+" ("+e.Source()+") for unbounded recursion or comprehensions over large inputs, and fix or reload it. Deciding again in 60s.", d.Message)
	t.Logf("policy-timeout after %s: %s", took, d.Message)

	// The runaway keeps its CUE values; the next decision gets a fresh copy of the
	// same policy and is not blocked by it.
	d, took = decide(t, e, input(2))
	assert.Equal(t, "slow", d.Rule, "the engine no longer decides after a timeout")
	assert.Equal(t, e.Digest(), d.Digest)
	assert.Less(t, took, testTimeout+slack)

	// Other engines, such as the embedded policies, are unaffected.
	fx := loadFixture(t, "testdata/healthy-retained.yaml")
	d, err := engine(t).Decide(fx.Input)
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.PlaybookHealthyMoveWorkload, d.Playbook)
}

func TestDecideFailsClosedAtRunawayCap(t *testing.T) {
	e := slowEngine(t)
	t.Cleanup(func() { waitForRunaways(t, e) })

	for i := range MaxRunawayEvaluations {
		d, _ := decide(t, e, input(slowConflicts))
		require.Equal(t, RulePolicyTimeout, d.Rule, "runaway %d", i)
	}
	require.EqualValues(t, MaxRunawayEvaluations, e.current().runaway.Load(), "the slow evaluations ended before the test could see them running")

	// At the cap even a quick input is refused at once: no more evaluations start.
	d, took := decide(t, e, input(2))
	assertTimedOut(t, e, d)
	assert.Less(t, took, testTimeout+slack)
	assert.EqualValues(t, MaxRunawayEvaluations, e.current().runaway.Load(), "at the cap Decide must not start another evaluation")
	assert.True(t, strings.HasPrefix(d.Message, fmt.Sprintf("Policy evaluation is suspended: %d earlier evaluations of policy %s (%s) took longer than 25ms and are still running.",
		MaxRunawayEvaluations, e.Digest(), e.Source())), d.Message)

	// Once they end, the engine decides again.
	waitForRunaways(t, e)
	d, _ = decide(t, e, input(2))
	assert.Equal(t, "slow", d.Rule)
}

func TestDefaultTimeout(t *testing.T) {
	assert.Equal(t, time.Second, DefaultTimeout)
	// A zero Timeout means the default: the embedded policies decide well within it.
	e := engine(t)
	require.Zero(t, e.Timeout)
	d, err := e.Decide(loadFixture(t, "testdata/shutdown-holder.yaml").Input)
	require.NoError(t, err)
	assert.NotEqual(t, RulePolicyTimeout, d.Rule)
}

func TestConditionReason(t *testing.T) {
	// The pattern metav1.Condition's reason must match (apimachinery's
	// conditionReasonFmt).
	valid := regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)
	long := strings.Repeat("ab-", 600)
	cases := []struct{ rule, want string }{
		{"node-shutdown", "NodeShutdown"},
		{v1alpha1.PlaybookFencedUnreachable, "FencedUnreachable"},
		{RulePolicyTimeout, "PolicyTimeout"},
		{"lease_not_found", "LeaseNotFound"},
		{"unreachable not fenced", "UnreachableNotFenced"},
		{"rule.with.dots", "RuleWithDots"},
		{"alreadyCamel", "AlreadyCamel"},
		{"1st-rule", "Rule1stRule"},
		{"42", "Rule42"},
		{"règle-ünïcode", "RgleNcode"},
		{"日本", "Unknown"},
		{"", "Unknown"},
		{"--", "Unknown"},
		{"a/b:c,d", "Abcd"},
		{"trailing-", "Trailing"},
		{long, strings.Repeat("Ab", 512)},
	}
	for _, tc := range cases {
		name := tc.rule
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		t.Run(name, func(t *testing.T) {
			got := ConditionReason(tc.rule)
			assert.Equal(t, tc.want, got)
			assert.Regexp(t, valid, got)
			assert.LessOrEqual(t, len(got), 1024)
			// The API server's own validation of a condition accepts it.
			errs := metav1validation.ValidateCondition(metav1.Condition{
				Type: "Accepted", Status: metav1.ConditionFalse, Reason: got,
				LastTransitionTime: metav1.Now(),
			}, field.NewPath("status", "conditions").Index(0))
			assert.Empty(t, errs)
		})
	}
}

// TestDecideTimesOutWhileCompilingACopy: the compile of a copy is bounded too. A
// decision that finds no idle copy compiles one, and if that compile were unbounded a
// worker would wait for it (and a manager stopping would give up on the worker). It
// has a bound of its own, a load's (compileTimeout), as a compile takes longer than an
// evaluation. The hook holds the compile for as long as the test runs.
func TestDecideTimesOutWhileCompilingACopy(t *testing.T) {
	e := slowEngine(t)
	// Lowered once the policy is loaded, which would otherwise be held to it.
	defer func(was time.Duration) { compileTimeout = was }(compileTimeout)
	compileTimeout = testTimeout
	c := e.current()
	c.idle = nil // every copy in use: the next decision compiles one
	hold := make(chan struct{})
	c.onCompile = func() { <-hold }
	t.Cleanup(func() {
		close(hold)
		waitForRunaways(t, e)
	})

	got := make(chan Decision, 1)
	go func() {
		d, err := e.Decide(input(2))
		assert.NoError(t, err, "a timeout is a decision, not an error")
		got <- d
	}()
	select {
	case d := <-got:
		assert.Equal(t, RulePolicyTimeout, d.Rule)
		assert.Equal(t, VerdictReject, d.Verdict, "a timed-out policy must not allow anything, nor wait")
		assert.Equal(t, []string{"building a copy of the policy exceeded 25ms"}, d.Reasons)
		assert.True(t, strings.HasPrefix(d.Message, "Building a copy of the policy took longer than 25ms and was abandoned."), d.Message)
	case <-time.After(testTimeout + slack):
		require.FailNow(t, "Decide waited for the compile of a copy, past its bound")
	}
	assert.EqualValues(t, 1, c.runaway.Load(), "the abandoned compile is a runaway: it counts towards the cap")
}

// TestTheEvaluationBoundExcludesTheCompile: a decision's own bound (Timeout) starts
// once it has its copy, so a compile that takes longer than an evaluation may (the
// first decisions of a storm each compile one) does not fail it closed.
func TestTheEvaluationBoundExcludesTheCompile(t *testing.T) {
	e := slowEngine(t)
	// The default bound, so that a loaded machine does not fail the evaluation
	// itself; the build takes half as long again.
	e.Timeout = DefaultTimeout
	c := e.current()
	c.idle = nil
	c.onCompile = func() { time.Sleep(DefaultTimeout * 3 / 2) }
	d, _ := decide(t, e, input(2))
	assert.Equal(t, "slow", d.Rule, d.Message)
	assert.Zero(t, c.runaway.Load())
}
