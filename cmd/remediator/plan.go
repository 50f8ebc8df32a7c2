package main

// plan is the pull-request check of a remediation repository: it tells a reviewer,
// before merge, what the controller would decide for a RemediationRequest. It reads
// requests strictly, refuses what admission would refuse, gathers facts the way the
// controller does (or takes saved ones), asks the same policies and prints the
// decision, the playbook's steps and an exit code a CI job can gate on.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

// plan's exit codes besides 0 (every request would be allowed) and 1 (plan itself
// failed: bad input, an unreadable file, the API unreachable, a policy that does not
// compile). With several requests the worst wins: 1, then 2, then 4.
const (
	// ExitPlanRejected: at least one request would be rejected by policy.
	ExitPlanRejected = 2
	// ExitPlanWaiting: none would be rejected, but at least one would wait (another
	// remediation on the same node or Lease, or a closed maintenance window).
	ExitPlanWaiting = 4
)

// Outcomes of one planned request.
const (
	planAllowed   = "allowed"
	planRejected  = "rejected"
	planWouldWait = "would-wait"
)

// planExitError makes main exit with a plan's exit code after the report was written.
type planExitError struct {
	code    int
	summary planSummary
}

func (e planExitError) Error() string {
	return fmt.Sprintf("plan: %d allowed, %d rejected, %d would wait, %d failed",
		e.summary.Allowed, e.summary.Rejected, e.summary.WouldWait, e.summary.Failed)
}

// planExitCode reports the exit code of a plan that ran and wrote its report. main
// exits with it without printing the error again: the report already explains it.
func planExitCode(err error) (int, bool) {
	var p planExitError
	if errors.As(err, &p) {
		return p.code, true
	}
	return 0, false
}

// planCodeRank orders exit codes from best to worst: 0 < 4 < 2 < 1.
func planCodeRank(code int) int {
	switch code {
	case 0:
		return 0
	case ExitPlanWaiting:
		return 1
	case ExitPlanRejected:
		return 2
	}
	return 3
}

type planOptions struct {
	files                []string
	factsFiles           []string
	kubeconfig           string
	policiesDir          string
	tridentNamespace     string
	driverName           string
	nodePluginSelector   string
	nodeLeaseGracePeriod time.Duration
	output               string
	at                   string
	maxConcurrent        int
}

