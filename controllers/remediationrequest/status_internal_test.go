package remediationrequest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
)

// TestEventsFollowTheStatusWrite: the Event of a change of state is recorded only
// once the status write that carries the change is applied. A write the API server
// refuses (here a conflict) records nothing, so the retried reconcile, which makes
// the same change again, reports it once, not twice; a write with nothing to change
// still records what was queued, as the change is stored already.
func TestEventsFollowTheStatusWrite(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	stored := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "r", Generation: 1}}
	refuse := true
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stored).WithStatusSubresource(stored).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if refuse {
				return apierrors.NewConflict(schema.GroupResource{Group: "remediator.io", Resource: "remediationrequests"}, o.GetName(), nil)
			}
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		}}).Build()
	events := record.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: events}

	reconcile := func() error {
		rr := &v1alpha1.RemediationRequest{}
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(stored), rr))
		s := &scope{rr: rr, base: rr.DeepCopy(), now: metav1.Now().Time}
		rr.Status.Phase = v1alpha1.PhaseRunning
		s.recordTransition(lifecycle.Fail(rr, v1alpha1.ReasonStepFailed, v1alpha1.ReasonFailed, "cordon failed"))
		return r.patchStatus(context.Background(), s)
	}
	require.Error(t, reconcile(), "the refused write")
	assert.Empty(t, events.Events, "an Event for a change the API server refused")

	refuse = false
	require.NoError(t, reconcile())
	require.Len(t, events.Events, 1)
	assert.Equal(t, corev1.EventTypeWarning+" "+v1alpha1.EventFailed+" cordon failed", <-events.Events)

	// Nothing left to write: the change is stored, its Event is recorded.
	require.NoError(t, reconcile())
	assert.Len(t, events.Events, 1)
}

// TestNoActWithoutTheJournal: a release acts in the reconcile that decided it only
// once the API server applied the write that journals its step; a request gone
// before that write (NotFound, which a status write takes as nothing to report)
// never reaches the step, whose call would then have no journal.
func TestNoActWithoutTheJournal(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	stored := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "gone", Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stored).WithStatusSubresource(stored).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(_ context.Context, _ client.Client, _ string, o client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
			return apierrors.NewNotFound(schema.GroupResource{Group: "remediator.io", Resource: "remediationrequests"}, o.GetName())
		}}).Build()
	// No gatherer, no playbooks: a reconcile that went on to the step would fail here.
	r := &Reconciler{Client: c, Recorder: record.NewFakeRecorder(10)}
	rr := &v1alpha1.RemediationRequest{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(stored), rr))
	s := &scope{rr: rr, base: rr.DeepCopy(), now: metav1.Now().Time, decidedAt: rr.ResourceVersion}
	rr.Status.Phase = v1alpha1.PhaseRunning
	rr.Status.Steps = []v1alpha1.StepStatus{{Name: v1alpha1.StepDeleteLease, State: v1alpha1.StepRunning}}
	res, err := r.journalThenAct(context.Background(), s)
	require.NoError(t, err)
	assert.Zero(t, res)
	assert.False(t, s.journaled)
}
