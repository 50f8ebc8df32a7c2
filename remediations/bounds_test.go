package remediations

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/remediator/remediator/api/v1alpha1"
)

var nodesGR = schema.GroupResource{Resource: "nodes"}

func TestRefusedForGood(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"403 forbidden (RBAC, an admission policy)", apierrors.NewForbidden(nodesGR, "n", errors.New("denied")), true},
		{"422 invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n", field.ErrorList{field.Forbidden(field.NewPath("spec"), "no")}), true},
		{"400 bad request", apierrors.NewBadRequest("no"), true},
		{"404 not found", apierrors.NewNotFound(nodesGR, "n"), true},
		{"wrapped 403", fmt.Errorf("cordoning: %w", apierrors.NewForbidden(nodesGR, "n", errors.New("denied"))), true},
		{"409 conflict", apierrors.NewConflict(nodesGR, "n", errors.New("changed")), false},
		{"429 too many requests", apierrors.NewTooManyRequests("budget", 5), false},
		{"408 request timeout", apierrors.NewGenericServerResponse(408, "patch", nodesGR, "n", "", 0, false), false},
		{"401 unauthorized", apierrors.NewUnauthorized("token expired"), false},
		{"500 internal", apierrors.NewInternalError(errors.New("etcd")), false},
		{"503 unavailable", apierrors.NewServiceUnavailable("restarting"), false},
		{"504 timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"not an API status", errors.New("connection refused"), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, RefusedForGood(tc.err))
		})
	}
}

// TestEveryStepHasATimeout: cordon, deleteLease and uncordon used to have none
// (zero), so an error retried them for ever. A zero configured timeout means the
// default, not "no bound". Seen failing before: cordon, deleteLease and uncordon
// returned 0.
func TestEveryStepHasATimeout(t *testing.T) {
	for _, r := range []*Execution{{Timeouts: DefaultTimeouts}, {}} {
		for name, step := range library {
			assert.Positive(t, step.Timeout(r), "step %s with timeouts %+v", name, r.Timeouts)
		}
	}
	r := &Execution{Timeouts: Timeouts{Step: 7 * time.Second}}
	for _, name := range []string{v1alpha1.StepCordon, v1alpha1.StepDeleteLease, v1alpha1.StepUncordon} {
		assert.Equal(t, 7*time.Second, library[name].Timeout(r), "step %s follows Timeouts.Step", name)
	}
}

func fieldsV1(t *testing.T, raw string) *metav1.FieldsV1 {
	t.Helper()
	return &metav1.FieldsV1{Raw: []byte(raw)}
}

func TestCordonAssertedBy(t *testing.T) {
	unsched := `{"f:spec":{"f:unschedulable":{}}}`
	mark := `{"f:metadata":{"f:annotations":{"f:remediator.io/cordoned-by":{}}}}`
	cases := []struct {
		name   string
		fields []metav1.ManagedFieldsEntry
		want   []string
	}{
		{"ours alone", []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: fieldsV1(t, unsched)}}, nil},
		{"no managedFields (stripped)", nil, nil},
		{"another manager owns other fields only", []metav1.ManagedFieldsEntry{
			{Manager: FieldManager, FieldsV1: fieldsV1(t, unsched)},
			{Manager: "kubelet", FieldsV1: fieldsV1(t, `{"f:spec":{"f:podCIDR":{}}}`)},
			{Manager: "kubectl-annotate", FieldsV1: fieldsV1(t, mark)},
		}, nil},
		{"status subresource is not the cordon", []metav1.ManagedFieldsEntry{
			{Manager: "kubelet", Subresource: "status", FieldsV1: fieldsV1(t, unsched)},
		}, nil},
		{"an administrator re-cordoned", []metav1.ManagedFieldsEntry{{Manager: "kubectl-cordon", FieldsV1: fieldsV1(t, unsched)}}, []string{"kubectl-cordon"}},
		{"shared by apply", []metav1.ManagedFieldsEntry{
			{Manager: FieldManager, FieldsV1: fieldsV1(t, unsched)},
			{Manager: "ops", Operation: metav1.ManagedFieldsOperationApply, FieldsV1: fieldsV1(t, unsched)},
			{Manager: "kubectl-cordon", FieldsV1: fieldsV1(t, unsched)},
		}, []string{"kubectl-cordon", "ops"}},
		{"unparsable field set", []metav1.ManagedFieldsEntry{{Manager: "x", FieldsV1: fieldsV1(t, `{`)}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{ManagedFields: tc.fields}}
			assert.Equal(t, tc.want, CordonAssertedBy(n))
		})
	}
}

