// Package verification says whether a fix held: for --verify-fix-for after a request
// Succeeded, it re-reads the same Lease or node (and, after a release, the pods of the
// volume's claim and their FailedMount events) and sets ConditionFixHeld. It only
// reads and writes the request's status and an Event: a fix that did not hold calls
// for an operator to find the cause, never for the playbook to run again. It is its
// own runnable so that a failed read here never fails or slows the reconcile that
// records the success.
//
// The window counts from status.outcome.finishedAt (else the Succeeded condition's
// lastTransitionTime), so a restarted controller goes on with it. While it lasts the
// request is requeued at most verifyPoll apart, and at once when a watched object of
// its target changes (IndexVerifying). Ready is left alone: the playbook did succeed.
package verification

import (
	"cmp"
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/remediations"
)

// What verification reads and writes (the request reconciler's markers cover it too).
// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch

// DefaultVerifyFixFor is --verify-fix-for's default.
const DefaultVerifyFixFor = 15 * time.Minute

// verifyPoll bounds the time between two checks: a node-plugin pod or a pod of a
// released claim turning Ready is not watched, and a Lease reaches the stuck age
// without any event.
const verifyPoll = time.Minute

// IndexVerifying indexes the requests in their verification window by
// "lease/<namespace>/<name>" or "node/<name>", and a release's by "pods/<namespace>"
// of its claim too, so that a change of that Lease, its LeaseRetained events, that
// CSINode or a FailedMount event on a pod of that namespace reconciles exactly those.
const IndexVerifying = "remediator.io/verifying"

// Reconciler verifies the fixes of Succeeded requests.
type Reconciler struct {
	// Client reads requests from the cache (unstructured, with IndexVerifying) and
	// writes their status.
	Client client.Client
	// Gatherer gathers the facts of the request's Lease or node: wiring.VerifyGatherer,
	// from the cache with every miss final.
	Gatherer *facts.Gatherer
	// StuckLeaseAge is the safety floor's healthy stuck age, from which a re-taken
	// Lease without LeaseRetained events counts as retained; zero:
	// remediations.DefaultFloor's.
	StuckLeaseAge time.Duration
	// Window is how long after a request Succeeded its fix is verified; zero: off.
	Window time.Duration
	// Namespaces are the namespaces whose requests are this controller's; empty
	// means all. The cache is restricted too, but a reconcile's Get is not.
	Namespaces []string
	Recorder   record.EventRecorder
	// Clock is the request reconciler's, which stamps status.outcome; nil: real.
	Clock clock.PassiveClock
	// Workers is how many requests are verified at once; zero means one.
	Workers int
}

// SetupWithManager registers the index and the controller, when verification is on.
// The watched objects come from the facts' cache, without the node Leases' renewals
// every few seconds.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Window <= 0 {
		return nil
	}
	r.Recorder = requests.BoundEvents(r.Recorder)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.RemediationRequest{}, IndexVerifying, indexKeys); err != nil {
		return fmt.Errorf("indexing requests for verification: %w", err)
	}
	notNodeLease := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() != corev1.NamespaceNodeLease })
	return ctrl.NewControllerManagedBy(mgr).
		Named("verification").
		Watches(&v1alpha1.RemediationRequest{}, r.enqueue(), builder.WithPredicates(toVerify)).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.verifyingOn), builder.WithPredicates(notNodeLease)).
		Watches(&corev1.Event{}, handler.EnqueueRequestsFromMapFunc(r.verifyingOn)).
		Watches(&storagev1.CSINode{}, handler.EnqueueRequestsFromMapFunc(r.verifyingOn)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Workers), RateLimiter: requests.RateLimiter()}).
		Complete(r)
}

// toVerify passes a request whose FixHeld is still open when it shows up (the first
// list included), becomes Succeeded, or is edited; not its own status writes.
var toVerify = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return pending(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return pending(e.ObjectNew) && (requests.PhaseOf(e.ObjectOld) != v1alpha1.PhaseSucceeded ||
			e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			!apiequality.Semantic.DeepEqual(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()))
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// enqueue enqueues the requests toVerify passes at once, but one that just Succeeded
// with its window already open (lifecycle.Finish opens it in the write that records
// the success) one poll later, or at the window's end if sooner: as every later check,
// so that a success costs no read of its own. A change of its target comes first
// through the watches of the Leases, events and CSINodes.
func (r *Reconciler) enqueue() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.ObjectNew)}
			if after := r.firstCheckIn(e.ObjectOld, e.ObjectNew); after > 0 {
				q.AddAfter(req, after)
				return
			}
			q.Add(req)
		},
	}
}

