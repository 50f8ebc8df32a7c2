package policies

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	cuejson "cuelang.org/go/encoding/json"

	"cuelang.org/go/cue"

	"github.com/remediator/remediator/api/v1alpha1"
)

//go:embed *.cue
var embedded embed.FS

// Input is what a policy decides on: the facts, the spec fields a policy may weigh,
// and the other active requests on the same node or Lease, sorted.
type Input struct {
	Remediation v1alpha1.Remediation `json:"remediation"`
	Mode        v1alpha1.Mode        `json:"mode,omitempty"`
	Fencing     *v1alpha1.Fencing    `json:"fencing,omitempty"`
	Facts       *v1alpha1.Facts      `json:"facts"`
	Conflicts   []string             `json:"conflicts"`
}

// Verdict is what a policy's answer comes to: one of three.
type Verdict string

const (
	// VerdictAllow means run Decision.Playbook.
	VerdictAllow Verdict = "Allow"
	// VerdictWait means not now, not never (phase Waiting); decided again later.
	VerdictWait Verdict = "Wait"
	// VerdictReject means the request is rejected, with an explanation.
	VerdictReject Verdict = "Reject"
)

// Decision is a policy's answer.
type Decision struct {
	Verdict             Verdict  `json:"verdict"`
	Playbook            string   `json:"playbook,omitempty"`
	Rule                string   `json:"rule"`
	Reasons             []string `json:"reasons"`
	Message             string   `json:"message"`
	RecheckAfterSeconds int64    `json:"recheckAfterSeconds,omitempty"`
	// Digest identifies the policy source that decided.
	Digest string `json:"digest,omitempty"`
}

// decoded is a decision as #Decision spells it, two booleans (validateDecision),
// which decision turns into a Verdict.
type decoded struct {
	Allowed bool `json:"allowed"`
	Wait    bool `json:"wait"`
	Decision
}

// decision is d as a Decision of policy digest.
func (d decoded) decision(digest string) Decision {
	out := d.Decision
	out.Verdict, out.Digest = VerdictReject, digest
	switch {
	case d.Allowed:
		out.Verdict = VerdictAllow
	case d.Wait:
		out.Verdict = VerdictWait
	}
	return out
}

// RulePolicyTimeout is the rule of the decision when the policy did not decide
// within the Engine's timeout: rejected (fail closed) and decided again later.
const RulePolicyTimeout = "policy-timeout"

// RulePolicyInvalid is the rule of the decision while the Engine has no policy
// (LoadOrWait): the request waits until Reload swaps in a policy that loads.
const RulePolicyInvalid = "policy-invalid"

// NoPolicy is the Digest of an Engine that has no policy yet.
const NoPolicy = "none"

// policyInvalidRecheckAfterSeconds: soon after a fixed policy is reloaded, rarely
// enough not to gather every waiting request's facts every few seconds.
const policyInvalidRecheckAfterSeconds = 15

// DefaultTimeout bounds one evaluation when Engine.Timeout is zero: the embedded
// policies take a millisecond, and a second is room for a slow node, not for a
// policy that recurses without bound.
const DefaultTimeout = time.Second

// MaxRunawayEvaluations caps the evaluations past the timeout still running: CUE
// cannot cancel one, so each keeps a CPU busy; past the cap Decide fails closed.
const MaxRunawayEvaluations = 2

// timeoutRecheckAfterSeconds: long enough not to pile up runaways, short enough
// that a fixed policy takes over soon.
const timeoutRecheckAfterSeconds = 60

// Engine decides with compiled policies. No lock is held around a decision: Reload
// swaps the compiledPolicy whole, and each evaluation runs on CUE values of its own
// (compiledPolicy.take), so a slow evaluation delays only its own request.
type Engine struct {
	// Timeout bounds each evaluation; zero means DefaultTimeout. Set before use.
	Timeout time.Duration

	// cur is the policy in use; nil while an Engine from LoadOrWait has none.
	cur atomic.Pointer[compiledPolicy]
	// loadErr is why cur is nil: the last failed load of dir.
	loadErr atomic.Pointer[LoadError]
	// dir is where the policies were loaded from; empty means embedded.
	dir string

	// mu serialises Reload, so that an older compile is never stored over a newer.
	mu sync.Mutex

	// onEvaluate (tests only) is called as each evaluation starts, with its copy, on
	// its goroutine.
	onEvaluate func()
}

