// Package controllers owns the RemediationRequest reconciler: it fetches a request,
// guards it with a finalizer, runs small phase functions (decide from freshly gathered
// facts, then advance the playbook one step) and writes the status back in one merge
// patch at the end of every reconcile.
package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims;persistentvolumes,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=trident,resources=leases,verbs=get;delete
// +kubebuilder:rbac:groups="",namespace=trident,resources=events,verbs=list
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kube-node-lease,resources=leases,verbs=get

// Event reasons on RemediationRequests.
const (
	EventAccepted = "Accepted"
	EventRejected = "Rejected"
	EventWaiting  = "Waiting"
	// Step transitions get a reason per kind so that the event correlator, which
	// folds more than ten similar events of one reason, keeps each one readable.
	EventStepStarted   = "StepStarted"
	EventStepSucceeded = "StepSucceeded"
	EventFailed        = "Failed"
	EventDone          = "Succeeded"
)

// Condition reasons besides the playbook and rule names.
const (
	ReasonPlaybookRunning   = "PlaybookRunning"
	ReasonPlaybookCompleted = "PlaybookCompleted"
	ReasonDryRun            = "DryRun"
	ReasonRejected          = "Rejected"
	ReasonWaiting           = "Waiting"
	ReasonFailed            = "Failed"
	ReasonWaitingForWindow  = "WaitingForMaintenanceWindow"
	// ReasonWaitingForSlot: the policy allowed the playbook but the cluster-wide cap
	// on running remediations is reached.
	ReasonWaitingForSlot = "WaitingForRemediationSlot"
	// ReasonWindowClosed: the maintenance window closed mid-playbook before a
	// destructive step, so the playbook stopped, restored and waits for the next one.
	ReasonWindowClosed = "MaintenanceWindowClosed"
	// RuleInvalidWindow rejects a request whose maintenance window cannot be parsed.
	RuleInvalidWindow = "invalid-maintenance-window"
)

// RemediationRequestReconciler reconciles RemediationRequests.
type RemediationRequestReconciler struct {
	Client client.Client
	// Reader reads live state (the manager's APIReader): other requests when checking
	// for conflicts, and the objects steps act on.
	Reader    client.Reader
	Gatherer  *facts.Gatherer
	Policy    *policies.Engine
	Playbooks remediations.Playbooks
	Timeouts  remediations.Timeouts
	Recorder  record.EventRecorder
	// MaxConcurrent caps the playbooks running at once across the cluster, so that a
	// burst of merged requests cannot cordon half the nodes; zero means no cap.
	MaxConcurrent int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// scope carries one reconcile's request and the copy its status patch is computed from.
type scope struct {
	rr   *v1alpha1.RemediationRequest
	base *v1alpha1.RemediationRequest
	now  time.Time
}

// phase is one small step of a reconcile. A phase that returns a non-zero result or
// an error ends the reconcile.
type phase func(ctx context.Context, s *scope) (ctrl.Result, error)

// SetupWithManager registers the reconciler. Status writes do not bump the
// generation, so filtering on generation (and annotations, used to ask for a
// refresh) keeps the controller from re-triggering itself with its own patches.
// The second watch wakes the waiting requests when a playbook stops running, so a
// request held back by a guard starts as soon as the guard clears instead of at its
// next recheck.
//
// MaxConcurrentReconciles stays at its default of 1: the guards count Running
// requests live, and one reconcile at a time is what makes that count exact.
func (r *RemediationRequestReconciler) SetupWithManager(mgr ctrl.Manager) error {
	cache := mgr.GetClient()
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.RemediationRequest{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&v1alpha1.RemediationRequest{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			return waitingRequests(ctx, cache)
		}), builder.WithPredicates(stoppedRunning)).
		Named("remediationrequest").
		Complete(r)
}