// failingWrites is r's client with every node patch and Lease delete answered by
// err, counting the calls.
func failingWrites(t *testing.T, r *Execution, err func() error) *int {
	t.Helper()
	calls := 0
	wc, cerr := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, cerr)
	r.Client = interceptor.NewClient(wc, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				calls++
				if e := err(); e != nil {
					return e
				}
			}
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				calls++
				if e := err(); e != nil {
					return e
				}
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
	return &calls
}

// TestStepErrorsAreBounded: an error from a step's Run or Done is retried until the
// step's timeout, counted from its StartedAt, and then fails the playbook with
// ReasonTimeout and the error's text; a 4xx refusal (not 409, not 429) fails it at
// once with the API server's message. Seen failing before: the erroring cordon,
// deleteLease and uncordon were retried for ever (Advance returned the error past
// any timeout), and a refused cordon or Lease delete was retried like any error.
func TestStepErrorsAreBounded(t *testing.T) {
	ctx := context.Background()
	unavailable := apierrors.NewServiceUnavailable("the API server is restarting")
	forbidden := apierrors.NewForbidden(nodesGR, "n", errors.New(`ValidatingAdmissionPolicy 'freeze-cordons' denied request: cordons are frozen`))
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}, "l",
		field.ErrorList{field.Forbidden(field.NewPath("metadata"), "a webhook refused it")})
	cases := []struct {
		name, step string
		err        error
		// wantReason "" means the error is retried, even past the timeout (never).
		wantReason, wantText string
		atOnce               bool
	}{
		{"deleteLease, unavailable", v1alpha1.StepDeleteLease, unavailable, v1alpha1.ReasonTimeout, "the API server is restarting", false},
		{"deleteLease, refused", v1alpha1.StepDeleteLease, invalid, ReasonWriteRefused, "a webhook refused it", true},
		{"uncordon, unavailable", v1alpha1.StepUncordon, unavailable, v1alpha1.ReasonTimeout, "the API server is restarting", false},
		{"uncordon, forbidden", v1alpha1.StepUncordon, forbidden, ReasonWriteRefused, "cordons are frozen", true},
	}
	// The cordon's write, on its own: the runner's floor would refuse a cordon in
	// this Lease-only fixture before it writes; its timeout is the runner's, as below.
	for _, tc := range []struct {
		err     error
		refused bool
	}{{forbidden, true}, {unavailable, false}, {apierrors.NewConflict(nodesGR, "n", errors.New("changed")), false}, {apierrors.NewTooManyRequests("slow down", 1), false}} {
		r, _ := shutdownHolder(t)
		failingWrites(t, r, func() error { return tc.err })
		_, err := (cordon{}).Run(ctx, r)
		require.Error(t, err)
		f, refused := errors.AsType[*Failure](err)
		assert.Equal(t, tc.refused, refused, "cordon answered %v", tc.err)
		if refused {
			assert.Equal(t, ReasonWriteRefused, f.Reason)
			assert.Contains(t, f.Message, "cordons are frozen")
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := shutdownHolder(t)
			r.Timeouts.Step = time.Minute
			if tc.step == v1alpha1.StepUncordon {
				// Something to undo: this request's cordon.
				_, err := (cordon{}).Run(ctx, r)
				require.NoError(t, err)
			}
			failing := true
			calls := failingWrites(t, r, func() error {
				if failing {
					return tc.err
				}
				return nil
			})
			p := runStepErr(t, r, tc.step)
			if tc.atOnce {
				require.NotNil(t, p.Failure, "a refusal fails at once")
				assert.Equal(t, tc.wantReason, p.Failure.Reason)
				assert.Contains(t, p.Failure.Message, tc.wantText, "the API server's message")
				assert.Equal(t, v1alpha1.StepFailed, r.RR.Status.Steps[0].State)
				assert.Equal(t, 1, *calls, "a refusal is not retried")
				return
			}
			// Within the timeout: retried, and the journal says why.
			require.Nil(t, p.Failure, "failed before its timeout: %+v", p.Failure)
			assert.Equal(t, v1alpha1.StepRunning, r.RR.Status.Steps[0].State)
			assert.Contains(t, r.RR.Status.Steps[0].Message, tc.wantText)
			// Past it: failed, with the error's text.
			r.freshFacts = nil
			r.Now = r.Now.Add(time.Minute + time.Second)
			p, err := Advance(ctx, r)
			require.NoError(t, err)
			require.NotNil(t, p.Failure, "an erroring step must time out")
			assert.Equal(t, tc.wantReason, p.Failure.Reason)
			assert.Contains(t, p.Failure.Message, "timed out after 1m0s")
			assert.Contains(t, p.Failure.Message, tc.wantText)
			assert.Equal(t, v1alpha1.StepFailed, r.RR.Status.Steps[0].State)
		})
	}
}

