package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// Goals; the summary marks each one met or missed. The call budget is callBudget,
// which the run also fails on (verdict).
const (
	// goalScriptRatio: one request at least this many times faster than the kubectl
	// runbook script, at the median.
	goalScriptRatio = 30
	// goalFloorRatio: the largest storm terminal within this many times the API
	// server's floor measured in the same run.
	goalFloorRatio    = 2
	goalRSSMiB        = 150
	goalMemoryDiffPct = 10
	goalHandoverSec   = 1
)

// scalePoint is the scale's storm of n requests, nil when the run has none.
func scalePoint(r *Result, n int) *ScalePoint {
	for i := range r.Scale {
		if r.Scale[i].Requests == n {
			return &r.Scale[i]
		}
	}
	return nil
}

func mark(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// summarise renders the one summary table make bench prints.
func summarise(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nRemediator benchmark, preset %s, %s, %d cores, %d MiB, %s\n\n", r.Preset, r.Commit, r.Machine.NProc, r.Machine.MemTotalMiB, r.StartedAt.Format("2006-01-02 15:04 MST"))
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MEASURE\tREMEDIATOR\tKUBECTL RUNBOOK\tGOAL\t")
	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "created -> Lease deleted, %d sequential, p50\t%.0f ms\t%.0f ms (%.1fx)\t>= %dx faster than the script: %s\t\n", l.Requests, l.P50Ms, l.ScriptP50Ms, l.Ratio, goalScriptRatio, mark(l.Ratio >= goalScriptRatio))
		fmt.Fprintf(w, "created -> Lease deleted, %d sequential, p99\t%.0f ms\t%.0f ms\t-\t\n", l.Requests, l.P99Ms, l.ScriptP99Ms)
		fmt.Fprintf(w, "API calls per shut-down remediation\t%.1f (%s)\t%d kubectl calls\t-\t\n", l.APICallsPerRequest, byMethod(l.APICallsByKind, l.Requests), l.ScriptCalls)
	}
	if s := r.Storm; s != nil {
		fmt.Fprintf(w, "storm of %d (%d pods), all decided\t%.1f s\t-\t-\t\n", s.Requests, s.Pods, s.DecidedSeconds)
		goal := "-"
		if p := scalePoint(r, s.Requests); p != nil && p.FloorSeconds > 0 {
			goal = fmt.Sprintf("<= %dx the floor (%.2f s): %s", goalFloorRatio, p.FloorSeconds, mark(s.TerminalSeconds > 0 && s.TerminalSeconds <= goalFloorRatio*p.FloorSeconds))
		}
		fmt.Fprintf(w, "storm of %d (%d pods), all terminal\t%s (%d Succeeded)\t-\t%s\t\n", s.Requests, s.Pods, secs(s.TerminalSeconds), s.Succeeded, goal)
		calls := ScalePoint{Requests: s.Requests, APICallsPerRequest: s.APICallsPerRequest, APICallsByKind: s.APICallsByKind}
		fmt.Fprintf(w, "storm API calls per request\t%.1f (%s)\t-\t<= %d, live reads allowed: %s\t\n", s.APICallsPerRequest, byMethod(s.APICallsByKind, s.Requests), callBudget, mark(withinBudget(calls)))
		fmt.Fprintf(w, "storm controller peak RSS\t%.0f MiB\t-\t<= %d MiB: %s\t\n", s.PeakRSSMiB, goalRSSMiB, mark(s.PeakRSSMiB <= goalRSSMiB))
	}
	if d := r.Disruptive; d != nil {
		fmt.Fprintf(w, "disruptive storm of %d, cap %d, all terminal\t%s (%d Succeeded, at most %d at once)\t-\t-\t\n", d.Requests, d.Cap, secs(d.TerminalSeconds), d.Succeeded, d.MaxConcurrent)
		fmt.Fprintf(w, "slot handover, max (p50)\t%.2f s (%.2f s), FIFO %v\t-\t<= %d s, FIFO: %s\t\n", d.MaxHandoverSeconds, d.P50HandoverSeconds, d.FIFO, goalHandoverSec, mark(d.FIFO && d.MaxHandoverSeconds <= goalHandoverSec))
		fmt.Fprintf(w, "decisions beyond arrival + slot\t%d (of %d)\t-\t0: %s\t\n", d.ExtraDecisions, d.Decisions, mark(d.ExtraDecisions <= 0))
	}
	if m := r.Memory; m != nil && len(m.Samples) == 2 {
		a, z := m.Samples[0], m.Samples[1]
		fmt.Fprintf(w, "peak RSS, %d requests: %d pods vs %d pods\t%.0f vs %.0f MiB (%.1f%%)\t-\t<= %d%%: %s\t\n", a.Requests, a.Pods, z.Pods, a.PeakRSSMiB, z.PeakRSSMiB, m.DiffPercent, goalMemoryDiffPct, mark(m.DiffPercent <= goalMemoryDiffPct))
	}
	_ = w.Flush() // into a strings.Builder, which cannot fail
	scaleTable(&b, r)
	baselineTable(&b, r)
	writesTable(&b, r)
	return b.String()
}

