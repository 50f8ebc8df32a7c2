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

	"cuelang.org/go/cue"

	"github.com/remediator/remediator/api/v1alpha1"
)

//go:embed *.cue
var embedded embed.FS

// Input is what a policy decides on: the facts, the spec fields a policy may weigh,
// and the other active requests on the same node or Lease.
type Input struct {
	Remediation v1alpha1.Remediation `json:"remediation"`
	Mode        v1alpha1.Mode        `json:"mode,omitempty"`
	Fencing     *v1alpha1.Fencing    `json:"fencing,omitempty"`
	Facts       *v1alpha1.Facts      `json:"facts"`
	// Conflicts describe other active requests on the same node or Lease, sorted.
	Conflicts []string `json:"conflicts"`
}

// Verdict is what a policy's answer comes to: one of three, never two at once.
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
	// Digest identifies the policy source that produced the decision.
	Digest string `json:"digest,omitempty"`
}

// decoded is a decision as the policies' #Decision spells it, two booleans, before
// validateDecision has checked that they name one verdict.
type decoded struct {
	Allowed             bool     `json:"allowed"`
	Wait                bool     `json:"wait"`
	Playbook            string   `json:"playbook,omitempty"`
	Rule                string   `json:"rule"`
	Reasons             []string `json:"reasons"`
	Message             string   `json:"message"`
	RecheckAfterSeconds int64    `json:"recheckAfterSeconds,omitempty"`
}

// decision is d as a Decision of policy digest; validateDecision has refused a d
// that is both allowed and waiting.
func (d decoded) decision(digest string) Decision {
	v := VerdictReject
	switch {
	case d.Allowed:
		v = VerdictAllow
	case d.Wait:
		v = VerdictWait
	}
	return Decision{Verdict: v, Playbook: d.Playbook, Rule: d.Rule, Reasons: d.Reasons, Message: d.Message,
		RecheckAfterSeconds: d.RecheckAfterSeconds, Digest: digest}
}

// RulePolicyTimeout is the rule of the decision Decide returns when the policy did
// not decide within the Engine's timeout: the request is rejected (fail closed) and
// decided again later, never allowed by default.
const RulePolicyTimeout = "policy-timeout"

// RulePolicyInvalid is the rule of the decision Decide returns while the Engine has
// no policy (LoadOrWait started it on policy files that do not load): the request
// waits, neither allowed nor rejected, and is decided again once Reload swaps in a
// policy that loads.
const RulePolicyInvalid = "policy-invalid"

// NoPolicy is the Digest of an Engine that has no policy yet.
const NoPolicy = "none"

// policyInvalidRecheckAfterSeconds is when a request that waits for a policy is
// decided again: soon after a fixed policy is reloaded, and rarely enough that the
// facts of every waiting request are not gathered again every few seconds.
const policyInvalidRecheckAfterSeconds = 15

// DefaultTimeout bounds one policy evaluation when Engine.Timeout is zero. The
// embedded policies decide in about a millisecond; a second is room for a slow node,
// not for a policy that recurses or iterates without bound.
const DefaultTimeout = time.Second

// MaxRunawayEvaluations caps the evaluations that exceeded the timeout and are still
// running. CUE evaluation cannot be cancelled, so each one keeps a CPU busy until it
// ends; past the cap Decide fails closed at once instead of starting another.
const MaxRunawayEvaluations = 2

// timeoutRecheckAfterSeconds is when a request rejected by a timeout is decided
// again: long enough not to pile up more runaway evaluations, short enough that a
// fixed policy (Reload) takes over soon.
const timeoutRecheckAfterSeconds = 60

// Engine decides with compiled policies. No lock is held around a decision: the
// policy in use is a compiledPolicy that Reload swaps whole (an atomic pointer), and
// each evaluation runs on CUE values of its own (compiledPolicy.take), so a slow
// evaluation delays its own request only, not every worker's.
type Engine struct {
	// Timeout bounds each evaluation; zero means DefaultTimeout. Set it before the
	// Engine is used.
	Timeout time.Duration

	// cur is the policy in use; nil only while an Engine from LoadOrWait has not
	// loaded one yet.
	cur atomic.Pointer[compiledPolicy]
	// loadErr is why cur is nil: the last load of dir that failed. Only Reload
	// changes it, under mu.
	loadErr atomic.Pointer[LoadError]
	// dir is where the policies were loaded from; empty means embedded.
	dir string

	// mu serialises Reload, the writer of cur, so that a reload cannot store an older
	// compile over a newer one. No decision takes it.
	mu sync.Mutex

	// onEvaluate, when set (tests only, before the Engine is used), is called by
	// every evaluation as it starts, on the goroutine that evaluates.
	onEvaluate func()
}

