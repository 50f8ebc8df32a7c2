package policies_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/policies"
)

// TestLoadOrWaitDecidesNothingUntilAPolicyLoads: started on policy files that do not
// load, the Engine has no policy: it answers every request "wait" (rule
// policy-invalid, never allow, never a final reject), is suspended with the load
// error, and takes the first policy a Reload loads.
func TestLoadOrWaitDecidesNothingUntilAPolicyLoads(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600))
	}
	write("p.cue", "package policies\n#Policy: {input: _, decision: \n")
	_, err := policies.Load(dir)
	require.Error(t, err, "Load refuses the files")

	e, err := policies.LoadOrWait(dir)
	require.NoError(t, err)
	assert.Equal(t, policies.NoPolicy, e.Digest())
	require.ErrorContains(t, e.LoadFailure(), "p.cue:2:")
	suspended, why := e.Suspended()
	assert.True(t, suspended)
	assert.Contains(t, why, "No policy is in use")
	assert.Contains(t, why, "p.cue:2:")

	in := policies.Input{Remediation: v1alpha1.RemediationReleaseLUKSLease, Facts: &v1alpha1.Facts{}}
	d, err := e.Decide(in)
	require.NoError(t, err)
	assert.Equal(t, policies.VerdictWait, d.Verdict)
	assert.Equal(t, policies.RulePolicyInvalid, d.Rule)
	assert.Equal(t, policies.NoPolicy, d.Digest)
	assert.Positive(t, d.RecheckAfterSeconds)
	assert.Contains(t, d.Message, "p.cue:2:")
	assert.Equal(t, "PolicyInvalid", policies.ConditionReason(d.Rule))

	// Still broken, another way: the newest reason is the one told.
	write("p.cue", "package policies\n#Policy: {input: _, decision: {allowed: true, playbook: \"node-shutdwn\", rule: \"r\", reasons: [\"x\"], message: \"m\"}}\n")
	changed, err := e.Reload()
	require.Error(t, err)
	assert.False(t, changed)
	require.ErrorContains(t, e.LoadFailure(), "node-shutdwn")
	_, why = e.Suspended()
	assert.Contains(t, why, "node-shutdwn")

	// The shipped rules load: the Engine decides with them.
	require.NoError(t, os.Remove(filepath.Join(dir, "p.cue")))
	for _, f := range []string{"release_luks_lease.cue", "reregister_csi_driver.cue"} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		write(f, string(data))
	}
	changed, err = e.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.NoError(t, e.LoadFailure())
	suspended, _ = e.Suspended()
	assert.False(t, suspended)
	assert.NotEqual(t, policies.NoPolicy, e.Digest())
	d, err = e.Decide(in)
	require.NoError(t, err)
	assert.NotEqual(t, policies.RulePolicyInvalid, d.Rule)
	assert.Equal(t, e.Digest(), d.Digest)

	// A later broken reload keeps that policy and is no LoadFailure.
	write("p.cue", "package policies\n#Policy: {\n")
	_, err = e.Reload()
	require.Error(t, err)
	assert.NoError(t, e.LoadFailure())
}

// TestLoadOrWaitEmbedded: without a directory the embedded policies, which the binary
// ships and its tests load, are used.
func TestLoadOrWaitEmbedded(t *testing.T) {
	e, err := policies.LoadOrWait("")
	require.NoError(t, err)
	assert.Equal(t, "embedded", e.Source())
	assert.NoError(t, e.LoadFailure())
	assert.NotEqual(t, policies.NoPolicy, e.Digest())
}