// writesTable renders what one status write cost the API server and etcd, by the
// status the request carried.
func writesTable(b *strings.Builder, r *Result) {
	if r.Writes == nil {
		return
	}
	fmt.Fprintf(b, "\nOne status write, by what the request carries (%d requests each, %d writes each a round, no controller running; the median of %d rounds)\n\n",
		r.Writes.Writes, writesPerRound, r.Writes.Rounds)
	w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STATUS\tREQUEST SIZE\tAPI SERVER CPU PER WRITE\tETCD CPU PER WRITE\t")
	for _, c := range r.Writes.Costs {
		fmt.Fprintf(w, "%s\t%d bytes\t%.1f ms\t%.1f ms\t\n", c.Status, c.Bytes, c.APIServerMs, c.EtcdMs)
	}
	_ = w.Flush()
}

// baselineTable renders the storm at the largest size with the baseline's binary
// next to the current controller's and the API server's floor. The baseline is
// recorded, not checked: what it misses is said, never failed on.
func baselineTable(b *strings.Builder, r *Result) {
	base := r.Baseline
	if base == nil {
		return
	}
	bs := base.Storm
	var now *ScalePoint
	for i := range r.Scale {
		if r.Scale[i].Requests == bs.Requests {
			now = &r.Scale[i]
		}
	}
	fmt.Fprintf(b, "\nThe controller now next to the baseline, %s (%s): a storm of %d on fresh incidents, each after its own floor\n\n",
		base.Version, base.Binary, bs.Requests)
	w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MEASURE\tBASELINE\tNOW\tFLOOR\t")
	cells := func(f func(p ScalePoint) string) (string, string) {
		if now == nil {
			return f(bs), "-"
		}
		return f(bs), f(*now)
	}
	row := func(measure string, f func(p ScalePoint) string, floor string) {
		bc, nc := cells(f)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t\n", measure, bc, nc, floor)
	}
	floor := "-"
	if now != nil && now.FloorSeconds > 0 {
		floor = fmt.Sprintf("%.2f s (the baseline's %.2f s)", now.FloorSeconds, bs.FloorSeconds)
	} else if bs.FloorSeconds > 0 {
		floor = fmt.Sprintf("the baseline's %.2f s", bs.FloorSeconds)
	}
	row(fmt.Sprintf("storm of %d, all terminal", bs.Requests), func(p ScalePoint) string {
		return fmt.Sprintf("%s (%d Succeeded)", secs(p.TerminalSeconds), p.Succeeded)
	}, floor)
	row("storm / its floor", func(p ScalePoint) string {
		if p.Ratio == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1fx", p.Ratio)
	}, "1.0x")
	row("API calls per request", func(p ScalePoint) string {
		return fmt.Sprintf("%.1f (%s)", p.APICallsPerRequest, byMethod(p.APICallsByKind, p.Requests))
	}, fmt.Sprintf("budget %d (now only)", callBudget))
	row("peak RSS", func(p ScalePoint) string { return fmt.Sprintf("%.0f MiB", p.PeakRSSMiB) }, "-")
	row("API server + etcd CPU per request", func(p ScalePoint) string {
		if p.StormControlPlane == nil {
			return "-"
		}
		return p.StormControlPlane.pair() + " ms"
	}, floorCost(now))
	_ = w.Flush()
	var missed []string
	if bs.TerminalSeconds == 0 {
		missed = append(missed, "not all terminal")
	}
	if bs.Succeeded != bs.Requests {
		missed = append(missed, fmt.Sprintf("%d of %d Succeeded", bs.Succeeded, bs.Requests))
	}
	if !withinBudget(bs) {
		missed = append(missed, fmt.Sprintf("over the call budget of %d", callBudget))
	}
	if len(missed) > 0 {
		fmt.Fprintf(b, "\nThe baseline, recorded and not checked: %s\n", strings.Join(missed, ", "))
	}
}

