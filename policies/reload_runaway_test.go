package policies

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReloadAfterRunawaysDecidesAgain: runaway evaluations suspend the policy they
// ran on, not the Engine. A reload to a fixed policy is the way out the timeout's
// message gives; it must decide at once, although the old policy's runaways are
// still running (CUE cannot cancel them).
func TestReloadAfterRunawaysDecidesAgain(t *testing.T) {
	e := slowEngine(t)
	old := e.current()
	t.Cleanup(func() { waitForCompiledRunaways(t, old) })

	for i := range MaxRunawayEvaluations {
		d, _ := decide(t, e, input(slowConflicts))
		require.Equal(t, RulePolicyTimeout, d.Rule, "runaway %d", i)
	}
	d, _ := decide(t, e, input(2))
	require.Equal(t, RulePolicyTimeout, d.Rule, "at the cap the old policy must stay suspended")
	require.Contains(t, d.Message, "Policy evaluation is suspended")
	suspended, why := e.Suspended()
	require.True(t, suspended, "the Engine does not say it is suspended")
	assert.Contains(t, why, old.digest)
	require.EqualValues(t, MaxRunawayEvaluations, old.runaway.Load(), "the slow evaluations ended before the reload could be tried under them")

	// The fix: the same policy without the cubic comprehension.
	fixed := `package policies

#Policy: {
	input: _
	decision: {
		allowed: false
		wait:    false
		rule:    "fixed"
		reasons: ["decides at once"]
		message: "the fixed policy decided"
	}
}
`
	require.NoError(t, os.WriteFile(filepath.Join(e.Source(), "slow.cue"), []byte(fixed), 0o644))
	changed, err := e.Reload()
	require.NoError(t, err)
	require.True(t, changed)

	suspended, why = e.Suspended()
	assert.False(t, suspended, "the new policy is suspended by the old one's runaways: %s", why)
	assert.Empty(t, why)
	// The fixed policy decides at once, but the 25 ms bound that made the old one's
	// runaways quick is less than one evaluation can take on a loaded machine under
	// -race (the clean-clone make test timed it out once): this check is about the
	// old policy's runaways, not about speed.
	e.Timeout = DefaultTimeout
	d, _ = decide(t, e, input(2))
	assert.Equal(t, "fixed", d.Rule, "the runaways of the old policy still suspend decisions: %s", d.Message)
	assert.Equal(t, e.Digest(), d.Digest)
	// Even the input that ran away before decides now.
	d, _ = decide(t, e, input(slowConflicts))
	assert.Equal(t, "fixed", d.Rule, d.Message)
	assert.EqualValues(t, MaxRunawayEvaluations, old.runaway.Load(), "the test did not run under the old policy's runaways")
}