// Embedded compiles the policies built into the binary.
func Embedded() (*Engine, error) { return newEngine(embedded, "") }

// FromDir compiles the policies in dir (for example a ConfigMap synced from Git).
// *_test.cue files are ignored, as by cue itself.
func FromDir(dir string) (*Engine, error) { return newEngine(os.DirFS(dir), dir) }

// FromFS compiles the policies at the root of fsys, as FromDir does a directory:
// remediator sync checks the policies of a revision before it writes them into the
// ConfigMap the controller loads, with the same digest.
func FromFS(fsys fs.FS) (*Engine, error) { return newEngine(fsys, "") }

// Load returns the policies from dir, or the embedded ones when dir is empty.
func Load(dir string) (*Engine, error) {
	if dir == "" {
		return Embedded()
	}
	return FromDir(dir)
}

// LoadOrWait is Load for the controller, whose policy files (a ConfigMap written
// from Git) may be broken when it starts: the same policies, except that a dir whose
// files do not load gives an Engine without a policy instead of an error. That
// Engine decides nothing (Decide: rule RulePolicyInvalid, the request waits), says
// so (Suspended, LoadFailure, Digest NoPolicy), and decides again as soon as Reload
// loads the files. A restart would read the same files; a controller that exits on
// them only crash-loops. The error is for the embedded policies, which are the
// binary's own.
func LoadOrWait(dir string) (*Engine, error) {
	if dir == "" {
		return Embedded()
	}
	e, err := FromDir(dir)
	if err == nil {
		return e, nil
	}
	le, ok := err.(*LoadError)
	if !ok {
		le = &LoadError{Reason: LoadReasonRead, Err: err}
	}
	e = &Engine{dir: dir}
	e.loadErr.Store(le)
	return e, nil
}

// LoadFailure is why the Engine has no policy (the last load of its directory that
// failed), or nil once it has one. A failed Reload of an Engine that has a policy
// keeps that policy and does not show here.
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

// current is the policy in use.
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

// Suspended reports whether the policy in use decides nothing for now:
// MaxRunawayEvaluations of its evaluations took longer than the timeout and are
// still running, so Decide rejects every request at once (rule RulePolicyTimeout)
// until they end or Reload swaps in another policy. why says so, for a readiness
// check or a log; it is empty when the Engine is not suspended.
//
// An Engine without a policy (LoadOrWait) is suspended too, with the load error.
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

// noPolicyWhy says why an Engine without a policy decides nothing.
func (e *Engine) noPolicyWhy() string {
	return fmt.Sprintf("No policy is in use: the policies in %s do not load (%v). Nothing is decided: requests wait, "+
		"condition Accepted reason PolicyInvalid, until the files are fixed; they are read again at every reload.", e.Source(), e.LoadFailure())
}

func (e *Engine) suspendedWhy(c *compiledPolicy, n int32, timeout time.Duration) string {
	return fmt.Sprintf("Policy evaluation is suspended: %d earlier evaluations of policy %s (%s) took longer than %s and are still running.",
		n, c.digest, e.Source(), timeout)
}