// runStepErr starts step as runStep does, and advances it once, an error allowed.
func runStepErr(t *testing.T, r *Execution, step string) Progress {
	t.Helper()
	now := metav1.NewTime(r.Now)
	r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: step, State: v1alpha1.StepRunning, StartedAt: &now}}
	p, _ := Advance(context.Background(), r)
	return p
}

// failingReader answers every Get of a Node with err.
type failingReader struct {
	client.Reader
	err error
}

func (f failingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Node); ok {
		return f.err
	}
	return f.Reader.Get(ctx, key, obj, opts...)
}

// TestDoneErrorsAreBounded: an error from Done used to skip the timeout check
// entirely. Seen failing before: uncordon's Done erred for ever past its timeout.
func TestDoneErrorsAreBounded(t *testing.T) {
	r, _ := shutdownHolder(t)
	r.Timeouts.Step = time.Minute
	r.Reader = failingReader{Reader: r.Reader, err: apierrors.NewServiceUnavailable("etcd leader changed")}
	_ = runStepErr(t, r, v1alpha1.StepUncordon)
	r.Now = r.Now.Add(2 * time.Minute)
	p, err := Advance(context.Background(), r)
	require.NoError(t, err)
	require.NotNil(t, p.Failure)
	assert.Equal(t, v1alpha1.ReasonTimeout, p.Failure.Reason)
	assert.Contains(t, p.Failure.Message, "etcd leader changed")
}

