// Package scan is `remediator scan`: it finds stuck Trident Leases and
// deregistered CSI drivers (controllers/facts' Scan, as the controller's detector
// does) and prints them, or the RemediationRequests that would fix them.
package scan

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// Options are scan's flags.
type Options struct {
	cluster *cmdutil.ClusterFlags
	// flags are scan's, for the settings ConfigMap to fill in what they do not give.
	flags             *pflag.FlagSet
	settingsConfigMap string
	// lease and node keep only the findings whose suggested request targets that
	// Lease (its PV) or that node, or a stuck Lease the node holds: what an alert
	// names. node also lists every Lease the node holds, stuck or not.
	lease, node string
	// stderr receives the warnings; nil means os.Stderr.
	stderr io.Writer
	// output is -o: kubectl's printer flags around scan's own outputs.
	output           *cmdutil.OutputFlags
	requestNamespace string
	// exitCode makes findings exit with cmdutil.ExitFinding, so that a CI job can gate
	// on them (as git diff --exit-code does). Without it scan exits 0 whatever it
	// found, so that `set -o pipefail` pipelines into kubectl apply work.
	exitCode bool
}

// scanOutputUsage is scan's -o help.
const scanOutputUsage = "Output format. Empty (the default; table is the same) lists the findings for people; " +
	"wide adds the Lease's age, its LeaseRetained events, the node-plugin pods and the suggested request's name; " +
	"yaml and json print the suggested RemediationRequests for tools (YAML documents, or one JSON v1 List; with --node, the Leases " +
	"the node holds as comments, or the List's heldLeases); name lists them " +
	"(remediationrequest.remediator.io/NAME); jsonpath=..., jsonpath-as-json=..., jsonpath-file=..., go-template=... and " +
	"go-template-file=... read the List -o json prints, as in kubectl"

// NewOptions returns scan's options with its defaults.
func NewOptions() *Options {
	return &Options{cluster: cmdutil.NewClusterFlags(true), output: cmdutil.NewOutputFlags("", "table")}
}

