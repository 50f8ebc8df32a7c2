package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// Goals, from the storm issue; the summary marks each one met or missed.
const (
	goalLatencyP50Ms  = 50
	goalLatencyP99Ms  = 150
	goalStormSeconds  = 60
	goalCallsPerReq   = 6
	goalRSSMiB        = 200
	goalMemoryDiffPct = 10
	goalHandoverSec   = 1
)

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
		fmt.Fprintf(w, "created -> Lease deleted, %d sequential, p50\t%.0f ms\t%.0f ms (%.1fx)\t<= %d ms: %s\t\n", l.Requests, l.P50Ms, l.ScriptP50Ms, l.Ratio, goalLatencyP50Ms, mark(l.P50Ms <= goalLatencyP50Ms))
		fmt.Fprintf(w, "created -> Lease deleted, %d sequential, p99\t%.0f ms\t%.0f ms\t<= %d ms: %s\t\n", l.Requests, l.P99Ms, l.ScriptP99Ms, goalLatencyP99Ms, mark(l.P99Ms <= goalLatencyP99Ms))
		fmt.Fprintf(w, "API calls per shut-down remediation\t%.1f (%s)\t%d kubectl calls\t<= %d: %s\t\n", l.APICallsPerRequest, byMethod(l.APICallsByKind, l.Requests), l.ScriptCalls, goalCallsPerReq, mark(l.APICallsPerRequest <= goalCallsPerReq))
	}
	if s := r.Storm; s != nil {
		fmt.Fprintf(w, "storm of %d (%d pods), all decided\t%.1f s\t-\t-\t\n", s.Requests, s.Pods, s.DecidedSeconds)
		fmt.Fprintf(w, "storm of %d (%d pods), all terminal\t%s (%d Succeeded)\t-\t<= %d s: %s\t\n", s.Requests, s.Pods, secs(s.TerminalSeconds), s.Succeeded, goalStormSeconds, mark(s.TerminalSeconds > 0 && s.TerminalSeconds <= goalStormSeconds))
		fmt.Fprintf(w, "storm API calls per request\t%.1f (%s)\t-\t<= %d: %s\t\n", s.APICallsPerRequest, byMethod(s.APICallsByKind, s.Requests), goalCallsPerReq, mark(s.APICallsPerRequest <= goalCallsPerReq))
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
	return b.String()
}

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