// TestRestoreIsBounded: a restore that keeps failing is retried within the step
// timeout from its first attempt, journaled on the uncordon step, and then gives
// up with the node named; a refused one gives up at once. Seen failing before:
// Restore returned the error every time, so its callers retried it for ever.
func TestRestoreIsBounded(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		err     error
		atOnce  bool
		wantMsg string
	}{
		{"unavailable", apierrors.NewServiceUnavailable("the API server is restarting"), false, "kept failing for 1m0s"},
		{"refused", apierrors.NewForbidden(nodesGR, "n", errors.New("uncordons are frozen")), true, "was refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := shutdownHolder(t)
			name := r.RR.Status.Facts.Lease.HolderIdentity
			r.Timeouts.Step = time.Minute
			r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: "cordon", State: v1alpha1.StepSucceeded},
				{Name: "deleteLease", State: v1alpha1.StepFailed}, {Name: "uncordon", State: v1alpha1.StepSkipped}}
			_, err := (cordon{}).Run(ctx, r)
			require.NoError(t, err)
			failingWrites(t, r, func() error { return tc.err })
			_, err = Restore(ctx, r, "the failure")
			require.Error(t, err)
			uc := r.RR.Status.Steps[2]
			if !tc.atOnce {
				_, gaveUp := IsRestoreFailure(err)
				require.False(t, gaveUp, "gave up before the bound: %v", err)
				require.NotNil(t, uc.StartedAt, "the first attempt must be journaled")
				assert.Contains(t, uc.Message, "retried until")
				r.Now = r.Now.Add(30 * time.Second)
				_, err = Restore(ctx, r, "the failure")
				_, gaveUp = IsRestoreFailure(err)
				require.False(t, gaveUp, "gave up before the bound: %v", err)
				r.Now = r.Now.Add(31 * time.Second)
				_, err = Restore(ctx, r, "the failure")
			}
			rf, gaveUp := IsRestoreFailure(err)
			require.True(t, gaveUp, "the restore must give up: %v", err)
			assert.Equal(t, name, rf.Node)
			assert.Contains(t, rf.Message, "could not uncordon node "+name)
			assert.Contains(t, rf.Message, tc.wantMsg)
			assert.Equal(t, v1alpha1.StepFailed, r.RR.Status.Steps[2].State)
		})
	}
}

// TestUncordonLeavesAnAssertedCordon: a cordon that someone else asserted during the
// run (an administrator who uncordoned and cordoned again, or applied
// spec.unschedulable with a field manager of their own) stays; only this request's
// mark goes, and the message says so. Seen failing before: uncordon cleared it.
func TestUncordonLeavesAnAssertedCordon(t *testing.T) {
	ctx := context.Background()
	recordon := func(t *testing.T, n *corev1.Node) {
		for _, v := range []bool{false, true} {
			before := n.DeepCopy()
			n.Spec.Unschedulable = v
			require.NoError(t, env.Client.Patch(ctx, n, client.MergeFrom(before), client.FieldOwner("kubectl-cordon")))
		}
	}
	apply := func(t *testing.T, n *corev1.Node) {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]any{"name": n.Name}, "spec": map[string]any{"unschedulable": true}}}
		require.NoError(t, env.Client.Patch(ctx, u, client.Apply, client.FieldOwner("ops-freeze")))
	}
	for _, tc := range []struct {
		name   string
		assert func(*testing.T, *corev1.Node)
		want   string
	}{
		{"uncordoned and cordoned again", recordon, "kubectl-cordon also set spec.unschedulable"},
		{"applied by an administrator", apply, "ops-freeze also set spec.unschedulable"},
		{"nobody else", func(*testing.T, *corev1.Node) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := shutdownHolder(t)
			name := r.RR.Status.Facts.Lease.HolderIdentity
			r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: "cordon", State: v1alpha1.StepSucceeded}, {Name: "uncordon", State: v1alpha1.StepPending}}
			_, err := (cordon{}).Run(ctx, r)
			require.NoError(t, err)
			n := &corev1.Node{}
			require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Name: name}, n))
			tc.assert(t, n)

			msg, err := Restore(ctx, r, "the end")
			require.NoError(t, err)
			require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Name: name}, n))
			assert.Empty(t, n.Annotations[CordonedByAnnotation], "this request's mark must go either way")
			if tc.want == "" {
				assert.False(t, n.Spec.Unschedulable, "this request's own cordon is undone")
				assert.Equal(t, "Uncordoned node "+name, msg)
				return
			}
			assert.True(t, n.Spec.Unschedulable, "an asserted cordon must stay")
			assert.Contains(t, msg, "left cordoned")
			assert.Contains(t, msg, tc.want)
		})
	}
}
