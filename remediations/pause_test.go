package remediations

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// podLeft observes the evicted pod still on the holder node, and counts the reads.
type podLeft struct{ reads *int }

func (o podLeft) FreshFacts(context.Context) (*v1alpha1.Facts, []string, error) {
	*o.reads++
	return &v1alpha1.Facts{AffectedPods: []v1alpha1.PodFacts{{Namespace: "app", Name: "db-0", UID: "uid-db-0", Node: "node-a"}}}, nil, nil
}

func (o podLeft) NodePluginPods(context.Context, string, string) ([]corev1.Pod, error) {
	*o.reads++
	return nil, nil
}

// unreadable fails every read: a step that reads while paused would show it.
type unreadable struct{ reads *int }

func (o unreadable) FreshFacts(context.Context) (*v1alpha1.Facts, []string, error) {
	*o.reads++
	return nil, nil, errors.New("the API server is unreachable")
}

func (o unreadable) NodePluginPods(context.Context, string, string) ([]corev1.Pod, error) {
	*o.reads++
	return nil, errors.New("the API server is unreachable")
}

// restarted passes the request through its stored form, as a restarted controller
// reads it: what the pause records must survive in status, not in memory.
func restarted(t *testing.T, rr *v1alpha1.RemediationRequest) *v1alpha1.RemediationRequest {
	t.Helper()
	b, err := json.Marshal(rr)
	require.NoError(t, err)
	out := &v1alpha1.RemediationRequest{}
	require.NoError(t, json.Unmarshal(b, out))
	return out
}

// TestPauseFreezesARunningStep: a step's timeout counts only the time Remediator was
// not paused. Paused a minute into waitPodsGone (timeout 10 min), the step neither
// reads nor times out however long the pause lasts; resumed, it goes on with the
// nine minutes it had left, through a controller restart at every reconcile, and
// times out once they are spent.
func TestPauseFreezesARunningStep(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	started := metav1.NewTime(t0)
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "frozen"}}
	rr.Status.Steps = []v1alpha1.StepStatus{{Name: v1alpha1.StepWaitPodsGone, State: v1alpha1.StepRunning, StartedAt: &started, Message: "Waiting for pods to terminate: app/db-0"}}
	reads := 0
	advance := func(after time.Duration, paused string) Progress {
		t.Helper()
		rr = restarted(t, rr)
		r := &Execution{RR: rr, Fresh: podLeft{&reads}, Now: t0.Add(after), Timeouts: DefaultTimeouts, Paused: paused}
		p, err := Advance(ctx, r)
		require.NoError(t, err)
		return p
	}
	const why = "Remediator is paused by alice@oncall: INC-4711"

	for _, after := range []time.Duration{time.Minute, 11 * time.Minute, 40 * time.Minute} {
		p := advance(after, why)
		require.NotNil(t, p.Halt, "paused %s after the start: the step must hold", after)
		assert.Equal(t, ActionHold, p.Halt.Action)
		assert.Equal(t, why, p.Halt.Message)
		require.Nil(t, p.Failure, "paused %s after the start, past the wall-clock timeout: %+v", after, p.Failure)
		assert.Equal(t, v1alpha1.StepRunning, rr.Status.Steps[0].State)
		assert.Zero(t, reads, "a paused step reads nothing")
	}
	st := rr.Status.Steps[0]
	require.NotNil(t, st.PausedSince, "the pause's start is journaled on the running step")
	assert.True(t, st.PausedSince.Time.Equal(t0.Add(time.Minute)), "paused since %v: written once, at the first paused reconcile", st.PausedSince)
	assert.True(t, st.StartedAt.Equal(&started), "the start is written once")

	// Resumed 40 minutes in: one minute ran, nine are left.
	p := advance(40*time.Minute, "")
	require.Nil(t, p.Halt)
	require.Nil(t, p.Failure, "resumed with nine minutes left: %+v", p.Failure)
	assert.Positive(t, p.RequeueAfter, "the step goes on waiting")
	assert.Equal(t, 1, reads, "resumed, the step checks again")
	st = rr.Status.Steps[0]
	assert.Nil(t, st.PausedSince, "resumed")
	require.NotNil(t, st.PausedFor)
	assert.Equal(t, 39*time.Minute, st.PausedFor.Duration)

	p = advance(49*time.Minute, "")
	require.Nil(t, p.Failure, "ten minutes of unpaused time are not yet past: %+v", p.Failure)

	p = advance(49*time.Minute+time.Second, "")
	require.NotNil(t, p.Failure, "ten minutes and a second of unpaused time")
	assert.Equal(t, v1alpha1.ReasonTimeout, p.Failure.Reason)
	assert.Equal(t, "step waitPodsGone timed out after 10m0s (not counting 39m0s paused): Waiting for pods to terminate: app/db-0", p.Failure.Message)
	assert.Equal(t, v1alpha1.StepFailed, rr.Status.Steps[0].State)
}

