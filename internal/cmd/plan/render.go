package plan

// The plan report, and rendering it: a report for people, JSON or YAML for tools; and
// kubectl's printer flags, which plan and scan share.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// planReport is plan's -o json (and -o yaml) output. Its field names are a contract for tools.
type planReport struct {
	Policy planPolicy `json:"policy"`
	// FactsSource is "saved" (--facts) or "live".
	FactsSource string `json:"factsSource"`
	// At is the time spec.maintenanceWindow was checked against.
	At string `json:"at"`
	// Settings are the controller's settings plan decided with on live facts, and
	// where each came from; Warnings say what plan could not take from the cluster.
	Settings []cmdutil.Setting `json:"settings,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
	Requests []planResult      `json:"requests"`
	Summary  planSummary       `json:"summary"`
	ExitCode int               `json:"exitCode"`
}

type planPolicy struct {
	// Source is "embedded" or the --policies-dir path.
	Source string `json:"source"`
	Digest string `json:"digest"`
	// ConfigMap is the ConfigMap the directory's kustomization.yaml generates (what
	// Argo CD applies for the controller), checked to hold exactly the policies
	// evaluated here; empty without a kustomization.
	ConfigMap string `json:"configMap,omitempty"`
}

type planSummary struct {
	Allowed   int `json:"allowed"`
	Rejected  int `json:"rejected"`
	WouldWait int `json:"wouldWait"`
	Failed    int `json:"failed"`
	// AlreadyDecided counts requests in the cluster the controller will not decide
	// again (already ran, or an unchanged rejection): they do not fail the plan.
	AlreadyDecided int `json:"alreadyDecided"`
}

// planResult is one request's plan.
type planResult struct {
	Request planRequest `json:"request"`
	// FactsFrom is "live" or the saved facts file (and document) used.
	FactsFrom string          `json:"factsFrom,omitempty"`
	Facts     *v1alpha1.Facts `json:"facts,omitempty"`
	Conflicts []string        `json:"conflicts"`
	Decision  *planDecision   `json:"decision,omitempty"`
	// Existing is set instead of Decision for a request in the cluster that the
	// controller will not decide again (existing.go).
	Existing *planExisting `json:"existing,omitempty"`
	// Steps are the playbook's steps, in order; empty unless a playbook was chosen.
	Steps []string `json:"steps"`
	Notes []string `json:"notes"`
	// Errors say why the request could not be planned (exit code 1).
	Errors   []string `json:"errors,omitempty"`
	ExitCode int      `json:"exitCode"`
}

type planRequest struct {
	// Source is the file the request was read from ("-" for stdin), Document its
	// 1-based position among the file's YAML documents.
	Source    string                           `json:"source"`
	Document  int                              `json:"document"`
	Namespace string                           `json:"namespace,omitempty"`
	Name      string                           `json:"name,omitempty"`
	Spec      *v1alpha1.RemediationRequestSpec `json:"spec,omitempty"`
}

type planDecision struct {
	// Outcome is allowed, rejected or would-wait.
	Outcome string `json:"outcome"`
	// Phase is the status.phase the controller would set: Running, Pending (DryRun),
	// Waiting or Rejected.
	Phase    v1alpha1.Phase `json:"phase"`
	Allowed  bool           `json:"allowed"`
	Wait     bool           `json:"wait"`
	Rule     string         `json:"rule"`
	Playbook string         `json:"playbook,omitempty"`
	Reasons  []string       `json:"reasons"`
	Message  string         `json:"message"`
	// RecheckAfterSeconds: the controller decides again, on fresh facts, after that long.
	RecheckAfterSeconds int64 `json:"recheckAfterSeconds,omitempty"`
	// WindowOpensAt is when a closed maintenance window opens next (RFC 3339).
	WindowOpensAt string `json:"windowOpensAt,omitempty"`
	PolicyDigest  string `json:"policyDigest"`
}

// writePlanReport writes the report as -o asks: for people (wide adds the facts'
// details), YAML or JSON, or through cli-runtime's printers (name: the requests
// planned; jsonpath and go-template: the report, as -o json prints it).
func writePlanReport(w io.Writer, r planReport, out *cmdutil.OutputFlags) error {
	format := out.Format()
	switch format {
	case "", cmdutil.OutputWide:
	case cmdutil.OutputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case cmdutil.OutputYAML:
		data, err := yaml.Marshal(r)
		if err != nil {
			return fmt.Errorf("encoding the plan: %w", err)
		}
		_, err = w.Write(data)
		return err
	default:
		p, err := out.Printer()
		if err != nil {
			return err
		}
		if format != cmdutil.OutputName {
			return p.PrintObj(reportObject{report: &r}, w)
		}
		var names []map[string]any
		for _, res := range r.Requests {
			if res.Request.Name != "" {
				names = append(names, requestStub(res.Request.Namespace, res.Request.Name))
			}
		}
		return p.PrintObj(cmdutil.ListOf(names), w)
	}
	var b strings.Builder
	writePlanSettings(&b, r)
	if len(r.Requests) == 0 {
		writePoliciesOnly(&b, r.Policy)
		_, err := io.WriteString(w, b.String())
		return err
	}
	for i, res := range r.Requests {
		if i > 0 {
			b.WriteString("\n")
		}
		writePlanResult(&b, res, r.Policy, format == cmdutil.OutputWide)
	}
	already := ""
	if r.Summary.AlreadyDecided > 0 {
		already = fmt.Sprintf(", %d already decided", r.Summary.AlreadyDecided)
	}
	fmt.Fprintf(&b, "\nSummary: %d allowed, %d rejected, %d would wait, %d failed%s; exit code %d (%s)\n",
		r.Summary.Allowed, r.Summary.Rejected, r.Summary.WouldWait, r.Summary.Failed, already, r.ExitCode, planCodeMeaning(r))
	_, err := io.WriteString(w, b.String())
	return err
}

// writePoliciesOnly is the result of plan --policies-dir without -f: the policies
// load, and this is their digest.
func writePoliciesOnly(b *strings.Builder, policy planPolicy) {
	fmt.Fprintf(b, "policies: %s load and name only playbooks the controller runs\n", policy.Source)
	if policy.ConfigMap != "" {
		fmt.Fprintf(b, "configmap: %s, generated by kustomization.yaml with exactly these policies\n", policy.ConfigMap)
	}
	fmt.Fprintf(b, "policy: %s (the digest decisions made with them record)\n", policy.Digest)
}

func planCodeMeaning(r planReport) string {
	switch r.ExitCode {
	case cmdutil.ExitOK:
		if r.Summary.WouldWait > 0 {
			return "nothing would be rejected; a request would wait and starts by itself later"
		}
		return "every request would be allowed"
	case cmdutil.ExitFinding:
		return "a request would be rejected"
	}
	return "a request could not be planned"
}

// resultWriter writes a request's plan as aligned "label: value" lines.
type resultWriter struct{ b *strings.Builder }

// line writes a labelled line.
func (w resultWriter) line(label, format string, args ...any) {
	fmt.Fprintf(w.b, "  %-10s %s\n", label+":", fmt.Sprintf(format, args...))
}

// more writes a line under the previous label.
func (w resultWriter) more(format string, args ...any) {
	fmt.Fprintf(w.b, "  %-10s %s\n", "", fmt.Sprintf(format, args...))
}

// block writes a list under one label: the label on the first line only.
func (w resultWriter) block(label string, items []string) {
	for i, it := range items {
		if i == 0 {
			w.line(label, "%s", it)
		} else {
			w.more("%s", it)
		}
	}
}

// writePlanResult writes one request's plan as aligned "label: value" lines; wide adds
// the facts' details the safety floor weighs.
func writePlanResult(b *strings.Builder, res planResult, policy planPolicy, wide bool) {
	w := resultWriter{b: b}
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
		w.block("error", res.Errors)
		w.line("exit code", "%d", res.ExitCode)
		return
	}
	s := rq.Spec
	w.line("request", "%s on %s, mode %s", s.Remediation, facts.TargetRef(s.Target), s.Mode)
	if e := res.Existing; e != nil {
		verdict := "ALREADY RAN"
		if e.Phase == v1alpha1.PhaseRejected {
			verdict = "ALREADY DECIDED"
		}
		w.line("decision", "%s: %s; not planned on today's facts", verdict, e.Phase)
		w.line("message", "%s", e.Message)
		w.line("exit code", "%d", res.ExitCode)
		return
	}
	if s.Fencing != nil {
		w.more("fencing confirmed=%t method=%s node=%s", s.Fencing.Confirmed, cmp.Or(string(s.Fencing.Method), "-"), cmp.Or(s.Fencing.Node, "-"))
	}
	if s.MaintenanceWindow != nil {
		w.more("maintenance window %q for %s", s.MaintenanceWindow.Schedule, s.MaintenanceWindow.Duration.Duration)
	}
	w.facts(res, wide)
	for _, c := range res.Conflicts {
		w.more("conflict  %s", c)
	}
	w.decision(res, policy)
}

// facts writes the facts the request was planned on; wide adds the details the
// safety floor weighs.
func (w resultWriter) facts(res planResult, wide bool) {
	f := res.Facts
	w.line("facts", "%s, gathered at %s", res.FactsFrom, f.GatheredAt.UTC().Format(time.RFC3339))
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
	w.more("%s", target)
	w.lease(f.Lease, wide)
	if n := f.Node; n != nil {
		w.more("node      %s %s (%s)", n.Name, n.State, n.StateReason)
		if wide {
			w.more("          exists=%t Ready=%s for %ds, node Lease renewed %ds ago, last heartbeat %ds ago, unschedulable=%t, taints=[%s]",
				n.Exists, cmp.Or(n.Ready, "-"), n.ReadyAgeSeconds, n.LeaseRenewAgeSeconds, n.HeartbeatAgeSeconds, n.Unschedulable, strings.Join(n.Taints, ","))
		}
	}
	w.volume(f.Volume, wide)
	w.logs(f.Logs, wide)
	for _, p := range f.AffectedPods {
		if wide {
			w.more("pod       %s/%s %s on %s ready=%t uid=%s deleting=%s", p.Namespace, p.Name, cmp.Or(p.Phase, "-"), cmp.Or(p.Node, "-"), p.Ready, cmp.Or(p.UID, "-"), timeOrDash(p.DeletionTimestamp))
			continue
		}
		w.more("pod       %s/%s %s on %s", p.Namespace, p.Name, cmp.Or(p.Phase, "-"), cmp.Or(p.Node, "-"))
	}
	if c := f.CSI; c != nil {
		w.more("csi       csinode=%t driverRegistered=%t drivers=[%s]", c.CSINodeExists, c.DriverRegistered, strings.Join(c.Drivers, ","))
		for _, p := range c.PluginPods {
			w.more("          plugin pod %s", p)
		}
	}
}

// volume writes the evidence of whether the holder still has the volume, if it was
// gathered: what the kubelet last reported in use there, and the VolumeAttachment.
func (w resultWriter) volume(v *v1alpha1.VolumeFacts, wide bool) {
	if v == nil {
		return
	}
	posted := "never posted"
	if v.InUseReportedAt != nil {
		posted = fmt.Sprintf("posted %ds ago", v.InUseReportAgeSeconds)
	}
	a := v.VolumeAttachment
	attachment := "absent"
	switch {
	case a.Exists && a.DeletionTimestamp != nil:
		attachment = fmt.Sprintf("detaching, attached=%t", a.Attached)
	case a.Exists:
		attachment = fmt.Sprintf("attached=%t", a.Attached)
	}
	w.more("volume    on %s: inUse=%t (kubelet %s), VolumeAttachment %s, attachRequired=%t", cmp.Or(v.Node, "-"), v.InUseOnNode, posted, attachment, v.AttachRequired)
	if v.Message != "" {
		w.more("          %s", v.Message)
	}
	if wide {
		w.more("          uniqueName=%s volumeAttachment=%s created %s, deleting %s, csiDriver=%t",
			cmp.Or(v.UniqueName, "-"), cmp.Or(a.Name, "-"), timeOrDash(a.CreationTimestamp), timeOrDash(a.DeletionTimestamp), v.CSIDriverExists)
	}
}

// logs writes what the holder's Trident log showed of the volume, if it was read:
// the state, the line it rests on and, wide, the newest lines. Lines are quoted: they
// come from a container's log, and a terminal must not interpret them.
func (w resultWriter) logs(l *v1alpha1.LogEvidence, wide bool) {
	if l == nil {
		return
	}
	since := "its start"
	if l.SinceTime != nil {
		since = l.SinceTime.UTC().Format(time.RFC3339)
	}
	w.more("logs      %s/%s -c %s since %s: %s (%d bytes read, truncated=%t)", l.Namespace, cmp.Or(l.Pod, "-"), l.Container, since, l.State, l.BytesRead, l.Truncated)
	if l.Line != "" {
		w.more("          %q", l.Line)
	}
	if l.ReadError != "" {
		w.more("          read error: %s", l.ReadError)
	}
	if wide {
		w.more("          volume names=[%s], newest line %s, newest about the volume %s", strings.Join(l.VolumeNames, ","), timeOrDash(l.NewestLineAt), timeOrDash(l.NewestVolumeLineAt))
		for _, line := range l.Lines {
			w.more("          | %q", line)
		}
	}
}

// lease writes the Lease's facts, if the request has a Lease.
func (w resultWriter) lease(l *v1alpha1.LeaseFacts, wide bool) {
	if l == nil {
		return
	}
	if !l.Exists {
		w.more("lease     %s/%s does not exist", l.Namespace, l.Name)
		return
	}
	w.more("lease     %s/%s holder=%s age=%ds LeaseRetained=%d", l.Namespace, l.Name, cmp.Or(l.HolderIdentity, "-"), l.AgeSeconds, l.RetainedEvents)
	if l.LastRetainedMessage != "" {
		w.more("          last LeaseRetained: %s", l.LastRetainedMessage)
	}
	if wide {
		w.more("          uid=%s resourceVersion=%s age from %s, acquired %s, created %s, LeaseRetained ignored=%d",
			cmp.Or(l.UID, "-"), cmp.Or(l.ResourceVersion, "-"), cmp.Or(l.AgeFrom, "-"), timeOrDash(l.AcquireTime), timeOrDash(l.CreationTimestamp), l.IgnoredRetainedEvents)
	}
}

// decision writes the decision, the playbook's steps, the notes and the policy.
func (w resultWriter) decision(res planResult, policy planPolicy) {
	d := res.Decision
	verdict := map[string]string{planAllowed: "ALLOWED", planRejected: "REJECTED", planWouldWait: "WOULD WAIT"}[d.Outcome]
	if d.Playbook != "" {
		w.line("decision", "%s by rule %s: playbook %s (phase %s)", verdict, d.Rule, d.Playbook, d.Phase)
	} else {
		w.line("decision", "%s by rule %s (phase %s)", verdict, d.Rule, d.Phase)
	}
	reasons := make([]string, len(d.Reasons))
	for i, r := range d.Reasons {
		reasons[i] = "- " + r
	}
	w.block("reasons", reasons)
	w.line("message", "%s", d.Message)
	if d.RecheckAfterSeconds > 0 {
		w.more("(the controller decides again after %ds, on fresh facts)", d.RecheckAfterSeconds)
	}
	if len(res.Steps) > 0 {
		steps := make([]string, len(res.Steps))
		for i, st := range res.Steps {
			steps[i] = fmt.Sprintf("%d. %s", i+1, st)
		}
		w.block("steps", steps)
	} else {
		w.line("steps", "none")
	}
	for _, n := range res.Notes {
		w.line("note", "%s", n)
	}
	if policy.ConfigMap != "" {
		w.line("policy", "%s (%s, as kustomization.yaml generates ConfigMap %s)", d.PolicyDigest, policy.Source, policy.ConfigMap)
	} else {
		w.line("policy", "%s (%s)", d.PolicyDigest, policy.Source)
	}
	w.line("exit code", "%d", res.ExitCode)
}

// timeOrDash is t in RFC 3339, or - when unset.
func timeOrDash(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// planOutputUsage is plan's -o help.
const planOutputUsage = "Output format. Empty (the default; table and text are the same) is the report for people; " +
	"wide adds the facts' details the safety floor weighs (the Lease's UID, resourceVersion and age source, the node's Ready, heartbeats and taints, the pods' readiness); " +
	"yaml and json are the report for tools; name lists the requests planned (remediationrequest.remediator.io/NAME); " +
	"jsonpath=..., jsonpath-as-json=..., jsonpath-file=..., go-template=... and go-template-file=... read the report as -o json prints it, as in kubectl"

// reportObject hands the plan report to cli-runtime's printers, which read it as -o
// json prints it.
type reportObject struct{ report *planReport }

func (reportObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (o reportObject) DeepCopyObject() runtime.Object { return o }
func (o reportObject) MarshalJSON() ([]byte, error)   { return json.Marshal(o.report) }

// requestStub is a RemediationRequest with only its name, for -o name.
func requestStub(namespace, name string) map[string]any {
	return map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "RemediationRequest",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
	}
}