// scaleTable renders the storm at each size next to the API server's floor, and
// the call budget's verdict.
func scaleTable(b *strings.Builder, r *Result) {
	if len(r.Scale) == 0 {
		return
	}
	fmt.Fprintf(b, "\nThe storm against the API server's floor (the same releases with the minimum calls, 32 workers, no controller)\n\n")
	w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "REQUESTS\tALL TERMINAL\tFLOOR\tSTORM / FLOOR\tAPI CALLS PER REQUEST\tPEAK RSS\tAPI SERVER + ETCD CPU PER REQUEST, FLOOR -> STORM\t")
	for _, p := range r.Scale {
		ratio := "-"
		if p.Ratio > 0 {
			ratio = fmt.Sprintf("%.1fx", p.Ratio)
		}
		fmt.Fprintf(w, "%d\t%s (%d Succeeded)\t%.2f s\t%s\t%.1f (%s)\t%.0f MiB\t%s\t\n",
			p.Requests, secs(p.TerminalSeconds), p.Succeeded, p.FloorSeconds, ratio, p.APICallsPerRequest, byMethod(p.APICallsByKind, p.Requests), p.PeakRSSMiB,
			controlPlaneCost(p.Requests, p.FloorControlPlane, p.StormControlPlane))
	}
	_ = w.Flush()
	over := overBudget(r)
	if len(over) == 0 {
		fmt.Fprintf(b, "\nAPI call budget, <= %d per request at every size: met\n", callBudget)
		return
	}
	fmt.Fprintf(b, "\nAPI call budget, <= %d per request at every size: EXCEEDED\n", callBudget)
	for _, o := range over {
		fmt.Fprintf(b, "  %s\n", o)
	}
}

// floorCost renders the API server's and etcd's CPU per request over p's floor.
func floorCost(p *ScalePoint) string {
	if p == nil || p.FloorControlPlane == nil {
		return "-"
	}
	return p.FloorControlPlane.pair() + " ms"
}

// controlPlaneCost renders the API server's and etcd's CPU per request over the
// floor and over the storm of n: "9.8 + 1.1 -> 31.2 + 2.0 ms"; "-" when not read,
// or below minCostRequests, where the cluster's own background work is most of it.
func controlPlaneCost(n int, floor, storm *ControlPlaneCPU) string {
	if floor == nil || storm == nil || n < minCostRequests {
		return "-"
	}
	return floor.pair() + " -> " + storm.pair() + " ms"
}

// minCostRequests is the smallest storm whose control-plane CPU per request the
// summary shows: a storm of one lasts well under a second, most of it the cluster's
// background work (kwok's heartbeats, kube-controller-manager).
const minCostRequests = 100

func secs(s float64) string {
	if s == 0 {
		return "not reached"
	}
	return fmt.Sprintf("%.1f s", s)
}

// byMethod renders calls per request by HTTP method, sorted.
func byMethod(by map[string]int, n int) string {
	if n == 0 {
		return ""
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(by[k])/float64(n)))
	}
	return strings.Join(parts, ", ")
}
