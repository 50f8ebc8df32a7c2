package remediationrequest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/admission"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/wiring"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/testenv"
)

// startAdmitter runs admission alone in a manager of its own, without leader
// election: two of them are two leaders that overlap (a failed election).
func startAdmitter(t *testing.T, name, ns string, maxConcurrent int, pause types.NamespacedName, opts ...func(*admission.Reconciler)) {
	t.Helper()
	cacheOpts, clientOpts := wiring.CacheOptions(facts.DefaultConfig(), []string{ns}, pause, wiring.Runs{})
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: scheme.Scheme, Cache: cacheOpts, Client: clientOpts,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	a := &admission.Reconciler{Reader: slowReader{mgr.GetAPIReader()}, Client: mgr.GetClient(), MaxConcurrent: maxConcurrent, Playbooks: playbooks,
		Namespaces: []string{ns}, Recorder: mgr.GetEventRecorderFor(name), Pause: pause}
	for _, o := range opts {
		o(a)
	}
	require.NoError(t, a.SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "admitter %s", name)
	})
}

// slowReader is a leader whose view of the line ages a little before it acts on it
// (a slow network, a busy process): up to 20ms pass before a List reaches the API
// server, and up to 20ms after it answers.
type slowReader struct{ client.Reader }

func (r slowReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	time.Sleep(time.Duration(rand.IntN(20_000)) * time.Microsecond)
	err := r.Reader.List(ctx, list, opts...)
	time.Sleep(time.Duration(rand.IntN(20_000)) * time.Microsecond)
	return err
}

// holdsSlot is the cap's count, read from status the way an auditor would: a
// disruptive playbook running, or a slot granted and not yet decided again, on a
// request that is not being deleted.
func holdsSlot(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks) bool {
	if rr.DeletionTimestamp != nil {
		return false
	}
	p := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	granted := rr.Status.Phase == v1alpha1.PhaseWaiting && p != nil && p.Reason == v1alpha1.ReasonAdmitted
	return granted || (rr.Status.Phase == v1alpha1.PhaseRunning && rr.Status.Decision != nil && playbooks.Disruptive(rr.Status.Decision.Playbook))
}

// slotAudit follows every committed change of the requests in ns, in the API
// server's order, and counts the slots held after each one.
type slotAudit struct {
	mu      sync.Mutex
	held    map[types.UID]bool
	maxHeld int
	over    []string
	err     error
}

func (a *slotAudit) apply(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks, deleted bool, capacity int) (grantedNow bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	was := a.held[rr.UID]
	now := !deleted && holdsSlot(rr, playbooks)
	a.held[rr.UID] = now
	n := 0
	for _, h := range a.held {
		if h {
			n++
		}
	}
	a.maxHeld = max(a.maxHeld, n)
	if n > capacity {
		a.over = append(a.over, fmt.Sprintf("%d slots held at resourceVersion %s (cap %d), after %s", n, rr.ResourceVersion, capacity, rr.Name))
	}
	return now && !was
}