// stoppedRunning passes a request whose playbook just stopped (finished, failed,
// or went back to waiting) or a deleted one that was running.
var stoppedRunning = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.RemediationRequest)
		n, ok2 := e.ObjectNew.(*v1alpha1.RemediationRequest)
		return ok1 && ok2 && o.Status.Phase == v1alpha1.PhaseRunning && n.Status.Phase != v1alpha1.PhaseRunning
	},
	DeleteFunc: func(e event.DeleteEvent) bool {
		o, ok := e.Object.(*v1alpha1.RemediationRequest)
		return ok && o.Status.Phase == v1alpha1.PhaseRunning
	},
}

// waitingRequests lists the requests held back by a guard, oldest first.
func waitingRequests(ctx context.Context, c client.Reader) []reconcile.Request {
	list := &v1alpha1.RemediationRequestList{}
	if err := c.List(ctx, list); err != nil {
		// The periodic recheck still wakes them; nothing is lost.
		ctrl.LoggerFrom(ctx).Error(err, "Listing waiting requests to wake them")
		return nil
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.RemediationRequest) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	var out []reconcile.Request
	for i := range list.Items {
		if rr := &list.Items[i]; waitsForGuard(rr) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rr)})
		}
	}
	return out
}

// waitsForGuard: the request is Waiting on another remediation (the policy's
// one-at-a-time rule) or on the cluster-wide cap, not on its maintenance window.
func waitsForGuard(rr *v1alpha1.RemediationRequest) bool {
	if rr.Status.Phase != v1alpha1.PhaseWaiting {
		return false
	}
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	return c != nil && (c.Reason == ReasonWaiting || c.Reason == ReasonWaitingForSlot)
}

