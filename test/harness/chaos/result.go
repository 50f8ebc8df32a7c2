package main

import (
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Result is one run of the campaigns: what results.json holds and summary.md shows.
type Result struct {
	Preset   string    `json:"preset"`
	Seed     int64     `json:"seed"`
	RunID    string    `json:"runID"`
	Commit   string    `json:"commit"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Crash    *Crash    `json:"crash,omitempty"`
	Faults   *Faults   `json:"faults,omitempty"`
	Churn    *Churn    `json:"churn,omitempty"`
	// Aborted is why a campaign could not finish; the results are partial then.
	Aborted string `json:"aborted,omitempty"`
}

// Crash is R1.
type Crash struct {
	// Kills by failpoint (name -> kills; a point a run never reached is listed
	// under NotReached) and at random moments.
	FailpointKills int            `json:"failpointKills"`
	ByPoint        map[string]int `json:"byPoint"`
	NotReached     []string       `json:"notReached,omitempty"`
	// Unreached are points that had to be reached and were not: a violation.
	Unreached    []string `json:"unreached,omitempty"`
	TimedKills   int      `json:"timedKills"`
	MidStepKills int      `json:"midStepKills"` // timed kills made while a step was Running
	// MinKills is the preset's floor on all kills.
	MinKills int     `json:"minKills"`
	Verdict  Verdict `json:"verdict"`
}

// Faults is R2.
type Faults struct {
	Injected  map[string]int64 `json:"injected"`
	Forwarded int64            `json:"forwarded"`
	// DestructiveRepliesDropped: destructive calls the server ran whose reply the
	// controller never got.
	DestructiveRepliesDropped int     `json:"destructiveRepliesDropped"`
	Verdict                   Verdict `json:"verdict"`
	// Goroutines and RSS (MiB) of the controller before the requests, and after
	// the faults stopped and the requests ended.
	GoroutinesBefore, GoroutinesAfter float64
	RSSBefore, RSSAfter               float64
	Baseline                          string `json:"baseline"` // why it counts as back at baseline, or why not
	// Missing are fault kinds the full run never injected: a violation.
	Missing []string `json:"missing,omitempty"`
	// HolderBack are the failpoints of the release at which a fenced holder came
	// back mid-playbook behind the proxy (the controller killed there, the holder's
	// heartbeat resumed, a clean controller finished); HolderBackMissed those that
	// were not reached, so the case was never tested: a violation.
	HolderBack       []string `json:"holderBack,omitempty"`
	HolderBackMissed []string `json:"holderBackMissed,omitempty"`
}

// Churn is R4.
type Churn struct {
	Created, DeletedMidRun int
	Restarts               int
	LeaderChanges          int
	Leaders                []string `json:"leaders"` // the replicas that led, in order
	// TwoLeaders lists the moments two replicas both reported leading.
	TwoLeaders []string `json:"twoLeaders,omitempty"`
	// Stuck lists requests seen Running with a step older than its timeout.
	Stuck []string `json:"stuck,omitempty"`
	// Admission is what a watch of the requests found against admission's promises
	// across the restarts (test/harness/admissionwatch): more slots held than the
	// cap, or a grant past an older request in line. MaxHeld and Grants are what it
	// saw.
	Admission []string `json:"admission,omitempty"`
	MaxHeld   int      `json:"maxHeld"`
	Grants    int      `json:"grants"`
	Verdict   Verdict  `json:"verdict"`
}

func (r *Result) violations() int {
	n := 0
	if r.Crash != nil {
		n += r.Crash.Verdict.Violations() + len(r.Crash.Unreached)
		if r.Crash.FailpointKills+r.Crash.TimedKills < r.Crash.MinKills {
			n++
		}
	}
	if r.Faults != nil {
		n += r.Faults.Verdict.Violations()
		if !strings.HasPrefix(r.Faults.Baseline, "back") {
			n++
		}
		n += len(r.Faults.Missing) + len(r.Faults.HolderBackMissed)
	}
	if r.Churn != nil {
		n += r.Churn.Verdict.Violations() + len(r.Churn.Stuck) + len(r.Churn.TwoLeaders) + len(r.Churn.Admission)
		if r.Churn.LeaderChanges < r.Churn.Restarts {
			n++ // leadership did not move at every restart of the leader
		}
	}
	return n
}

func (r *Result) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# make chaos: preset %s, seed %d, commit %s, %s\n\n", r.Preset, r.Seed, r.Commit, r.Finished.Sub(r.Started).Round(time.Second))
	r.writeTable(&b)
	b.WriteString("\n")
	r.writeNotes(&b)
	r.writeViolations(&b)
	return b.String()
}

// writeTable writes the table of the campaigns, a row each.
func (r *Result) writeTable(b *strings.Builder) {
	row := func(name, injected string, v Verdict) {
		fmt.Fprintf(b, "| %s | %s | %d | %d/%d | %d | %d | %d | %d |\n", name, injected, v.Requests, v.Correct, v.Requests,
			len(v.Unsafe), len(v.Repeated), len(v.Leaks), len(v.Wrong)+len(v.Stray))
	}
	fmt.Fprintf(b, "| campaign | injected | requests | correct terminal state | unsafe deletes | repeated destructive calls | leaks (cordon, finalizer) | other violations |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|\n")
	if c := r.Crash; c != nil {
		row("R1 crash", fmt.Sprintf("%d kills (%d at failpoints, %d timed)", c.FailpointKills+c.TimedKills, c.FailpointKills, c.TimedKills), c.Verdict)
	}
	if f := r.Faults; f != nil {
		var total int64
		var kinds []string
		for _, k := range sortedKeys(f.Injected) {
			total += f.Injected[k]
			kinds = append(kinds, fmt.Sprintf("%d %s", f.Injected[k], k))
		}
		row("R2 API faults", fmt.Sprintf("%d faults of %d calls (%s; %d destructive calls ran with the reply dropped)", total, f.Forwarded+total, strings.Join(kinds, ", "), f.DestructiveRepliesDropped), f.Verdict)
	}
	if c := r.Churn; c != nil {
		row("R4 churn", fmt.Sprintf("%d restarts, %d leader changes, %d deleted mid-run", c.Restarts, c.LeaderChanges, c.DeletedMidRun), c.Verdict)
	}
}

// writeNotes writes what each campaign found besides its verdict, and the
// abort if there was one.
func (r *Result) writeNotes(b *strings.Builder) {
	if c := r.Crash; c != nil {
		fmt.Fprintf(b, "R1 kills by failpoint: %s\n", pointList(c.ByPoint))
		if len(c.NotReached) > 0 {
			fmt.Fprintf(b, "R1 failpoints not reached (the step was already done when checked, so no call was made): %s\n", strings.Join(c.NotReached, ", "))
		}
	}
	if f := r.Faults; f != nil {
		fmt.Fprintf(b, "R2 controller: goroutines %.0f before, %.0f after; RSS %.0f MiB before, %.0f MiB after: %s\n",
			f.GoroutinesBefore, f.GoroutinesAfter, f.RSSBefore, f.RSSAfter, f.Baseline)
	}
	if c := r.Crash; c != nil && len(c.Unreached) > 0 {
		fmt.Fprintf(b, "R1 VIOLATION, failpoints that had to be reached and were not: %s\n", strings.Join(c.Unreached, ", "))
	}
	if c := r.Crash; c != nil {
		fmt.Fprintf(b, "R1 kills: %d (floor %d); timed kills with a step running: %d of %d\n", c.FailpointKills+c.TimedKills, c.MinKills, c.MidStepKills, c.TimedKills)
	}
	if f := r.Faults; f != nil && len(f.HolderBack) > 0 {
		fmt.Fprintf(b, "R2 holder back mid-playbook, controller killed at: %s\n", strings.Join(f.HolderBack, ", "))
	}
	if f := r.Faults; f != nil && len(f.HolderBackMissed) > 0 {
		fmt.Fprintf(b, "R2 VIOLATION, holder-back failpoints not reached: %s\n", strings.Join(f.HolderBackMissed, ", "))
	}
	if f := r.Faults; f != nil && len(f.Missing) > 0 {
		fmt.Fprintf(b, "R2 VIOLATION, fault kinds never injected: %s\n", strings.Join(f.Missing, ", "))
	}
	if c := r.Churn; c != nil {
		fmt.Fprintf(b, "R4 leaders in order: %s\n", strings.Join(c.Leaders, " -> "))
		fmt.Fprintf(b, "R4 admission, from a watch of the requests: %d slots granted, at most %d held at once (cap %d), %d out of order or over the cap\n",
			c.Grants, c.MaxHeld, churnCap, len(c.Admission))
		if len(c.Admission) > 0 {
			fmt.Fprintf(b, "R4 VIOLATION, admission: %s\n", strings.Join(c.Admission, "; "))
		}
		if len(c.TwoLeaders) > 0 {
			fmt.Fprintf(b, "R4 VIOLATION, two leaders at once: %s\n", strings.Join(c.TwoLeaders, "; "))
		}
	}
	if r.Aborted != "" {
		fmt.Fprintf(b, "ABORTED: %s\n", r.Aborted)
	}
	if c := r.Churn; c != nil && len(c.Stuck) > 0 {
		fmt.Fprintf(b, "R4 stuck in Running: %s\n", strings.Join(c.Stuck, "; "))
	}
}

// writeViolations lists every violation of every campaign's verdict.
func (r *Result) writeViolations(b *strings.Builder) {
	for _, v := range []struct {
		name string
		v    *Verdict
	}{{"R1", verdictOf(r.Crash)}, {"R2", verdictOfF(r.Faults)}, {"R4", verdictOfC(r.Churn)}} {
		if v.v == nil {
			continue
		}
		for _, l := range [][]string{v.v.Wrong, v.v.Unsafe, v.v.Repeated, v.v.Leaks, v.v.Stray} {
			for _, s := range l {
				fmt.Fprintf(b, "- %s violation: %s\n", v.name, s)
			}
		}
	}
}

func verdictOf(c *Crash) *Verdict {
	if c == nil {
		return nil
	}
	return &c.Verdict
}

func verdictOfF(f *Faults) *Verdict {
	if f == nil {
		return nil
	}
	return &f.Verdict
}

func verdictOfC(c *Churn) *Verdict {
	if c == nil {
		return nil
	}
	return &c.Verdict
}

func pointList(m map[string]int) string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(out, ", ")
}

func gitDescribe(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
