package failpoint

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleaseBuildIgnoresTheEnvironment: without -tags failpoints, an armed point
// is not honoured. The test re-runs itself as a child with the point armed, so a
// build that did honour it would die in the child and fail here.
func TestReleaseBuildIgnoresTheEnvironment(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Inject(Name("deleteLease", AfterCall))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReleaseBuildIgnoresTheEnvironment$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", Env+"=deleteLease/after-call=kill")
	out, err := cmd.CombinedOutput()
	if Enabled {
		require.Error(t, err, "a failpoints build must kill the child at the armed point: %s", out)
		assert.Contains(t, string(out), "failpoint deleteLease/after-call: SIGKILL")
		return
	}
	require.NoError(t, err, "a release build must ignore %s: %s", Env, out)
	assert.NotContains(t, string(out), "SIGKILL")
}

func TestName(t *testing.T) {
	assert.Equal(t, "cordon/before-call", Name("cordon", BeforeCall))
	assert.Equal(t, []string{"after-journal", "before-call", "after-call"}, Boundaries)
}
