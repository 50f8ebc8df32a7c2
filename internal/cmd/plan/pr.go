package plan

// plan pull-request: the pull-request check of a remediation repository
// (examples/remediation-repo), as one command that CI runs after its own checkout. It
// finds the pull request's base (fetching and deepening a shallow checkout as needed),
// tests override policies, and plans each request the pull request adds, changes or
// renames, on live facts with a kubeconfig and on saved ones (an offline review)
// without.
//
// It runs the git CLI rather than a Go implementation: CI checkouts are made by git
// (actions/checkout, GitLab's runner), usually shallow, and the base is found by
// fetching and deepening that same repository in place, which go-git does poorly
// (it cannot deepen a shallow repository, and its shallow merge-base is unreliable).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// prDeepen are the successive --deepen steps on a shallow checkout whose merge base
// with the base branch is not fetched yet; after them, --unshallow.
var prDeepen = []int{50, 200, 1000}

// prOptions are plan pull-request's flags.
type prOptions struct {
	// version is the binary's, named when the embedded policies are used.
	version string
	dir     string
	base    string
	// forward are plan's flags this command takes and passes on to each plan.
	forward *pflag.FlagSet
	// out receives the check's report, errOut the errors plan does not report.
	out, errOut io.Writer
}

// prForwarded: every flag of plan but those this command sets itself per request.
func prForwarded(name string) bool {
	return !slices.Contains([]string{"filename", "facts", "output", "policies-dir", "help", "base", "repo-dir"}, name)
}