func newPlanCommand() *cobra.Command {
	o := planOptions{}
	cmd := &cobra.Command{
		Use:   "plan -f REQUEST.yaml [-f ...] [--facts FACTS.yaml | --kubeconfig FILE]",
		Short: "Show what the policies would decide for RemediationRequests, without applying them (a PR check)",
		Long: `plan tells what the controller would do with RemediationRequests before they are
merged and applied. For each request in the -f files (several YAML documents per
file are fine; -f - reads stdin) it:

  1. reads it strictly and refuses what admission would refuse, naming the field:
     wrong apiVersion/kind, unknown fields, not exactly one target, a reason shorter
     than 10 characters, an unknown remediation, mode or fencing method,
     reregister-csi-driver without spec.target.node, a malformed maintenance window;
  2. takes facts either live from the cluster (--kubeconfig, read-only, gathered
     exactly as the controller does, and with the other Running requests on the same
     node or Lease as conflicts) or saved (--facts: a v1alpha1.Facts document such as
     kubectl get rr X -o jsonpath='{.status.facts}', or whole RemediationRequests with
     status.facts, matched to requests by target);
  3. evaluates the embedded policies, or --policies-dir, and prints the decision (the
     rule, its reasons and message, the policy digest), the playbook's steps, and
     notes on spec.mode DryRun and on spec.maintenanceWindow.

plan never writes to the cluster. It needs get/list on pods, persistentvolumeclaims,
persistentvolumes, nodes, events, leases, csinodes and remediationrequests.

Exit codes (with several requests the worst wins: 1, then 2, then 4, then 0):
  0  every request would be allowed (a DryRun request counts as allowed)
  2  at least one request would be rejected by policy
  4  none would be rejected, but at least one would wait: another remediation is
     running on the same node or Lease, its maintenance window is closed at --at,
     or --max-concurrent-remediations playbooks are running (live facts)
  1  plan itself failed: unreadable or invalid input, no saved facts for a request,
     the API unreachable, policies that do not compile`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPlan(cmd.Context(), cmd.OutOrStdout(), cmd.InOrStdin(), o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "RemediationRequest manifest(s) to plan; repeatable; - reads stdin")
	f.StringArrayVar(&o.factsFiles, "facts", nil, "Saved facts (v1alpha1.Facts, or RemediationRequests with status.facts) instead of live ones; repeatable")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig for live facts; empty uses $KUBECONFIG or the in-cluster config")
	f.StringVar(&o.policiesDir, "policies-dir", "", "Directory of CUE policies to use instead of the embedded ones")
	f.StringVar(&o.tridentNamespace, "trident-namespace", facts.DefaultTridentNamespace, "Namespace of Trident's Leases and node-plugin pods (live facts)")
	f.StringVar(&o.driverName, "driver-name", facts.DefaultDriverName, "CSI driver name Trident registers on CSINodes (live facts)")
	f.StringVar(&o.nodePluginSelector, "node-plugin-selector", facts.DefaultNodePluginSelector, "Label selector of Trident's node-plugin pods (live facts)")
	f.DurationVar(&o.nodeLeaseGracePeriod, "node-lease-grace-period", facts.DefaultNodeLeaseGracePeriod, "Age of a kube-node-lease renewal after which a node counts as unreachable (live facts)")
	f.StringVarP(&o.output, "output", "o", "text", "Output format: text or json")
	f.IntVar(&o.maxConcurrent, "max-concurrent-remediations", 3, "The controller's cap on running playbooks (live facts: a request over it would wait); 0 means no cap")
	f.StringVar(&o.at, "at", "", "When the request would be applied, for spec.maintenanceWindow (RFC 3339); empty means now")
	_ = cmd.MarkFlagRequired("filename")
	cmd.MarkFlagsMutuallyExclusive("facts", "kubeconfig")
	return cmd
}

// planReport is plan's -o json output. Its field names are a contract for tools.
type planReport struct {
	Policy planPolicy `json:"policy"`
	// FactsSource is "saved" (--facts) or "live".
	FactsSource string `json:"factsSource"`
	// At is the time spec.maintenanceWindow was checked against.
	At       string       `json:"at"`
	Requests []planResult `json:"requests"`
	Summary  planSummary  `json:"summary"`
	ExitCode int          `json:"exitCode"`
}

type planPolicy struct {
	// Source is "embedded" or the --policies-dir path.
	Source string `json:"source"`
	Digest string `json:"digest"`
}

type planSummary struct {
	Allowed   int `json:"allowed"`
	Rejected  int `json:"rejected"`
	WouldWait int `json:"wouldWait"`
	Failed    int `json:"failed"`
}

// planResult is one request's plan.
type planResult struct {
	Request planRequest `json:"request"`
	// FactsFrom is "live" or the saved facts file (and document) used.
	FactsFrom string          `json:"factsFrom,omitempty"`
	Facts     *v1alpha1.Facts `json:"facts,omitempty"`
	Conflicts []string        `json:"conflicts"`
	Decision  *planDecision   `json:"decision,omitempty"`
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

// planInput is one YAML document of an -f file: a request, or why it is not one.
type planInput struct {
	source string
	doc    int
	rr     *v1alpha1.RemediationRequest
	errs   []string
}

// savedFacts is one facts document of a --facts file.
type savedFacts struct {
	from string
	// namespace/name of the RemediationRequest the facts were copied from, if any.
	request string
	facts   *v1alpha1.Facts
}

func runPlan(ctx context.Context, w io.Writer, stdin io.Reader, o planOptions) error {
	if o.maxConcurrent < 0 {
		return fmt.Errorf("--max-concurrent-remediations must be 0 (no cap) or more, got %d", o.maxConcurrent)
	}
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("unknown --output %q: use text or json", o.output)
	}
	at := time.Now()
	if o.at != "" {
		t, err := time.Parse(time.RFC3339, o.at)
		if err != nil {
			return fmt.Errorf("parsing --at %q (want RFC 3339, e.g. 2026-11-19T02:30:00Z): %w", o.at, err)
		}
		at = t
	}
	source := "embedded"
	if o.policiesDir != "" {
		source = o.policiesDir
	}
	policy, err := policies.Load(o.policiesDir)
	if err != nil {
		return fmt.Errorf("loading policies from %s: %w", source, err)
	}
	playbooks, err := remediations.DefaultPlaybooks()
	if err != nil {
		return err
	}
	in := &onceReader{r: stdin}
	inputs := readPlanRequests(o.files, in)

	report := planReport{Policy: planPolicy{Source: source, Digest: policy.Digest()}, At: at.UTC().Format(time.RFC3339)}
	p := &planner{policy: policy, playbooks: playbooks, at: at, maxConcurrent: o.maxConcurrent}
	if len(o.factsFiles) > 0 {
		report.FactsSource = "saved"
		if p.saved, err = readSavedFacts(o.factsFiles, in); err != nil {
			return err
		}
	} else {
		report.FactsSource = "live"
		// Connect only when there is something to plan, so that a PR whose requests
		// are all invalid is told so without needing a cluster.
		if slices.ContainsFunc(inputs, func(in planInput) bool { return in.rr != nil && len(in.errs) == 0 }) {
			if p.reader, p.gatherer, err = planLiveClient(o); err != nil {
				return err
			}
		}
	}

	for _, input := range inputs {
		report.Requests = append(report.Requests, p.plan(ctx, input))
	}
	slices.SortStableFunc(report.Requests, func(a, b planResult) int {
		return strings.Compare(planSortKey(a.Request), planSortKey(b.Request))
	})
	for _, r := range report.Requests {
		switch {
		case r.Decision == nil:
			report.Summary.Failed++
		case r.Decision.Outcome == planAllowed:
			report.Summary.Allowed++
		case r.Decision.Outcome == planRejected:
			report.Summary.Rejected++
		default:
			report.Summary.WouldWait++
		}
		if planCodeRank(r.ExitCode) > planCodeRank(report.ExitCode) {
			report.ExitCode = r.ExitCode
		}
	}
	if err := writePlanReport(w, report, o.output); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	if report.ExitCode != 0 {
		return planExitError{code: report.ExitCode, summary: report.Summary}
	}
	return nil
}

func planSortKey(r planRequest) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%08d", r.Namespace, r.Name, r.Source, r.Document)
}

