// Package plan is `remediator plan` and `plan pull-request`: the pull-request check
// of a remediation repository.
package plan

// plan is the pull-request check of a remediation repository: it tells a reviewer,
// before merge, what the controller would decide for a RemediationRequest. It reads
// requests strictly, refuses what admission would refuse, gathers facts the way the
// controller does (or takes saved ones), asks the same policies and prints the
// decision, the playbook's steps and an exit code a CI job can gate on.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/remediator/remediator/api/v1alpha1"
	slots "github.com/remediator/remediator/controllers/admission"
	"github.com/remediator/remediator/controllers/decider"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/policies/kustomized"
	"github.com/remediator/remediator/remediations"
)

// plan's exit codes are cmdutil's: 0 every request would be allowed or would wait,
// cmdutil.ExitFinding at least one would be rejected, 1 plan itself failed (bad
// input, an unreadable file, the API unreachable, a policy that does not compile).
// With several requests the worst wins: 1, then 3.
//
// A request that would wait exits 0: it is valid, and the controller starts it by
// itself once the conflict ends, the window opens or a slot frees, so a CI gate must
// not hold its merge back (plan pull-request only warns of it). The report says it
// would wait, and -o json counts it in summary.wouldWait for a script that cares.

// Outcomes of one planned request.
const (
	planAllowed   = "allowed"
	planRejected  = "rejected"
	planWouldWait = "would-wait"
)

// planExitError makes main exit with a plan's exit code after the report was
// written: the report says why, so main prints nothing more.
func planExitError(r planReport) error {
	return &cmdutil.ReportedError{Code: r.ExitCode, Summary: fmt.Sprintf("plan: %d allowed, %d rejected, %d would wait, %d failed",
		r.Summary.Allowed, r.Summary.Rejected, r.Summary.WouldWait, r.Summary.Failed)}
}

// planCodeRank orders exit codes from best to worst: 0 < 3 < 1.
func planCodeRank(code int) int {
	switch code {
	case cmdutil.ExitOK:
		return 0
	case cmdutil.ExitFinding:
		return 1
	}
	return 2
}

// Options are plan's flags, and what Complete and Validate derive from them.
type Options struct {
	files       []string
	factsFiles  []string
	cluster     *cmdutil.ClusterFlags
	policiesDir string
	// policiesConfigMap is the ConfigMap a kustomization in policiesDir must generate.
	policiesConfigMap string
	// output is -o: kubectl's printer flags around plan's own outputs.
	output        *cmdutil.OutputFlags
	at            string
	maxConcurrent int
	// settingsConfigMap is the chart's settings ConfigMap (NAMESPACE/NAME) whose
	// values apply to the flags not given; flags is the command's flag set, which
	// says which were.
	settingsConfigMap string
	flags             *pflag.FlagSet
	// stdin is what -f - and --facts - read, once.
	stdin io.Reader

	// now is when the requests would be applied: --at, else the time Complete ran.
	// Set by Validate, which parses --at.
	now time.Time

	// summary is the last report's, set by Run: plan pull-request tells a request
	// that would wait from an allowed one by it, as both exit 0.
	summary planSummary
}

// NewOptions returns plan's options with its defaults.
func NewOptions() *Options {
	return &Options{cluster: cmdutil.NewClusterFlags(true), output: cmdutil.NewOutputFlags("", "table", "text")}
}

// NewCommand returns `remediator plan` with its subcommand pull-request; version is
// the binary's, which the pull-request check names.
func NewCommand(version string) *cobra.Command {
	cmd := newPlanRequestsCommand(NewOptions())
	cmd.AddCommand(newPlanPullRequestCommand(version))
	return cmd
}

