package main

// Rendering a plan: a table for people, the report as JSON or YAML for tools.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/controllers/facts"
)

func writePlanReport(w io.Writer, r planReport, output string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "yaml":
		data, err := yaml.Marshal(r)
		if err != nil {
			return fmt.Errorf("encoding the plan: %w", err)
		}
		_, err = w.Write(data)
		return err
	}
	var b strings.Builder
	for i, res := range r.Requests {
		if i > 0 {
			b.WriteString("\n")
		}
		writePlanResult(&b, res, r.Policy)
	}
	fmt.Fprintf(&b, "\nSummary: %d allowed, %d rejected, %d would wait, %d failed; exit code %d (%s)\n",
		r.Summary.Allowed, r.Summary.Rejected, r.Summary.WouldWait, r.Summary.Failed, r.ExitCode, planCodeMeaning(r.ExitCode))
	_, err := io.WriteString(w, b.String())
	return err
}

func planCodeMeaning(code int) string {
	switch code {
	case 0:
		return "every request would be allowed"
	case ExitPlanRejected:
		return "a request would be rejected"
	case ExitPlanWaiting:
		return "a request would wait"
	}
	return "a request could not be planned"
}

// writePlanResult writes one request's plan as aligned "label: value" lines.
func writePlanResult(b *strings.Builder, res planResult, policy planPolicy) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(b, "  %-10s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	more := func(format string, args ...any) { fmt.Fprintf(b, "  %-10s %s\n", "", fmt.Sprintf(format, args...)) }
	// block writes a list under one label: the label on the first line only.
	block := func(label string, items []string) {
		for i, it := range items {
			if i == 0 {
				line(label, "%s", it)
			} else {
				more("%s", it)
			}
		}
	}

	rq := res.Request
	head := rq.Source
	if rq.Document > 0 {
		head = fmt.Sprintf("%s (document %d)", rq.Source, rq.Document)
	}
	if rq.Name != "" {
		head = fmt.Sprintf("RemediationRequest %s/%s from %s", cmp.Or(rq.Namespace, "-"), rq.Name, head)
	}
	fmt.Fprintf(b, "== %s\n", head)
	if len(res.Errors) > 0 {
		block("error", res.Errors)
		line("exit code", "%d", res.ExitCode)
		return
	}
	s := rq.Spec
	line("request", "%s on %s, mode %s", s.Remediation, facts.TargetRef(s.Target), s.Mode)
	if s.Fencing != nil {
		more("fencing confirmed=%t method=%s node=%s", s.Fencing.Confirmed, cmp.Or(string(s.Fencing.Method), "-"), cmp.Or(s.Fencing.Node, "-"))
	}
	if s.MaintenanceWindow != nil {
		more("maintenance window %q for %s", s.MaintenanceWindow.Schedule, s.MaintenanceWindow.Duration.Duration)
	}
	f := res.Facts
	line("facts", "%s, gathered at %s", res.FactsFrom, f.GatheredAt.UTC().Format(time.RFC3339))
	t := f.Target
	target := fmt.Sprintf("target    %s found=%t", cmp.Or(t.Ref, "-"), t.Found)
	if t.PersistentVolumeClaim != "" {
		target += " PVC " + t.PersistentVolumeClaim
	}
	if t.PersistentVolume != "" {
		target += " PV " + t.PersistentVolume
	}
	if t.Message != "" {
		target += " - " + t.Message
	}
	more("%s", target)
	if l := f.Lease; l != nil {
		if l.Exists {
			more("lease     %s/%s holder=%s age=%ds LeaseRetained=%d", l.Namespace, l.Name, cmp.Or(l.HolderIdentity, "-"), l.AgeSeconds, l.RetainedEvents)
			if l.LastRetainedMessage != "" {
				more("          last LeaseRetained: %s", l.LastRetainedMessage)
			}
		} else {
			more("lease     %s/%s does not exist", l.Namespace, l.Name)
		}
	}
	if n := f.Node; n != nil {
		more("node      %s %s (%s)", n.Name, n.State, n.StateReason)
	}
	for _, p := range f.AffectedPods {
		more("pod       %s/%s %s on %s", p.Namespace, p.Name, cmp.Or(p.Phase, "-"), cmp.Or(p.Node, "-"))
	}
	if c := f.CSI; c != nil {
		more("csi       csinode=%t driverRegistered=%t drivers=[%s]", c.CSINodeExists, c.DriverRegistered, strings.Join(c.Drivers, ","))
		for _, p := range c.PluginPods {
			more("          plugin pod %s", p)
		}
	}
	for _, c := range res.Conflicts {
		more("conflict  %s", c)
	}
	d := res.Decision
	verdict := map[string]string{planAllowed: "ALLOWED", planRejected: "REJECTED", planWouldWait: "WOULD WAIT"}[d.Outcome]
	if d.Playbook != "" {
		line("decision", "%s by rule %s: playbook %s (phase %s)", verdict, d.Rule, d.Playbook, d.Phase)
	} else {
		line("decision", "%s by rule %s (phase %s)", verdict, d.Rule, d.Phase)
	}
	reasons := make([]string, len(d.Reasons))
	for i, r := range d.Reasons {
		reasons[i] = "- " + r
	}
	block("reasons", reasons)
	line("message", "%s", d.Message)
	if d.RecheckAfterSeconds > 0 {
		more("(the controller decides again after %ds, on fresh facts)", d.RecheckAfterSeconds)
	}
	if len(res.Steps) > 0 {
		steps := make([]string, len(res.Steps))
		for i, st := range res.Steps {
			steps[i] = fmt.Sprintf("%d. %s", i+1, st)
		}
		block("steps", steps)
	} else {
		line("steps", "none")
	}
	for _, n := range res.Notes {
		line("note", "%s", n)
	}
	line("policy", "%s (%s)", d.PolicyDigest, policy.Source)
	line("exit code", "%d", res.ExitCode)
}
