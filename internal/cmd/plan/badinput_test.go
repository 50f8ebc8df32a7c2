package plan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/test/badinput"
)

// TestPlanRefusesTheAdmissionTable: every malformed request the API server refuses
// at create (the bad-input table, run against a real API server by api/v1alpha1's
// and the controllers' tests) is refused by plan too, naming the same field, so CI
// stops in the pull request what the cluster would refuse after the merge. plan
// validates against the chart's CRD, so no rule is written twice.
func TestPlanRefusesTheAdmissionTable(t *testing.T) {
	v := embedded(t)
	for _, tc := range badinput.Admission() {
		t.Run(tc.Name, func(t *testing.T) {
			data, err := json.Marshal(tc.Malformed("remediator", "bad-request").Object)
			require.NoError(t, err)
			in := decodePlanRequest(v, "-", 1, data)
			require.False(t, planAccepted(in), "plan accepts what admission refuses")
			got := strings.Join(in.errs, "\n")
			for _, w := range append([]string{tc.Field}, tc.Want...) {
				assert.Contains(t, got, w, "plan's refusal must name what is wrong")
			}
		})
	}
	valid, err := json.Marshal(badinput.Object("remediator", "valid", badinput.ValidSpec()).Object)
	require.NoError(t, err)
	in := decodePlanRequest(v, "-", 1, valid)
	require.True(t, planAccepted(in), "plan refuses the table's valid request: %v", in.errs)
}