// Reload recompiles on-disk policies (a ConfigMap volume changes under a running
// process) and swaps them in when their digest changed. A policy that no longer
// compiles is an error and the previous one stays in use: a bad edit must not stop
// the controller from deciding. Embedded policies never change. The error is a
// *LoadError, which says why.
//
// The new policy starts with no runaway evaluations: the old one's may still run,
// but they no longer suspend decisions. Decisions already evaluating on the old
// policy finish on it.
func (e *Engine) Reload() (changed bool, err error) {
	if e.dir == "" {
		return false, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n, err := compile(os.DirFS(e.dir))
	if err != nil {
		if le := (*LoadError)(nil); errors.As(err, &le) && e.current() == nil {
			e.loadErr.Store(le) // the newest reason there is no policy
		}
		return false, err
	}
	if c := e.current(); c != nil && n.digest == c.digest {
		return false, nil
	}
	e.cur.Store(n)
	return true, nil
}

// Decide evaluates the policy for one input, for at most the Engine's Timeout. An
// evaluation that takes longer is abandoned and the request is rejected with rule
// RulePolicyTimeout (no error: it is the policy's answer, to be rechecked), so a
// runaway policy cannot stall the controller's workers. CUE cannot cancel it, so it
// runs on in the background on its own copy of the policy, which no later decision
// touches. While MaxRunawayEvaluations of the policy's evaluations are still running,
// Decide rejects at once (see Suspended). Decisions run concurrently, each on its own
// copy, so callers evaluating at once may each add a runaway before the cap is seen:
// at most MaxRunawayEvaluations-1 plus the number of concurrent callers.
//
// An error is an *EvalError: the policy could not decide (two rules disagree, or the
// decision is incomplete, names no rule, or is too large to write to status), and
// the caller must fail closed.
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
	if n := c.runaway.Load(); n >= MaxRunawayEvaluations {
		return e.timedOut(c, e.suspendedWhy(c, n, timeout), timeout), nil
	}
	inst, err := c.take()
	if err != nil {
		return Decision{}, &EvalError{Reason: EvalReasonError, Err: err}
	}

	type result struct {
		d   decoded
		err error
		// panicked: the copy may be half-written and is not given back.
		panicked bool
	}
	// Buffered, so that an abandoned evaluation can still deliver its result and end.
	done := make(chan result, 1)
	hook := e.onEvaluate
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{err: fmt.Errorf("evaluating policy: panic: %v", p), panicked: true}
			}
			done <- r
		}()
		if hook != nil {
			hook()
		}
		r.d, r.err = decideInput(inst.ctx, inst.policy, data)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if !r.panicked {
			c.give(inst)
		}
		if r.err != nil {
			return Decision{}, evalError(r.err)
		}
		if err := validateDecision(r.d); err != nil {
			return Decision{}, err
		}
		return r.d.decision(c.digest), nil
	case <-timer.C:
		c.runaway.Add(1)
		go func() {
			// The copy is dropped with the result: a runaway's values are never reused.
			<-done
			c.runaway.Add(-1)
		}()
		return e.timedOut(c, fmt.Sprintf("Policy evaluation took longer than %s and was abandoned.", timeout), timeout), nil
	}
}

// waitForPolicy is the decision of an Engine without a policy: not now, not never.
// The request is neither allowed nor rejected for good on the strength of files that
// do not load; it waits for a policy that does.
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

// timedOut is the fail-closed decision for an evaluation of policy c that did not
// finish in time.
func (e *Engine) timedOut(c *compiledPolicy, what string, timeout time.Duration) Decision {
	return Decision{
		Verdict: VerdictReject,
		Rule:    RulePolicyTimeout,
		Reasons: []string{fmt.Sprintf("policy evaluation exceeded %s", timeout)},
		Message: fmt.Sprintf("%s Nothing is allowed until the policy decides in time: check policy %s (%s) for unbounded recursion or comprehensions over large inputs, and fix or reload it. Deciding again in %ds.",
			what, c.digest, e.Source(), timeoutRecheckAfterSeconds),
		RecheckAfterSeconds: timeoutRecheckAfterSeconds,
		Digest:              c.digest,
	}
}

// decideInput fills the input into the policy and decodes its decision. It must be the
// only user of ctx and policy while it runs. The whole of #Policy & {input: data} is
// evaluated, so an input outside #Input fails the decision even where no rule reads
// the offending field: one evaluation path, whatever the policy source.
func decideInput(ctx *cue.Context, policy cue.Value, data []byte) (decoded, error) {
	iv := ctx.CompileBytes(data)
	if err := iv.Err(); err != nil {
		return decoded{}, fmt.Errorf("compiling policy input: %w", err)
	}
	d := policy.FillPath(cue.ParsePath("input"), iv).LookupPath(cue.ParsePath("decision"))
	// Decode fails on an incomplete or conflicting decision, so a policy that cannot
	// decide is an error, never a default.
	var out decoded
	if err := d.Decode(&out); err != nil {
		return decoded{}, fmt.Errorf("evaluating policy: %w", err)
	}
	return out, nil
}

// maxReasonLength is metav1.Condition's limit on reason.
const maxReasonLength = 1024

// ConditionReason turns a policy rule name into a valid metav1.Condition reason
// (^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$, at most 1024 characters), so that a rule
// from an on-disk policy can never make the status patch invalid: the parts separated
// by '-', '_', ' ' or '.' are joined in CamelCase ("node-shutdown" -> "NodeShutdown"),
// every other character that is not an ASCII letter or digit is dropped, "Rule" is
// put in front of a leading digit, and a rule with nothing left is "Unknown".
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