// Reconcile is fetch -> ensure finalizer -> phases -> one deferred status patch.
func (r *RemediationRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	// Read live, not from the cache: the journal must be current before any step acts,
	// and requests are few enough that this costs nothing.
	rr := &v1alpha1.RemediationRequest{}
	if err := r.Reader.Get(ctx, req.NamespacedName, rr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("remediationRequest", klog.KObj(rr))
	ctx = ctrl.LoggerInto(ctx, log)

	if rr.DeletionTimestamp.IsZero() {
		if err := r.ensureFinalizer(ctx, rr); err != nil {
			return ctrl.Result{}, err
		}
	}
	s := &scope{rr: rr, base: rr.DeepCopy(), now: r.clock()}
	if !rr.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	defer func() {
		if retErr == nil {
			rr.Status.ObservedGeneration = rr.Generation
		}
		if err := r.patchStatus(ctx, s); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	for _, p := range []phase{r.decide, r.runPlaybook} {
		res, err := p(ctx, s)
		if err != nil || !res.IsZero() {
			return res, err
		}
	}
	return ctrl.Result{}, nil
}

func (r *RemediationRequestReconciler) clock() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// ensureFinalizer adds the restore finalizer before anything can act, so that a
// request deleted mid-run always gets the chance to undo what it changed.
func (r *RemediationRequestReconciler) ensureFinalizer(ctx context.Context, rr *v1alpha1.RemediationRequest) error {
	if controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer) {
		return nil
	}
	before := rr.DeepCopy()
	controllerutil.AddFinalizer(rr, v1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, rr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", v1alpha1.Finalizer, err)
	}
	return nil
}

// reconcileDelete restores what a running playbook changed, journals it, and only
// then releases the finalizer.
func (r *RemediationRequestReconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	if !controllerutil.ContainsFinalizer(rr, v1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	if rr.Status.Phase == v1alpha1.PhaseRunning {
		msg, err := remediations.Restore(ctx, r.run(s), "the request was deleted")
		if err != nil {
			return ctrl.Result{}, err
		}
		for i := range rr.Status.Steps {
			if st := &rr.Status.Steps[i]; st.State == v1alpha1.StepPending || st.State == v1alpha1.StepRunning {
				st.State = v1alpha1.StepSkipped
				st.Message = "Skipped: the request was deleted"
			}
		}
		rr.Status.Phase = v1alpha1.PhaseFailed
		r.setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonAborted, "The request was deleted mid-run; "+orDefault(msg, "nothing needed restoring"))
		r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonAborted, "Aborted")
		r.Recorder.Event(rr, corev1.EventTypeWarning, EventFailed, "Aborted: the request was deleted mid-run; "+orDefault(msg, "nothing needed restoring"))
		if err := r.patchStatus(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	before := rr.DeepCopy()
	controllerutil.RemoveFinalizer(rr, v1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, rr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("removing finalizer %s: %w", v1alpha1.Finalizer, err))
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Released finalizer")
	return ctrl.Result{}, nil
}

// needsDecision: a new request, a changed spec (unless a playbook is under way or
// over), a request waiting on a guard (it is reconciled when the guard may have
// cleared), or a rejection or wait whose recheck time has come. Otherwise a
// decision stands.
func needsDecision(rr *v1alpha1.RemediationRequest, now time.Time) bool {
	switch rr.Status.Phase {
	case v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		return false
	}
	d := rr.Status.Decision
	if d == nil || rr.Status.ObservedGeneration != rr.Generation || waitsForGuard(rr) {
		return true
	}
	return d.RecheckAt != nil && !now.Before(d.RecheckAt.Time)
}

// decide gathers live facts and asks the policy.
func (r *RemediationRequestReconciler) decide(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	if !needsDecision(rr, s.now) {
		if d := rr.Status.Decision; d != nil && d.RecheckAt != nil && rr.Status.Phase != v1alpha1.PhaseRunning {
			return ctrl.Result{RequeueAfter: max(d.RecheckAt.Sub(s.now), time.Second)}, nil
		}
		return ctrl.Result{}, nil
	}
	// Real time, not the injected clock: this measures the controller, not the facts.
	started := time.Now()
	f, err := r.Gatherer.Gather(ctx, rr)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("gathering facts: %w", err)
	}
	rr.Status.Facts = f
	// One live list serves both guards: the conflicts the policy weighs and the cap.
	others := &v1alpha1.RemediationRequestList{}
	if err := r.Reader.List(ctx, others); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing requests: %w", err)
	}
	conflicts := conflictsIn(others, rr)
	d, err := r.Policy.Decide(policies.Input{
		Remediation: rr.Spec.Remediation, Mode: rr.Spec.Mode, Fencing: rr.Spec.Fencing, Facts: f, Conflicts: conflicts,
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("deciding: %w", err)
	}
	decisionSeconds.WithLabelValues(string(rr.Spec.Remediation)).Observe(time.Since(started).Seconds())
	now := metav1.NewTime(s.now)
	dec := &v1alpha1.Decision{
		Allowed: d.Allowed, Playbook: d.Playbook, Rule: d.Rule, Reasons: d.Reasons,
		Message: d.Message, PolicyDigest: d.Digest, DecidedAt: now,
	}
	if d.RecheckAfterSeconds > 0 {
		at := metav1.NewTime(s.now.Add(time.Duration(d.RecheckAfterSeconds) * time.Second))
		dec.RecheckAt = &at
		dec.Message += " Re-evaluated at " + at.UTC().Format(time.RFC3339) + "."
	}
	rr.Status.Decision = dec
	rr.Status.Steps = nil
	log := ctrl.LoggerFrom(ctx)

	switch {
	case d.Allowed:
		plan, err := r.Playbooks.Plan(d.Playbook)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("policy chose playbook %q: %w", d.Playbook, err)
		}
		rr.Status.Steps = plan
		r.setCondition(rr, v1alpha1.ConditionAccepted, metav1.ConditionTrue, reason(d.Playbook), d.Message)
		meta.RemoveStatusCondition(&rr.Status.Conditions, v1alpha1.ConditionSucceeded)
		names := make([]string, 0, len(plan))
		for _, st := range plan {
			names = append(names, st.Name)
		}
		if rr.Spec.Mode == v1alpha1.ModeDryRun {
			rr.Status.Phase = v1alpha1.PhasePending
			msg := fmt.Sprintf("DryRun: playbook %s would run %s; nothing was changed. Set spec.mode: Apply to run it.", d.Playbook, strings.Join(names, " -> "))
			r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonDryRun, msg)
			r.Recorder.Event(rr, corev1.EventTypeNormal, EventAccepted, msg)
			log.Info("Decided (dry run)", "playbook", d.Playbook, "rule", d.Rule)
			return ctrl.Result{}, nil
		}
		inside, next, err := MaintenanceWindow(rr.Spec.MaintenanceWindow, s.now)
		if err != nil {
			rr.Status.Phase = v1alpha1.PhaseRejected
			dec.Allowed, dec.Rule, dec.Playbook = false, RuleInvalidWindow, ""
			dec.Message = fmt.Sprintf("The maintenance window is invalid (%v); fix spec.maintenanceWindow.", err)
			rr.Status.Steps = nil
			r.setCondition(rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, reason(RuleInvalidWindow), dec.Message)
			r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonRejected, "Rejected: invalid maintenance window")
			r.Recorder.Event(rr, corev1.EventTypeWarning, EventRejected, dec.Message)
			return ctrl.Result{}, nil
		}
		if !inside {
			// Decide again when the window opens, on facts gathered then. Only the start
			// is gated: a playbook that has begun runs to its end (each wait bounded by
			// its timeout), because pausing it would leave a node cordoned, pods evicted
			// and the Lease held until the next window.
			at := metav1.NewTime(next)
			dec.RecheckAt = &at
			rr.Status.Phase = v1alpha1.PhaseWaiting
			msg := fmt.Sprintf("Playbook %s is allowed but waits for the maintenance window (%s for %s), which opens at %s; the decision is re-evaluated then.",
				d.Playbook, rr.Spec.MaintenanceWindow.Schedule, rr.Spec.MaintenanceWindow.Duration.Duration, at.UTC().Format(time.RFC3339))
			r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonWaitingForWindow, msg)
			r.Recorder.Event(rr, corev1.EventTypeNormal, EventWaiting, msg)
			return ctrl.Result{RequeueAfter: next.Sub(s.now)}, nil
		}
		if running := r.slotsTaken(others, rr); running != nil {
			rr.Status.Phase = v1alpha1.PhaseWaiting
			msg := fmt.Sprintf("Playbook %s is allowed but %d remediation(s) are already running, the cluster-wide cap (--max-concurrent-remediations): %s; it starts when one of them stops.",
				d.Playbook, len(running), strings.Join(running, ", "))
			r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonWaitingForSlot, msg)
			r.Recorder.Event(rr, corev1.EventTypeNormal, EventWaiting, msg)
			log.Info("Waiting for a remediation slot", "running", len(running))
			// Woken when a playbook stops; the requeue is only a safety net.
			return ctrl.Result{RequeueAfter: guardRecheck}, nil
		}
		rr.Status.Phase = v1alpha1.PhaseRunning
		r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonPlaybookRunning,
			fmt.Sprintf("Running playbook %s: %s", d.Playbook, strings.Join(names, " -> ")))
		r.Recorder.Eventf(rr, corev1.EventTypeNormal, EventAccepted, "Policy rule %s chose playbook %s: %s", d.Rule, d.Playbook, d.Message)
		log.Info("Accepted", "playbook", d.Playbook, "rule", d.Rule)
		return ctrl.Result{}, nil
	case d.Wait:
		rr.Status.Phase = v1alpha1.PhaseWaiting
		r.setCondition(rr, v1alpha1.ConditionAccepted, metav1.ConditionUnknown, reason(d.Rule), dec.Message)
		r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonWaiting, dec.Message)
		r.Recorder.Event(rr, corev1.EventTypeNormal, EventWaiting, dec.Message)
		log.Info("Waiting", "rule", d.Rule)
	default:
		rr.Status.Phase = v1alpha1.PhaseRejected
		r.setCondition(rr, v1alpha1.ConditionAccepted, metav1.ConditionFalse, reason(d.Rule), dec.Message)
		r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonRejected, "Rejected by policy rule "+d.Rule)
		r.Recorder.Eventf(rr, corev1.EventTypeWarning, EventRejected, "Policy rule %s: %s", d.Rule, dec.Message)
		log.Info("Rejected", "rule", d.Rule)
	}
	if dec.RecheckAt != nil {
		return ctrl.Result{RequeueAfter: dec.RecheckAt.Sub(s.now)}, nil
	}
	return ctrl.Result{}, nil
}