func newPlanPullRequestCommand(version string) *cobra.Command {
	o := &prOptions{version: version}
	cmd := &cobra.Command{
		Use:   "pull-request",
		Short: "The pull-request check of a remediation repository: plan what the pull request adds or changes under requests/",
		Long: `plan pull-request is the pull-request check of a remediation repository (the
template is examples/remediation-repo). Run it in the repository's checkout, in CI:

  1. The base: --base, else origin/$GITHUB_BASE_REF (GitHub Actions), else
     origin/$CI_MERGE_REQUEST_TARGET_BRANCH_NAME (GitLab CI), else origin/main. When
     the base ref is missing or has no merge base with HEAD, the base branch is
     fetched (git fetch --no-tags origin +refs/heads/B:refs/remotes/origin/B) and a
     shallow checkout is deepened (--deepen 50, 200, 1000, then --unshallow) until it
     has one. Without a base the check fails: it never plans every file instead.
  2. The requests: the files the pull request adds, changes or renames under
     requests/ (git diff --no-renames --diff-filter=d BASE...HEAD); deleted ones are
     listed as prunes, and changes to facts/ are pointed out.
  3. Override policies in policies/: each *_test.cue case file is unified with the
     policy files and must be concrete and consistent (cue vet -c, through CUE's Go
     API), then plan checks the policies (and a policies/kustomization.yaml).
  4. Each request is planned with plan: on live facts when there is a kubeconfig
     (--kubeconfig, else $KUBECONFIG, one file; facts/ is then not read, and the
     controller's settings come from its settings ConfigMap), else on its saved facts
     facts/<name>.yaml or .json, an offline review only.

A request that would wait only warns. A request already in the cluster that the
controller will not decide again (it already ran) is reported and passes.

Exit codes (the worst wins: 1, then 3, then 0): 0 every checked request would be
allowed, would wait or already ran; 3 a request would be rejected (the code plan and
scan --exit-code give a refusal or a finding); 1 a request is invalid or has no
facts, a policy case fails, or the check cannot run (no base, git failing, an
unusable kubeconfig); 2 a wrong command line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(cmd); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// AddFlags registers the check's own flags on cmd, and plan's that it passes on.
func (o *prOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.base, "base", "", "The pull request's base: a ref or commit (default: origin/$GITHUB_BASE_REF, else origin/$CI_MERGE_REQUEST_TARGET_BRANCH_NAME, else origin/main)")
	f.StringVarP(&o.dir, "repo-dir", "C", ".", "The remediation repository's directory (requests/, facts/, policies/) in the checkout")
	newPlanRequestsCommand(NewOptions()).Flags().VisitAll(func(fl *pflag.Flag) {
		if prForwarded(fl.Name) {
			f.AddFlag(fl)
		}
	})
}

// Complete takes the command's flag set, whose plan flags are passed on, and its
// streams. The flags are checked by each plan they are passed to; the kubeconfig
// is checked in Run, from the repository's directory, as plan reads it.
func (o *prOptions) Complete(cmd *cobra.Command) error {
	o.forward, o.out, o.errOut = cmd.Flags(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	return nil
}

// prCheck is one run's state and report.
type prCheck struct {
	out, errOut io.Writer
	dir         string
	version     string
}

func (c *prCheck) say(format string, args ...any) {
	fmt.Fprintf(c.out, "\n==> %s\n", fmt.Sprintf(format, args...))
}

// git runs git in the repository directory and returns its standard output.
func (c *prCheck) git(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = c.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// prBase is the base ref to diff against and the branch to fetch it from, if known.
func prBase(flag string, getenv func(string) string) (ref, branch, why string) {
	switch {
	case flag != "":
		if b, ok := strings.CutPrefix(flag, "origin/"); ok {
			return flag, b, "--base"
		}
		return flag, "", "--base"
	case getenv("GITHUB_BASE_REF") != "":
		return "origin/" + getenv("GITHUB_BASE_REF"), getenv("GITHUB_BASE_REF"), "GITHUB_BASE_REF"
	case getenv("CI_MERGE_REQUEST_TARGET_BRANCH_NAME") != "":
		b := getenv("CI_MERGE_REQUEST_TARGET_BRANCH_NAME")
		return "origin/" + b, b, "CI_MERGE_REQUEST_TARGET_BRANCH_NAME"
	}
	return "origin/main", "main", "the default"
}

// mergeBase is the merge base of ref and HEAD, or "" when there is none yet.
func (c *prCheck) mergeBase(ctx context.Context, ref string) string {
	if _, err := c.git(ctx, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); err != nil {
		return ""
	}
	mb, err := c.git(ctx, "merge-base", ref, "HEAD")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(mb)
}

// findBase makes sure ref and HEAD have a merge base, fetching the base branch and
// deepening a shallow checkout as long as they have none.
func (c *prCheck) findBase(ctx context.Context, ref, branch, why string) (string, error) {
	if mb := c.mergeBase(ctx, ref); mb != "" {
		return mb, nil
	}
	if branch == "" {
		return "", fmt.Errorf("the base %s (%s) has no merge base with HEAD, and is no origin/BRANCH that could be fetched: pass --base origin/<the target branch>", ref, why)
	}
	refspec := "+refs/heads/" + branch + ":refs/remotes/origin/" + branch
	fmt.Fprintf(c.out, "fetching the base: git fetch --no-tags origin %s\n", refspec)
	if _, err := c.git(ctx, "fetch", "--no-tags", "origin", refspec); err != nil {
		return "", fmt.Errorf("fetching the base branch %s (%s): %w; check that the job can fetch from origin, or pass --base", branch, why, err)
	}
	steps := slices.Clone(prDeepen)
	for {
		if mb := c.mergeBase(ctx, ref); mb != "" {
			return mb, nil
		}
		shallow, err := c.git(ctx, "rev-parse", "--is-shallow-repository")
		if err != nil {
			return "", err
		}
		if strings.TrimSpace(shallow) != "true" {
			return "", fmt.Errorf("%s (%s) and HEAD have no common history, even with the whole history fetched: is the base branch right? pass --base origin/<the target branch>", ref, why)
		}
		args := []string{"fetch", "--no-tags", "--unshallow", "origin", refspec}
		if len(steps) > 0 {
			args = []string{"fetch", "--no-tags", fmt.Sprintf("--deepen=%d", steps[0]), "origin", refspec}
			steps = steps[1:]
		}
		fmt.Fprintf(c.out, "the checkout is shallow and has no merge base with %s yet: git %s\n", ref, strings.Join(args, " "))
		if _, err := c.git(ctx, args...); err != nil {
			return "", fmt.Errorf("deepening the shallow checkout to find the merge base with %s: %w; check out with more history (actions/checkout fetch-depth: 0, GitLab GIT_DEPTH: 0), or pass --base", ref, err)
		}
		if args[2] == "--unshallow" {
			if mb := c.mergeBase(ctx, ref); mb != "" {
				return mb, nil
			}
			return "", fmt.Errorf("%s (%s) and HEAD have no common history, even with the whole history fetched: is the base branch right? pass --base origin/<the target branch>", ref, why)
		}
	}
}

// diffNames lists the files under dir/ that the pull request changes, as diff-filter
// selects them, relative to the repository directory.
func (c *prCheck) diffNames(ctx context.Context, base, filter, dir string) ([]string, error) {
	args := []string{"-c", "core.quotePath=false", "diff", "-z", "--no-renames", "--name-only", "--relative"}
	if filter != "" {
		args = append(args, "--diff-filter="+filter)
	}
	out, err := c.git(ctx, append(args, base+"...HEAD", "--", dir+"/")...)
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range strings.SplitSeq(out, "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

func isManifest(name string) bool {
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// runPlanArgs runs plan with args in-process, its report on out, and returns plan's
// exit code and its report's summary (which tells a request that would wait from an
// allowed one); an error plan did not report itself goes to errOut, as main prints it.
func runPlanArgs(ctx context.Context, out, errOut io.Writer, args []string) (int, planSummary) {
	o := NewOptions()
	cmd := newPlanRequestsCommand(o)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(ctx)
	code, print := cmdutil.ExitCode(err)
	if print {
		fmt.Fprintln(errOut, "Error:", err)
	}
	return code, o.summary
}

// forwardedArgs are the plan flags given to this command, to pass on to each plan.
func (o *prOptions) forwardedArgs() []string {
	var args []string
	o.forward.Visit(func(f *pflag.Flag) {
		if !prForwarded(f.Name) || f.Name == "kubeconfig" {
			return
		}
		if s, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range s.GetSlice() {
				args = append(args, "--"+f.Name+"="+v)
			}
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}

// prKubeconfig is the kubeconfig to plan live with: --kubeconfig, else $KUBECONFIG,
// else none (saved facts).
func (o *prOptions) kubeconfig() (string, error) {
	if f := o.forward.Lookup("kubeconfig"); f != nil && f.Changed {
		return f.Value.String(), nil
	}
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		return "", nil
	}
	if strings.Contains(kc, string(os.PathListSeparator)) {
		return "", fmt.Errorf("KUBECONFIG=%s names several files: give the job one kubeconfig file (plan --kubeconfig takes one)", kc)
	}
	if fi, err := os.Stat(kc); err != nil || fi.IsDir() {
		return "", fmt.Errorf("KUBECONFIG=%s is not a readable file: fix the job's credentials, or unset KUBECONFIG to review on saved facts offline", kc)
	}
	if f, err := os.Open(kc); err != nil {
		return "", fmt.Errorf("KUBECONFIG=%s is not a readable file (%w): fix the job's credentials, or unset KUBECONFIG to review on saved facts offline", kc, err)
	} else {
		_ = f.Close()
	}
	return kc, nil
}

// prFailed makes main exit with code without printing an error: the report says why.
func prFailed(code int, r *prReport) error {
	return &cmdutil.ReportedError{Code: code, Summary: fmt.Sprintf("plan pull-request: %d rejected, %d failed", len(r.rejected), len(r.failed))}
}
