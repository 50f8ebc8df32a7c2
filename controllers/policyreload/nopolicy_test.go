package policyreload

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/policies"
)

// TestPolicyReloaderReportsNoPolicyAtOnce: a controller that started on policy files
// that do not load says so when its reloader starts, not one interval later: the
// gauge the PolicyReloadFailing alert reads, and a Warning Event on its Pod saying
// that nothing is decided. A fixed directory is then loaded at the next reload.
func TestPolicyReloaderReportsNoPolicyAtOnce(t *testing.T) {
	dir := reviewedPolicies(t)
	policy := filepath.Join(dir, "release_luks_lease.cue")
	src, err := os.ReadFile(policy)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(policy, append(src, "\n#Policy: {"...), 0o644))
	e, err := policies.LoadOrWait(dir)
	require.NoError(t, err)
	require.Error(t, e.LoadFailure())
	setPolicyInfo(e)

	rec := record.NewFakeRecorder(10)
	pod := &corev1.ObjectReference{Kind: "Pod", Namespace: "remediator-system", Name: "remediator-7d9f-x2"}
	p := &Reloader{Engine: e, Interval: time.Hour, Recorder: rec, Pod: pod}
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), ctrl.Log))
	done := make(chan struct{})
	go func() { _ = p.Start(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	select {
	case ev := <-rec.Events:
		assert.Contains(t, ev, "Warning "+EventReloadFailed)
		assert.Contains(t, ev, "no policy is in use, so nothing is decided")
	case <-time.After(10 * time.Second):
		t.Fatal("no Event within 10s of the reloader's start; its interval is an hour")
	}
	assert.Equal(t, 1.0, value(t, policyReloadFailing.WithLabelValues(policies.LoadReasonSyntax)), "remediator_policy_reload_failing{reason=syntax}")
	assert.Equal(t, 1.0, value(t, policyInfo.WithLabelValues(policies.NoPolicy, dir)), "remediator_policy_info shows no policy")

	require.NoError(t, os.WriteFile(policy, src, 0o644))
	var logs logLines
	p.reload(logs.logger())
	assert.NoError(t, e.LoadFailure())
	assert.NotEqual(t, policies.NoPolicy, e.Digest())
	assert.Equal(t, 0.0, value(t, policyReloadFailing.WithLabelValues(policies.LoadReasonSyntax)))
	assert.Equal(t, 1.0, value(t, policyInfo.WithLabelValues(e.Digest(), dir)))
}