// NewCommand returns `remediator scan`.
func NewCommand() *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "scan",
		Short: "Find stuck Trident Leases and deregistered CSI drivers, and print suggested requests",
		Long: `scan reads the cluster (read-only) and reports:
  - stuck Leases: PV-named Leases in the Trident namespace whose holder node is shut
    down, unreachable or gone (at any age), or that are older than
    --floor-healthy-lease-age or carry LeaseRetained events, with the holder node's
    state;
  - deregistered drivers: nodes whose CSINode lacks the driver while a Ready
    node-plugin pod runs there;
  - overlapping node-plugin pods.
Each finding counts its symptoms: kubelet's FailedMount events (on the volume's pods,
or saying the driver is not registered on the node), and the volume's pods waiting in
ContainerCreating or stuck Terminating. The controller runs the same scan from its
informers (--detect-interval) and exports it as metrics; --lease and --node keep the
one an alert names, and --node the stuck Leases that node holds.
--node NODE also lists every PV-named Lease in the Trident namespace that NODE holds
(its holderIdentity), sorted, the runbook's first step on a node: each Stuck, with
the part of the test above that holds, or NotStuck, with why not (young, no
LeaseRetained event, a holder that still runs, whether pods wait behind it). Only
the stuck ones are findings and get a request. With --kubeconfig, the controller's
settings (Trident namespace, driver, selector, grace period, floor ages) come from
the chart's settings ConfigMap wherever no flag gives them, as in plan.
-o yaml and -o json print the same thing for tools, as they do in plan: the suggested
RemediationRequests, one per target, ready to commit to the remediation repository
(YAML documents, or one JSON v1 List; the admission policy refuses a kubectl apply);
-o name, jsonpath=... and go-template=... print them as kubectl does. With --node,
-o yaml lists the Leases the node holds in comments before the requests, and -o json
(jsonpath, go-template) in the List's heldLeases, which kubectl apply ignores. The
table lists the findings (-o wide with more detail), then with --node the Leases the
node holds.
It only reads. Exit codes: 0 whatever it found; 1 the scan itself failed; 2 a wrong
command line; with --exit-code, 3 when findings were printed (as git diff
--exit-code; a Lease --node lists as NotStuck is none), so a CI job can gate on it:
the code plan gives a refused request.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(cmd); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return cmdutil.Usage(err) // the flags alone are wrong: nothing was done
			}
			return o.Run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.cluster.AddFlags(f, "")
	f.Lookup("namespace").Usage = "Namespace of the suggested RemediationRequests (-o yaml); the same as --request-namespace"
	cmdutil.AddSettingsFlag(f, &o.settingsConfigMap, "scan")
	f.StringVar(&o.lease, "lease", "", "Only the stuck Lease of this name in the Trident namespace (its PV's name), as TridentLeaseStuck names it")
	f.StringVar(&o.node, "node", "", "Only the findings whose request targets this node (deregistered driver, overlapping node-plugin pods), "+
		"as TridentCSIDriverDeregistered names it, and the stuck Leases it holds; also lists every Lease it holds, stuck or not, and why")
	o.output.AddFlags(cmd, scanOutputUsage)
	f.StringVar(&o.requestNamespace, "request-namespace", "remediator", "Namespace of the suggested RemediationRequests")
	f.BoolVar(&o.exitCode, "exit-code", false, fmt.Sprintf("Exit with %d when something was found (as git diff --exit-code); without it scan exits 0 whatever it found", cmdutil.ExitFinding))
	return cmd
}

// Complete takes the command's flag set and streams, and -n as the suggested
// requests' namespace.
func (o *Options) Complete(cmd *cobra.Command) error {
	o.flags, o.stderr = cmd.Flags(), cmd.ErrOrStderr()
	if ns := o.cluster.Namespace(); ns != "" {
		if cmd.Flags().Changed("request-namespace") && ns != o.requestNamespace {
			return fmt.Errorf("--namespace %q and --request-namespace %q disagree: give one", ns, o.requestNamespace)
		}
		o.requestNamespace = ns
	}
	return nil
}

// Validate checks the flags given, before anything is read; the settings' values
// are checked once they applied (Run).
func (o *Options) Validate() error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	if _, err := o.cluster.FactsConfig(); err != nil {
		return err
	}
	_, err := o.cluster.Floor()
	return err
}

// Run scans the cluster and writes what it found to w.
func (o *Options) Run(ctx context.Context, w io.Writer) error {
	stderr := o.stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	warn := func(msg string) { fmt.Fprintln(stderr, "warning: "+msg) }
	if o.flags != nil {
		_, warnings, err := cmdutil.ApplySettings(ctx, "scan", o.flags, o.cluster, o.settingsConfigMap)
		if err != nil {
			return fmt.Errorf("with the controller's settings from ConfigMap %s: %w", o.settingsConfigMap, err)
		}
		for _, m := range warnings {
			warn(m)
		}
	}
	gates, err := o.cluster.Floor()
	if err != nil {
		return err
	}
	_, g, err := o.cluster.Gatherer(ctx)
	if err != nil {
		return err
	}
	res, err := g.ScanWithHeld(ctx, facts.ScanOptions{LeaseAge: gates.HealthyStuckLeaseAge, Warn: warn, HeldBy: o.node})
	if err != nil {
		return fmt.Errorf("scanning: %w", err)
	}
	r := report{findings: o.only(res.Findings), held: res.Held}
	if err := writeFindings(w, r, *o); err != nil {
		return err
	}
	// A Lease the node holds that is not stuck is no finding: --exit-code gates on
	// what needs a request, as without --node.
	if len(r.findings) > 0 && o.exitCode {
		return cmdutil.Finding("%d finding(s)", len(r.findings))
	}
	return nil
}

// report is what scan prints.
type report struct {
	findings []facts.Finding
	// held are the Leases --node holds, stuck or not, sorted; nil without --node.
	held []facts.HeldLease
}

// heldLease is a Lease --node holds as -o json prints it: with the name of the request
// suggested for it when it is stuck.
type heldLease struct {
	facts.HeldLease
	Request string `json:"request,omitempty"`
}

// heldLeases are r.held for -o json and the printers; nil without --node.
func (r report) heldLeases(ns string) []heldLease {
	if r.held == nil {
		return nil
	}
	out := make([]heldLease, 0, len(r.held))
	for _, h := range r.held {
		out = append(out, heldLease{HeldLease: h, Request: heldRequest(h, ns)})
	}
	return out
}

// heldRequest is ns/name of the request scan suggests for a held Lease, "" for one
// that is not stuck: the request is the StuckLease finding's.
func heldRequest(h facts.HeldLease, ns string) string {
	if !h.Stuck {
		return ""
	}
	return ns + "/" + suggestedName(facts.Finding{Kind: facts.FindingStuckLease, Lease: h.Lease})
}

// list is the v1 List -o json prints: the suggested requests as items, and with
// --node the Leases the node holds in heldLeases, a field kubectl apply ignores (it
// applies a List's items), so the List stays what it applies.
func (r report) list(ns string) (map[string]any, error) {
	items := SuggestedRequests(r.findings, ns)
	if items == nil {
		items = []map[string]any{}
	}
	l := map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
	if held := r.heldLeases(ns); held != nil {
		// Through JSON, so that jsonpath and go-template read the fields -o json prints.
		data, err := json.Marshal(held)
		if err != nil {
			return nil, fmt.Errorf("encoding the held Leases: %w", err)
		}
		var v []any
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("decoding the held Leases: %w", err)
		}
		l["heldLeases"] = v
	}
	return l, nil
}

func writeFindings(w io.Writer, r report, o Options) error {
	format := o.output.Format()
	switch format {
	case "", cmdutil.OutputWide:
	case cmdutil.OutputJSON:
		l, err := r.list(o.requestNamespace)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(l)
	case cmdutil.OutputYAML:
		if err := writeHeldComments(w, r, o); err != nil {
			return err
		}
		return WriteRequests(w, SuggestedRequests(r.findings, o.requestNamespace))
	default:
		// name, jsonpath, go-template: on the List -o json prints.
		p, err := o.output.Printer()
		if err != nil {
			return err
		}
		l, err := r.list(o.requestNamespace)
		if err != nil {
			return err
		}
		items, _ := l["items"].([]map[string]any)
		ul := cmdutil.ListOf(items)
		if held, ok := l["heldLeases"]; ok {
			ul.Object["heldLeases"] = held
		}
		return p.PrintObj(ul, w)
	}
	findings := r.findings
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if format == cmdutil.OutputWide {
		fmt.Fprintln(tw, "KIND\tNODE\tNODE STATE\tLEASE\tAGE\tLEASERETAINED\tPLUGIN PODS\tSYMPTOMS\tREQUEST\tEVIDENCE")
	} else {
		fmt.Fprintln(tw, "KIND\tNODE\tNODE STATE\tLEASE\tSYMPTOMS\tEVIDENCE")
	}
	for _, f := range findings {
		if format == cmdutil.OutputWide {
			age := "-"
			if f.Lease != "" {
				age = (time.Duration(f.AgeSeconds) * time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", f.Kind, f.Node, f.NodeState, cmp.Or(f.Lease, "-"), age, f.RetainedEvents,
				cmp.Or(strings.Join(f.PluginPods, ","), "-"), symptomsSummary(f.Symptoms), o.requestNamespace+"/"+suggestedName(f), f.Evidence)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, f.Node, f.NodeState, cmp.Or(f.Lease, "-"), symptomsSummary(f.Symptoms), f.Evidence)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(findings) == 0 {
		if _, err := fmt.Fprintln(w, "No stuck Leases, deregistered drivers or overlapping node-plugin pods found."); err != nil {
			return err
		}
	}
	return writeHeldTable(w, r, o)
}

// writeHeldTable lists the Leases --node holds after the findings: every one, so
// that a Lease not found stuck is seen to be ruled out, and why.
func writeHeldTable(w io.Writer, r report, o Options) error {
	if r.held == nil {
		return nil
	}
	if len(r.held) == 0 {
		_, err := fmt.Fprintf(w, "\nNo Trident Leases held by %s.\n", o.node)
		return err
	}
	fmt.Fprintf(w, "\nTrident Leases held by %s:\n", o.node)
	wide := o.output.Format() == cmdutil.OutputWide
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "LEASE\tSTUCK\tNODE STATE\tAGE\tLEASERETAINED\tSYMPTOMS\tREQUEST\tWHY")
	} else {
		fmt.Fprintln(tw, "LEASE\tSTUCK\tNODE STATE\tAGE\tLEASERETAINED\tSYMPTOMS\tWHY")
	}
	for _, h := range r.held {
		age := (time.Duration(h.AgeSeconds) * time.Second).String()
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", h.Lease, stuckWord(h), h.NodeState, age, h.RetainedEvents,
				symptomsSummary(h.Symptoms), cmp.Or(heldRequest(h, o.requestNamespace), "-"), h.Why)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", h.Lease, stuckWord(h), h.NodeState, age, h.RetainedEvents,
			symptomsSummary(h.Symptoms), h.Why)
	}
	return tw.Flush()
}

// stuckWord is a held Lease's STUCK column, one word so that awk and grep read it.
func stuckWord(h facts.HeldLease) string {
	if h.Stuck {
		return "Stuck"
	}
	return "NotStuck"
}

// writeHeldComments lists the Leases --node holds as YAML comments before -o yaml's
// requests: the output stays the manifests to commit (or kubectl apply), with one
// request per stuck Lease and none for the others, and the person who commits them
// sees which Leases the node holds and why the others got none.
func writeHeldComments(w io.Writer, r report, o Options) error {
	if r.held == nil {
		return nil
	}
	lines := []string{fmt.Sprintf("remediator scan: Trident Leases held by %s: %d, a request below for each stuck one", o.node, len(r.held))}
	for _, h := range r.held {
		line := fmt.Sprintf("  %s: %s (%s); ", h.Lease, stuckWord(h), h.Why)
		if req := heldRequest(h, o.requestNamespace); req != "" {
			line += "request " + req
		} else {
			line += "no request"
		}
		lines = append(lines, line)
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, "# "+commentSafe(l)); err != nil {
			return err
		}
	}
	return nil
}

// commentSafe keeps a YAML comment on its line: a line break in it (YAML counts
// NEL, LS and PS too) would end the comment, and what follows would be applied as
// part of a manifest. Cluster text reaches the comment through names only, which the
// API validates, but the comment must not depend on that.
func commentSafe(s string) string { return escapeRunes(s, commentBreaks) }

func commentBreaks(r rune) bool { return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' }

// only keeps the findings --lease and --node select: the Lease --lease names, and
// --node's own findings and the stuck Leases it holds (the runbook's shutdown branch
// releases those).
func (o *Options) only(findings []facts.Finding) []facts.Finding {
	if o.lease == "" && o.node == "" {
		return findings
	}
	var out []facts.Finding
	for _, f := range findings {
		if f.Kind == facts.FindingStuckLease && o.lease != "" && leasePV(f) == o.lease ||
			o.node != "" && f.Node == o.node {
			out = append(out, f)
		}
	}
	return out
}

// symptomsSummary counts a finding's symptoms by kind, in the order Scan sorts them:
// "3 FailedMount, 1 ContainerCreating" ("-" for none). The pods and messages are in
// the controller's log (remediator-controller, "Detected an incident").
func symptomsSummary(symptoms []facts.Symptom) string {
	var kinds []string
	counts := map[string]int32{}
	for _, s := range symptoms {
		if _, ok := counts[s.Kind]; !ok {
			kinds = append(kinds, s.Kind)
		}
		counts[s.Kind] += s.Count
	}
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	return cmp.Or(strings.Join(parts, ", "), "-")
}

// SuggestedRequests turns findings into one request per target: a Lease's PV, or a
// node (a node with both overlapping pods and a missing driver gets one request whose
// reason quotes both).
func SuggestedRequests(findings []facts.Finding, ns string) []map[string]any {
	var out []map[string]any
	byNode := map[string]int{}
	for _, f := range findings {
		switch f.Kind {
		case facts.FindingStuckLease:
			out = append(out, request(ns, suggestedName(f), v1alpha1.RemediationReleaseLUKSLease,
				map[string]any{"persistentVolume": leasePV(f)}, "remediator scan: "+f.Evidence))
		default:
			if i, ok := byNode[f.Node]; ok {
				spec := out[i]["spec"].(map[string]any)
				spec["reason"] = truncate(spec["reason"].(string)+"; "+printable(f.Evidence), 4096)
				continue
			}
			byNode[f.Node] = len(out)
			out = append(out, request(ns, suggestedName(f), v1alpha1.RemediationReregisterCSIDriver,
				map[string]any{"node": f.Node}, "remediator scan: "+f.Evidence))
		}
	}
	return out
}

// leasePV is the PV a stuck Lease is named after.
func leasePV(f facts.Finding) string { return f.Lease[strings.Index(f.Lease, "/")+1:] }

// suggestedName is the name of the request suggested for finding f: one per PV, or
// per node.
func suggestedName(f facts.Finding) string {
	if f.Kind == facts.FindingStuckLease {
		return objectName("release-lease-" + leasePV(f))
	}
	return objectName("reregister-csi-" + f.Node)
}

func request(ns, name string, r v1alpha1.Remediation, target map[string]any, reason string) map[string]any {
	return map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "RemediationRequest",
		"metadata":   map[string]any{"name": objectName(name), "namespace": ns},
		"spec": map[string]any{
			"remediation": string(r),
			"target":      target,
			"reason":      truncate(printable(reason), 4096),
		},
	}
}

// printable escapes the control characters of evidence taken from the cluster (an
// event message, a holder identity), which YAML cannot carry: one such character
// would make `scan -o yaml` fail for every finding (found by FuzzScanSuggestions:
// a DEL in the evidence). Newlines and tabs stay; a reason is free text.
func printable(s string) string { return escapeRunes(s, escaped) }

func escaped(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }

// escapeRunes writes each rune of s that escape selects as \uXXXX, and s itself when
// there is none.
func escapeRunes(s string, escape func(rune) bool) string {
	if !strings.ContainsFunc(s, escape) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if escape(r) {
			fmt.Fprintf(&b, "\\u%04x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// truncate cuts s to at most n bytes, at a character boundary: a reason cut inside a
// character would be committed with a replacement character in it.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// objectName cuts a suggested request's name to the 253 characters a Kubernetes name
// may have. The name is a prefix and a node or PV name, so the cut can fall right
// after a '-' or '.', with which no name may end: those are trimmed too.
func objectName(name string) string {
	return strings.TrimRight(truncate(name, 253), "-.")
}

// WriteRequests writes reqs as YAML documents, the manifests scan -o yaml prints
// (ready to commit to the remediation repository).
func WriteRequests(w io.Writer, reqs []map[string]any) error {
	if len(reqs) == 0 {
		_, err := fmt.Fprintln(w, "# remediator scan: nothing to remediate")
		return err
	}
	for i, r := range reqs {
		data, err := yaml.Marshal(r)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		if i > 0 {
			if _, err := fmt.Fprintln(w, "---"); err != nil {
				return err
			}
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}
