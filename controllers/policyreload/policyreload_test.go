package policyreload

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/remediator/remediator/policies"
)

// value reads a counter or a gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.Write(&out))
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// logLines captures a logger's output, one entry per line.
type logLines struct{ lines []string }

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) { l.lines = append(l.lines, prefix+" "+args) }, funcr.Options{Verbosity: 0})
}

func (l *logLines) take() []string {
	out := l.lines
	l.lines = nil
	return out
}

// reviewedPolicies copies the embedded policy files into a fresh directory.
func reviewedPolicies(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../../policies/*.cue")
	require.NoError(t, err)
	for _, f := range files {
		// The schema is the controller's own: a policy directory holds the rules only.
		if filepath.Base(f) == "schema.cue" {
			continue
		}
		if strings.HasSuffix(f, "_test.cue") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644))
	}
	return dir
}

func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestPolicyReloaderSaysWhichPolicyIsKept: a reload that fails keeps the last good
// policy and says so, with the reason and the digest kept, in the log, the metrics
// and a Warning Event on the controller's Pod; once, not on every attempt while the
// files stay broken. A fixed policy is taken and announced.
func TestPolicyReloaderSaysWhichPolicyIsKept(t *testing.T) {
	dir := reviewedPolicies(t)
	e, err := policies.FromDir(dir)
	require.NoError(t, err)
	good := e.Digest()
	setPolicyInfo(e)
	rec := record.NewFakeRecorder(10)
	pod := &corev1.ObjectReference{Kind: "Pod", Namespace: "remediator-system", Name: "remediator-7d9f-x2"}
	p := &Reloader{Engine: e, Interval: 30 * time.Second, Recorder: rec, Pod: pod}
	var logs logLines
	errorsBefore := value(t, policyLoadErrors)
	policy := filepath.Join(dir, "release_luks_lease.cue")
	src, err := os.ReadFile(policy)
	require.NoError(t, err)

	p.reload(logs.logger())
	assert.Empty(t, logs.take(), "an unchanged directory is not news")
	assert.Empty(t, drain(rec.Events))

	steps := []struct {
		name, src, reason string
	}{
		{"syntax error", string(src) + "\n#Policy: {", policies.LoadReasonSyntax},
		{"unknown playbook", strings.Replace(string(src), `playbook: "node-shutdown"`, `playbook: "node-shutdwn"`, 1), policies.LoadReasonUnknownPlaybook},
	}
	for i, st := range steps {
		require.NotEqual(t, string(src), st.src)
		require.NoError(t, os.WriteFile(policy, []byte(st.src), 0o644))
		for attempt := range 3 {
			p.reload(logs.logger())
			assert.Equal(t, errorsBefore+float64(3*i+attempt+1), value(t, policyLoadErrors), "%s: every attempt counts", st.name)
			for _, r := range policies.LoadReasons {
				want := 0.0
				if r == st.reason {
					want = 1
				}
				assert.Equal(t, want, value(t, policyReloadFailing.WithLabelValues(r)), "%s: remediator_policy_reload_failing{reason=%q}", st.name, r)
			}
			assert.Equal(t, 1.0, value(t, policyInfo.WithLabelValues(good, dir)), "%s: remediator_policy_info shows the policy in use", st.name)
			assert.Equal(t, good, e.Digest())

			lines, events := logs.take(), drain(rec.Events)
			if attempt > 0 {
				assert.Empty(t, lines, "%s: a failure that persists is logged once", st.name)
				assert.Empty(t, events, "%s: and evented once", st.name)
				continue
			}
			require.Len(t, lines, 1, "%s", st.name)
			assert.Contains(t, lines[0], `"msg"="Reloading policies failed; the last good policy stays in use"`)
			assert.Contains(t, lines[0], fmt.Sprintf(`"reason"=%q`, st.reason))
			assert.Contains(t, lines[0], fmt.Sprintf(`"digestKept"=%q`, good))
			require.Len(t, events, 1, "%s", st.name)
			assert.True(t, strings.HasPrefix(events[0], "Warning "+EventReloadFailed+" The policies in "+dir+" were refused ("+st.reason+": "), events[0])
			assert.Contains(t, events[0], "the last good policy "+good+" stays in use")
		}
	}

	require.NoError(t, os.WriteFile(policy, append(src, "// reviewed again\n"...), 0o644))
	p.reload(logs.logger())
	fixed := e.Digest()
	require.NotEqual(t, good, fixed)
	for _, r := range policies.LoadReasons {
		assert.Zero(t, value(t, policyReloadFailing.WithLabelValues(r)), r)
	}
	assert.Equal(t, 1.0, value(t, policyInfo.WithLabelValues(fixed, dir)))
	assert.Zero(t, value(t, policyInfo.WithLabelValues(good, dir)), "the old digest is gone from remediator_policy_info")
	lines := logs.take()
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], `"msg"="Reloaded policies"`)
	assert.Equal(t, []string{"Normal " + EventReloaded + " Reloaded the policies in " + dir + ": now deciding with policy " + fixed + "."}, drain(rec.Events))

	// Without the Pod there is no Event; the log and the metrics still say it.
	require.NoError(t, os.WriteFile(policy, []byte(steps[0].src), 0o644))
	p.Pod = nil
	p.reload(logs.logger())
	assert.Len(t, logs.take(), 1)
	assert.Empty(t, drain(rec.Events))
	assert.Equal(t, 1.0, value(t, policyReloadFailing.WithLabelValues(policies.LoadReasonSyntax)))
}