// planLiveClient connects the way scan and the controller do, reading only.
func planLiveClient(o planOptions) (client.Reader, *facts.Gatherer, error) {
	sel, err := labels.Parse(o.nodePluginSelector)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing --node-plugin-selector %q: %w", o.nodePluginSelector, err)
	}
	if o.nodeLeaseGracePeriod <= 0 {
		return nil, nil, fmt.Errorf("--node-lease-grace-period must be positive, got %s", o.nodeLeaseGracePeriod)
	}
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("creating client: %w", err)
	}
	return c, &facts.Gatherer{Reader: c, Config: facts.Config{
		TridentNamespace: o.tridentNamespace, DriverName: o.driverName, NodePluginSelector: sel,
		NodeLeaseGracePeriod: o.nodeLeaseGracePeriod, RetainedEventReason: facts.DefaultRetainedEventReason,
	}}, nil
}

// planner decides one request at a time, as the controller's decide phase does.
type planner struct {
	policy    *policies.Engine
	playbooks remediations.Playbooks
	at        time.Time
	// saved facts (--facts), or a live reader and gatherer.
	saved    []savedFacts
	reader   client.Reader
	gatherer *facts.Gatherer
	// others are the requests the guards weigh when there is no live reader.
	others []v1alpha1.RemediationRequest
	// maxConcurrent is the controller's --max-concurrent-remediations.
	maxConcurrent int
}

