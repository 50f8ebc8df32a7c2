package plan

// The steps of plan pull-request (pr.go), in the order the check takes them.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/policies"
)

// Run runs the check in --repo-dir and writes its report; its error is a
// cmdutil.ReportedError (prFailed) when the report says why the check failed.
func (o *prOptions) Run(ctx context.Context) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return fmt.Errorf("resolving --repo-dir %s: %w", o.dir, err)
	}
	c := &prCheck{out: o.out, errOut: o.errOut, dir: dir, version: o.version}
	// plan reads -f and --facts relative to the working directory, and the report
	// names the repository's paths (requests/x.yaml), as in the pull request.
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("reading the working directory: %w", err)
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("entering --repo-dir %s: %w", dir, err)
	}
	defer func() { _ = os.Chdir(wd) }()
	forward := o.forwardedArgs()

	// 0. Which facts: live ones whenever the job has a kubeconfig.
	kubeconfig, err := o.kubeconfig()
	if err != nil {
		return err
	}
	r := &prReport{live: kubeconfig != ""}
	if r.live {
		c.say("Facts: live, gathered read-only from the cluster in the kubeconfig %s; facts/ is not read", kubeconfig)
	} else {
		c.say("Facts: saved, from facts/ (KUBECONFIG is not set). This is an OFFLINE REVIEW ONLY: the facts are a snapshot a pull request can change; the controller decides on live facts when the merged request is applied")
	}
	// 1. Which requests: those added, changed or renamed since the merge base.
	if err := c.changes(ctx, o.base, r); err != nil {
		return err
	}
	// 2. Which policies: an override directory replaces the embedded policies whole,
	// so its own cases must pass before any request is planned with it.
	policyArgs, err := c.checkPolicies(ctx, forward)
	if err != nil {
		return err
	}
	// 3. Plan each request: on live facts with a kubeconfig, else on its saved facts.
	if len(r.requests) == 0 {
		c.say("No request to check")
	}
	for _, f := range r.requests {
		c.planRequest(ctx, f, policyArgs, forward, kubeconfig, r)
	}
	return c.report(r)
}

// prReport is what the pull-request check found, for its result.
type prReport struct {
	live bool
	// requests were added, changed or renamed; prunes deleted; factsChanged are the
	// files under facts/ the pull request changes.
	requests, prunes, factsChanged []string
	// rejected, failed (could not be planned), waiting and forged (planned on saved
	// facts the pull request changes) are the requests so planned.
	rejected, failed, waiting, forged []string
}

// changes lists the request files added, changed or renamed since the merge base with
// the pull request's base, those deleted, and the changed files under facts/.
// --no-renames makes a renamed file an addition of its new path (planned like any new
// request) and a deletion of its old one (a prune).
func (c *prCheck) changes(ctx context.Context, base string, r *prReport) error {
	ref, branch, why := prBase(base, os.Getenv)
	mb, err := c.findBase(ctx, ref, branch, why)
	if err != nil {
		return fmt.Errorf("cannot find the pull request's base: %w", err)
	}
	c.say("Base: %s (%s), merge base %s", ref, why, shortSHA(mb))
	changed, err := c.diffNames(ctx, mb, "d", "requests")
	if err != nil {
		return err
	}
	deleted, err := c.diffNames(ctx, mb, "D", "requests")
	if err != nil {
		return err
	}
	if r.factsChanged, err = c.diffNames(ctx, mb, "", "facts"); err != nil {
		return err
	}
	r.requests = slices.DeleteFunc(changed, func(f string) bool { return !isManifest(f) })
	r.prunes = slices.DeleteFunc(deleted, func(f string) bool { return !isManifest(f) })
	fmt.Fprintf(c.out, "%d request file(s) added, changed or renamed since %s\n", len(r.requests), ref)
	if len(r.prunes) > 0 {
		fmt.Fprintf(c.out, "%d request file(s) deleted since %s: listed as prunes below\n", len(r.prunes), ref)
	}
	if len(r.factsChanged) > 0 {
		fmt.Fprintf(c.out, "this pull request changes facts/: %s\n", strings.Join(r.factsChanged, " "))
	}
	return nil
}

// planRequest plans request file f with the policy and forwarded plan arguments: on
// live facts with a kubeconfig, else on its saved facts, and records the outcome in r.
func (c *prCheck) planRequest(ctx context.Context, f string, policyArgs, forward []string, kubeconfig string, r *prReport) {
	name := strings.TrimSuffix(filepath.Base(f), filepath.Ext(f))
	args := append([]string{"-f", f}, policyArgs...)
	from := "live facts from the cluster"
	if r.live {
		args = append(args, "--kubeconfig", kubeconfig)
	} else {
		saved := ""
		for _, s := range []string{"facts/" + name + ".yaml", "facts/" + name + ".json"} {
			if fi, err := os.Stat(filepath.Join(c.dir, s)); err == nil && !fi.IsDir() {
				saved = s
				break
			}
		}
		if saved == "" {
			c.say("%s", f)
			fmt.Fprintf(c.out, "check: no facts/%s.yaml and no kubeconfig: there is nothing to decide on.\n", name)
			fmt.Fprintln(c.out, "  Give the job read-only cluster credentials (KUBECONFIG) to plan on live facts, or, for an")
			fmt.Fprintln(c.out, "  offline review, save the facts (kubectl get rr -n <ns> <name> -o jsonpath='{.status.facts}' of a DryRun request).")
			r.failed = append(r.failed, f+" (no facts)")
			return
		}
		args = append(args, "--facts", saved)
		from = "saved facts " + saved + ", for offline review only"
		if slices.Contains(r.factsChanged, saved) {
			from += "; WARNING: this pull request itself changed " + saved
			r.forged = append(r.forged, f+" ("+saved+")")
		}
	}
	args = append(args, forward...)
	c.say("remediator plan %s", strings.Join(args, " "))
	fmt.Fprintf(c.out, "(planned on %s)\n", from)
	switch code, summary := c.plan(ctx, args); code {
	case cmdutil.ExitOK:
		if summary.WouldWait > 0 {
			r.waiting = append(r.waiting, f)
		}
	case cmdutil.ExitFinding:
		r.rejected = append(r.rejected, f+" (rejected)")
	default:
		r.failed = append(r.failed, fmt.Sprintf("%s (plan failed, exit code %d)", f, code))
	}
}

