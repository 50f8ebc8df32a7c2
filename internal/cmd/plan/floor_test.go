package plan

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanHoldsTheFloor: plan refuses what the controller's floor refuses, whatever
// the policy says (issue 22). A policy override that sets both Lease-age gates to 0
// allows the fenced holder's one-minute-old Lease; plan still rejects it, naming the
// floor, and the floor's minimum is the --floor-unreachable-lease-age plan was given.
func TestPlanHoldsTheFloor(t *testing.T) {
	dir := t.TempDir()
	srcs, err := filepath.Glob("../../../policies/*.cue")
	require.NoError(t, err)
	for _, src := range srcs {
		if strings.HasSuffix(src, "_test.cue") || filepath.Base(src) == "schema.cue" {
			continue
		}
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		data = regexp.MustCompile(`(?m)^(#(UnreachableMin|HealthyStuck)LeaseAgeSeconds:\s*)\d+`).ReplaceAll(data, []byte("${1}0"))
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o644))
	}
	facts, err := os.ReadFile(planTestdata + "facts/unreachable.json")
	require.NoError(t, err)
	young := strings.Replace(string(facts), `"ageSeconds":2400`, `"ageSeconds":60`, 1)
	require.NotEqual(t, string(facts), young)
	youngFacts := filepath.Join(t.TempDir(), "young.json")
	require.NoError(t, os.WriteFile(youngFacts, []byte(young), 0o644))

	args := []string{"-f", planTestdata + "fenced-window.yaml", "--facts", youngFacts, "--at", "2026-11-20T03:00:00Z", "--policies-dir", dir}
	out, code, _ := runPlanCommand(t, "", args...)
	assert.Equal(t, 3, code, "exit code; output:\n%s", out)
	for _, w := range []string{
		"REJECTED by rule lease-too-young",
		"Refused by the safety floor (invariant lease-too-young)",
		"Policy rule unreachable-fenced allowed playbook fenced-unreachable",
		"younger than the floor's 5m0s",
	} {
		assert.Contains(t, out, w)
	}

	// A floor shortened below the Lease's age (as tests and the demo do) lets it go.
	out, code, _ = runPlanCommand(t, "", append(args, "--floor-unreachable-lease-age", "30s")...)
	assert.Equal(t, 0, code, "exit code; output:\n%s", out)
	assert.Contains(t, out, "ALLOWED by rule unreachable-fenced")

	// The floor's flags must be positive: a zero is no floor.
	_, code, err = runPlanCommand(t, "", append(args, "--floor-unreachable-lease-age", "0s")...)
	assert.NotEqual(t, 0, code)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must be positive")
}
