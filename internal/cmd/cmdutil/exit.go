package cmdutil

// The exit codes of every remediator command, defined once so that a CI script can
// test one code whatever the command: plan, plan pull-request and scan used to exit
// with three different codes for the same news ("the cluster or the request needs a
// person"), and cobra's usage errors exited 1, like a failure of the work itself.

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

const (
	// ExitOK means the command did what was asked, and found nothing that needs a person.
	ExitOK = 0
	// ExitError means the command itself failed (unreadable input, the API unreachable,
	// policies that do not compile...); its output may be incomplete.
	ExitError = 1
	// ExitUsage means the command line is wrong (an unknown command or flag, a bad flag
	// value, arguments where none are taken, missing or conflicting flags); nothing
	// was done. 2, as for shell builtins and most Unix tools.
	ExitUsage = 2
	// ExitFinding means the command ran and its output says what needs a person: plan or
	// plan pull-request refuses a request (the policy or the safety floor rejects it),
	// scan --exit-code found an incident. 3, scan's code from the start.
	ExitFinding = 3
)

// ReportedError is a command's error whose output already says why: main exits with
// Code and prints nothing more (a plan's report, scan's findings).
type ReportedError struct {
	Code int
	// Summary is for logs and tests; main does not print it.
	Summary string
}

func (e *ReportedError) Error() string { return e.Summary }

// Finding returns the error of a command whose output reports a finding or a refusal.
func Finding(format string, args ...any) error {
	return &ReportedError{Code: ExitFinding, Summary: fmt.Sprintf(format, args...)}
}

// UsageError is a wrong command line: main exits ExitUsage and points at --help.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usage marks err, when there is one, as a usage error.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	var u *UsageError
	if errors.As(err, &u) {
		return err
	}
	return &UsageError{Err: err}
}

// ExitCode is the exit code of a command that returned err, and whether main must
// print err (a ReportedError was printed by the command itself).
func ExitCode(err error) (code int, print bool) {
	var reported *ReportedError
	var usage *UsageError
	switch {
	case err == nil:
		return ExitOK, false
	case errors.As(err, &reported):
		return reported.Code, false
	case errors.As(err, &usage):
		return ExitUsage, true
	}
	return ExitError, true
}

// MarkUsageErrors makes every error cobra raises about the command line of root or
// of any command under it a UsageError: flag errors (through the flag error func the
// commands inherit), positional arguments (each command's Args), and missing or
// mutually exclusive flags. Call it once the tree is built (cobra's completion
// command included: cobra adds it only when the root executes, unless
// InitDefaultCompletionCmd was called). Unknown commands are Execute's.
func MarkUsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })
	markUsage(root)
}

// Execute runs root, as cobra's ExecuteC, and returns the command that ran (root when
// none was found) and its error. A root that runs nothing itself fails only on its
// command line (an unknown command, which cobra reports with an error of no type of
// its own): that error is a UsageError.
func Execute(root *cobra.Command) (*cobra.Command, error) {
	cmd, err := root.ExecuteC()
	if cmd == nil {
		cmd = root
	}
	if err != nil && cmd == root && !root.Runnable() {
		err = Usage(err)
	}
	return cmd, err
}

func markUsage(cmd *cobra.Command) {
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error { return Usage(args(c, a)) }
	}
	if cmd.Runnable() {
		// cobra checks required and grouped flags after the pre-runs, and returns
		// their errors as they are: check them first, so they are usage errors.
		pre, preE := cmd.PreRun, cmd.PreRunE
		cmd.PreRun = nil
		cmd.PreRunE = func(c *cobra.Command, a []string) error {
			if err := c.ValidateRequiredFlags(); err != nil {
				return Usage(err)
			}
			if err := c.ValidateFlagGroups(); err != nil {
				return Usage(err)
			}
			if preE != nil {
				return preE(c, a)
			}
			if pre != nil {
				pre(c, a)
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		markUsage(sub)
	}
}