// TestPauseHoldsADestructiveStepPastItsTimeout: an eviction a PodDisruptionBudget
// holds, paused past the eviction timeout, neither fails nor acts: before, its
// timeout was checked before the gate, so the request failed and the restore
// uncordoned the node during the pause. Nothing is read while paused either, so an
// unreachable API server cannot fail it.
func TestPauseHoldsADestructiveStepPastItsTimeout(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	started := metav1.NewTime(t0)
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "held-eviction"}}
	rr.Status.Steps = []v1alpha1.StepStatus{
		{Name: v1alpha1.StepCordon, State: v1alpha1.StepSucceeded, StartedAt: &started, CompletedAt: &started},
		{Name: v1alpha1.StepDeleteAffectedPods, State: v1alpha1.StepRunning, StartedAt: &started, Message: "Eviction refused, retrying: app/db-0"},
		{Name: v1alpha1.StepWaitPodsGone, State: v1alpha1.StepPending},
	}
	reads := 0
	r := &Execution{RR: rr, Fresh: unreadable{&reads}, Now: t0.Add(time.Hour), Timeouts: DefaultTimeouts, Paused: "paused for the firmware upgrade"}
	p, err := Advance(ctx, r)
	require.NoError(t, err)
	require.Nil(t, p.Failure, "paused an hour into a ten-minute eviction: %+v", p.Failure)
	require.NotNil(t, p.Halt)
	assert.Equal(t, ActionHold, p.Halt.Action)
	assert.Equal(t, v1alpha1.StepRunning, rr.Status.Steps[1].State)
	assert.Equal(t, v1alpha1.StepPending, rr.Status.Steps[2].State)
	assert.Zero(t, reads, "a paused step reads nothing")
}

// TestRanFor: a step's running time, as its timeout counts it, is the time since its
// start less the time pauses held it.
func TestRanFor(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { m := metav1.NewTime(t0.Add(d)); return &m }
	paused := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	cases := []struct {
		name        string
		st          v1alpha1.StepStatus
		now         time.Duration
		want        time.Duration
		wantTimeout bool // against a 10-minute bound
	}{
		{"not started", v1alpha1.StepStatus{}, time.Hour, 0, false},
		{"never paused", v1alpha1.StepStatus{StartedAt: at(0)}, 4 * time.Minute, 4 * time.Minute, false},
		{"never paused, past the bound", v1alpha1.StepStatus{StartedAt: at(0)}, 11 * time.Minute, 11 * time.Minute, true},
		{"paused now: the time stands still", v1alpha1.StepStatus{StartedAt: at(0), PausedSince: at(3 * time.Minute)}, 2 * time.Hour, 3 * time.Minute, false},
		{"resumed: the pause does not count", v1alpha1.StepStatus{StartedAt: at(0), PausedFor: paused(time.Hour)}, time.Hour + 9*time.Minute, 9 * time.Minute, false},
		{"resumed, then the time left ran out", v1alpha1.StepStatus{StartedAt: at(0), PausedFor: paused(time.Hour)}, time.Hour + 11*time.Minute, 11 * time.Minute, true},
		{"paused again after a resume", v1alpha1.StepStatus{StartedAt: at(0), PausedFor: paused(time.Hour), PausedSince: at(time.Hour + 5*time.Minute)}, 5 * time.Hour, 5 * time.Minute, false},
		{"a clock behind the pause's start counts nothing extra", v1alpha1.StepStatus{StartedAt: at(0), PausedSince: at(3 * time.Minute)}, time.Minute, time.Minute, false},
		{"a clock behind the start counts nothing", v1alpha1.StepStatus{StartedAt: at(0)}, -time.Minute, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(tc.now)
			assert.Equal(t, tc.want, RanFor(&tc.st, now))
			assert.Equal(t, tc.wantTimeout, timedOut(&tc.st, 10*time.Minute, now))
		})
	}
}

