package policies

import (
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecisionsEvaluateConcurrently: decisions on one Engine evaluate at the same
// time, so one slow policy evaluation does not hold up every worker, and no more
// than maxEvaluating, so that a burst does not compile a copy per worker. Each
// evaluation waits in the test hook until maxEvaluating are evaluating at once; an
// Engine that serialised decisions would never get there (each caller gives up
// waiting after a bound and the test fails on the count, it does not hang).
func TestDecisionsEvaluateConcurrently(t *testing.T) {
	// More callers than evaluations may run at once: as many as the process has
	// CPUs (at least two) run together, and no more.
	limit := maxEvaluating()
	callers := limit + 2
	e := slowEngine(t)
	// The hook holds every evaluation until limit have started; none may time out.
	e.Timeout = time.Minute
	var running, most atomic.Int32
	all := make(chan struct{})
	var once sync.Once
	e.onEvaluate = func() {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if int(n) == limit {
			once.Do(func() { close(all) })
		}
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
	}
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			d, err := e.Decide(input(2))
			assert.NoError(t, err)
			assert.Equal(t, "slow", d.Rule, d.Message)
		})
	}
	wg.Wait()
	assert.EqualValues(t, limit, most.Load(), "evaluations on one Engine: %d at once, want %d", most.Load(), limit)
}

// TestConcurrentDecisionsAgree: decisions made at once, with the embedded policies
// and with the same policies from a directory, give what the same decisions give one
// at a time. Run with -race: each evaluation must use
// CUE values no other evaluation touches.
func TestConcurrentDecisionsAgree(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var inputs []Input
	for _, f := range files {
		inputs = append(inputs, loadFixture(t, f).Input)
	}

	dir := t.TempDir()
	copyPolicies(t, dir)
	fromDir, err := FromDir(dir)
	require.NoError(t, err)

	for name, e := range map[string]*Engine{"embedded": engine(t), "from a directory": fromDir} {
		t.Run(name, func(t *testing.T) {
			type answer struct {
				d   Decision
				err string
			}
			decideOne := func(in Input) answer {
				d, err := e.Decide(in)
				if err != nil {
					return answer{err: err.Error()}
				}
				return answer{d: d}
			}
			want := make([]answer, len(inputs))
			for i, in := range inputs {
				want[i] = decideOne(in)
			}
			const rounds = 3
			got := make([][]answer, rounds)
			var wg sync.WaitGroup
			for r := range rounds {
				got[r] = make([]answer, len(inputs))
				for i, in := range inputs {
					wg.Go(func() { got[r][i] = decideOne(in) })
				}
			}
			wg.Wait()
			for r := range rounds {
				assert.Equal(t, want, got[r], "round %d", r)
			}
			c := e.current()
			c.poolMu.Lock()
			defer c.poolMu.Unlock()
			assert.LessOrEqual(t, len(c.idle), maxEvaluating(), "the copies of a burst are all kept")
			assert.LessOrEqual(t, int(c.copies.Load()), maxEvaluating(), "a burst of %d evaluates %d at a time, on as many copies", rounds*len(inputs), maxEvaluating())
		})
	}
}

// TestSuspendedFollowsTheRunaways: the Engine says it is suspended while the policy
// in use has MaxRunawayEvaluations evaluations still running, and why; not before,
// and not once they ended.
func TestSuspendedFollowsTheRunaways(t *testing.T) {
	e := slowEngine(t)
	t.Cleanup(func() { waitForRunaways(t, e) })
	suspended, why := e.Suspended()
	require.False(t, suspended)
	require.Empty(t, why)

	for i := range MaxRunawayEvaluations {
		suspended, _ = e.Suspended()
		assert.False(t, suspended, "suspended after %d runaways", i)
		d, _ := decide(t, e, input(slowConflicts))
		require.Equal(t, RulePolicyTimeout, d.Rule, "runaway %d", i)
	}
	suspended, why = e.Suspended()
	assert.True(t, suspended)
	assert.Equal(t, "Policy evaluation is suspended: 2 earlier evaluations of policy "+e.Digest()+" ("+e.Source()+") took longer than 25ms and are still running.", why)
	d, _ := decide(t, e, input(2))
	assert.Contains(t, d.Message, why, "Decide and Suspended disagree")

	waitForRunaways(t, e)
	suspended, why = e.Suspended()
	assert.False(t, suspended, why)
	d, _ = decide(t, e, input(2))
	assert.Equal(t, "slow", d.Rule)
}
