package controller

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// TestControllerWithoutReloadDoesNotStartOnABrokenPolicy: a broken --policies-dir
// with reloading off (--policy-reload-interval=0) could never be fixed without a
// restart, so the controller stops before it reads anything from the cluster, and
// the error says why. With reloading on it starts and waits for a policy
// (TestControllerStartsOnABrokenPolicy).
func TestControllerWithoutReloadDoesNotStartOnABrokenPolicy(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"syntax error", "package policies\n#Policy: {input: _, decision: \n", []string{"loading policies", "p.cue:2:", "expected operand"}},
		{"unknown playbook", `package policies
#Policy: {input: _, decision: {allowed: true, playbook: "node-shutdwn", rule: "r", reasons: ["x"], message: "m"}}
`, []string{"loading policies", `p.cue:2:`, `playbook "node-shutdwn"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "p.cue"), []byte(tc.src), 0o644))
			cmd := NewCommand("test")
			// No cluster: the policy must be refused before the kubeconfig is read.
			cmd.SetArgs([]string{"--policies-dir", dir, "--policy-reload-interval", "0", "--kubeconfig", filepath.Join(dir, "no-such-kubeconfig")})
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Contains(t, err.Error(), "--policy-reload-interval=0")
			assert.NotContains(t, err.Error(), "kubeconfig")
		})
	}
}

func TestOwnPodComesFromTheDownwardAPI(t *testing.T) {
	t.Setenv("POD_NAME", "")
	t.Setenv("POD_NAMESPACE", "remediator-system")
	assert.Nil(t, ownPod(), "without POD_NAME there is no Pod to record Events on")
	t.Setenv("POD_NAME", "remediator-7d9f-x2")
	t.Setenv("POD_UID", "6f1c")
	assert.Equal(t, &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "remediator-system", Name: "remediator-7d9f-x2", UID: "6f1c"}, ownPod())
}

// TestGCPercentDefaultsUnlessGOGCIsSet: the controller collects at DefaultGCPercent
// when GOGC is unset or empty, and leaves the runtime's target alone when GOGC is set
// (the runtime applied it before main); either way it says which GOGC it runs with.
func TestGCPercentDefaultsUnlessGOGCIsSet(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	assert.Equal(t, "50", defaultGCPercent(func(string) string { return "" }))
	assert.Equal(t, DefaultGCPercent, debug.SetGCPercent(100), "the runtime's target")

	for _, gogc := range []string{"100", "off", "200"} {
		got := defaultGCPercent(func(k string) string {
			if k == "GOGC" {
				return gogc
			}
			return ""
		})
		assert.Equal(t, gogc, got)
		assert.Equal(t, 100, debug.SetGCPercent(100), "GOGC=%s: the runtime's target changed", gogc)
	}
}
