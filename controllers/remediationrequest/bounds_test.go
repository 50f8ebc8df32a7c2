package remediationrequest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/controllers/sweeper"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/stage"
)

// freezeLabel selects the nodes the test's admission policy freezes cordons on.
const freezeLabel = "envtest.remediator.io/freeze-cordons"

// freezeCordons installs a ValidatingAdmissionPolicy that refuses to cordon the
// nodes labelled freezeLabel, the way a change freeze would, and waits until the
// API server enforces it.
func freezeCordons(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	const msg = "cordons are frozen during the change freeze (CHG-1234)"
	for _, obj := range stage.FreezeCordons("envtest-freeze-cordons", freezeLabel, msg) {
		require.NoError(t, env.Client.Create(ctx, obj))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "envtest-freeze-probe", Labels: map[string]string{freezeLabel: "true"}}}
	require.NoError(t, env.Client.Create(ctx, probe))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), probe) })
	require.Eventually(t, func() bool {
		before := probe.DeepCopy()
		p := probe.DeepCopy()
		p.Spec.Unschedulable = true
		err := env.Client.Patch(ctx, p, client.MergeFrom(before), client.DryRunAll)
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}, 20*time.Second, 100*time.Millisecond, "the admission policy never took effect")
	return msg
}

// gate holds the first node patch that matches until it is opened: the test then
// knows the request is Running, mid-step, when it files the next one.
type gate struct {
	once    sync.Once
	reached chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{reached: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) hold() {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.reached)
		<-g.open
	}
}

// withClient wraps the reconciler's client, whose writes the steps make.
func withClient(funcs interceptor.Funcs) func(*remediationrequest.Reconciler) {
	return func(r *remediationrequest.Reconciler) {
		r.Client = interceptor.NewClient(noWatch{r.Client}, funcs)
	}
}

// noWatch is a client the interceptor can wrap; the reconciler never watches
// through its client.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not watched through the reconciler's client")
}

// TestRefusedCordonFailsAndFreesTheSlot: an admission policy refuses the cordon. The
// request fails at once with the API server's message, restores (nothing: the
// cordon never happened), releases its disruptive slot, and the request waiting
// for that slot (cap 1) starts. Seen failing before: the refused cordon was retried
// for ever, the first request stayed Running and the second never started.
func TestRefusedCordonFailsAndFreesTheSlot(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	msg := freezeCordons(t)
	g := newGate()
	defer func() {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
	}()
	startManager(t, func(r *remediationrequest.Reconciler) { r.MaxConcurrent = 1 },
		withClient(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if n, ok := obj.(*corev1.Node); ok && n.Name == "envtest-frozen" {
				g.hold()
			}
			return c.Patch(ctx, obj, p, opts...)
		}}))

	healthyHolder(t, "envtest-frozen", staged())
	n := &corev1.Node{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: "envtest-frozen"}, n))
	label(t, n, map[string]string{freezeLabel: "true"})
	pod := healthyHolder(t, "envtest-after-frozen", staged())
	frozen := newRequest(t, "frozen", "pvc-envtest-frozen", nil)
	select {
	case <-g.reached:
	case <-time.After(20 * time.Second):
		t.Fatal("the cordon of the frozen node was never tried")
	}
	next := newRequest(t, "after-frozen", "pvc-envtest-after-frozen", nil)
	waitFor(t, next, 20*time.Second, "the second request waiting for the slot", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseWaiting
	})
	close(g.open)

	start := time.Now()
	got := waitFor(t, frozen, 20*time.Second, "the refused request Failed, its finalizer released", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseFailed && !controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer)
	})
	t.Logf("failed %s after the refusal", time.Since(start).Round(time.Millisecond))
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSucceeded)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, remediations.ReasonWriteRefused, c.Reason)
	assert.Contains(t, c.Message, msg, "the API server's message")
	assert.Equal(t, v1alpha1.StepFailed, stepState(got, "cordon"))
	assert.False(t, nodeCordoned(t, "envtest-frozen"))
	assert.True(t, leaseExists(t, "pvc-envtest-frozen"), "nothing but the cordon was tried")

	waitFor(t, next, 20*time.Second, "the waiting request started once the slot freed", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})
	finishTermination(t, pod)
	waitFor(t, next, 20*time.Second, "the second request Succeeded", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseSucceeded
	})
}