// Conflicts lists the other Running requests on the same node or Lease as rr, sorted,
// in the form the policies take as input. rr.Status.Facts must already hold rr's
// facts. reader should be live (the manager's APIReader) so that a request another
// reconcile just started is seen. `remediator plan` calls it too, so that a PR check
// waits on exactly what the controller would wait on.
func Conflicts(ctx context.Context, reader client.Reader, rr *v1alpha1.RemediationRequest) ([]string, error) {
	list := &v1alpha1.RemediationRequestList{}
	if err := reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing requests: %w", err)
	}
	return conflictsIn(list, rr), nil
}

// conflictsIn is Conflicts on an already listed set of requests.
func conflictsIn(list *v1alpha1.RemediationRequestList, rr *v1alpha1.RemediationRequest) []string {
	f := rr.Status.Facts
	var out []string
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == rr.UID || o.Status.Phase != v1alpha1.PhaseRunning || o.Status.Facts == nil {
			continue
		}
		of := o.Status.Facts
		switch {
		case f.Lease != nil && of.Lease != nil && f.Lease.Namespace == of.Lease.Namespace && f.Lease.Name == of.Lease.Name:
			out = append(out, fmt.Sprintf("%s/%s (Running, on Lease %s/%s)", o.Namespace, o.Name, of.Lease.Namespace, of.Lease.Name))
		case f.Node != nil && of.Node != nil && f.Node.Name == of.Node.Name:
			out = append(out, fmt.Sprintf("%s/%s (Running, on node %s)", o.Namespace, o.Name, of.Node.Name))
		}
	}
	slices.Sort(out)
	return out
}