// newPlanRequestsCommand is plan, with the options o, without its subcommands.
func newPlanRequestsCommand(o *Options) *cobra.Command {
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

--policies-dir holds policy rules only (the schema, #Input and #Decision, is always
the binary's own: a schema.cue there is refused); they must compile and name only the
playbooks the controller runs. When it holds a kustomization.yaml (what Argo CD builds
into the controller's policies ConfigMap), plan builds it as kustomize does and
refuses it unless it generates one ConfigMap, --policies-configmap, holding exactly
the directory's non-test .cue files; the directory may hold nothing else but Markdown.
With --policies-dir and no -f, plan checks the policies alone and prints their
digest: the one the controller records in status.decision.policyDigest.

With live facts, the controller's settings (the Trident namespace, driver and
node-plugin selector, the node-lease grace, the cap and the floor's minimums) are read
from the chart's settings ConfigMap (--settings-configmap) wherever no flag gives them.

plan never writes to the cluster. It needs get/list on pods, persistentvolumeclaims,
persistentvolumes, nodes, events, leases, csinodes and remediationrequests, get on
csidrivers and volumeattachments, and get on the settings ConfigMap (the chart's
remediator-plan ClusterRole).

plan pull-request is the whole pull-request check of a remediation repository.

Exit codes (with several requests the worst wins: 1, then 3, then 0):
  0  every request would be allowed (a DryRun request counts as allowed) or would
     wait: another remediation is running on the same node or Lease, its
     maintenance window is closed at --at, or --max-concurrent-remediations
     playbooks are running (live facts); it starts by itself later
  3  at least one request would be rejected by the policy or the safety floor
  1  plan itself failed: unreadable or invalid input, no saved facts for a request,
     the API unreachable, policies that do not compile
  2  a wrong command line: an unknown flag, a bad flag value, conflicting flags`,
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
	o.AddFlags(cmd)
	return cmd
}

// AddFlags registers plan's flags on cmd.
func (o *Options) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "RemediationRequest manifest(s) to plan: a file, a directory (its .json, .yaml and .yml files, as kubectl -f) or - for stdin; repeatable")
	f.StringArrayVar(&o.factsFiles, "facts", nil, "Saved facts (v1alpha1.Facts, or RemediationRequests with status.facts) instead of live ones; repeatable")
	o.cluster.AddFlags(f, " (live facts)")
	f.Lookup("namespace").Usage = "Namespace of the requests whose manifest names none, as kubectl apply -n would create them; a request naming another namespace is refused"
	f.StringVar(&o.policiesDir, "policies-dir", "", "Directory of CUE policies to use instead of the embedded ones")
	f.StringVar(&o.policiesConfigMap, "policies-configmap", "remediator-policies",
		"The ConfigMap (NAME, or NAMESPACE/NAME) a kustomization.yaml in --policies-dir must generate: the chart's policiesConfigMap")
	o.output.AddFlags(cmd, planOutputUsage)
	f.IntVar(&o.maxConcurrent, "max-concurrent-remediations", 2, "The controller's cap on running playbooks (live facts: a request over it would wait); 0 means no cap")
	f.StringVar(&o.at, "at", "", "When the request would be applied, for spec.maintenanceWindow (RFC 3339); empty means now")
	cmdutil.AddSettingsFlag(f, &o.settingsConfigMap, "plan")
	cmd.MarkFlagsMutuallyExclusive("facts", "kubeconfig")
	cmd.MarkFlagsMutuallyExclusive("facts", "context")
}

// Complete takes the command's flag set (the settings ConfigMap fills the flags it
// says were not given) and stdin, and the time now, which --at overrides. The
// clients are built in Run: plan connects only when a request is to be planned on
// live facts, so that invalid requests are reported without a cluster.
func (o *Options) Complete(cmd *cobra.Command) error {
	o.flags, o.stdin, o.now = cmd.Flags(), cmd.InOrStdin(), time.Now()
	return nil
}

// Validate refuses what the flags alone make wrong, before any file is read or the
// cluster is reached: -o, --at, nothing to plan, and settings the controller would
// refuse. The settings ConfigMap's values are checked once they applied (Run).
func (o *Options) Validate() error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	if o.at != "" {
		t, err := time.Parse(time.RFC3339, o.at)
		if err != nil {
			return fmt.Errorf("parsing --at %q (want RFC 3339, e.g. 2026-11-19T02:30:00Z): %w", o.at, err)
		}
		o.now = t
	}
	if len(o.files) == 0 && o.policiesDir == "" {
		return errors.New("-f is required: the requests to plan (or give --policies-dir alone to check policies)")
	}
	return nil
}

// planInput is one YAML document of an -f file: a request, or why it is not one.
type planInput struct {
	source string
	doc    int
	rr     *v1alpha1.RemediationRequest
	errs   []string
	// refused says why a request that admission accepts must not come from Git as it
	// is (gitsync.Refusals); kept apart from errs, which are admission's verdict.
	refused []string
}

// savedFacts is one facts document of a --facts file.
type savedFacts struct {
	from string
	// namespace/name of the RemediationRequest the facts were copied from, if any.
	request string
	facts   *v1alpha1.Facts
}

// Run plans every request of -f (or checks --policies-dir alone) and writes the
// report to w. Its error is a planExitError when the report says why it fails.
func (o *Options) Run(ctx context.Context, w io.Writer) error {
	report, policy, playbooks, err := o.loadPolicies()
	if err != nil {
		return err
	}
	in := &onceReader{r: o.stdin}
	inputs := readPlanRequests(o.files, in)
	// The settings flags are checked after the policies and the inputs are read, so
	// that a broken policy is reported first, as it always was.
	if err := o.checkSettings(); err != nil {
		return err
	}
	p, err := o.newPlanner(ctx, policy, playbooks, inputs, in, &report)
	if err != nil {
		return err
	}
	for _, input := range inputs {
		report.Requests = append(report.Requests, p.plan(ctx, input))
	}
	report.summarize()
	if err := writePlanReport(w, report, o.output); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	o.summary = report.Summary
	if report.ExitCode != cmdutil.ExitOK {
		return planExitError(report)
	}
	return nil
}

// loadPolicies loads the policies (--policies-dir, else the embedded ones) and the
// playbooks, checks a kustomization in --policies-dir, and starts the report with
// them and the time planned at.
func (o *Options) loadPolicies() (planReport, *policies.Engine, remediations.Playbooks, error) {
	source := cmp.Or(o.policiesDir, "embedded")
	policy, err := policies.Load(o.policiesDir)
	if err != nil {
		return planReport{}, nil, nil, fmt.Errorf("loading policies from %s: %w", source, err)
	}
	playbooks, err := remediations.DefaultPlaybooks()
	if err != nil {
		return planReport{}, nil, nil, err
	}
	var generated string
	if o.policiesDir != "" {
		cm, err := kustomized.Check(filesys.MakeFsOnDisk(), o.policiesDir, o.policiesConfigMap)
		if err != nil {
			return planReport{}, nil, nil, fmt.Errorf("the policies in %s: %w", o.policiesDir, err)
		}
		if cm != nil {
			generated = cm.String()
		}
	}
	report := planReport{Policy: planPolicy{Source: source, Digest: policy.Digest(), ConfigMap: generated}, At: o.now.UTC().Format(time.RFC3339)}
	return report, policy, playbooks, nil
}

// newPlanner builds the planner for inputs: on saved facts (--facts), or on live
// ones, with the controller's settings from its ConfigMap (flags given win: they are
// what the gatherer and the floor use), which it records in report.
func (o *Options) newPlanner(ctx context.Context, policy *policies.Engine, playbooks remediations.Playbooks,
	inputs []planInput, in *onceReader, report *planReport) (*planner, error) {
	// Connect only when there is something to plan live, so that a PR whose requests
	// are all invalid is told so without needing a cluster.
	live := len(o.factsFiles) == 0 && slices.ContainsFunc(inputs, func(in planInput) bool { return in.rr != nil && len(in.errs) == 0 })
	var err error
	if live {
		if report.Settings, report.Warnings, err = o.applySettings(ctx); err != nil {
			return nil, err
		}
		if err := o.checkSettings(); err != nil {
			return nil, fmt.Errorf("with the controller's settings from ConfigMap %s: %w", o.settingsConfigMap, err)
		}
	}
	gates, err := o.cluster.Floor()
	if err != nil {
		return nil, err
	}
	p := &planner{policy: policy, playbooks: playbooks, at: o.now, maxConcurrent: o.maxConcurrent, gates: gates, namespace: o.cluster.Namespace()}
	if len(o.factsFiles) > 0 {
		report.FactsSource = "saved"
		if p.saved, err = readSavedFacts(o.factsFiles, in); err != nil {
			return nil, err
		}
		return p, nil
	}
	report.FactsSource = "live"
	if live {
		if p.reader, p.gatherer, err = o.cluster.Gatherer(ctx); err != nil {
			return nil, err
		}
		// plan decides as the controller does, so it reads the holder's log as the
		// controller's decision does.
		if p.gatherer.Logs, err = o.cluster.LogReader(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// summarize sorts the results by request and counts their outcomes; the report's
// exit code is the worst of theirs.
func (r *planReport) summarize() {
	slices.SortStableFunc(r.Requests, func(a, b planResult) int {
		return strings.Compare(planSortKey(a.Request), planSortKey(b.Request))
	})
	for _, res := range r.Requests {
		switch {
		case res.Existing != nil:
			r.Summary.AlreadyDecided++
		case res.Decision == nil:
			r.Summary.Failed++
		case res.Decision.Outcome == planAllowed:
			r.Summary.Allowed++
		case res.Decision.Outcome == planRejected:
			r.Summary.Rejected++
		default:
			r.Summary.WouldWait++
		}
		if planCodeRank(res.ExitCode) > planCodeRank(r.ExitCode) {
			r.ExitCode = res.ExitCode
		}
	}
}

func planSortKey(r planRequest) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%08d", r.Namespace, r.Name, r.Source, r.Document)
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
	// gates are the controller's safety-floor minimums (--floor-*, the heartbeat
	// grace and the driver), so that plan refuses what the floor refuses.
	gates remediations.Floor
	// namespace is --namespace: where a request whose manifest names none goes.
	namespace string
}

// plan plans one request: refused as admission or the sync would refuse it, reported
// as already decided when the controller will not decide it again, else decided as
// the controller would.
func (p *planner) plan(ctx context.Context, in planInput) planResult {
	res := planResult{Request: planRequest{Source: in.source, Document: in.doc}, Conflicts: []string{}, Steps: []string{}, Notes: []string{}}
	fail := func(errs ...string) planResult {
		res.Errors = append(res.Errors, errs...)
		res.ExitCode = cmdutil.ExitError
		return res
	}
	if in.rr == nil {
		return fail(in.errs...)
	}
	rr := in.rr
	errs := p.placeInNamespace(in)
	res.Request.Namespace, res.Request.Name, res.Request.Spec = rr.Namespace, rr.Name, &rr.Spec
	if len(errs) > 0 || len(in.refused) > 0 {
		return fail(append(slices.Clone(errs), in.refused...)...)
	}
	if p.gatherer == nil {
		sf, err := matchSavedFacts(p.saved, rr)
		if err != nil {
			return fail(err.Error())
		}
		// decide takes the saved facts from the request, as the controller's own
		// record of them.
		res.FactsFrom = sf.from
		rr.Status.Facts = sf.facts
		res.Notes = append(res.Notes, fmt.Sprintf("Facts are saved ones, gathered at %s; the controller decides on live facts when the request is applied.",
			sf.facts.GatheredAt.UTC().Format(time.RFC3339)))
	} else {
		res.FactsFrom = "live"
		ex, err := p.adoptExisting(ctx, rr)
		if err != nil {
			return fail(err.Error())
		}
		if ex.done != nil {
			// The controller will not decide it again: planning it on today's facts
			// would judge what it already did, not what applying the file does.
			res.Existing = ex.done
			return res
		}
		if ex.note != "" {
			res.Notes = append(res.Notes, ex.note)
		}
	}
	o, f, err := p.decide(ctx, rr, p.at)
	if err != nil {
		return fail(err.Error())
	}
	res.Facts = f
	p.record(&res, rr, o)
	return res
}

// placeInNamespace puts a request whose manifest names no namespace in --namespace
// and refuses one that names another, as kubectl apply -n does. It returns the
// input's errors, with that refusal.
func (p *planner) placeInNamespace(in planInput) []string {
	rr := in.rr
	if p.namespace == "" || len(in.errs) > 0 {
		return in.errs
	}
	switch rr.Namespace {
	case "":
		rr.Namespace = p.namespace
	case p.namespace:
	default:
		return []string{fmt.Sprintf("%s (document %d): the request's namespace %q does not match --namespace %q",
			in.source, in.doc, rr.Namespace, p.namespace)}
	}
	return nil
}

// decide decides rr at now through the decider the controller decides through
// (package decider): the policy, the safety floor, DryRun, the maintenance window and
// the cap, in the controller's order. What plan injects: the facts (live ones, or
// with saved ones those plan put in rr.Status.Facts), the others (a live list, else
// p.others), and admission's own choice on the others for the slot, which tells
// whether the request would get a slot of the cap at once or wait in line for one.
func (p *planner) decide(ctx context.Context, rr *v1alpha1.RemediationRequest, now time.Time) (lifecycle.Transition, *v1alpha1.Facts, error) {
	d := &decider.Decider{Policy: p.policy, Playbooks: p.playbooks, Floor: p.gates, MaxConcurrent: p.maxConcurrent,
		Gather: func(context.Context, *v1alpha1.RemediationRequest) (*v1alpha1.Facts, error) {
			return rr.Status.Facts, nil
		},
		Others: func(context.Context, *v1alpha1.Facts) ([]v1alpha1.RemediationRequest, error) { return p.others, nil },
		Admitted: func(rr *v1alpha1.RemediationRequest, others []v1alpha1.RemediationRequest) bool {
			return slots.WouldAdmit(rr, others, p.maxConcurrent, p.playbooks, now)
		}}
	if p.gatherer != nil {
		// The live facts go into the request before admission is asked: it passes over a
		// request whose Lease or node a slot holder works on.
		d.Gather = func(ctx context.Context, rr *v1alpha1.RemediationRequest) (*v1alpha1.Facts, error) {
			f, err := p.gatherer.Gather(ctx, rr)
			if err == nil {
				rr.Status.Facts = f
			}
			return f, err
		}
		d.Others = func(ctx context.Context, _ *v1alpha1.Facts) ([]v1alpha1.RemediationRequest, error) {
			return requests.List(ctx, p.reader)
		}
	}
	dec, err := d.Decide(ctx, rr, now, "")
	if err != nil {
		return lifecycle.Transition{}, nil, err
	}
	return dec.Transition, dec.Facts, nil
}

// record writes the controller's outcome o for rr into res: the decision, the
// conflicts, the playbook's steps, the notes and the exit code.
func (p *planner) record(res *planResult, rr *v1alpha1.RemediationRequest, o lifecycle.Transition) {
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
	dec.Outcome, res.Notes = p.outcome(rr, o, dec, res.Notes)
	// A request that would wait exits 0: it is valid and starts by itself later.
	if dec.Outcome == planRejected {
		res.ExitCode = cmdutil.ExitFinding
	}
}

// outcome is plan's outcome for the phase the controller would set, with notes on
// DryRun, the maintenance window and a wait for a slot appended to notes. A window's
// wait replaces dec's recheck time with the time the window opens.
func (p *planner) outcome(rr *v1alpha1.RemediationRequest, o lifecycle.Transition, dec *planDecision, notes []string) (string, []string) {
	mw := rr.Spec.MaintenanceWindow
	at := p.at.UTC().Format(time.RFC3339)
	switch o.Phase {
	case v1alpha1.PhasePending:
		notes = append(notes, "spec.mode is DryRun: the controller records this decision and the planned steps (all Pending) and changes nothing; set spec.mode: Apply to run the playbook.")
		if mw != nil {
			notes = append(notes, "spec.maintenanceWindow is not consulted for a dry run.")
		}
		return planAllowed, notes
	case v1alpha1.PhaseRunning:
		if mw != nil {
			notes = append(notes, fmt.Sprintf("The maintenance window (%s for %s) is open at %s: the playbook would start right away; only its start is gated.",
				mw.Schedule, mw.Duration.Duration, at))
		}
		return planAllowed, notes
	case v1alpha1.PhaseWaiting:
		switch o.Progressing.Reason {
		case v1alpha1.ReasonWaitingForWindow:
			dec.WindowOpensAt = o.Decision.RecheckAt.UTC().Format(time.RFC3339)
			dec.RecheckAfterSeconds = 0
			notes = append(notes, fmt.Sprintf(
				"Playbook %s is allowed but waits for the maintenance window (%s for %s), which is closed at %s and opens at %s; the controller decides again then, on fresh facts.",
				o.Decision.Playbook, mw.Schedule, mw.Duration.Duration, at, dec.WindowOpensAt))
		case v1alpha1.ReasonWaitingForSlot:
			notes = append(notes, o.Progressing.Message)
		}
		return planWouldWait, notes
	}
	return planRejected, notes
}