// firstCheckIn is how long after this update the first check of a request that the
// update made Succeeded with its window open is due; zero for any other update.
func (r *Reconciler) firstCheckIn(old, updated client.Object) time.Duration {
	if requests.PhaseOf(old) == v1alpha1.PhaseSucceeded {
		return 0
	}
	rr := requests.ViewOf(updated)
	if c, open := fixHeld(&rr); c == nil || !open {
		return 0
	}
	start := verifyStart(&rr)
	if start.IsZero() {
		return 0
	}
	return min(verifyPoll, start.Add(r.Window).Sub(r.clock().Now()))
}

// pending: a Succeeded request without a final FixHeld (none yet, or Unknown).
func pending(o client.Object) bool {
	if requests.PhaseOf(o) != v1alpha1.PhaseSucceeded {
		return false
	}
	rr := requests.ViewOf(o)
	_, open := fixHeld(&rr)
	return open
}

// fixHeld is rr's FixHeld (nil: none yet), and whether it is still open: rr
// Succeeded and FixHeld is absent or Unknown.
func fixHeld(rr *v1alpha1.RemediationRequest) (*metav1.Condition, bool) {
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionFixHeld)
	return c, rr.Status.Phase == v1alpha1.PhaseSucceeded && (c == nil || c.Status == metav1.ConditionUnknown)
}

// Reconcile is fetch -> verify -> one deferred status patch.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	if !requests.InScope(r.Namespaces, req.Namespace) {
		return ctrl.Result{}, nil
	}
	rr := &v1alpha1.RemediationRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, rr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("remediationRequest", klog.KObj(rr))
	ctx = ctrl.LoggerInto(ctx, log)
	if err := rr.DecodeError(); err != nil {
		// The request reconciler reports it; the edit that fixes it brings it back.
		log.V(1).Info("Cannot decode the request; its fix is not verified", "error", err.Error())
		return ctrl.Result{}, nil
	}
	if !rr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	base := rr.DeepCopy()
	defer func() {
		err := r.patchStatus(ctx, base, rr)
		switch {
		case apierrors.IsConflict(err) && retErr == nil:
			// Written since this reconcile read it (by the request reconciler, or by
			// this one ahead of the cache): look again at the new version.
			res = ctrl.Result{Requeue: true} //nolint:staticcheck // the rate-limited requeue is the point
		case err != nil:
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	return r.verify(ctx, rr, r.clock().Now())
}

// verify judges a Succeeded request's fix, once its window opened; the verdict is set
// once and then kept.
func (r *Reconciler) verify(ctx context.Context, rr *v1alpha1.RemediationRequest, now time.Time) (ctrl.Result, error) {
	c, open := fixHeld(rr)
	target := verifyTarget(rr)
	if !open || target == nil {
		return ctrl.Result{}, nil
	}
	start := verifyStart(rr)
	end := start.Add(r.Window)
	if start.IsZero() || (c == nil && !now.Before(end)) {
		// Succeeded before this controller verified fixes, and its window is over:
		// nothing was watched, so nothing is claimed.
		return ctrl.Result{}, nil
	}
	if c == nil {
		// The window opens: Verifying is written even if the read below fails.
		v := judgeFix(rr, nil, nil, start, end, now, 0)
		setCondition(rr, v.status, v.reason, v.message)
	}
	g := *r.Gatherer
	g.Clock = r.clock()
	// The pods on the holder that use the volume decide nothing here, nor does the
	// holder's Trident log, which a decision reads. How the cache is read, and that
	// its misses are final, is the gatherer's (wiring.VerifyGatherer).
	g.SkipAffectedPods, g.Logs = true, nil
	f, err := g.Gather(ctx, target)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("gathering facts to verify the fix: %w", err)
	}
	w, err := readWorkload(ctx, g.Reader, rr, start, !now.Before(end))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the released volume's pods to verify the fix: %w", err)
	}
	stuck := remediations.Floor{HealthyStuckLeaseAge: r.StuckLeaseAge}.Effective().HealthyStuckLeaseAge
	v := judgeFix(rr, f, w, start, end, now, stuck)
	setCondition(rr, v.status, v.reason, v.message)
	if v.status != metav1.ConditionUnknown {
		ctrl.LoggerFrom(ctx).Info("Fix verified", "fixHeld", v.status, "reason", v.reason)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: max(min(v.until.Sub(now), verifyPoll), time.Second)}, nil
}