// failUncordons answers every patch that uncordons node with 503, as an API
// server that is down for the restore would; other writes pass.
func failUncordons(node string, refuseEvictions bool) interceptor.Funcs {
	return interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if n, ok := obj.(*corev1.Node); ok && n.Name == node && !n.Spec.Unschedulable {
				return apierrors.NewServiceUnavailable("the API server is shedding load")
			}
			return c.Patch(ctx, obj, p, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, sr client.Object, opts ...client.SubResourceCreateOption) error {
			if sub == "eviction" && refuseEvictions && obj.GetName() == node {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods/eviction"}, obj.GetName(), errors.New("evictions are frozen"))
			}
			return c.SubResource(sub).Create(ctx, obj, sr, opts...)
		},
	}
}

// TestRestoreThatKeepsFailingEndsFailed: the restore after a failure, and the one of
// a deleted request, are bounded by the step timeout from their first attempt; then
// the request ends Failed with the node named, the finalizer is released, and the
// sweeper uncordons the node once the API server lets it. Seen failing before: the
// refused eviction was retried for ever (Running), and so was the restore of the
// deleted request, whose finalizer was never released.
func TestRestoreThatKeepsFailingEndsFailed(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	t.Run("after a failure", func(t *testing.T) {
		node := "envtest-restore-fails"
		startManager(t, withTimeouts(3*time.Second), withClient(failUncordons(node, true)))
		healthyHolder(t, node, staged())
		key := newRequest(t, "restore-fails", "pvc-"+node, nil)
		got := waitFor(t, key, 30*time.Second, "Failed after the restore gave up", func(rr *v1alpha1.RemediationRequest) bool {
			return rr.Status.Phase == v1alpha1.PhaseFailed && !controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer)
		})
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSucceeded)
		require.NotNil(t, c)
		assert.Equal(t, remediations.ReasonRestoreFailed, c.Reason)
		assert.Contains(t, c.Message, "evictions are frozen", "the failure")
		assert.Contains(t, c.Message, "could not uncordon node "+node, "the node")
		assert.Contains(t, c.Message, "the API server is shedding load", "the restore's error")
		assert.Equal(t, v1alpha1.StepFailed, stepState(got, "uncordon"))
		assert.True(t, nodeCordoned(t, node), "the restore failed, so the cordon stays")

		// The sweeper, with a client the API server answers, undoes the leftover.
		require.NoError(t, (&sweeper.Sweeper{Client: env.Client, Reader: env.Client}).Sweep(ctx))
		assert.False(t, nodeCordoned(t, node), "the sweeper uncordons the node of a Failed request")
	})
	t.Run("on deletion", func(t *testing.T) {
		node := "envtest-restore-fails-del"
		startManager(t, withTimeouts(3*time.Second), withClient(failUncordons(node, false)))
		healthyHolder(t, node, staged())
		key := newRequest(t, "restore-fails-del", "pvc-"+node, nil)
		rr := waitFor(t, key, 20*time.Second, "holding at waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
			return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning && controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer)
		})
		require.NoError(t, env.Client.Delete(ctx, rr))
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, key, &v1alpha1.RemediationRequest{}))
		}, 30*time.Second, 100*time.Millisecond, "the deleted request kept its finalizer while its restore failed")
		assert.True(t, nodeCordoned(t, node), "the restore failed, so the cordon stays")
		require.NoError(t, (&sweeper.Sweeper{Client: env.Client, Reader: env.Client}).Sweep(ctx))
		assert.False(t, nodeCordoned(t, node), "the sweeper uncordons the node of a request that is gone")
	})
}

// staged is the time an incident is staged at on the real clock: a moment ahead,
// so that its LeaseRetained event, stamped with it, is not older than the Lease
// the API server creates after it (such an event is no evidence).
func staged() time.Time { return time.Now().Add(2 * time.Second) }

func withTimeouts(step time.Duration) func(*remediationrequest.Reconciler) {
	return func(r *remediationrequest.Reconciler) { r.Timeouts.Step = step }
}

