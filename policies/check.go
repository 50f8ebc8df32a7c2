package policies

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"cuelang.org/go/cue/ast"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
)

// A policy source that cannot be used is refused at load (a LoadError: the last
// good policy stays), a decision a policy cannot make is an EvalError (the request
// fails closed). Both carry a fixed Reason for metrics and a bounded message: a
// status write the API server refuses would leave the request undecided.

// Reasons of a LoadError.
const (
	LoadReasonRead            = "read"             // unreadable, or no policy file
	LoadReasonSyntax          = "syntax"           // does not parse, or not one package
	LoadReasonCompile         = "compile"          // does not evaluate
	LoadReasonNoPolicy        = "no-policy"        // no #Policy
	LoadReasonSchema          = "schema"           // brings or redefines the schema
	LoadReasonUnknownPlaybook = "unknown-playbook" // a playbook outside #Playbook
	LoadReasonTimeout         = "timeout"          // building took longer than its bound
)

// LoadReasons are every LoadError reason, for metrics that list them all.
var LoadReasons = []string{LoadReasonRead, LoadReasonSyntax, LoadReasonCompile, LoadReasonNoPolicy, LoadReasonSchema, LoadReasonUnknownPlaybook, LoadReasonTimeout}

// LoadError is a policy source that was refused.
type LoadError struct {
	Reason string
	Err    error
}

func (e *LoadError) Error() string { return bounded(e.Err.Error()) }
func (e *LoadError) Unwrap() error { return e.Err }

func loadError(reason string, format string, args ...any) *LoadError {
	return &LoadError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// positioned is a CUE error that names the file, line and column of each fault.
type positioned struct{ error }

func (p positioned) Error() string {
	d := cueerrors.Details(p.error, &cueerrors.Config{Cwd: policyRoot})
	return strings.Join(strings.Fields(d), " ")
}

func (p positioned) Unwrap() error { return p.error }

// Reasons of an EvalError.
const (
	EvalReasonAmbiguous = "ambiguous" // rules disagree, or both allowed and wait
	EvalReasonTooLarge  = "too-large" // past the Max* limits
	EvalReasonInvalid   = "invalid"   // breaks its contract (no rule, unknown playbook)
	EvalReasonError     = "error"     // any other failure
)

// EvalError is a decision the policy could not make; the caller fails closed.
type EvalError struct {
	Reason string
	Err    error
}

func (e *EvalError) Error() string { return bounded(e.Err.Error()) }
func (e *EvalError) Unwrap() error { return e.Err }

// Limits on a decision: well below a condition message's 32768 characters, which
// also carry a recheck time and the rule, and reasons bounded so that a policy
// cannot push the request towards etcd's object size limit.
const (
	MaxRuleLength     = 253
	MaxPlaybookLength = 253
	MaxMessageLength  = 16384
	MaxReasons        = 64
	MaxReasonLength   = 1024
)

// maxErrorLength bounds an error message: a CUE error quotes values as large as the
// policy made them.
const maxErrorLength = 8192

// bounded cuts s at a rune boundary, saying how much was cut.
func bounded(s string) string {
	if len(s) <= maxErrorLength {
		return s
	}
	cut := maxErrorLength
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d more bytes)", s[:cut], len(s)-cut)
}

// evalError classifies a failed evaluation: conflicting values inside the decision
// (not the input) mean two rules decided differently.
func evalError(err error) *EvalError {
	for _, e := range cueerrors.Errors(err) {
		// A playbook outside #Playbook fails here first, whatever else disagrees.
		if p := e.Path(); len(p) >= 2 && p[len(p)-1] == "playbook" && p[len(p)-2] == "decision" {
			return &EvalError{Reason: EvalReasonInvalid, Err: fmt.Errorf(
				"policy decision names a playbook this controller does not have (%w); the playbooks are the schema's #Playbook", err)}
		}
	}
	for _, e := range cueerrors.Errors(err) {
		msg, _ := e.Msg()
		if strings.HasPrefix(msg, "conflicting values") && slices.Contains(e.Path(), "decision") {
			return &EvalError{Reason: EvalReasonAmbiguous, Err: fmt.Errorf(
				"policy is ambiguous: more than one rule decided and they disagree (%w); make the rules exclusive, or order them in a list and take the first match as the embedded policies do", err)}
		}
	}
	return &EvalError{Reason: EvalReasonError, Err: err}
}