// TestHoldAndResumeJournalThePause: the pause's start is written once, at the first
// paused reconcile; the resume adds its length to what earlier pauses held.
func TestHoldAndResumeJournalThePause(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	start := metav1.NewTime(t0)
	st := v1alpha1.StepStatus{StartedAt: &start}

	resumeStep(&st, t0.Add(time.Minute))
	assert.Nil(t, st.PausedFor, "a step no pause held records nothing")

	holdStep(&st, t0.Add(2*time.Minute))
	holdStep(&st, t0.Add(30*time.Minute))
	require.NotNil(t, st.PausedSince)
	assert.True(t, st.PausedSince.Time.Equal(t0.Add(2*time.Minute)), "written once: %v", st.PausedSince)

	resumeStep(&st, t0.Add(32*time.Minute))
	assert.Nil(t, st.PausedSince)
	assert.Equal(t, 30*time.Minute, st.PausedFor.Duration)

	holdStep(&st, t0.Add(40*time.Minute))
	resumeStep(&st, t0.Add(50*time.Minute))
	assert.Equal(t, 40*time.Minute, st.PausedFor.Duration, "pauses add up")
	assert.Equal(t, 10*time.Minute, RanFor(&st, t0.Add(50*time.Minute)))

	holdStep(&st, t0.Add(60*time.Minute))
	resumeStep(&st, t0.Add(59*time.Minute))
	assert.Equal(t, 40*time.Minute, st.PausedFor.Duration, "a clock read behind the pause's start adds nothing")
}

// TestRestoreBoundLeavesOutThePausedTime: a restore retried on an uncordon step that
// a pause once held is bounded like the step, less the paused time, and says until
// when it is retried on that count.
func TestRestoreBoundLeavesOutThePausedTime(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	started := metav1.NewTime(t0)
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "restoring"}}
	rr.Status.Steps = []v1alpha1.StepStatus{{Name: v1alpha1.StepUncordon, State: v1alpha1.StepRunning, StartedAt: &started,
		PausedFor: &metav1.Duration{Duration: time.Hour}}}
	st := &rr.Status.Steps[0]
	r := &Execution{RR: rr, Now: t0.Add(time.Hour + 2*time.Minute), Timeouts: DefaultTimeouts}
	err := restoreFailed(r, st, "node-a", "the failure", errors.New("the API server is unreachable"))
	_, gaveUp := IsRestoreFailure(err)
	require.False(t, gaveUp, "two minutes of unpaused time, within the five-minute bound: %v", err)
	assert.Equal(t, "Restore after the failure failed, retried until 2030-01-01T11:05:00Z: the API server is unreachable", st.Message)

	r.Now = t0.Add(time.Hour + 5*time.Minute + time.Second)
	_, gaveUp = IsRestoreFailure(restoreFailed(r, st, "node-a", "the failure", errors.New("the API server is unreachable")))
	assert.True(t, gaveUp, "past five minutes of unpaused time")
}