// Embedded compiles the policies built into the binary.
func Embedded() (*Engine, error) { return newEngine(embedded, "") }

// FromDir compiles the policies in dir (for example a ConfigMap synced from Git).
// *_test.cue files are ignored, as by cue itself.
func FromDir(dir string) (*Engine, error) { return newEngine(os.DirFS(dir), dir) }

// FromFS compiles the policies at the root of fsys, as FromDir does (remediator sync
// checks a revision's policies, with the same digest).
func FromFS(fsys fs.FS) (*Engine, error) { return newEngine(fsys, "") }

// Load returns the policies from dir, or the embedded ones when dir is empty.
func Load(dir string) (*Engine, error) {
	if dir == "" {
		return Embedded()
	}
	return FromDir(dir)
}

// LoadOrWait is Load for the controller: a dir whose files do not load (a broken
// ConfigMap from Git) gives an Engine without a policy, not an error, which decides
// nothing (RulePolicyInvalid) until Reload loads them: a controller that exits on
// them only crash-loops. The error is for the embedded policies, the binary's own.
func LoadOrWait(dir string) (*Engine, error) {
	e, err := Load(dir)
	if err == nil || dir == "" {
		return e, err
	}
	le, ok := err.(*LoadError)
	if !ok {
		le = &LoadError{Reason: LoadReasonRead, Err: err}
	}
	e = &Engine{dir: dir}
	e.loadErr.Store(le)
	return e, nil
}

// LoadFailure is why the Engine has no policy, or nil once it has one (a failed
// Reload that keeps a policy does not show here).
func (e *Engine) LoadFailure() error {
	if e.current() != nil {
		return nil
	}
	if le := e.loadErr.Load(); le != nil {
		return le
	}
	return nil
}

func newEngine(fsys fs.FS, dir string) (*Engine, error) {
	c, err := compile(fsys)
	if err != nil {
		return nil, err
	}
	e := &Engine{dir: dir}
	e.cur.Store(c)
	return e, nil
}

func (e *Engine) current() *compiledPolicy { return e.cur.Load() }

// Digest identifies the compiled policy source in use; NoPolicy when there is none.
func (e *Engine) Digest() string {
	c := e.current()
	if c == nil {
		return NoPolicy
	}
	return c.digest
}

// Source is the policy directory, or "embedded".
func (e *Engine) Source() string {
	if e.dir == "" {
		return "embedded"
	}
	return e.dir
}

func (e *Engine) timeout() time.Duration {
	if e.Timeout <= 0 {
		return DefaultTimeout
	}
	return e.Timeout
}

// Suspended reports whether the Engine decides nothing for now, and why (for a
// readiness check or a log): it has no policy, or MaxRunawayEvaluations of its
// evaluations are still running, so Decide rejects at once until they end or
// Reload swaps in another policy.
func (e *Engine) Suspended() (suspended bool, why string) {
	c := e.current()
	if c == nil {
		return true, e.noPolicyWhy()
	}
	if n := c.runaway.Load(); n >= MaxRunawayEvaluations {
		return true, e.suspendedWhy(c, n, e.timeout())
	}
	return false, ""
}

func (e *Engine) noPolicyWhy() string {
	return fmt.Sprintf("No policy is in use: the policies in %s do not load (%v). Nothing is decided: requests wait, "+
		"condition Accepted reason PolicyInvalid, until the files are fixed; they are read again at every reload.", e.Source(), e.LoadFailure())
}

func (e *Engine) suspendedWhy(c *compiledPolicy, n int32, timeout time.Duration) string {
	return fmt.Sprintf("Policy evaluation is suspended: %d earlier evaluations of policy %s (%s) took longer than %s and are still running.",
		n, c.digest, e.Source(), timeout)
}