// openWindow is a fake clock a minute ahead of real time, and a daily one-hour
// maintenance window open at it. The clock starts ahead because the facts weigh
// the API server's timestamps (a Lease's creation) against the reconciler's clock:
// the incident the test stages must not look older than the Lease it is about.
func openWindow() (*clocktesting.FakePassiveClock, *v1alpha1.MaintenanceWindow, time.Time) {
	now := time.Now().UTC().Add(time.Minute).Truncate(time.Second)
	opened := now.Truncate(time.Minute).Add(-time.Minute)
	return clocktesting.NewFakePassiveClock(now), &v1alpha1.MaintenanceWindow{Schedule: fmt.Sprintf("CRON_TZ=UTC %d %d * * *", opened.Minute(), opened.Hour()),
		Duration: metav1.Duration{Duration: time.Hour}}, opened
}

// TestWindowClosingBeforeEvictionReleasesTheFinalizer: the window closes right after
// the cordon, before the eviction: the playbook stops, restores and waits for the
// next window, and a waiting request keeps no restore finalizer. Seen failing
// before: the finalizer stayed on the Waiting request.
func TestWindowClosingBeforeEvictionReleasesTheFinalizer(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	clock, window, opened := openWindow()
	node := "envtest-window-early"
	startManager(t, withClock(clock), withClient(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			err := c.Patch(ctx, obj, p, opts...)
			if n, ok := obj.(*corev1.Node); ok && err == nil && n.Name == node && n.Spec.Unschedulable {
				// The window closes the moment the cordon is in place.
				clock.SetTime(opened.Add(time.Hour + time.Minute))
			}
			return err
		},
	}))
	healthyHolder(t, node, clock.Now())
	key := newRequest(t, "window-early", "pvc-"+node, window)
	got := waitFor(t, key, 20*time.Second, "Waiting for the next window, without the finalizer", func(rr *v1alpha1.RemediationRequest) bool {
		p := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
		return rr.Status.Phase == v1alpha1.PhaseWaiting && p != nil && p.Reason == v1alpha1.ReasonWindowClosed &&
			!controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer)
	})
	assert.Equal(t, v1alpha1.StepSkipped, stepState(got, "deleteAffectedPods"))
	assert.Equal(t, v1alpha1.StepSucceeded, stepState(got, "uncordon"))
	assert.False(t, nodeCordoned(t, node), "restored")
	assert.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-" + node}, &coordinationv1.Lease{}))
	pod := &corev1.Pod{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "app", Name: node}, pod))
	assert.Nil(t, pod.DeletionTimestamp, "the pod must not be evicted after the window closed")
}

// TestRefusedFinalizerAbortsThePlaybook: the API server refuses the restore
// finalizer a cordoning playbook needs (an admission policy that does not know the
// controller, RBAC without requests/finalizers). The request is aborted before its
// first step acts, Failed with the API server's message, instead of retrying the
// write for ever while holding its slot. Seen failing before: the request stayed
// Running and the finalizer write was retried without end.
func TestRefusedFinalizerAbortsThePlaybook(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	const msg = "finalizers may only be written by the Git writers"
	startManager(t, withClient(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		if rr, ok := obj.(*v1alpha1.RemediationRequest); ok && controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer) {
			return apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "remediationrequests"}, rr.Name, errors.New(msg))
		}
		return c.Patch(ctx, obj, p, opts...)
	}}))
	node := "envtest-finalizer-refused"
	healthyHolder(t, node, staged())
	key := newRequest(t, "finalizer-refused", "pvc-"+node, nil)
	got := waitFor(t, key, 20*time.Second, "Failed, aborted before the cordon", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseFailed
	})
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSucceeded)
	require.NotNil(t, c)
	assert.Equal(t, v1alpha1.ReasonAborted, c.Reason)
	assert.Contains(t, c.Message, "refused the restore finalizer")
	assert.Contains(t, c.Message, msg, "the API server's message")
	assert.False(t, nodeCordoned(t, node), "the cordon ran without the finalizer that guards it")
	assert.True(t, leaseExists(t, "pvc-"+node))
}
