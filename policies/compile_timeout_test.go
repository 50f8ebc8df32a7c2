package policies

import (
	"os"
	"path/filepath"
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

// stillRunning counts the abandoned builds that have not ended.
func (t *timedOut) stillRunning() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, b := range t.builds {
		n += b.running
	}
	return n
}

// waitForAbandonedBuilds waits until the builds past the bound end, so that they do
// not take CPU from the tests that follow.
func waitForAbandonedBuilds(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return timedOutBuilds.stillRunning() == 0 }, 2*time.Minute, 10*time.Millisecond,
		"the abandoned builds never ended")
}

// TestABuildThatRunsAwayIsRefusedAtLoad: a load waits for the policy's build at most
// compileTimeout, and is then refused like any source that cannot be used: the
// controller's reload keeps the last good policy, and the sync's check of a revision
// refuses the revision, where either used to wait for as long as the build ran. The
// same source is refused at once afterwards, not built again; another source, the
// fix, is built whatever runs in the background.
func TestABuildThatRunsAwayIsRefusedAtLoad(t *testing.T) {
	// A memory of its own: the sources' digests are the same in every run (-count).
	old := timedOutBuilds
	timedOutBuilds = &timedOut{}
	t.Cleanup(func() { timedOutBuilds = old })
	good := t.TempDir()
	copyPolicies(t, good)
	e, err := FromDir(good)
	require.NoError(t, err)
	lastGood := e.Digest()

	was := compileTimeout
	defer func() { compileTimeout = was }()
	compileTimeout = testTimeout
	t.Cleanup(func() { waitForAbandonedBuilds(t) })

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
	assert.Less(t, took, testTimeout+slack, "the load waited for the build")
	require.Equal(t, 1, timedOutBuilds.stillRunning(), "the build ended before the test could see it running")

	// Again: refused at once, without another build.
	start = time.Now()
	_, err = FromFS(os.DirFS(dir))
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LoadReasonTimeout, le.Reason)
	assert.Contains(t, le.Error(), "is not built again yet: a build of it took longer than 25ms")
	assert.Contains(t, le.Error(), "ago and still runs")
	assert.Less(t, time.Since(start), slack)
	assert.Equal(t, 1, timedOutBuilds.stillRunning())

	// The controller's reload of it keeps the last good policy.
	e.dir = dir
	changed, err := e.Reload()
	assert.False(t, changed)
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LoadReasonTimeout, le.Reason)
	assert.Equal(t, lastGood, e.Digest())

	// Another source that runs away gets its build too, and so does the fix, while
	// both still run.
	second := t.TempDir()
	writePolicy(t, second, "p.cue", runawayAtLoad+"// another\n")
	_, err = FromDir(second)
	require.ErrorAs(t, err, &le)
	assert.Contains(t, le.Error(), "took longer than 25ms and was abandoned")
	require.Equal(t, 2, timedOutBuilds.stillRunning())
	compileTimeout = was
	p := filepath.Join(good, "reregister_csi_driver.cue")
	src, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, append(src, "// fixed\n"...), 0o644))
	e.dir = good
	changed, err = e.Reload()
	require.NoError(t, err, "the fix is refused while earlier builds run")
	assert.True(t, changed)

	// Once they end, the source that ran away is still refused at once for a while,
	// then built again (in case only the machine was stalled).
	waitForAbandonedBuilds(t)
	_, err = FromDir(dir)
	require.ErrorAs(t, err, &le)
	assert.Contains(t, le.Error(), "it is built again 10m0s after that")
	defer func(was time.Duration) { rebuildAfter = was }(rebuildAfter)
	rebuildAfter = 0
	compileTimeout = testTimeout
	_, err = FromDir(dir)
	require.ErrorAs(t, err, &le)
	assert.Contains(t, le.Error(), "took longer than 25ms and was abandoned", "not built again")
	assert.Equal(t, 1, timedOutBuilds.stillRunning())
}