func (p *planner) plan(ctx context.Context, in planInput) planResult {
	res := planResult{Request: planRequest{Source: in.source, Document: in.doc}, Conflicts: []string{}, Steps: []string{}, Notes: []string{}}
	fail := func(errs ...string) planResult {
		res.Errors = append(res.Errors, errs...)
		res.ExitCode = 1
		return res
	}
	if in.rr == nil {
		return fail(in.errs...)
	}
	rr := in.rr
	res.Request.Namespace, res.Request.Name, res.Request.Spec = rr.Namespace, rr.Name, &rr.Spec
	if len(in.errs) > 0 {
		return fail(in.errs...)
	}

	// The other requests the guards weigh: live ones, or none with saved facts.
	others := p.others
	if p.gatherer == nil {
		sf, err := matchSavedFacts(p.saved, rr)
		if err != nil {
			return fail(err.Error())
		}
		res.FactsFrom = sf.from
		rr.Status.Facts = sf.facts
		res.Notes = append(res.Notes, fmt.Sprintf("Facts are saved ones, gathered at %s; the controller decides on live facts when the request is applied.",
			sf.facts.GatheredAt.UTC().Format(time.RFC3339)))
	} else {
		res.FactsFrom = "live"
		note, err := p.adoptExisting(ctx, rr)
		if err != nil {
			return fail(err.Error())
		}
		if note != "" {
			res.Notes = append(res.Notes, note)
		}
		f, err := p.gatherer.Gather(ctx, rr)
		if err != nil {
			return fail(fmt.Sprintf("gathering facts: %v", err))
		}
		rr.Status.Facts = f
		if others, err = controllers.ListRequests(ctx, p.reader); err != nil {
			return fail(err.Error())
		}
	}
	res.Facts = rr.Status.Facts

	// The controller's own decision path: the policy, the safety floor, DryRun, the
	// maintenance window and the cap, in the same order and with the same outcome.
	o := controllers.Decide(p.policy, p.playbooks, controllers.DecisionInput{
		Request: rr, Facts: rr.Status.Facts, Others: others, MaxConcurrent: p.maxConcurrent, Now: p.at,
	})
	if o.Conflicts != nil {
		res.Conflicts = o.Conflicts
	}
	d := o.Decision
	dec := &planDecision{
		Phase: o.Phase, Allowed: d.Allowed, Wait: o.Phase == v1alpha1.PhaseWaiting, Rule: d.Rule, Playbook: d.Playbook,
		Reasons: d.Reasons, Message: d.Message, PolicyDigest: d.PolicyDigest,
	}
	if d.RecheckAt != nil {
		dec.RecheckAfterSeconds = int64(d.RecheckAt.Sub(p.at) / time.Second)
	}
	if dec.Reasons == nil {
		dec.Reasons = []string{}
	}
	res.Decision = dec
	for _, st := range o.Steps {
		res.Steps = append(res.Steps, st.Name)
	}
	mw := rr.Spec.MaintenanceWindow
	switch o.Phase {
	case v1alpha1.PhasePending:
		dec.Outcome = planAllowed
		res.Notes = append(res.Notes, "spec.mode is DryRun: the controller records this decision and the planned steps (all Pending) and changes nothing; set spec.mode: Apply to run the playbook.")
		if mw != nil {
			res.Notes = append(res.Notes, "spec.maintenanceWindow is not consulted for a dry run.")
		}
	case v1alpha1.PhaseRunning:
		dec.Outcome = planAllowed
		if mw != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("The maintenance window (%s for %s) is open at %s: the playbook would start right away; only its start is gated.",
				mw.Schedule, mw.Duration.Duration, p.at.UTC().Format(time.RFC3339)))
		}
	case v1alpha1.PhaseWaiting:
		dec.Outcome = planWouldWait
		switch o.Progressing.Reason {
		case controllers.ReasonWaitingForWindow:
			dec.WindowOpensAt = d.RecheckAt.UTC().Format(time.RFC3339)
			dec.RecheckAfterSeconds = 0
			res.Notes = append(res.Notes, fmt.Sprintf(
				"Playbook %s is allowed but waits for the maintenance window (%s for %s), which is closed at %s and opens at %s; the controller decides again then, on fresh facts.",
				d.Playbook, mw.Schedule, mw.Duration.Duration, p.at.UTC().Format(time.RFC3339), dec.WindowOpensAt))
		case controllers.ReasonWaitingForSlot:
			res.Notes = append(res.Notes, o.Progressing.Message)
		}
	default:
		dec.Outcome = planRejected
	}
	switch dec.Outcome {
	case planRejected:
		res.ExitCode = ExitPlanRejected
	case planWouldWait:
		res.ExitCode = ExitPlanWaiting
	}
	return res
}

// adoptExisting looks for a request of the same name in the cluster. The controller
// never counts a request as its own conflict (it compares UIDs), so the plan of an
// update takes the existing UID; and an update of a request whose playbook has started
// or ended is not decided again, which the reviewer should know.
func (p *planner) adoptExisting(ctx context.Context, rr *v1alpha1.RemediationRequest) (string, error) {
	if rr.Namespace == "" {
		return "", nil
	}
	existing := &v1alpha1.RemediationRequest{}
	if err := p.reader.Get(ctx, types.NamespacedName{Namespace: rr.Namespace, Name: rr.Name}, existing); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading RemediationRequest %s/%s: %w", rr.Namespace, rr.Name, err)
	}
	rr.UID = existing.UID
	switch existing.Status.Phase {
	case v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		return fmt.Sprintf("RemediationRequest %s/%s already exists and is %s: applying this file changes its spec but it is not decided again; create a request with a new name instead.",
			rr.Namespace, rr.Name, existing.Status.Phase), nil
	}
	return fmt.Sprintf("RemediationRequest %s/%s already exists (phase %s); applying this file updates it and it is decided again.",
		rr.Namespace, rr.Name, orDash(string(existing.Status.Phase))), nil
}

// onceReader lets several flags name "-" while stdin is read only once.
type onceReader struct {
	r    io.Reader
	used bool
}

func (o *onceReader) open(what string) (io.Reader, error) {
	if o.used {
		return nil, fmt.Errorf("%s: stdin (-) can be read only once", what)
	}
	o.used = true
	return o.r, nil
}

