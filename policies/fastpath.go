package policies

// The fast path of a decision: evaluate only what the decision depends on, for the
// policy sources reviewed for it. See evaluate in policy.go for when it is taken.

import (
	"fmt"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// tryFast runs the fast path and reports whether it decided. A panic counts as not
// deciding, so that the general path gives its own answer to that input as well.
func tryFast(ctx *cue.Context, root cue.Value, data []byte) (d decoded, ok bool) {
	defer func() {
		if recover() != nil {
			d, ok = decoded{}, false
		}
	}()
	d, err := decideSelected(ctx, root, data)
	return d, err == nil
}

// fastPathDigests are the policy sources the fast path may decide for: sources whose
// evaluation, for an input #Input accepts, has no error outside decision. That is a
// property of the source, checked by reading it, so a source is added here only
// after a review of every field and let of #Policy, #ReleaseLUKSLease and
// #ReregisterCSIDriver (the rules whose guard holds are evaluated in full by the
// general path, not only the first) and of #Input against inputInSchema. For the
// embedded policies at this digest: the rule messages interpolate only strings, ints
// and bools, and the builtins (strings.Join, list.Contains) take lists of strings;
// every list indexed with [0] (the dispatch, the rule lists, the lets) ends in an
// element without guard; the arithmetic is on ints; the inner definitions re-apply
// the same #Input, which adds no error to an input that passed it once; and the only
// constraints on a rule's result (#Decision: playbook: #Playbook, an enum, and
// recheckAfterSeconds: int & >0) apply to the decision alone, which the fast path
// evaluates too.
//
// Any other source (an edit of the embedded policies, a --policies-dir of the user's
// own) is decided on the general path only: correct, about twice as slow.
// TestFastPathReviewed fails when the embedded policies change, as a reminder to
// review them and update the digest here.
var fastPathDigests = map[string]bool{
	"sha256:3178856617f863e7c90fc312d18a713105d1fddaaa56c82fa84fa8dd01051c4b": true,
}

// inputInSchema reports whether the embedded #Input (schema.cue at a digest of
// fastPathDigests) accepts in, as Decide marshals it. It may say no to an input the
// schema accepts (that input is then decided on the general path), never yes to one
// it rejects. The Go types fix the kinds and field names, all of which #Input knows
// (TestInputFieldsInSchema); what is left to check is the enums, the facts that
// must be present, and times: a non-nil *metav1.Time that is zero marshals as null,
// which the optional string fields reject.
func inputInSchema(in Input) bool {
	switch in.Remediation {
	case v1alpha1.RemediationReleaseLUKSLease, v1alpha1.RemediationReregisterCSIDriver:
	default:
		return false
	}
	switch in.Mode {
	case "", v1alpha1.ModeApply, v1alpha1.ModeDryRun:
	default:
		return false
	}
	f := in.Facts
	if f == nil || in.Conflicts == nil {
		return false
	}
	if l := f.Lease; l != nil && (zeroTime(l.AcquireTime) || zeroTime(l.CreationTimestamp) || zeroTime(l.LastRetainedAt)) {
		return false
	}
	if n := f.Node; n != nil {
		switch n.State {
		case v1alpha1.NodeShutdown, v1alpha1.NodeUnreachable, v1alpha1.NodeNotFound, v1alpha1.NodeHealthy, v1alpha1.NodeUnknown:
		default:
			return false
		}
		if zeroTime(n.ReadySince) || zeroTime(n.LeaseRenewTime) || zeroTime(n.ReadyHeartbeatTime) || zeroTime(n.LastHeartbeat) {
			return false
		}
	}
	var plugin []v1alpha1.PodFacts
	if f.CSI != nil {
		plugin = f.CSI.PluginPods
	}
	for _, pods := range [][]v1alpha1.PodFacts{f.AffectedPods, plugin} {
		for _, p := range pods {
			if zeroTime(p.DeletionTimestamp) {
				return false
			}
		}
	}
	return true
}

// zeroTime reports a time that is set but marshals as null.
func zeroTime(t *metav1.Time) bool { return t != nil && t.IsZero() }

// decideSelected is the fast path: it evaluates only the expression
//
//	(#Policy & {input: <data>}).decision
//
// in the scope of the policy package. The general path fills the input into #Policy
// and finalizes the whole result (Value.FillPath unifies, and unification finalizes
// every field) before it looks up decision: it evaluates everything the policy
// defines, such as the copy of the input each rule set unifies with #Input again and
// every rule whose guard holds, messages included, although only the first one is the
// decision. Selecting decision inside the expression lets the evaluator compute only
// what decision depends on, about half the work on the embedded policies. The input is
// parsed as an expression from the same JSON that the general path compiles.
func decideSelected(ctx *cue.Context, root cue.Value, data []byte) (decoded, error) {
	in, err := parser.ParseExpr("input", data)
	if err != nil {
		return decoded{}, fmt.Errorf("parsing policy input: %w", err)
	}
	// A fresh expression each time: compiling it resolves (and so writes to) its
	// identifiers, and an abandoned evaluation may still hold the previous one.
	expr := &ast.SelectorExpr{
		X: &ast.ParenExpr{X: &ast.BinaryExpr{
			Op: token.AND,
			X:  ast.NewIdent("#Policy"),
			Y:  ast.NewStruct(ast.NewIdent("input"), in),
		}},
		Sel: ast.NewIdent("decision"),
	}
	d := ctx.BuildExpr(expr, cue.Scope(root))
	var out decoded
	if err := d.Decode(&out); err != nil {
		return decoded{}, fmt.Errorf("evaluating policy: %w", err)
	}
	return out, nil
}
