package policies

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runawayAtLoad runs away in any compile, not only in a decision: the comprehension
// reads no input, so CUE evaluates it when the package is built. 91,000 iterations
// take seconds, far over the test's bound, and still end.
const runawayAtLoad = `package policies
import "list"
#Policy: {
	input: _
	let l = list.Range(0, 45, 1)
	let n = len([for a in l for b in l for c in l if a+b+c < 0 {1}])
	decision: {allowed: false, rule: "slow", reasons: ["\(n)"], message: "m"}
}
`

// waitForAbandonedCompiles waits until the compiles past the bound end, so that they
// do not take CPU from the tests that follow.
func waitForAbandonedCompiles(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return abandonedCompiles.running() == 0 }, 2*time.Minute, 10*time.Millisecond,
		"the abandoned compiles never ended")
}

// TestACompileThatRunsAwayIsRefusedAtLoad: a load waits for the compile at most
// compileTimeout, and is then refused like any source that cannot be used: the
// controller's reload keeps the last good policy, and the sync's check of a revision
// refuses the revision, where either used to wait for as long as the compile ran. A
// load of the same source while its compile still runs is refused at once, without
// starting another.
func TestACompileThatRunsAwayIsRefusedAtLoad(t *testing.T) {
	good := t.TempDir()
	copyPolicies(t, good)
	e, err := FromDir(good)
	require.NoError(t, err)
	lastGood := e.Digest()

	defer func(was time.Duration) { compileTimeout = was }(compileTimeout)
	compileTimeout = testTimeout
	t.Cleanup(func() { waitForAbandonedCompiles(t) })

	dir := t.TempDir()
	writePolicy(t, dir, "p.cue", runawayAtLoad)
	start := time.Now()
	_, err = FromDir(dir)
	took := time.Since(start)
	var le *LoadError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LoadReasonTimeout, le.Reason)
	assert.Contains(t, le.Error(), "took longer than 25ms and was abandoned")
	assert.Contains(t, le.Error(), "reads no input")
	assert.Less(t, took, testTimeout+slack, "the load waited for the compile")
	require.Equal(t, 1, abandonedCompiles.running(), "the compile ended before the test could see it running")

	// Again, while the first compile runs: refused at once, and no second compile.
	_, err = FromFS(os.DirFS(dir))
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LoadReasonTimeout, le.Reason)
	assert.Contains(t, le.Error(), "is still running")
	assert.Equal(t, 1, abandonedCompiles.running())

	// The controller's reload of it keeps the last good policy.
	e.dir = dir
	changed, err := e.Reload()
	assert.False(t, changed)
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LoadReasonTimeout, le.Reason)
	assert.Equal(t, lastGood, e.Digest())

	// Another source that runs away is abandoned too, and at the cap a third is
	// refused at once: abandoned compiles keep a CPU each, so they are bounded.
	second := t.TempDir()
	writePolicy(t, second, "p.cue", runawayAtLoad+"// another\n")
	_, err = FromDir(second)
	require.ErrorAs(t, err, &le)
	assert.Contains(t, le.Error(), "took longer than 25ms and was abandoned")
	require.Equal(t, maxAbandonedCompiles, abandonedCompiles.running())
	third := t.TempDir()
	writePolicy(t, third, "p.cue", runawayAtLoad+"// a third\n")
	start = time.Now()
	_, err = FromDir(third)
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LoadReasonTimeout, le.Reason)
	assert.Contains(t, le.Error(), "2 earlier compiles took longer than 25ms and are still running")
	assert.Less(t, time.Since(start), slack)
	assert.Equal(t, maxAbandonedCompiles, abandonedCompiles.running())

	// Once they end, a source is compiled again.
	waitForAbandonedCompiles(t)
	_, err = FromDir(third)
	require.ErrorAs(t, err, &le)
	assert.Contains(t, le.Error(), "took longer than 25ms and was abandoned")
}