// Reload recompiles on-disk policies and swaps them in when their digest changed. A
// policy that no longer compiles is a *LoadError and the previous one stays in use:
// a bad edit must not stop the controller from deciding. The new policy starts with
// no runaways; decisions evaluating on the old one finish on it.
func (e *Engine) Reload() (changed bool, err error) {
	if e.dir == "" {
		return false, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// An unchanged source is not compiled again: a reload every interval would
	// otherwise build the whole policy each time to find it the same.
	files, digest, err := readSource(os.DirFS(e.dir))
	var n *compiledPolicy
	if err == nil {
		if c := e.current(); c != nil && digest == c.digest {
			return false, nil
		}
		n, err = compileSource(files, digest)
	}
	if err != nil {
		if le := (*LoadError)(nil); errors.As(err, &le) && e.current() == nil {
			e.loadErr.Store(le)
		}
		return false, err
	}
	e.cur.Store(n)
	return true, nil
}

// Decide evaluates the policy for one input, for at most the Engine's Timeout once it
// has a copy of the policy of its own (building one, when none is idle, has the
// bound of a build, compileTimeout). A longer evaluation or build is abandoned,
// running on in the background, and the request is rejected with rule
// RulePolicyTimeout (no error), so a runaway policy cannot stall the workers.
// Concurrent callers may each add a runaway before the cap is seen (Suspended).
//
// An error is an *EvalError: the policy could not decide, and the caller must fail
// closed.
func (e *Engine) Decide(in Input) (Decision, error) {
	if in.Conflicts == nil {
		in.Conflicts = []string{}
	}
	data, err := json.Marshal(in)
	if err != nil {
		return Decision{}, &EvalError{Reason: EvalReasonError, Err: fmt.Errorf("encoding policy input: %w", err)}
	}

	c := e.current()
	if c == nil {
		return e.waitForPolicy(), nil
	}
	timeout := e.timeout()
	if d, suspended := e.atRunawayCap(c, timeout); suspended {
		return d, nil
	}
	c.acquire()
	// Waiting for the token, others may have been abandoned up to the cap.
	if d, suspended := e.atRunawayCap(c, timeout); suspended {
		c.release()
		return d, nil
	}
	var late atomic.Bool             // the build was abandoned: the copy is not evaluated for nobody
	taken := make(chan struct{})     // closed once the evaluation has its copy, or none
	done := make(chan evaluation, 1) // an abandoned evaluation still delivers and ends
	hook := e.onEvaluate
	go func() {
		var r evaluation
		copied := false
		defer func() {
			if p := recover(); p != nil {
				r = evaluation{err: fmt.Errorf("evaluating policy: panic: %v", p), panicked: true}
			}
			if !copied {
				close(taken)
			}
			done <- r
		}()
		inst, err := c.take()
		copied = true
		close(taken)
		if err != nil {
			r.err = &EvalError{Reason: EvalReasonError, Err: err}
			return
		}
		if late.Load() {
			c.give(inst) // built late, never evaluated: the next decision's
			return
		}
		r.inst = inst
		if hook != nil {
			hook()
		}
		r.d, r.err = decideInput(inst.ctx, inst.policy, data)
	}()
	// With no idle copy, take builds one, bounded as a load is (compileTimeout), not by
	// the evaluation's timeout: a build takes longer than an evaluation, and a storm's
	// first decisions each build one. A policy that runs away in its build is refused
	// at load, so a copy's build past that bound is a machine stalled.
	compiling := time.NewTimer(compileTimeout)
	defer compiling.Stop()
	select {
	case <-taken:
	case <-compiling.C:
		select {
		case <-taken: // in time after all: both were ready
		default:
			late.Store(true)
			return e.abandon(c, done, fmt.Sprintf("Building a copy of the policy took longer than %s and was abandoned.", compileTimeout),
				fmt.Sprintf("building a copy of the policy exceeded %s", compileTimeout)), nil
		}
	}
	evaluating := time.NewTimer(timeout)
	defer evaluating.Stop()
	select {
	case r := <-done:
		if r.inst != nil && !r.panicked {
			c.give(r.inst)
		}
		c.release()
		if ee := (*EvalError)(nil); errors.As(r.err, &ee) {
			return Decision{}, ee
		}
		if r.err != nil {
			return Decision{}, evalError(r.err)
		}
		if err := validateDecision(r.d); err != nil {
			return Decision{}, err
		}
		return r.d.decision(c.digest), nil
	case <-evaluating.C:
		return e.abandon(c, done, fmt.Sprintf("Policy evaluation took longer than %s and was abandoned.", timeout), evaluationExceeded(timeout)), nil
	}
}

// atRunawayCap is the fail-closed decision, and true, while c has
// MaxRunawayEvaluations evaluations still running.
func (e *Engine) atRunawayCap(c *compiledPolicy, timeout time.Duration) (Decision, bool) {
	n := c.runaway.Load()
	if n < MaxRunawayEvaluations {
		return Decision{}, false
	}
	return e.timedOut(c, e.suspendedWhy(c, n, timeout), evaluationExceeded(timeout)), true
}

// evaluation is what one evaluation delivers when it ends.
type evaluation struct {
	inst     *instance // nil when no copy could be taken
	d        decoded
	err      error
	panicked bool // the copy may be half-written: not given back
}

// abandon leaves an evaluation of c that did not end within its bound running,
// counted as a runaway until it delivers on done, and returns the fail-closed
// decision. The runaway keeps its copy, not its token (the runaway cap bounds
// those); the copy is dropped when it ends, unless it was built too late to be
// evaluated at all.
func (e *Engine) abandon(c *compiledPolicy, done <-chan evaluation, what, reason string) Decision {
	c.release()
	c.runaway.Add(1)
	go func() {
		<-done
		c.runaway.Add(-1)
	}()
	return e.timedOut(c, what, reason)
}

// evaluationExceeded is the reason of a decision whose evaluation took longer than
// timeout.
func evaluationExceeded(timeout time.Duration) string {
	return fmt.Sprintf("policy evaluation exceeded %s", timeout)
}

// waitForPolicy is the decision of an Engine without a policy: not now, not never.
func (e *Engine) waitForPolicy() Decision {
	return Decision{
		Verdict: VerdictWait,
		Rule:    RulePolicyInvalid,
		Reasons: []string{fmt.Sprintf("the policies in %s do not load", e.Source())},
		Message: fmt.Sprintf("Not decided: the controller has no policy. %s Fix the policy files in Git; the request is decided once they load.",
			e.noPolicyWhy()),
		RecheckAfterSeconds: policyInvalidRecheckAfterSeconds,
		Digest:              NoPolicy,
	}
}

// timedOut is the fail-closed decision for an evaluation of c that did not finish.
func (e *Engine) timedOut(c *compiledPolicy, what, reason string) Decision {
	return Decision{
		Verdict: VerdictReject,
		Rule:    RulePolicyTimeout,
		Reasons: []string{reason},
		Message: fmt.Sprintf("%s Nothing is allowed until the policy decides in time: check policy %s (%s) for unbounded recursion or comprehensions over large inputs, and fix or reload it. Deciding again in %ds.",
			what, c.digest, e.Source(), timeoutRecheckAfterSeconds),
		RecheckAfterSeconds: timeoutRecheckAfterSeconds,
		Digest:              c.digest,
	}
}

// decideInput fills the input into the policy, whose only user it must be, and
// decodes its decision. An input outside #Input fails even where no rule reads it.
// The input is built as an expression, not compiled as a file: a cue.Context keeps
// every file compiled into it, and a copy decides for the life of the controller.
func decideInput(ctx *cue.Context, policy cue.Value, data []byte) (decoded, error) {
	expr, err := cuejson.Extract("input.json", data)
	if err != nil {
		return decoded{}, fmt.Errorf("compiling policy input: %w", err)
	}
	iv := ctx.BuildExpr(expr)
	if err := iv.Err(); err != nil {
		return decoded{}, fmt.Errorf("compiling policy input: %w", err)
	}
	d := policy.FillPath(cue.ParsePath("input"), iv).LookupPath(cue.ParsePath("decision"))
	// Decode fails on an incomplete or conflicting decision: an error, never a default.
	var out decoded
	if err := d.Decode(&out); err != nil {
		return decoded{}, fmt.Errorf("evaluating policy: %w", err)
	}
	return out, nil
}

// maxReasonLength is metav1.Condition's limit on reason.
const maxReasonLength = 1024

// ConditionReason turns a rule name into a valid metav1.Condition reason, so that an
// on-disk policy can never make the status patch invalid: parts separated by '-',
// '_', ' ' or '.' in CamelCase ("node-shutdown" -> "NodeShutdown"), other non-ASCII
// letters and digits dropped, "Rule" before a leading digit, "Unknown" for nothing.
func ConditionReason(rule string) string {
	var b strings.Builder
	upper := true
	for _, r := range rule {
		switch {
		case r == '-' || r == '_' || r == ' ' || r == '.':
			upper = true
		case r <= unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			if upper {
				r = unicode.ToUpper(r)
				upper = false
			}
			b.WriteRune(r)
		}
	}
	out := b.String()
	switch {
	case out == "":
		return "Unknown"
	case out[0] >= '0' && out[0] <= '9':
		out = "Rule" + out
	}
	if len(out) > maxReasonLength {
		out = out[:maxReasonLength]
	}
	return out
}
