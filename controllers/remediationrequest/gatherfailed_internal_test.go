package remediationrequest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/record"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
)

// TestGatherFailedMessage: the message says what the operator can do about each kind
// of answer, and keeps the API server's own words (for a Forbidden, the permission).
func TestGatherFailedMessage(t *testing.T) {
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	forbidden := apierrors.NewForbidden(leases, "pvc-1", errors.New(`User "system:serviceaccount:remediator-system:remediator-controller" cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "trident-2"`))
	cases := []struct {
		name string
		err  error
		want []string
	}{
		{"forbidden", forbidden, []string{`cannot get resource "leases"`, `namespace "trident-2"`, "Grant the controller's ServiceAccount that permission"}},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolume"}, "a/b", field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), "a/b", "bad")}),
			[]string{"a/b", "correct the request in Git"}},
		{"bad request", apierrors.NewBadRequest("bad name"), []string{"bad name", "correct the request in Git"}},
		{"timeout", apierrors.NewTimeoutError("slow", 1), []string{"slow", "Nothing to do if this passes"}},
		{"no API error", context.DeadlineExceeded, []string{"context deadline exceeded", "Nothing to do if this passes"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := gatherFailedMessage(tc.err)
			assert.Contains(t, got, "is not decided yet; it tries again with backoff, at most 30s apart")
			for _, w := range tc.want {
				assert.Contains(t, got, w)
			}
		})
	}
}

// TestGatherFailedIsDecidedAgain: a request whose facts could not be read is decided
// again on its next reconcile, whatever its decision said, and is Pending with a
// condition saying why; a phase it had is kept.
func TestGatherFailedIsDecidedAgain(t *testing.T) {
	r := &Reconciler{Recorder: record.NewFakeRecorder(10)}
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	s := &scope{rr: rr}
	_, err := r.gatherFailed(s, errors.New("boom"))
	r.recordEvents(s) // as the status write does once applied
	require.EqualError(t, err, "boom", "returned, for the rate limiter's backoff")
	assert.Equal(t, v1alpha1.PhasePending, rr.Status.Phase)
	assert.Equal(t, int64(2), rr.Status.ObservedGeneration)
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	require.NotNil(t, c)
	assert.Equal(t, v1alpha1.ReasonGatherFailed, c.Reason)
	assert.True(t, lifecycle.NeedsDecision(rr, metav1.Now().Time))

	// Once per answer: the same answer again records no second Event.
	s = &scope{rr: rr}
	_, _ = r.gatherFailed(s, errors.New("boom"))
	r.recordEvents(s)
	assert.Len(t, r.Recorder.(*record.FakeRecorder).Events, 1)

	// A request waiting on a decision whose recheck failed keeps its phase.
	waiting := &v1alpha1.RemediationRequest{Status: v1alpha1.RemediationRequestStatus{Phase: v1alpha1.PhaseWaiting, Decision: &v1alpha1.Decision{}}}
	_, _ = r.gatherFailed(&scope{rr: waiting}, errors.New("boom"))
	assert.Equal(t, v1alpha1.PhaseWaiting, waiting.Status.Phase)
	assert.True(t, lifecycle.NeedsDecision(waiting, metav1.Now().Time))
}
