package plan

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/internal/cmd/scan"
)

// TestSuggestedRequestsAreValid: the manifests scan -o yaml prints are ready to commit,
// so plan (and admission) must accept them whatever the names and evidence. A name
// cut at 253 characters once ended in '-' or '.', which no Kubernetes name may, and a
// reason cut at 4096 bytes split a character (found by FuzzScanSuggestions).
func TestSuggestedRequestsAreValid(t *testing.T) {
	cases := []struct {
		name    string
		finding facts.Finding
	}{
		{"PV name cut at a dash", facts.Finding{Kind: facts.FindingStuckLease, Node: "n", Lease: "trident/" + strings.Repeat("a", 238) + "-" + strings.Repeat("b", 14), Evidence: "Lease held for 40m"}},
		{"PV name cut at a dot", facts.Finding{Kind: facts.FindingStuckLease, Node: "n", Lease: "trident/" + strings.Repeat("a", 238) + "." + strings.Repeat("b", 14), Evidence: "Lease held for 40m"}},
		{"node name cut at a dot", facts.Finding{Kind: facts.FindingDeregisteredDriver, Node: strings.Repeat("a", 237) + "." + strings.Repeat("b", 15), Evidence: "CSINode lacks the driver"}},
		{"node name cut after dashes", facts.Finding{Kind: facts.FindingOverlappingPluginPods, Node: strings.Repeat("a", 236) + "--" + strings.Repeat("b", 15), Evidence: "2 node-plugin pods"}},
		{"reason cut inside a character", facts.Finding{Kind: facts.FindingStuckLease, Node: "n", Lease: "trident/pvc-1", Evidence: strings.Repeat("é", 3000)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, scan.WriteRequests(&buf, scan.SuggestedRequests([]facts.Finding{tc.finding}, "remediator")))
			inputs := planInputsOf(buf.Bytes())
			require.Len(t, inputs, 1)
			require.Empty(t, inputs[0].errs, "plan refuses the suggested request:\n%s", buf.String())
			assert.True(t, utf8.ValidString(inputs[0].rr.Spec.Reason), "the reason is not valid UTF-8")
			assert.NotContains(t, inputs[0].rr.Spec.Reason, "\uFFFD", "the reason was cut inside a character")
		})
	}
}