// report writes the check's result; it fails when a request failed.
func (c *prCheck) report(r *prReport) error {
	out := c.out
	c.say("Result")
	if r.live {
		fmt.Fprintln(out, "facts: live, from the cluster in the kubeconfig")
		if len(r.factsChanged) > 0 {
			fmt.Fprintln(out, "note: this pull request changes facts/: saved facts are for offline review only; they were not used")
		}
	} else {
		fmt.Fprintln(out, "facts: saved, from facts/: an offline review only, not evidence about the cluster; set KUBECONFIG to plan on live facts")
		switch {
		case len(r.forged) > 0:
			fmt.Fprintln(out, "\n!!! WARNING: this pull request changes the saved facts that its own requests were planned against:")
			for _, x := range r.forged {
				fmt.Fprintf(out, "!!!   %s\n", x)
			}
			fmt.Fprintln(out, "!!! A plan on facts the pull request brings says nothing about the cluster. Review the facts/ diff")
			fmt.Fprintln(out, "!!! as closely as the request, or give the job read-only credentials (KUBECONFIG) to plan on live facts.")
			fmt.Fprintln(out)
		case len(r.factsChanged) > 0:
			fmt.Fprintf(out, "note: this pull request changes facts/ (%s); no request it plans was planned on those files\n", strings.Join(r.factsChanged, " "))
		}
	}
	for _, f := range r.prunes {
		fmt.Fprintf(out, "prune: %s — the request is deleted from the cluster; a running one restores first\n", f)
	}
	for _, f := range r.waiting {
		fmt.Fprintf(out, "warning: %s would wait (a remediation on the same node or Lease, its maintenance window, or its turn for a slot of the cap); it starts by itself later\n", f)
	}
	for _, f := range append(slices.Clone(r.rejected), r.failed...) {
		fmt.Fprintf(out, "FAILED: %s\n", f)
	}
	// A request that could not be planned is worse news than a refused one: the
	// check does not know what the controller would do with it.
	if len(r.failed) > 0 {
		return prFailed(cmdutil.ExitError, r)
	}
	if len(r.rejected) > 0 {
		return prFailed(cmdutil.ExitFinding, r)
	}
	fmt.Fprintf(out, "OK: %d request(s) checked, %d prune(s)\n", len(r.requests), len(r.prunes))
	return nil
}

// plan runs plan with args.
func (c *prCheck) plan(ctx context.Context, args []string) (int, planSummary) {
	return runPlanArgs(ctx, c.out, c.errOut, args)
}

// checkPolicies tests and checks override policies in policies/, and returns the
// plan arguments that use them (none: the embedded policies).
func (c *prCheck) checkPolicies(ctx context.Context, forward []string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(c.dir, "policies", "*.cue"))
	if err != nil {
		return nil, fmt.Errorf("listing policies/: %w", err)
	}
	var policyFiles, caseFiles []string
	for _, m := range matches {
		if strings.HasSuffix(m, "_test.cue") {
			caseFiles = append(caseFiles, m)
		} else {
			policyFiles = append(policyFiles, m)
		}
	}
	if len(policyFiles) == 0 {
		for _, k := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
			if _, err := os.Stat(filepath.Join(c.dir, "policies", k)); err == nil {
				return nil, fmt.Errorf("policies/%s is there for Argo CD, but policies/ has no .cue files: Argo CD could build no policies ConfigMap (add the policies, or remove policies/%s)", k, k)
			}
		}
		c.say("policies/ has no .cue files: planning with the policies embedded in remediator %s", c.version)
		return nil, nil
	}
	c.say("Testing the override policies in policies/ (cue vet -c, with CUE's Go API)")
	if len(caseFiles) == 0 {
		fmt.Fprintln(c.errOut, "check: warning: policies/ has no *_test.cue cases; the overrides are untested")
	}
	for _, t := range caseFiles {
		rel := "policies/" + filepath.Base(t)
		fmt.Fprintf(c.out, "cue vet -c <the controller's schema> policies/*.cue - < %s\n", rel)
		src, err := os.ReadFile(t)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", rel, err)
		}
		if err := policies.VetCase(filepath.Join(c.dir, "policies"), rel, src); err != nil {
			return nil, fmt.Errorf("policy cases in %s failed: %w", rel, err)
		}
	}
	policiesDir := filepath.Join(c.dir, "policies")
	// Checked even when the pull request changes no request: they compile, name only
	// playbooks the controller runs, and a policies/kustomization.yaml (Argo CD's
	// ConfigMap) generates exactly them. It prints the digest the controller records.
	c.say("Checking the override policies: remediator plan --policies-dir policies")
	args := []string{"--policies-dir", policiesDir}
	for _, a := range forward {
		if strings.HasPrefix(a, "--policies-configmap=") {
			args = append(args, a)
		}
	}
	if code, _ := c.plan(ctx, args); code != cmdutil.ExitOK {
		return nil, fmt.Errorf("the policies in policies/ cannot be used (plan exit code %d)", code)
	}
	return []string{"--policies-dir", policiesDir}, nil
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