// TestTwoAdmittersKeepTheCap: two admissions running at once against one API server
// (two leaders overlapping after a failed election) never hold more slots between
// them than --max-concurrent-remediations. The requests join the line youngest
// first, so every one that joins goes to the head of the line: two admitters that
// list a moment apart see two different heads, and each grants its own. A stand-in
// for the requests' own reconcile starts each grant and ends it at once, so that the
// slot is free again for the next race.
func TestTwoAdmittersKeepTheCap(t *testing.T) {
	const ns, capacity, rounds, perRound = "admission-race", 1, 6, 10
	ctx := context.Background()
	admissionNamespace(t, ns)
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	pause := types.NamespacedName{Namespace: ns, Name: v1alpha1.PauseConfigMap}
	startAdmitter(t, "admitter-a", ns, capacity, pause)
	startAdmitter(t, "admitter-b", ns, capacity, pause)

	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.Scheme})
	require.NoError(t, err)
	list := &v1alpha1.RemediationRequestList{}
	require.NoError(t, wc.List(ctx, list, client.InNamespace(ns)))
	w, err := wc.Watch(ctx, &v1alpha1.RemediationRequestList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	require.NoError(t, err)
	audit := &slotAudit{held: map[types.UID]bool{}}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var runs sync.WaitGroup
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		defer w.Stop()
		for {
			select {
			case <-watchCtx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					audit.mu.Lock()
					audit.err = fmt.Errorf("the watch of requests ended early")
					audit.mu.Unlock()
					return
				}
				rr, isRR := ev.Object.(*v1alpha1.RemediationRequest)
				if !isRR {
					continue
				}
				if audit.apply(rr, playbooks, ev.Type == watch.Deleted, capacity) && rr.Status.Phase == v1alpha1.PhaseWaiting {
					runs.Add(1)
					go func() { defer runs.Done(); runGrant(t, client.ObjectKeyFromObject(rr)) }()
				}
			}
		}
	}()

	for round := range rounds {
		var keys []client.ObjectKey
		for i := range perRound {
			rr := &v1alpha1.RemediationRequest{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("race-%02d-%02d", round, i)},
				Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
					Target: v1alpha1.Target{PersistentVolume: fmt.Sprintf("pvc-race-%02d-%02d", round, i)}, Reason: "admission race"},
			}
			require.NoError(t, env.Client.Create(ctx, rr))
			keys = append(keys, client.ObjectKeyFromObject(rr))
		}
		// Youngest first: each one joins at the head of the line, while the slot is
		// free at first, then taken and freed again and again.
		for i := len(keys) - 1; i >= 0; i-- {
			joinLine(t, keys[i])
			time.Sleep(time.Duration(rand.IntN(10_000)) * time.Microsecond)
		}
		// The line empties before the next round.
		for _, k := range keys {
			waitFor(t, k, 30*time.Second, "Succeeded", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseSucceeded })
		}
	}
	stopWatch()
	<-watched
	runs.Wait()
	audit.mu.Lock()
	defer audit.mu.Unlock()
	require.NoError(t, audit.err)
	assert.Empty(t, audit.over, "the cap was exceeded")
	assert.Equal(t, capacity, audit.maxHeld, "every slot was used")
}

// joinLine writes what the request's own reconcile writes when the policy allows a
// disruptive playbook: it waits in line for a slot.
func joinLine(t *testing.T, key client.ObjectKey) {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{}
	require.NoError(t, env.Client.Get(context.Background(), key, rr))
	rr.Status.Phase, rr.Status.ObservedGeneration = v1alpha1.PhaseWaiting, rr.Generation
	rr.Status.Decision = &v1alpha1.Decision{Allowed: true, Playbook: v1alpha1.PlaybookHealthyMoveWorkload, DecidedAt: metav1.Now(), Generation: rr.Generation}
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonWaitingForSlot, Message: "in line"})
	require.NoError(t, env.Client.Status().Update(context.Background(), rr))
}

// runGrant plays the granted request's own reconcile: it starts the playbook in the
// slot, then ends it, each write guarded by the resourceVersion it read.
func runGrant(t *testing.T, key client.ObjectKey) {
	for _, phase := range []v1alpha1.Phase{v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded} {
		time.Sleep(time.Duration(5_000+rand.IntN(20_000)) * time.Microsecond)
		for {
			rr := &v1alpha1.RemediationRequest{}
			if err := env.Client.Get(context.Background(), key, rr); err != nil {
				t.Errorf("reading %s: %v", key, err)
				return
			}
			base := rr.DeepCopy()
			rr.Status.Phase = phase
			reason := v1alpha1.ReasonPlaybookRunning
			if phase == v1alpha1.PhaseSucceeded {
				reason = v1alpha1.ReasonPlaybookCompleted
			}
			meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason, Message: string(phase)})
			err := env.Client.Status().Patch(context.Background(), rr, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
			if err == nil {
				break
			}
			if !apierrors.IsConflict(err) {
				t.Errorf("writing %s %s: %v", key, phase, err)
				return
			}
		}
	}
}

// admissionNamespace is a namespace of its own for an admission test, emptied of
// requests and of the slots Lease when the test ends.
func admissionNamespace(t *testing.T, ns string) {
	t.Helper()
	env.EnsureNamespaces(t, ns)
	t.Cleanup(func() {
		ctx := context.Background()
		list := &v1alpha1.RemediationRequestList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err == nil {
			for i := range list.Items {
				rr := &list.Items[i]
				if len(rr.Finalizers) > 0 {
					before := rr.DeepCopy()
					rr.Finalizers = nil
					_ = env.Client.Patch(ctx, rr, client.MergeFrom(before))
				}
				_ = env.Client.Delete(ctx, rr)
			}
		}
		_ = env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: admission.SlotsLeaseName}})
	})
}

// grantSlot writes what admission writes when it grants a request a slot at at.
func grantSlot(t *testing.T, key client.ObjectKey, at time.Time) {
	t.Helper()
	joinLine(t, key)
	rr := &v1alpha1.RemediationRequest{}
	require.NoError(t, env.Client.Get(context.Background(), key, rr))
	granted := metav1.NewTime(at)
	rr.Status.AdmittedAt = &granted
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonAdmitted, Message: "granted"})
	require.NoError(t, env.Client.Status().Update(context.Background(), rr))
}