func readSource(name string, stdin *onceReader, what string) ([]byte, error) {
	if name == "-" {
		r, err := stdin.open(what)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("reading %s from stdin: %w", what, err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	return data, nil
}

// yamlDoc is one YAML document of a file, converted to JSON; json is nil for a
// document that holds only comments.
type yamlDoc struct {
	json []byte
	err  error
}

// yamlDocuments splits a file into its YAML documents, keeping empty ones so that
// positions match the file.
func yamlDocuments(data []byte) ([]yamlDoc, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []yamlDoc
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		// YAMLToJSONStrict refuses duplicate keys, which a lenient decoder would
		// silently resolve to the last one.
		j, err := yaml.YAMLToJSONStrict(doc)
		if t := bytes.TrimSpace(j); err == nil && (len(t) == 0 || string(t) == "null") {
			j = nil
		}
		docs = append(docs, yamlDoc{json: j, err: err})
	}
}

// readPlanRequests reads every -f file. A file or document that cannot be used
// becomes an input with errors, so that the other requests are still planned.
func readPlanRequests(files []string, stdin *onceReader) []planInput {
	var out []planInput
	for _, name := range files {
		data, err := readSource(name, stdin, "-f "+name)
		if err != nil {
			out = append(out, planInput{source: name, errs: []string{err.Error()}})
			continue
		}
		docs, err := yamlDocuments(data)
		if err != nil {
			out = append(out, planInput{source: name, errs: []string{fmt.Sprintf("%s: reading YAML: %v", name, err)}})
			continue
		}
		found := false
		for i, doc := range docs {
			switch {
			case doc.err != nil:
				found = true
				out = append(out, planInput{source: name, doc: i + 1, errs: []string{fmt.Sprintf("%s (document %d): malformed YAML: %v", name, i+1, doc.err)}})
			case doc.json != nil:
				found = true
				out = append(out, decodePlanRequest(name, i+1, doc.json))
			}
		}
		if !found {
			out = append(out, planInput{source: name, errs: []string{fmt.Sprintf("%s holds no YAML document", name)}})
		}
	}
	return out
}

// decodePlanRequest checks one document the way the API server would at admission:
// the type, unknown fields, and the schema's and CEL rules' constraints.
func decodePlanRequest(source string, doc int, data []byte) planInput {
	in := planInput{source: source, doc: doc}
	where := fmt.Sprintf("%s (document %d)", source, doc)
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		in.errs = []string{fmt.Sprintf("%s: not a Kubernetes object: %v", where, err)}
		return in
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion != v1alpha1.GroupVersion.String() || kind != "RemediationRequest" {
		in.errs = []string{fmt.Sprintf("%s: %s is not a %s RemediationRequest; plan (and remediator sync) accept nothing else",
			where, describeObject(obj), v1alpha1.GroupVersion)}
		return in
	}

	rr := &v1alpha1.RemediationRequest{}
	var msgs []string
	for _, e := range validatePlanRequest(obj) {
		msgs = append(msgs, e.Error())
	}
	strict, err := kjson.UnmarshalStrict(data, rr)
	for _, e := range strict {
		msgs = append(msgs, e.Error()) // unknown field "spec.targt", duplicate field ...
	}
	if err != nil && len(msgs) == 0 {
		// A type mismatch the field checks do not cover.
		msgs = append(msgs, err.Error())
	}
	in.rr = rr
	if len(msgs) > 0 {
		name := rr.Name
		if rr.Namespace != "" {
			name = rr.Namespace + "/" + name
		}
		in.errs = append([]string{fmt.Sprintf("%s: RemediationRequest %s is invalid (the API server would refuse it):", where, orDash(name))}, msgs...)
		return in
	}
	// The CRD's default.
	if rr.Spec.Mode == "" {
		rr.Spec.Mode = v1alpha1.ModeApply
	}
	return in
}

func describeObject(obj map[string]any) string {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	s := apiVersion + " " + kind
	if apiVersion == "" || kind == "" {
		s = fmt.Sprintf("an object with apiVersion %q and kind %q", apiVersion, kind)
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok && n != "" {
			s += fmt.Sprintf(" named %q", n)
		}
	}
	return s
}

// The CRD's patterns (api/v1alpha1 markers).
var (
	schedulePattern  = regexp.MustCompile(`^((CRON_TZ|TZ)=[A-Za-z0-9_+/-]+ +)?(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every +[0-9.]+(ns|us|µs|ms|s|m|h)([0-9.]+(ns|us|µs|ms|s|m|h))*|[A-Za-z0-9*/,?-]+( +[A-Za-z0-9*/,?-]+){4})$`)
	durationPattern  = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)
	namespacePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	driverPattern    = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?$`)
)

// validatePlanRequest mirrors the CRD's OpenAPI schema and CEL rules on the raw
// object: presence matters there (an empty persistentVolume is set, and refused),
// which a typed decode cannot tell. Messages follow the API server's, naming the field.
func validatePlanRequest(obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	md, _ := obj["metadata"].(map[string]any)
	mp := field.NewPath("metadata")
	if name, ok := stringField(md, "name", mp, &errs); !ok || name == "" {
		if ok || md["name"] == nil {
			errs = append(errs, field.Required(mp.Child("name"), "a request needs a name"))
		}
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, field.Invalid(mp.Child("name"), name, msg))
		}
	}
	if ns, ok := stringField(md, "namespace", mp, &errs); ok && ns != "" {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(mp.Child("namespace"), ns, msg))
		}
	}

	sp := field.NewPath("spec")
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return append(errs, field.Required(sp, ""))
	}
	remediation, ok := stringField(spec, "remediation", sp, &errs)
	switch {
	case !ok && spec["remediation"] == nil:
		errs = append(errs, field.Required(sp.Child("remediation"), ""))
	case ok && remediation != string(v1alpha1.RemediationReleaseLUKSLease) && remediation != string(v1alpha1.RemediationReregisterCSIDriver):
		errs = append(errs, field.NotSupported(sp.Child("remediation"), remediation,
			[]string{string(v1alpha1.RemediationReleaseLUKSLease), string(v1alpha1.RemediationReregisterCSIDriver)}))
	}

	tp := sp.Child("target")
	switch target, ok := spec["target"].(map[string]any); {
	case spec["target"] == nil:
		errs = append(errs, field.Required(tp, ""))
	case !ok:
		errs = append(errs, field.Invalid(tp, spec["target"], "must be of type object"))
	default:
		set := 0
		for _, k := range []string{"persistentVolume", "node"} {
			if target[k] == nil {
				continue
			}
			set++
			if s, ok := stringField(target, k, tp, &errs); ok {
				lengthBetween(tp.Child(k), s, 1, 253, &errs)
			}
		}
		for _, k := range []string{"persistentVolumeClaim", "pod"} {
			if target[k] == nil {
				continue
			}
			set++
			ref, ok := target[k].(map[string]any)
			if !ok {
				errs = append(errs, field.Invalid(tp.Child(k), target[k], "must be of type object"))
				continue
			}
			for _, f := range []struct {
				name string
				max  int
			}{{"namespace", 63}, {"name", 253}} {
				if ref[f.name] == nil {
					errs = append(errs, field.Required(tp.Child(k, f.name), ""))
				} else if s, ok := stringField(ref, f.name, tp.Child(k), &errs); ok {
					lengthBetween(tp.Child(k, f.name), s, 1, f.max, &errs)
				}
			}
		}
		if set != 1 {
			errs = append(errs, field.Invalid(tp, "object", "exactly one of spec.target.persistentVolume, spec.target.persistentVolumeClaim, spec.target.pod or spec.target.node must be set"))
		}
		hasNode := target["node"] != nil
		if remediation == string(v1alpha1.RemediationReregisterCSIDriver) && !hasNode {
			errs = append(errs, field.Invalid(tp, "object", "remediation reregister-csi-driver needs spec.target.node"))
		}
		if remediation == string(v1alpha1.RemediationReleaseLUKSLease) && hasNode {
			errs = append(errs, field.Invalid(tp, "object", "remediation release-luks-lease needs spec.target.persistentVolume, spec.target.persistentVolumeClaim or spec.target.pod, not spec.target.node"))
		}
	}

	if spec["reason"] == nil {
		errs = append(errs, field.Required(sp.Child("reason"), "say why, for the audit trail"))
	} else if reason, ok := stringField(spec, "reason", sp, &errs); ok {
		lengthBetween(sp.Child("reason"), reason, 10, 4096, &errs)
	}
	if mode, ok := stringField(spec, "mode", sp, &errs); ok && mode != string(v1alpha1.ModeApply) && mode != string(v1alpha1.ModeDryRun) {
		errs = append(errs, field.NotSupported(sp.Child("mode"), mode, []string{string(v1alpha1.ModeApply), string(v1alpha1.ModeDryRun)}))
	}

	if spec["fencing"] != nil {
		fp := sp.Child("fencing")
		fencing, ok := spec["fencing"].(map[string]any)
		if !ok {
			errs = append(errs, field.Invalid(fp, spec["fencing"], "must be of type object"))
		} else {
			confirmed, isBool := fencing["confirmed"].(bool)
			switch {
			case fencing["confirmed"] == nil:
				errs = append(errs, field.Required(fp.Child("confirmed"), ""))
			case !isBool:
				errs = append(errs, field.Invalid(fp.Child("confirmed"), fencing["confirmed"], "must be of type boolean"))
			}
			methods := []string{string(v1alpha1.FencingNodeShutdown), string(v1alpha1.FencingTridentNodeContainerStopped), string(v1alpha1.FencingLogsVerified)}
			if m, ok := stringField(fencing, "method", fp, &errs); ok && !slices.Contains(methods, m) {
				errs = append(errs, field.NotSupported(fp.Child("method"), m, methods))
			}
			if confirmed && fencing["method"] == nil {
				errs = append(errs, field.Invalid(fp, "object", "spec.fencing.method is required when spec.fencing.confirmed is true"))
			}
			if n, ok := stringField(fencing, "node", fp, &errs); ok {
				lengthBetween(fp.Child("node"), n, 1, 253, &errs)
			}
			if confirmed && fencing["node"] == nil {
				errs = append(errs, field.Invalid(fp, "object", "spec.fencing.node is required when spec.fencing.confirmed is true: name the holder node that was fenced, as the Lease's holderIdentity spells it"))
			}
		}
	}

	if spec["maintenanceWindow"] != nil {
		wp := sp.Child("maintenanceWindow")
		mw, ok := spec["maintenanceWindow"].(map[string]any)
		if !ok {
			errs = append(errs, field.Invalid(wp, spec["maintenanceWindow"], "must be of type object"))
		} else {
			if mw["schedule"] == nil {
				errs = append(errs, field.Required(wp.Child("schedule"), ""))
			} else if s, ok := stringField(mw, "schedule", wp, &errs); ok {
				lengthBetween(wp.Child("schedule"), s, 1, 256, &errs)
				if !schedulePattern.MatchString(s) {
					errs = append(errs, field.Invalid(wp.Child("schedule"), s, "should match '"+schedulePattern.String()+"'"))
				}
			}
			if mw["duration"] == nil {
				errs = append(errs, field.Required(wp.Child("duration"), ""))
			} else if d, ok := stringField(mw, "duration", wp, &errs); ok {
				lengthBetween(wp.Child("duration"), d, 0, 64, &errs)
				if !durationPattern.MatchString(d) {
					errs = append(errs, field.Invalid(wp.Child("duration"), d, "should be a Go duration such as 2h or 90m (should match '"+durationPattern.String()+"')"))
				} else if v, err := time.ParseDuration(d); err != nil || v <= 0 || v > controllers.MaxWindowDuration {
					errs = append(errs, field.Invalid(wp.Child("duration"), d, "spec.maintenanceWindow.duration must be a positive duration of at most 168h (7 days)"))
				}
			}
		}
	}

	for _, f := range []struct {
		name    string
		pattern *regexp.Regexp
	}{{"tridentNamespace", namespacePattern}, {"driverName", driverPattern}} {
		if s, ok := stringField(spec, f.name, sp, &errs); ok {
			lengthBetween(sp.Child(f.name), s, 0, 63, &errs)
			if !f.pattern.MatchString(s) {
				errs = append(errs, field.Invalid(sp.Child(f.name), s, "should match '"+f.pattern.String()+"'"))
			}
		}
	}
	return errs
}

// stringField returns m[key] when it is a string. A present value of another type
// is recorded as an error; ok is false for it and for an absent key.
func stringField(m map[string]any, key string, parent *field.Path, errs *field.ErrorList) (string, bool) {
	v, present := m[key]
	if !present || v == nil {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		*errs = append(*errs, field.Invalid(parent.Child(key), v, "must be of type string"))
	}
	return s, ok
}

// lengthBetween checks a string's length in characters, as OpenAPI's minLength and
// maxLength do.
func lengthBetween(p *field.Path, s string, minLen, maxLen int, errs *field.ErrorList) {
	switch n := utf8.RuneCountInString(s); {
	case n < minLen:
		*errs = append(*errs, field.Invalid(p, s, fmt.Sprintf("should be at least %d chars long", minLen)))
	case n > maxLen:
		*errs = append(*errs, field.TooLong(p, "", maxLen))
	}
}

// readSavedFacts reads every --facts file. Any problem fails the whole plan: facts
// that cannot be read would silently leave requests without evidence.
func readSavedFacts(files []string, stdin *onceReader) ([]savedFacts, error) {
	var out []savedFacts
	for _, name := range files {
		data, err := readSource(name, stdin, "--facts "+name)
		if err != nil {
			return nil, err
		}
		docs, err := yamlDocuments(data)
		if err != nil {
			return nil, fmt.Errorf("--facts %s: reading YAML: %w", name, err)
		}
		n := len(out)
		for i, doc := range docs {
			if doc.err != nil {
				return nil, fmt.Errorf("--facts %s (document %d): malformed YAML: %w", name, i+1, doc.err)
			}
			if doc.json == nil {
				continue
			}
			sf, err := decodeSavedFacts(fmt.Sprintf("%s (document %d)", name, i+1), doc.json)
			if err != nil {
				return nil, fmt.Errorf("--facts %s: %w", name, err)
			}
			out = append(out, sf...)
		}
		if len(out) == n {
			return nil, fmt.Errorf("--facts %s holds no facts", name)
		}
	}
	return out, nil
}

// decodeSavedFacts accepts a bare Facts document, a RemediationRequest with
// status.facts, or a List of them (kubectl get rr -o yaml).
func decodeSavedFacts(where string, data []byte) ([]savedFacts, error) {
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%s: not a facts document: %w", where, err)
	}
	kind, _ := obj["kind"].(string)
	switch kind {
	case "":
		f, err := strictFacts(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		return []savedFacts{{from: where, facts: f}}, nil
	case "RemediationRequest":
		md, _ := obj["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		name, _ := md["name"].(string)
		status, _ := obj["status"].(map[string]any)
		if status["facts"] == nil {
			return nil, fmt.Errorf("%s: RemediationRequest %s/%s has no status.facts (has the controller decided it yet?)", where, ns, name)
		}
		// Only status.facts is decoded strictly: the rest of a request read back from
		// a newer cluster may hold fields this version does not know.
		raw, err := json.Marshal(status["facts"])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		f, err := strictFacts(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: status.facts of RemediationRequest %s/%s: %w", where, ns, name, err)
		}
		return []savedFacts{{from: fmt.Sprintf("%s, RemediationRequest %s/%s", where, ns, name), request: ns + "/" + name, facts: f}}, nil
	case "List", "RemediationRequestList":
		items, _ := obj["items"].([]any)
		var out []savedFacts
		for i, item := range items {
			raw, err := json.Marshal(item)
			if err != nil {
				return nil, fmt.Errorf("%s: item %d: %w", where, i, err)
			}
			sf, err := decodeSavedFacts(fmt.Sprintf("%s item %d", where, i), raw)
			if err != nil {
				return nil, err
			}
			out = append(out, sf...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: %s is neither a Facts document nor a RemediationRequest with status.facts", where, describeObject(obj))
}

func strictFacts(data []byte) (*v1alpha1.Facts, error) {
	f := &v1alpha1.Facts{}
	strict, err := kjson.UnmarshalStrict(data, f)
	if err != nil {
		return nil, fmt.Errorf("decoding facts: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decoding facts: %w", errors.Join(strict...))
	}
	return f, nil
}

// matchSavedFacts picks the facts for a request: those copied from the request of the
// same name, else those whose target.ref is the request's target, else the only facts
// given when they do not name a target.
func matchSavedFacts(saved []savedFacts, rr *v1alpha1.RemediationRequest) (savedFacts, error) {
	ref := facts.TargetRef(rr.Spec.Target)
	var byRef []savedFacts
	for _, s := range saved {
		if s.facts.Target.Ref != ref {
			continue
		}
		if s.request != "" && s.request == rr.Namespace+"/"+rr.Name {
			return s, nil
		}
		byRef = append(byRef, s)
	}
	switch {
	case len(byRef) == 1:
		return byRef[0], nil
	case len(byRef) > 1:
		var from []string
		for _, s := range byRef {
			from = append(from, s.from)
		}
		return savedFacts{}, fmt.Errorf("several saved facts are for %s (%s); pass only one", ref, strings.Join(from, "; "))
	case len(saved) == 1 && saved[0].facts.Target.Ref == "":
		return saved[0], nil
	}
	var covered []string
	for _, s := range saved {
		covered = append(covered, fmt.Sprintf("%s (%s)", orDash(s.facts.Target.Ref), s.from))
	}
	return savedFacts{}, fmt.Errorf("no saved facts for %s: the --facts given are for %s", ref, strings.Join(covered, ", "))
}

func writePlanReport(w io.Writer, r planReport, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
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
		head = fmt.Sprintf("RemediationRequest %s/%s from %s", orDash(rq.Namespace), rq.Name, head)
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
		more("fencing confirmed=%t method=%s node=%s", s.Fencing.Confirmed, orDash(string(s.Fencing.Method)), orDash(s.Fencing.Node))
	}
	if s.MaintenanceWindow != nil {
		more("maintenance window %q for %s", s.MaintenanceWindow.Schedule, s.MaintenanceWindow.Duration.Duration)
	}
	f := res.Facts
	line("facts", "%s, gathered at %s", res.FactsFrom, f.GatheredAt.UTC().Format(time.RFC3339))
	t := f.Target
	target := fmt.Sprintf("target    %s found=%t", orDash(t.Ref), t.Found)
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
			more("lease     %s/%s holder=%s age=%ds LeaseRetained=%d", l.Namespace, l.Name, orDash(l.HolderIdentity), l.AgeSeconds, l.RetainedEvents)
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
		more("pod       %s/%s %s on %s", p.Namespace, p.Name, orDash(p.Phase), orDash(p.Node))
	}
	if c := f.CSI; c != nil {
		more("csi       csinode=%t driverRegistered=%t drivers=[%s]", c.CSINodeExists, c.DriverRegistered, strings.Join(c.Drivers, ","))
		for _, p := range c.PluginPods {
			terminating := ""
			if p.DeletionTimestamp != nil {
				terminating = ", terminating"
			}
			more("          plugin pod %s (%s, ready=%t%s)", p.Name, orDash(p.Phase), p.Ready, terminating)
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
