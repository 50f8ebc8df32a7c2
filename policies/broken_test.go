package policies

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
)

// Broken policies (issue 12, R3): each way a policy source or a decision can be
// broken is refused with a reason, and the last good policy keeps deciding.

// decision is a complete decision body for the test policies below.
const decision = `allowed: false, rule: "deny", reasons: ["test"], message: "denied by the test policy"`

func writePolicy(t *testing.T, dir, name, src string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644))
}

func defaultPlaybookNames(t *testing.T) []string {
	t.Helper()
	p, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	return slices.Sorted(maps.Keys(p))
}

// brokenSources are policy sources that must not be used, by the reason given.
var brokenSources = []struct {
	name, reason string
	files        map[string]string
	// want is in the error, so that the operator finds the file and the fault.
	want []string
}{
	{"syntax error", LoadReasonSyntax, map[string]string{"p.cue": "package policies\n#Policy: {input: _, decision: \n"},
		[]string{"p.cue:2:32", "expected operand"}},
	{"two packages", LoadReasonSyntax, map[string]string{
		"a.cue": "package policies\n#Policy: {input: _, decision: {" + decision + "}}\n", "b.cue": "package other\nx: 1\n"},
		[]string{"found packages"}},
	{"undefined reference", LoadReasonCompile, map[string]string{"p.cue": "package policies\n#Policy: {input: _, decision: #Nowhere}\n"},
		[]string{"p.cue:2", "reference \"#Nowhere\" not found"}},
	{"no #Policy", LoadReasonNoPolicy, map[string]string{"p.cue": "package policies\n#Rules: {input: _, decision: {" + decision + "}}\n"},
		[]string{"no #Policy"}},
	// The schema is the binary's: a directory that brings one, or redefines a part of
	// it, is refused, even when the text is the same.
	{"a schema.cue", LoadReasonSchema, map[string]string{
		"schema.cue": "package policies\n", "p.cue": "package policies\n#Policy: {input: _, decision: {" + decision + "}}\n"},
		[]string{"schema.cue: the schema (#Input, #Decision) is the controller's own", "holds rules only"}},
	{"redefines #Input", LoadReasonSchema, map[string]string{
		"p.cue": "package policies\n#Input: {remediation: string}\n#Policy: {input: _, decision: {" + decision + "}}\n"},
		[]string{"p.cue defines #Input, which the controller's schema owns"}},
	{"redefines #Decision and #Contract", LoadReasonSchema, map[string]string{
		"p.cue": "package policies\n#Decision: _\n#Contract: _\n#Policy: {input: _, decision: {" + decision + "}}\n"},
		[]string{"p.cue defines #Contract, #Decision"}},
	{"no policy file", LoadReasonRead, map[string]string{"README.md": "policies go here\n"},
		[]string{"no .cue policy files"}},
	// A typo in a playbook name: found at load, not when an incident reaches the rule.
	{"unknown playbook", LoadReasonUnknownPlaybook, map[string]string{"p.cue": `package policies
#Policy: {
	input: _
	_rules: [
		if input.facts.node.state == "Shutdown" {allowed: true, playbook: "node-shutdwn", rule: "holder-shutdown", reasons: ["down"], message: "m"},
		{allowed: false, rule: "deny", reasons: ["test"], message: "m"},
	]
	decision: _rules[0]
}
`}, []string{`p.cue:5:`, `playbook "node-shutdwn"`, "fenced-unreachable, healthy-move-workload, node-shutdown, restart-node-plugin"}},
	{"unknown playbook in a default", LoadReasonUnknownPlaybook, map[string]string{"p.cue": `package policies
#Policy: {input: _, decision: {allowed: true, playbook: *"node-shutdown" | "reboot-node", rule: "r", reasons: ["x"], message: "m"}}
`}, []string{`playbook "reboot-node"`}},
}