func admissionRequest(t *testing.T, ns, name string, finalizers ...string) client.ObjectKey {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target: v1alpha1.Target{PersistentVolume: "pvc-" + name}, Reason: "admission test"},
	}
	require.NoError(t, env.Client.Create(context.Background(), rr))
	return client.ObjectKeyFromObject(rr)
}

func hasReason(reason string) func(*v1alpha1.RemediationRequest) bool {
	return func(rr *v1alpha1.RemediationRequest) bool {
		p := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
		return rr.Status.Phase == v1alpha1.PhaseWaiting && p != nil && p.Reason == reason
	}
}

// TestDeletedGrantGivesBackItsSlot: a request granted a slot and then deleted, kept
// by another owner's finalizer, gives the slot to the next request in line. Before,
// it held the slot for as long as the finalizer stayed: nothing decides a request
// being deleted, so its grant was never used or given back.
func TestDeletedGrantGivesBackItsSlot(t *testing.T) {
	const ns = "admission-deleted"
	ctx := context.Background()
	admissionNamespace(t, ns)
	holder := admissionRequest(t, ns, "a-granted", "example.com/keep")
	grantSlot(t, holder, time.Now())
	next := admissionRequest(t, ns, "b-in-line")
	joinLine(t, next)
	startAdmitter(t, "admitter", ns, 1, types.NamespacedName{Namespace: ns, Name: v1alpha1.PauseConfigMap})

	// The slot is held: give a wrong grant every chance to show.
	time.Sleep(time.Second)
	waitFor(t, next, time.Second, "b-in-line still in line behind the grant", hasReason(v1alpha1.ReasonWaitingForSlot))

	require.NoError(t, env.Client.Delete(ctx, &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: holder.Name}}))
	waitFor(t, holder, 5*time.Second, "a-granted kept by its finalizer", func(rr *v1alpha1.RemediationRequest) bool { return rr.DeletionTimestamp != nil })
	waitFor(t, next, 10*time.Second, "b-in-line granted the slot the deleted request held", hasReason(v1alpha1.ReasonAdmitted))
}

// TestUnusedGrantIsGivenBack: a grant whose playbook does not start its first step
// within the step timeout (its request's re-decision keeps failing, say) is given
// back: the request goes back to Waiting with reason RemediationSlotExpired, to be
// decided again at once, a Warning Event says why, and the next request in line is
// granted the slot. Before, the grant held the slot with no expiry.
func TestUnusedGrantIsGivenBack(t *testing.T) {
	const ns = "admission-expiry"
	ctx := context.Background()
	admissionNamespace(t, ns)
	stuck := admissionRequest(t, ns, "a-stuck")
	grantSlot(t, stuck, time.Now())
	next := admissionRequest(t, ns, "b-in-line")
	joinLine(t, next)
	startAdmitter(t, "admitter", ns, 1, types.NamespacedName{Namespace: ns, Name: v1alpha1.PauseConfigMap},
		func(a *admission.Reconciler) { a.StepTimeout = 3 * time.Second })

	waitFor(t, next, 2*time.Second, "b-in-line in line while the grant is young", hasReason(v1alpha1.ReasonWaitingForSlot))
	rr := waitFor(t, stuck, 10*time.Second, "a-stuck's slot given back", hasReason(v1alpha1.ReasonSlotExpired))
	assert.Nil(t, rr.Status.AdmittedAt, "the grant time goes with the grant")
	require.NotNil(t, rr.Status.Decision.RecheckAt, "decided again")
	assert.False(t, rr.Status.Decision.RecheckAt.After(time.Now()), "decided again at once")
	p := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	assert.Contains(t, p.Message, "did not start its first step within the step timeout (3s, --step-timeout)")
	waitFor(t, next, 5*time.Second, "b-in-line granted the slot", hasReason(v1alpha1.ReasonAdmitted))

	testenv.Eventually(t, "a SlotExpired Warning on a-stuck", func() (bool, string) {
		events := &corev1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var reasons []string
		for _, e := range events.Items {
			if e.InvolvedObject.Name == stuck.Name {
				reasons = append(reasons, e.Type+"/"+e.Reason)
			}
		}
		return slices.Contains(reasons, corev1.EventTypeWarning+"/"+admission.EventSlotExpired), fmt.Sprint(reasons)
	})
}
