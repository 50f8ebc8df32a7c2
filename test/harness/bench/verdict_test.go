package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVerdictCallBudget(t *testing.T) {
	p := presets["small"]
	point := func(n int, calls float64, by map[string]int) ScalePoint {
		return ScalePoint{Requests: n, TerminalSeconds: 1, FloorSeconds: 0.1, Succeeded: n, APICallsPerRequest: calls, APICallsByKind: by}
	}

	t.Run("within the budget at every size", func(t *testing.T) {
		r := &Result{Scale: []ScalePoint{point(1, 4, nil), point(100, 3.5, nil)}}
		require.NoError(t, verdict(r, p))
		assert.Contains(t, summarise(r), "per request at every size: met")
	})

	t.Run("a few live reads of a loaded machine pass, a write more does not", func(t *testing.T) {
		reads := &Result{Scale: []ScalePoint{point(100, 4.03, map[string]int{"GET": 3, "PATCH": 200, "DELETE": 100, "POST": 100})}}
		require.NoError(t, verdict(reads, p))
		write := &Result{Scale: []ScalePoint{point(100, 5, map[string]int{"PATCH": 300, "DELETE": 100, "POST": 100})}}
		require.Error(t, verdict(write, p))
		one := &Result{Scale: []ScalePoint{point(1, 5, map[string]int{"GET": 1, "PATCH": 2, "DELETE": 1, "POST": 1})}}
		require.NoError(t, verdict(one, p), "one request's one live read")
		oneWrite := &Result{Scale: []ScalePoint{point(1, 5, map[string]int{"PATCH": 3, "DELETE": 1, "POST": 1})}}
		require.Error(t, verdict(oneWrite, p), "one request's one write more")
		// 4001.0/1000*1000 is 4001.0000000000005 in floating point: counted in
		// floats, one allowed read of a storm of 1,000 failed the run.
		big := &Result{Scale: []ScalePoint{point(1000, 4001.0/1000, map[string]int{"GET": 1, "PATCH": 2000, "DELETE": 1000, "POST": 1000})}}
		require.NoError(t, verdict(big, p), "a storm of 1,000's one live read")
		bigWrite := &Result{Scale: []ScalePoint{point(1000, 4001.0/1000, map[string]int{"PATCH": 2001, "DELETE": 1000, "POST": 1000})}}
		require.Error(t, verdict(bigWrite, p), "a storm of 1,000's one write more")
	})

	t.Run("one size over the budget fails the run", func(t *testing.T) {
		r := &Result{Scale: []ScalePoint{
			point(1, 4, nil),
			point(100, 12.5, map[string]int{"GET": 830, "PATCH": 200, "DELETE": 100, "POST": 120}),
		}}
		err := verdict(r, p)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "storm of 100: 12.5 API calls per request (1250 in all), budget 4 (DELETE 1.0, GET 8.3, PATCH 2.0, POST 1.2)")
		assert.NotContains(t, err.Error(), "storm of 1:")
		assert.Contains(t, summarise(r), "EXCEEDED")
	})

	t.Run("a result without the scale is checked on its storm", func(t *testing.T) {
		r := &Result{Storm: &Storm{Requests: 100, TerminalSeconds: 5, Succeeded: 100, APICallsPerRequest: 6}}
		err := verdict(r, p)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "storm of 100: 6.0 API calls per request (600 in all)")
	})

	t.Run("a size not terminal or not all Succeeded fails the run", func(t *testing.T) {
		stuck := point(100, 3, nil)
		stuck.TerminalSeconds, stuck.Succeeded = 0, 90
		err := verdict(&Result{Scale: []ScalePoint{point(1, 3, nil), stuck}}, p)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "storm of 100 not terminal")
		assert.Contains(t, err.Error(), "storm of 100: 90 of 100 Succeeded")
	})
	t.Run("the baseline is recorded, never failed on", func(t *testing.T) {
		base := point(100, 12.5, map[string]int{"GET": 830, "PATCH": 200, "DELETE": 100, "POST": 120})
		base.TerminalSeconds, base.Succeeded = 0, 90
		now := point(100, 3.5, map[string]int{"PATCH": 200, "DELETE": 100, "POST": 50})
		now.TerminalSeconds, now.Ratio, now.PeakRSSMiB = 2.5, 25, 80
		r := &Result{Scale: []ScalePoint{point(1, 4, nil), now},
			Baseline: &Baseline{Version: "remediator a9f3949", Binary: "bin/remediator-baseline", Storm: base}}
		require.NoError(t, verdict(r, p))
		s := summarise(r)
		assert.Contains(t, s, "The controller now next to the baseline, remediator a9f3949 (bin/remediator-baseline): a storm of 100")
		assert.Regexp(t, `MEASURE\s+BASELINE\s+NOW\s+FLOOR`, s)
		assert.Regexp(t, `storm of 100, all terminal\s+not reached \(90 Succeeded\)\s+2\.5 s \(100 Succeeded\)\s+0\.10 s`, s)
		assert.Regexp(t, `API calls per request\s+12\.5 \(DELETE 1\.0, GET 8\.3, PATCH 2\.0, POST 1\.2\)\s+3\.5 \(DELETE 1\.0, PATCH 2\.0, POST 0\.5\)`, s)
		assert.Contains(t, s, "The baseline, recorded and not checked: not all terminal, 90 of 100 Succeeded, over the call budget of 4")
		assert.Contains(t, s, "per request at every size: met")
	})
}