// guardRecheck is how often a request waiting on a guard re-decides if no wake-up
// came (for instance, the blocking request was handled by a previous leader).
const guardRecheck = 30 * time.Second

// slotsTaken returns the other Running requests, sorted, when they fill the
// cluster-wide cap, and nil when rr may start. list is the live list decide read.
func (r *RemediationRequestReconciler) slotsTaken(list *v1alpha1.RemediationRequestList, rr *v1alpha1.RemediationRequest) []string {
	if r.MaxConcurrent <= 0 {
		return nil
	}
	var running []string
	for i := range list.Items {
		if o := &list.Items[i]; o.UID != rr.UID && o.Status.Phase == v1alpha1.PhaseRunning {
			running = append(running, o.Namespace+"/"+o.Name)
		}
	}
	if len(running) < r.MaxConcurrent {
		return nil
	}
	slices.Sort(running)
	return running
}

// runPlaybook advances a running playbook by one step.
func (r *RemediationRequestReconciler) runPlaybook(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	if rr.Status.Phase != v1alpha1.PhaseRunning {
		return ctrl.Result{}, nil
	}
	run := r.run(s)
	// Only the start of a destructive step is gated: waits and restore steps finish
	// even after the window closed, so nothing is left half-done.
	if next, ok := remediations.NextPending(rr.Status.Steps); ok && remediations.Destructive(next) {
		inside, opens, err := MaintenanceWindow(rr.Spec.MaintenanceWindow, s.now)
		if err == nil && !inside {
			return r.windowClosed(ctx, s, run, next, opens)
		}
	}
	p, err := remediations.Advance(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	log := ctrl.LoggerFrom(ctx)
	if p.Transition != "" {
		log.Info(p.Transition)
	}
	switch {
	case p.Failure != nil:
		msg := p.Failure.Message
		restored, err := remediations.Restore(ctx, run, "the failure")
		if err != nil {
			return ctrl.Result{}, err
		}
		if restored != "" {
			msg += "; restored: " + restored
		}
		rr.Status.Phase = v1alpha1.PhaseFailed
		r.setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, p.Failure.Reason, msg)
		r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonFailed, msg)
		r.Recorder.Event(rr, corev1.EventTypeWarning, EventFailed, msg)
		return ctrl.Result{}, nil
	case p.Finished:
		rr.Status.Phase = v1alpha1.PhaseSucceeded
		msg := fmt.Sprintf("Playbook %s completed", rr.Status.Decision.Playbook)
		r.setCondition(rr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, ReasonPlaybookCompleted, msg)
		r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonPlaybookCompleted, msg)
		r.Recorder.Event(rr, corev1.EventTypeNormal, EventDone, msg)
		return ctrl.Result{}, nil
	}
	if p.Transition != "" {
		reason := EventStepSucceeded
		if p.Started {
			reason = EventStepStarted
		}
		r.Recorder.Event(rr, corev1.EventTypeNormal, reason, p.Transition)
		// One step per reconcile: the journal is written before the next one starts.
		return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
	}
	return ctrl.Result{RequeueAfter: p.RequeueAfter}, nil
}