// validateDecision refuses a decision that is not one verdict with a rule, or too
// large for status.
func validateDecision(d decoded) error {
	tooLarge := func(what string, n, limit int) error {
		return &EvalError{Reason: EvalReasonTooLarge, Err: fmt.Errorf("policy decision too large: %s is %d bytes, at most %d", what, n, limit)}
	}
	switch {
	case d.Rule == "":
		return &EvalError{Reason: EvalReasonInvalid, Err: errors.New("policy decision names no rule")}
	case d.Allowed && d.Wait:
		return &EvalError{Reason: EvalReasonAmbiguous, Err: fmt.Errorf("policy decision of rule %s is both allowed and wait", truncate(d.Rule, MaxRuleLength))}
	case len(d.Rule) > MaxRuleLength:
		return tooLarge("the rule name", len(d.Rule), MaxRuleLength)
	case len(d.Playbook) > MaxPlaybookLength:
		return tooLarge("the playbook name", len(d.Playbook), MaxPlaybookLength)
	case len(d.Message) > MaxMessageLength:
		return tooLarge("the message of rule "+d.Rule, len(d.Message), MaxMessageLength)
	case len(d.Reasons) > MaxReasons:
		return &EvalError{Reason: EvalReasonTooLarge, Err: fmt.Errorf("policy decision too large: rule %s gives %d reasons, at most %d", d.Rule, len(d.Reasons), MaxReasons)}
	}
	for i, r := range d.Reasons {
		if len(r) > MaxReasonLength {
			return tooLarge(fmt.Sprintf("reason %d of rule %s", i, d.Rule), len(r), MaxReasonLength)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// checkPlaybooks finds the playbook literals in the parsed files: the compiled value
// holds the rules inside comprehensions, which only an input evaluates.
func checkPlaybooks(files []sourceFile, known []string) error {
	var unknown []string
	for _, f := range files {
		file, err := parser.ParseFile(f.name, f.data)
		if err != nil {
			return loadError(LoadReasonSyntax, "parsing policy %s: %w", f.name, err)
		}
		ast.Walk(file, func(n ast.Node) bool {
			field, ok := n.(*ast.Field)
			if !ok {
				return true
			}
			if name, _, err := ast.LabelName(field.Label); err != nil || name != "playbook" {
				return true
			}
			for _, lit := range stringLiterals(field.Value) {
				if !slices.Contains(known, lit.value) {
					unknown = append(unknown, fmt.Sprintf("%s: playbook %q", lit.pos, lit.value))
				}
			}
			return true
		}, nil)
	}
	if len(unknown) > 0 {
		return loadError(LoadReasonUnknownPlaybook, "policy names playbooks this controller does not have (%s); the playbooks are %s",
			strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return nil
}

type stringLiteral struct {
	value string
	pos   token.Pos
}

// stringLiterals are the plain strings an expression can be: "a", *"a" | "b".
func stringLiterals(x ast.Expr) []stringLiteral {
	switch x := x.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return nil
		}
		s, err := literal.Unquote(x.Value)
		if err != nil {
			return nil
		}
		return []stringLiteral{{s, x.Pos()}}
	case *ast.UnaryExpr:
		if x.Op == token.MUL {
			return stringLiterals(x.X)
		}
	case *ast.BinaryExpr:
		if x.Op == token.OR || x.Op == token.AND {
			return append(stringLiterals(x.X), stringLiterals(x.Y)...)
		}
	case *ast.ParenExpr:
		return stringLiterals(x.X)
	}
	return nil
}
