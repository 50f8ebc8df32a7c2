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
	// Lease (its PV) or that node: what an alert names.
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
	"yaml and json print the suggested RemediationRequests for tools (YAML documents, or one JSON v1 List); name lists them " +
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
one an alert names. With --kubeconfig, the controller's settings (Trident namespace,
driver, selector, grace period, floor ages) come from the chart's settings ConfigMap
wherever no flag gives them, as in plan.
-o yaml and -o json print the same thing for tools, as they do in plan: the suggested
RemediationRequests, one per target, ready to commit to the remediation repository
(YAML documents, or one JSON v1 List; the admission policy refuses a kubectl apply);
-o name, jsonpath=... and go-template=... print them as kubectl does. The table lists the
findings (-o wide with more detail).
It only reads. Exit codes: 0 whatever it found; 1 the scan itself failed; 2 a wrong
command line; with --exit-code, 3 when findings were printed (as git diff
--exit-code), so a CI job can gate on it: the code plan gives a refused request.`,
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
	f.StringVar(&o.node, "node", "", "Only the findings whose request targets this node (deregistered driver, overlapping node-plugin pods), as TridentCSIDriverDeregistered names it")
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
	findings, err := g.Scan(ctx, facts.ScanOptions{LeaseAge: gates.HealthyStuckLeaseAge, Warn: warn})
	if err != nil {
		return fmt.Errorf("scanning: %w", err)
	}
	findings = o.only(findings)
	if err := writeFindings(w, findings, *o); err != nil {
		return err
	}
	if len(findings) > 0 && o.exitCode {
		return cmdutil.Finding("%d finding(s)", len(findings))
	}
	return nil
}

func writeFindings(w io.Writer, findings []facts.Finding, o Options) error {
	format := o.output.Format()
	switch format {
	case "", cmdutil.OutputWide:
	case cmdutil.OutputJSON:
		items := SuggestedRequests(findings, o.requestNamespace)
		if items == nil {
			items = []map[string]any{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	case cmdutil.OutputYAML:
		return WriteRequests(w, SuggestedRequests(findings, o.requestNamespace))
	default:
		// name, jsonpath, go-template: on the List -o json prints.
		p, err := o.output.Printer()
		if err != nil {
			return err
		}
		return p.PrintObj(cmdutil.ListOf(SuggestedRequests(findings, o.requestNamespace)), w)
	}
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
		_, err := fmt.Fprintln(w, "No stuck Leases, deregistered drivers or overlapping node-plugin pods found.")
		return err
	}
	return nil
}

// only keeps the findings --lease and --node select.
func (o *Options) only(findings []facts.Finding) []facts.Finding {
	if o.lease == "" && o.node == "" {
		return findings
	}
	var out []facts.Finding
	for _, f := range findings {
		if f.Kind == facts.FindingStuckLease && o.lease != "" && leasePV(f) == o.lease ||
			f.Kind != facts.FindingStuckLease && o.node != "" && f.Node == o.node {
			out = append(out, f)
		}
	}
	return out
}

// symptomsSummary counts a finding's symptoms by kind, in the order Scan sorts them:
// "3 FailedMount, 1 ContainerCreating" ("-" for none). The pods and messages are in
// the controller's log (remediator controller, "Detected an incident").
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
func printable(s string) string {
	if !strings.ContainsFunc(s, escaped) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if escaped(r) {
			fmt.Fprintf(&b, "\\u%04x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func escaped(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }

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