// windowClosed stops a playbook whose maintenance window closed before its next
// destructive step: it restores what the playbook changed (the cordon), skips the
// remaining steps, and waits for the next window, when the request is decided again
// on fresh facts.
func (r *RemediationRequestReconciler) windowClosed(ctx context.Context, s *scope, run *remediations.Run, next string, opens time.Time) (ctrl.Result, error) {
	rr := s.rr
	restored, err := remediations.Restore(ctx, run, "the maintenance window closed")
	if err != nil {
		return ctrl.Result{}, err
	}
	for i := range rr.Status.Steps {
		if st := &rr.Status.Steps[i]; st.State == v1alpha1.StepPending {
			st.State = v1alpha1.StepSkipped
			st.Message = "Skipped: the maintenance window closed before it started"
		}
	}
	at := metav1.NewTime(opens)
	rr.Status.Decision.RecheckAt = &at
	rr.Status.Phase = v1alpha1.PhaseWaiting
	what := "nothing needed restoring"
	if restored != "" {
		what = "restored: " + restored
	}
	msg := fmt.Sprintf("The maintenance window closed before step %s, so the playbook stopped without starting it; %s. The request is decided again when the next window opens at %s.",
		next, what, at.UTC().Format(time.RFC3339))
	r.setCondition(rr, v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonWindowClosed, msg)
	r.Recorder.Event(rr, corev1.EventTypeWarning, ReasonWindowClosed, msg)
	ctrl.LoggerFrom(ctx).Info("Maintenance window closed mid-playbook", "nextStep", next, "opens", at.Time)
	return ctrl.Result{RequeueAfter: opens.Sub(s.now)}, nil
}

func (r *RemediationRequestReconciler) run(s *scope) *remediations.Run {
	return &remediations.Run{
		RR: s.rr, Client: r.Client, Reader: r.Reader, Gatherer: r.Gatherer,
		Now: s.now, Timeouts: r.Timeouts,
	}
}

func (r *RemediationRequestReconciler) setCondition(rr *v1alpha1.RemediationRequest, t string, st metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{
		Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: rr.Generation,
	})
}

// reason turns a policy name such as "node-shutdown" into a condition reason
// ("NodeShutdown"), which must be CamelCase.
func reason(name string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '-' || r == '_' || r == ' ' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	if b.Len() == 0 {
		return "Unknown"
	}
	return b.String()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// patchStatus writes the status once, as a merge patch guarded by the resourceVersion
// it was computed from, and skips the call when nothing changed.
func (r *RemediationRequestReconciler) patchStatus(ctx context.Context, s *scope) error {
	if apiequality.Semantic.DeepEqual(s.base.Status, s.rr.Status) {
		return nil
	}
	err := r.Client.Status().Patch(ctx, s.rr, client.MergeFromWithOptions(s.base, client.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching status: %w", err)
	}
	if err == nil {
		observeTransitions(s.base, s.rr)
	}
	// A second patch in the same reconcile (deletion) diffs from what was written.
	s.base = s.rr.DeepCopy()
	return nil
}