func TestCommand(t *testing.T) {
	assert.Equal(t, "make bench BENCH=small", command("small", ""))
	assert.Equal(t, "make bench BENCH=full BASELINE=a9f3949", command("full", "remediator a9f3949"))
	assert.Equal(t, "make bench BENCH=full BASELINE=<the baseline's git ref>", command("full", "remediator a9f3949-dirty"))
	assert.Equal(t, "make bench BENCH=full BASELINE=<the baseline's git ref>", command("full", "/work/main/bin/remediator-old"))
	assert.Equal(t, "make bench BENCH=full BASELINE=v0.4.0", command("full", "remediator-controller v0.4.0"))
	assert.Equal(t, "make bench BENCH=full BASELINE=<the baseline's git ref>", command("full", "kubectl v0.4.0"))
}

// The summary judges a run against the storm issue's goals: the storm within twice
// its floor, the call budget, 150 MiB, one request 30 times faster than the script.
func TestSummaryGoals(t *testing.T) {
	r := &Result{
		Latency: &Latency{Requests: 20, P50Ms: 49, ScriptP50Ms: 1618, Ratio: 33.1},
		Storm:   &Storm{Requests: 1000, Pods: 20000, TerminalSeconds: 45, Succeeded: 1000, APICallsPerRequest: 4, PeakRSSMiB: 189},
		Scale:   []ScalePoint{{Requests: 1000, TerminalSeconds: 45, FloorSeconds: 16.07, Succeeded: 1000, APICallsPerRequest: 4}},
	}
	s := summarise(r)
	assert.Regexp(t, `p50\s+49 ms\s+1618 ms \(33\.1x\)\s+>= 30x faster than the script: met`, s)
	assert.Regexp(t, `all terminal\s+45\.0 s \(1000 Succeeded\)\s+-\s+<= 2x the floor \(16\.07 s\): MISSED`, s)
	assert.Regexp(t, `storm API calls per request\s+4\.0 .*<= 4, live reads allowed: met`, s)
	assert.Regexp(t, `peak RSS\s+189 MiB\s+-\s+<= 150 MiB: MISSED`, s)

	// Two live reads of a storm of 1,000 are within its allowance.
	r.Storm.APICallsPerRequest, r.Storm.APICallsByKind = 4.002, map[string]int{"GET": 2, "PATCH": 2000, "DELETE": 1000, "POST": 1000}
	assert.Regexp(t, `storm API calls per request\s+4\.0 .*: met`, summarise(r))

	r.Latency.Ratio, r.Storm.TerminalSeconds, r.Storm.PeakRSSMiB = 29.9, 32.1, 150
	r.Storm.APICallsPerRequest, r.Storm.APICallsByKind = 4.1, map[string]int{"PATCH": 2100, "DELETE": 1000, "POST": 1000}
	s = summarise(r)
	assert.Contains(t, s, "faster than the script: MISSED")
	assert.Regexp(t, `<= 2x the floor \(16\.07 s\): met`, s)
	assert.Contains(t, s, "<= 150 MiB: met")
	assert.Regexp(t, `storm API calls per request\s+4\.1 .*: MISSED`, s)
}