// TestBrokenSourcesAreRefusedAtLoad: FromDir (the controller's start) refuses each
// broken source with its reason; the controller does not start on it.
func TestBrokenSourcesAreRefusedAtLoad(t *testing.T) {
	for _, tc := range brokenSources {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range tc.files {
				writePolicy(t, dir, name, src)
			}
			_, err := FromDir(dir)
			var le *LoadError
			require.ErrorAs(t, err, &le, "a broken source was loaded")
			assert.Equal(t, tc.reason, le.Reason)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestReloadKeepsTheLastGoodPolicy: a running controller whose --policies-dir turns
// into each broken source keeps deciding with the last good policy, and says why the
// new one was refused; a fixed source is then picked up.
func TestReloadKeepsTheLastGoodPolicy(t *testing.T) {
	shutdown := loadFixture(t, "testdata/shutdown-holder.yaml")
	for _, tc := range brokenSources {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyPolicies(t, dir)
			e, err := FromDir(dir)
			require.NoError(t, err)
			good := e.Digest()

			// The ConfigMap is replaced as a whole: the reviewed files go, the broken ones come.
			files, err := filepath.Glob(filepath.Join(dir, "*.cue"))
			require.NoError(t, err)
			for _, f := range files {
				require.NoError(t, os.Remove(f))
			}
			for name, src := range tc.files {
				writePolicy(t, dir, name, src)
			}
			changed, err := e.Reload()
			assert.False(t, changed)
			var le *LoadError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, tc.reason, le.Reason)

			assert.Equal(t, good, e.Digest(), "the broken source replaced the last good policy")
			d, err := e.Decide(shutdown.Input)
			require.NoError(t, err)
			assert.Equal(t, shutdown.Want.Rule, d.Rule, "the last good policy no longer decides")
			assert.Equal(t, good, d.Digest)

			// Fixed: the reviewed files are back, with one comment more.
			for name := range tc.files {
				require.NoError(t, os.Remove(filepath.Join(dir, name)))
			}
			copyPolicies(t, dir)
			p := filepath.Join(dir, "reregister_csi_driver.cue")
			src, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, append(src, "// fixed\n"...), 0o644))
			changed, err = e.Reload()
			require.NoError(t, err)
			assert.True(t, changed)
			assert.NotEqual(t, good, e.Digest())
		})
	}
}

// TestEmbeddedPoliciesNameOnlyKnownPlaybooks: the check that refuses a typo at load
// (against the schema's #Playbook) does not refuse the reviewed rules, and it does
// refuse them against a smaller set.
func TestEmbeddedPoliciesNameOnlyKnownPlaybooks(t *testing.T) {
	require.NoError(t, checkPlaybooks(engine(t).current().files, defaultPlaybookNames(t)))
	err := checkPlaybooks(engine(t).current().files, []string{v1alpha1.PlaybookNodeShutdown})
	var le *LoadError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LoadReasonUnknownPlaybook, le.Reason)
	assert.Contains(t, err.Error(), `release_luks_lease.cue`)
	assert.Contains(t, err.Error(), `playbook "fenced-unreachable"`)
}

// TestComputedPlaybookIsLeftToTheDecision: a playbook name the policy computes cannot
// be checked at load; the schema's #Decision holds it to #Playbook when the decision
// is made, so the decision fails (fail closed) and says why, even for a rule that
// writes its decision without #Decision.
func TestComputedPlaybookIsLeftToTheDecision(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "p.cue", `package policies
#Policy: {input: _, decision: {allowed: true, playbook: "node-\(input.remediation)", rule: "computed", reasons: ["x"], message: "m"}}
`)
	e, err := FromDir(dir)
	require.NoError(t, err)
	d, err := e.Decide(input(0))
	var ee *EvalError
	require.ErrorAs(t, err, &ee, "decided %+v", d)
	assert.Equal(t, EvalReasonInvalid, ee.Reason)
	assert.Contains(t, err.Error(), "names a playbook this controller does not have")
}

// ambiguousPolicy has two rules that both match a shutdown holder and disagree.
const ambiguousPolicy = `package policies
#Policy: {
	input: _
	if input.facts.node.state == "Shutdown" {
		decision: {allowed: true, playbook: "node-shutdown", rule: "holder-shutdown", reasons: ["down"], message: "release"}
	}
	if input.remediation == "release-luks-lease" {
		decision: {allowed: false, rule: "leases-need-a-human", reasons: ["policy"], message: "keep"}
	}
}
`