// patchStatus writes rr's bounded status, if changed from base, as a merge patch
// guarded by base's resourceVersion, so a stale read never announces twice.
func (r *Reconciler) patchStatus(ctx context.Context, base, rr *v1alpha1.RemediationRequest) error {
	requests.BoundStatus(&rr.Status)
	if apiequality.Semantic.DeepEqual(base.Status, rr.Status) {
		return nil
	}
	err := r.Client.Status().Patch(ctx, rr, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patching status: %w", err)
	}
	r.announceFixHeld(base, rr)
	return nil
}

// verifyStart is when the window of a Succeeded request began; zero if unknown.
func verifyStart(rr *v1alpha1.RemediationRequest) time.Time {
	if o := rr.Status.Outcome; o != nil && o.Result == v1alpha1.PhaseSucceeded {
		return o.FinishedAt.Time
	}
	if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionSucceeded); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

func leaseKey(ns, name string) string { return "lease/" + ns + "/" + name }
func nodeKey(name string) string      { return "node/" + name }
func podsKey(ns string) string        { return "pods/" + ns }

// indexKeys are the IndexVerifying keys of a request in its verification window.
func indexKeys(o client.Object) []string {
	rr := requests.ViewOf(o)
	// In the window: FixHeld Unknown.
	c, open := fixHeld(&rr)
	f := rr.Status.Facts
	if !open || c == nil || f == nil {
		return nil
	}
	switch {
	case rr.Spec.Remediation == v1alpha1.RemediationReleaseLUKSLease && f.Lease != nil && f.Lease.Name != "":
		keys := []string{leaseKey(f.Lease.Namespace, f.Lease.Name)}
		if claim := releasedClaim(&rr); claim.Name != "" {
			keys = append(keys, podsKey(claim.Namespace))
		}
		return keys
	case rr.Spec.Remediation == v1alpha1.RemediationReregisterCSIDriver && rr.Spec.Target.Node != "":
		return []string{nodeKey(rr.Spec.Target.Node)}
	}
	return nil
}

// verifyingOn maps a Lease, a Lease's Event or a CSINode to the requests in scope
// verifying a fix on it.
func (r *Reconciler) verifyingOn(ctx context.Context, o client.Object) []reconcile.Request {
	var key string
	switch o := o.(type) {
	case *coordinationv1.Lease:
		key = leaseKey(o.Namespace, o.Name)
	case *corev1.Event:
		switch {
		case o.InvolvedObject.Kind == "Lease":
			key = leaseKey(o.Namespace, o.InvolvedObject.Name)
		case o.InvolvedObject.Kind == "Pod" && o.Reason == facts.FailedMountReason:
			// Cached while the detector runs; otherwise the periodic check reads them.
			key = podsKey(o.Namespace)
		default:
			return nil
		}
	case *storagev1.CSINode:
		key = nodeKey(o.Name)
	default:
		return nil
	}
	list, err := requests.List(ctx, r.Client, client.MatchingFields{IndexVerifying: key})
	if err != nil {
		// The window's periodic check (verifyPoll) still sees them.
		ctrl.LoggerFrom(ctx).Error(err, "Listing the requests verifying a fix", "key", key)
		return nil
	}
	var out []reconcile.Request
	for _, rr := range list {
		if requests.InScope(r.Namespaces, rr.Namespace) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rr.Namespace, Name: rr.Name}})
		}
	}
	return out
}

func (r *Reconciler) clock() clock.PassiveClock {
	return cmp.Or[clock.PassiveClock](r.Clock, clock.RealClock{})
}

func setCondition(rr *v1alpha1.RemediationRequest, st metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionFixHeld, Status: st, Reason: reason, Message: msg, ObservedGeneration: rr.Generation,
	})
}
