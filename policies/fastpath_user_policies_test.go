package policies

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/api/v1alpha1"
)

// userPolicies are on-disk policies of the kinds a user may write, including broken
// ones: Decide must answer as the general path does for each of them.
var userPolicies = map[string]string{
	// An error in a field the decision does not use, for some inputs.
	"unused-conflict": `package policies
#Policy: {
	input: _
	_unused: input.remediation & "something else"
	decision: {allowed: false, rule: "r", reasons: ["x"], message: "m"}
}`,
	// A schema the input violates in a field the decision does not read.
	"schema-violation": `package policies
#Policy: {
	input: {remediation: string, mode: *"Apply" | "DryRun", ...}
	decision: {allowed: false, rule: input.remediation, reasons: ["x"], message: "m"}
}`,
	// A closed schema without the fields the controller sends.
	"closed-schema": `package policies
#Policy: {
	input: close({remediation: string})
	decision: {allowed: false, rule: input.remediation, reasons: ["x"], message: "m"}
}`,
	// Rules after the first one that conflict or cannot be evaluated.
	"broken-later-rules": `package policies
#Policy: {
	input: _
	_rules: [
		{allowed: false, rule: "first", reasons: ["\(input.remediation)"], message: "m"},
		{allowed: false, rule: "second" & input.remediation, reasons: [], message: "m"},
		{allowed: true, rule: "third \(input.nothere)", reasons: [], message: "m"},
	]
	decision: _rules[0]
}`,
	// A decision that is never concrete.
	"incomplete": `package policies
#Policy: {
	input: _
	decision: {allowed: bool, rule: "r", reasons: [], message: string}
}`,
	// A decision that conflicts for some inputs.
	"conflicting": `package policies
#Policy: {
	input: _
	decision: {allowed: false, rule: "r", reasons: [], message: "m"}
	decision: allowed: input.remediation == "release-luks-lease"
}`,
	// The order of the input's fields, and defaults.
	"field-order": `package policies
#Policy: {
	input: _
	decision: {
		allowed: *false | bool
		rule: "order"
		reasons: [for k, _ in input {k}, for k, _ in input.facts {k}]
		message: "\(len(input.conflicts)) conflicts"
		if len(input.conflicts) > 1 {recheckAfterSeconds: 5}
	}
}`,
	// A decision with fields Decision does not have, and a wrongly typed one.
	"extra-fields": `package policies
#Policy: {
	input: _
	decision: {allowed: false, rule: "r", reasons: ["x"], message: "m", debug: {depth: 3}}
}`,
	"wrong-type": `package policies
#Policy: {
	input: _
	decision: {allowed: "no", rule: "r", reasons: ["x"], message: "m"}
}`,
	// No decision at all, and a #Policy that is not a struct.
	"no-decision": `package policies
#Policy: {input: _}`,
	"not-a-struct": `package policies
#Policy: 5`,
	// A policy that uses package-level definitions, hidden fields and imports.
	"package-scope": `package policies
import "strings"
_prefix: "pkg"
#Rule: {allowed: false, rule: string, reasons: [...string], message: string}
#Policy: {
	input: _
	decision: #Rule & {rule: strings.ToUpper(_prefix), reasons: input.conflicts, message: "m"}
}`,
}

func TestFastPathMatchesUserPolicies(t *testing.T) {
	ins := []Input{
		loadFixture(t, "testdata/shutdown-holder.yaml").Input,
		loadFixture(t, "testdata/conflict-waits.yaml").Input,
		{Remediation: v1alpha1.RemediationReleaseLUKSLease, Mode: "Later", Facts: &v1alpha1.Facts{}},
		{Remediation: v1alpha1.RemediationReleaseLUKSLease},
	}
	for name, src := range userPolicies {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(src), 0o644))
			e, err := FromDir(dir)
			if err != nil {
				// A policy that does not compile never reaches Decide.
				t.Skipf("does not compile: %v", err)
			}
			require.False(t, e.current().fast, "an unreviewed policy is decided on the fast path")
			for i, in := range ins {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					assertSameDecision(t, e, in)
					// Where both paths decide, they decide alike, on any policy.
					want, wantErr := decideGeneral(e, in)
					fast, fastErr := decideFast(e, in)
					if wantErr == nil && fastErr == nil {
						assert.Equal(t, want, fast)
					}
				})
			}
		})
	}
}
