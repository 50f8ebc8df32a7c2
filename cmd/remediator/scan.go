package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// ExitFindings is scan's exit code when it found something to remediate, so that a
// CI job can gate on it; 0 means nothing was found, 1 means scan itself failed.
const ExitFindings = 3

// findingsError makes main exit with ExitFindings after the output was written.
type findingsError struct{ n int }

func (e findingsError) Error() string { return fmt.Sprintf("%d finding(s)", e.n) }

type scanOptions struct {
	cluster          *clusterFlags
	leaseAge         time.Duration
	output           string
	requestNamespace string
}

func newScanCommand() *cobra.Command {
	o := scanOptions{cluster: newClusterFlags(true)}
	cmd := &cobra.Command{
		Use:   "scan",
		Short: "Find stuck Trident Leases and deregistered CSI drivers, and print suggested requests",
		Long: `scan reads the cluster (read-only) and reports:
  - stuck Leases: PV-named Leases in the Trident namespace older than --lease-age or
    with LeaseRetained events, with the holder node's state;
  - deregistered drivers: nodes whose CSINode lacks the driver while a Ready
    node-plugin pod runs there;
  - overlapping node-plugin pods.
-o yaml and -o json print the same thing for tools, as they do in plan: the suggested
RemediationRequests, one per target, ready to commit or to pipe into kubectl apply -f -
(YAML documents, or one JSON v1 List). The table lists the findings.
It only reads. Exit code: 0 when nothing was found, 3 when findings were printed,
1 when the scan itself failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ns := o.cluster.namespace(); ns != "" {
				if cmd.Flags().Changed("request-namespace") && ns != o.requestNamespace {
					return fmt.Errorf("--namespace %q and --request-namespace %q disagree: give one", ns, o.requestNamespace)
				}
				o.requestNamespace = ns
			}
			return runScan(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	o.cluster.addFlags(f, "")
	f.Lookup("namespace").Usage = "Namespace of the suggested RemediationRequests (-o yaml); the same as --request-namespace"
	f.DurationVar(&o.leaseAge, "lease-age", 10*time.Minute, "Age from which a Lease without LeaseRetained events counts as stuck")
	f.StringVarP(&o.output, "output", "o", "table", "Output format: table (the findings), yaml or json (the suggested RemediationRequests)")
	f.StringVar(&o.requestNamespace, "request-namespace", "remediator", "Namespace of the suggested RemediationRequests")
	return cmd
}

func runScan(ctx context.Context, w io.Writer, o scanOptions) error {
	switch o.output {
	case "table", "yaml", "json":
	default:
		return fmt.Errorf("unknown --output %q: use table, yaml or json", o.output)
	}
	_, g, err := o.cluster.gatherer()
	if err != nil {
		return err
	}
	findings, err := g.Scan(ctx, facts.ScanOptions{LeaseAge: o.leaseAge})
	if err != nil {
		return fmt.Errorf("scanning: %w", err)
	}
	if err := writeFindings(w, findings, o); err != nil {
		return err
	}
	if len(findings) > 0 {
		return findingsError{n: len(findings)}
	}
	return nil
}

func writeFindings(w io.Writer, findings []facts.Finding, o scanOptions) error {
	switch o.output {
	case "json":
		items := suggestedRequests(findings, o.requestNamespace)
		if items == nil {
			items = []map[string]any{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	case "yaml":
		return writeRequests(w, suggestedRequests(findings, o.requestNamespace))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNODE\tNODE STATE\tLEASE\tEVIDENCE")
	for _, f := range findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Kind, f.Node, f.NodeState, cmp.Or(f.Lease, "-"), f.Evidence)
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

// suggestedRequests turns findings into one request per target: a Lease's PV, or a
// node (a node with both overlapping pods and a missing driver gets one request whose
// reason quotes both).
func suggestedRequests(findings []facts.Finding, ns string) []map[string]any {
	var out []map[string]any
	byNode := map[string]int{}
	for _, f := range findings {
		switch f.Kind {
		case facts.FindingStuckLease:
			pv := f.Lease[strings.Index(f.Lease, "/")+1:]
			out = append(out, request(ns, "release-lease-"+pv, v1alpha1.RemediationReleaseLUKSLease,
				map[string]any{"persistentVolume": pv}, "remediator scan: "+f.Evidence))
		default:
			if i, ok := byNode[f.Node]; ok {
				spec := out[i]["spec"].(map[string]any)
				spec["reason"] = truncate(spec["reason"].(string)+"; "+printable(f.Evidence), 4096)
				continue
			}
			byNode[f.Node] = len(out)
			out = append(out, request(ns, "reregister-csi-"+f.Node, v1alpha1.RemediationReregisterCSIDriver,
				map[string]any{"node": f.Node}, "remediator scan: "+f.Evidence))
		}
	}
	return out
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

func writeRequests(w io.Writer, reqs []map[string]any) error {
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
