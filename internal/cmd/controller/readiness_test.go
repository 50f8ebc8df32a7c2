package controller

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/policies"
)

// fakeEngine is suspended when why is set.
type fakeEngine struct{ why string }

func (f *fakeEngine) Suspended() (bool, string) { return f.why != "", f.why }

// TestPolicyReadiness: the check fails, with the engine's reason, exactly while the
// engine is suspended, and logs each change of state once, not every probe.
func TestPolicyReadiness(t *testing.T) {
	const why = "Policy evaluation is suspended: 2 earlier evaluations of policy sha256:abc (embedded) took longer than 1s and are still running."
	steps := []struct {
		name    string
		why     string
		wantErr string
		wantLog string // the line logged by this probe; empty: none
	}{
		{name: "deciding", wantLog: ""},
		{name: "still deciding"},
		{name: "suspended", why: why, wantErr: why, wantLog: `"level"=0 "msg"="Not ready: the policy engine is suspended" "reason"="` + why + `"`},
		{name: "still suspended", why: why, wantErr: why},
		{name: "deciding again", wantLog: `"level"=0 "msg"="Ready again: the policy engine decides"`},
		{name: "deciding on", wantLog: ""},
	}
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	engine := &fakeEngine{}
	check := policyReadiness(engine, log)
	for _, st := range steps {
		lines = nil
		engine.why = st.why
		err := check(httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if st.wantErr == "" {
			assert.NoError(t, err, st.name)
		} else {
			assert.EqualError(t, err, st.wantErr, st.name)
		}
		if st.wantLog == "" {
			assert.Empty(t, lines, st.name)
		} else {
			assert.Equal(t, []string{st.wantLog}, lines, st.name)
		}
	}
}

// TestReadyzFollowsTheEngine: on a real Engine, /readyz turns 500 when runaway
// evaluations suspend the policy and 200 again once a reload swaps in a fixed one,
// although the old policy's runaways still run.
func TestReadyzFollowsTheEngine(t *testing.T) {
	// Cubic in len(input.conflicts): 60 conflicts take far over the 25ms bound.
	const slow = `package policies

#Policy: {
	input: _
	let l = input.conflicts
	let n = len([for a in l for b in l for c in l if a+b+c == "" {1}])
	decision: {allowed: false, wait: false, rule: "slow", reasons: ["\(n)"], message: "slow"}
}
`
	const fixed = `package policies

#Policy: {
	input: _
	decision: {allowed: false, wait: false, rule: "fixed", reasons: ["fixed"], message: "fixed"}
}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.cue")
	require.NoError(t, os.WriteFile(file, []byte(slow), 0o644))
	engine, err := policies.FromDir(dir)
	require.NoError(t, err)
	engine.Timeout = 25 * time.Millisecond

	handler := &healthz.Handler{Checks: map[string]healthz.Checker{"policy": policyReadiness(engine, funcr.New(func(string, string) {}, funcr.Options{}))}}
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		// The manager mounts the handler under /readyz with the prefix stripped.
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec.Code, rec.Body.String()
	}
	code, body := readyz()
	require.Equal(t, http.StatusOK, code, body)

	in := policies.Input{Remediation: v1alpha1.RemediationReleaseLUKSLease, Facts: &v1alpha1.Facts{}}
	for i := range 60 {
		in.Conflicts = append(in.Conflicts, fmt.Sprintf("remediator/request-%d", i))
	}
	for i := range policies.MaxRunawayEvaluations {
		d, err := engine.Decide(in)
		require.NoError(t, err)
		require.Equal(t, policies.RulePolicyTimeout, d.Rule, "runaway %d", i)
	}
	code, body = readyz()
	assert.Equal(t, http.StatusInternalServerError, code, body)
	assert.Contains(t, body, "[-]policy failed")

	require.NoError(t, os.WriteFile(file, []byte(fixed), 0o644))
	changed, err := engine.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	code, body = readyz()
	assert.Equal(t, http.StatusOK, code, body)
}