// TestTwoMatchingRulesFailClosed: CUE unifies both rules' decisions; where they
// disagree the decision is an error, never either rule's verdict, and the error says
// that the policy is ambiguous. Where only one matches, it decides.
func TestTwoMatchingRulesFailClosed(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "p.cue", ambiguousPolicy)
	e, err := FromDir(dir)
	require.NoError(t, err, "an ambiguous policy compiles: only an input shows both rules matching")

	both := loadFixture(t, "testdata/shutdown-holder.yaml").Input
	d, err := e.Decide(both)
	var ee *EvalError
	require.ErrorAs(t, err, &ee, "two disagreeing rules decided %+v", d)
	assert.Equal(t, EvalReasonAmbiguous, ee.Reason)
	assert.Contains(t, err.Error(), "policy is ambiguous: more than one rule decided and they disagree")
	assert.Contains(t, err.Error(), "conflicting values")
	assert.Contains(t, err.Error(), "decision")
	assert.NotEqual(t, VerdictAllow, d.Verdict)

	one := both
	one.Remediation = "reregister-csi-driver"
	d, err = e.Decide(one)
	require.NoError(t, err)
	assert.Equal(t, "holder-shutdown", d.Rule)

	// A decision both allowed and waiting is ambiguous too.
	dir = t.TempDir()
	writePolicy(t, dir, "p.cue", `package policies
#Policy: {input: _, decision: {allowed: true, wait: true, playbook: "node-shutdown", rule: "both", reasons: ["x"], message: "m"}}
`)
	e, err = FromDir(dir)
	require.NoError(t, err)
	_, err = e.Decide(both)
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, EvalReasonAmbiguous, ee.Reason)
	assert.Contains(t, err.Error(), "both allowed and wait")
}

// TestAConflictInTheInputIsNotAmbiguity: an input outside the schema conflicts too,
// but in the input, not between rules.
func TestAConflictInTheInputIsNotAmbiguity(t *testing.T) {
	in := loadFixture(t, "testdata/shutdown-holder.yaml").Input
	in.Mode = "Force"
	_, err := engine(t).Decide(in)
	var ee *EvalError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, EvalReasonError, ee.Reason, "%v", err)
}

// TestOversizedDecisionsAreRefused: a decision that would not fit a status condition
// (32768 characters) or would bloat the request is an error, not a status write the
// API server refuses; the error itself stays small.
func TestOversizedDecisionsAreRefused(t *testing.T) {
	cases := []struct {
		name, decision, reason, want string
	}{
		{"huge message", `allowed: false, rule: "r", reasons: ["x"], message: strings.Repeat("x", 40000)`, EvalReasonTooLarge,
			"the message of rule r is 40000 bytes, at most 16384"},
		{"reasons explode", `allowed: false, rule: "r", reasons: [for a in input.conflicts for b in input.conflicts {a+b}], message: "m"`, EvalReasonTooLarge,
			"rule r gives 3600 reasons, at most 64"},
		{"one huge reason", `allowed: false, rule: "r", reasons: [strings.Repeat("y", 5000)], message: "m"`, EvalReasonTooLarge,
			"reason 0 of rule r is 5000 bytes, at most 1024"},
		{"huge rule name", `allowed: false, rule: strings.Repeat("r", 300), reasons: ["x"], message: "m"`, EvalReasonTooLarge,
			"the rule name is 300 bytes, at most 253"},
		// Computed, so that it is only seen when deciding: not one of the schema's
		// #Playbook, which also caps its length.
		{"huge playbook name", `allowed: true, playbook: strings.Repeat(input.remediation, 20), rule: "r", reasons: ["x"], message: "m"`, EvalReasonInvalid,
			"names a playbook this controller does not have"},
		{"no rule", `allowed: false, rule: "", reasons: ["x"], message: "m"`, EvalReasonInvalid, "names no rule"},
		// Two rules that disagree on huge values: CUE quotes both in the error.
		{"huge conflict", `message: strings.Repeat("a", 40000), if input.remediation != "" {message: strings.Repeat("b", 40000)}, allowed: false, rule: "r", reasons: ["x"]`, EvalReasonAmbiguous,
			"more bytes)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writePolicy(t, dir, "p.cue", "package policies\nimport \"strings\"\n#Policy: {input: _, decision: {"+tc.decision+"}}\n_use: strings.Repeat(\"\", 0)\n")
			e, err := FromDir(dir)
			require.NoError(t, err)
			_, err = e.Decide(input(60))
			var ee *EvalError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, tc.reason, ee.Reason, "%v", err)
			assert.Contains(t, err.Error(), tc.want)
			assert.LessOrEqual(t, len(err.Error()), maxErrorLength+64, "the error must fit a condition message")
		})
	}
}

// TestBoundedErrorsCutAtARune: the cut error is still valid UTF-8, as the API server
// requires of a condition message.
func TestBoundedErrorsCutAtARune(t *testing.T) {
	long := strings.Repeat("é", maxErrorLength)
	got := bounded(long)
	assert.True(t, utf8.ValidString(got))
	assert.Less(t, len(got), len(long))
	assert.True(t, strings.HasSuffix(got, fmt.Sprintf("... (%d more bytes)", len(long)-maxErrorLength)), got[len(got)-40:])
}
