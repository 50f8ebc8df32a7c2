package remediationrequest

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/decider"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/pause"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=remediator.io,resources=remediationrequests/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims;persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",namespace=trident,resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csinodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=csidrivers;volumeattachments,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=trident,resources=leases,verbs=delete
// +kubebuilder:rbac:groups="",namespace=remediator-system,resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// The list and watch verbs on nodes, Leases, PVs, claims, CSINodes, CSIDrivers,
// VolumeAttachments and the Trident namespace's events serve the informer cache
// decisions are made from (wiring.go); pods are listed by node only, never watched.
// Leases are read in every namespace because they are watched in one stream, whose
// progress vouches for the cache of node Leases (facts.Watermarks); only the Trident
// namespace's are deleted.

// Reconciler reconciles RemediationRequests.
type Reconciler struct {
	// Client writes, and reads requests from the manager's cache (unstructured, with
	// the IndexGuard index).
	Client client.Client
	// Reader reads live state (the manager's APIReader): the objects steps act on.
	Reader client.Reader
	// Gatherer gathers the facts a decision is made on.
	Gatherer *facts.Gatherer
	// Fresh re-gathers the facts right before a destructive step of a disruptive
	// playbook, reading live all the floor weighs; FreshRelease, before one that only
	// deletes the Lease, reading the holder node live. nil: Fresh, and Gatherer for
	// both (wiring.Gatherers).
	Fresh        *facts.Gatherer
	FreshRelease *facts.Gatherer
	Policy       *policies.Engine
	Playbooks    remediations.Playbooks
	Timeouts     remediations.Timeouts
	Recorder     record.EventRecorder
	// Namespaces restricts the requests reconciled and counted by the guards; empty
	// means all. The live reads are not restricted like the cache, so the check is here.
	Namespaces []string
	// MaxConcurrent caps the disruptive playbooks running at once across the cluster,
	// so that a burst of merged requests cannot cordon half the nodes; zero means no
	// cap. Playbooks that only release the Lease of a holder proven down are not
	// capped (playbooks.yaml).
	MaxConcurrent int
	// Workers is how many requests are reconciled at once; zero means one. The work
	// queue never gives one request to two workers; slots are admission's alone.
	Workers int
	// Floor is the safety floor's minimums (--floor-* flags); zero fields mean the
	// runbook's values. The heartbeat grace and the driver are the gatherer's.
	Floor remediations.Floor
	// Pause is the pause ConfigMap (--pause-configmap); empty means
	// pause.DefaultConfigMap. It is read from the manager's cache (CacheOptions).
	Pause types.NamespacedName
	// Clock is the reconciler's one clock, its gatherers' too (it overrides theirs);
	// nil means the real clock.
	Clock clock.PassiveClock
	// FixWindow is how long package verification watches a Succeeded request; the
	// write that records the success opens it. Zero: fixes are not verified.
	FixWindow time.Duration

	written writeLog
}

// scope carries one reconcile's request and the copy its status patch is computed from.
type scope struct {
	rr   *v1alpha1.RemediationRequest
	base *v1alpha1.RemediationRequest
	now  time.Time
	// pause is the pause as this reconcile read it (pausedMessage), once: the
	// decision and the step it may start see the same state.
	pause *pause.State
	// events are the Events about the changes of state this reconcile made, recorded
	// once the status write that carries them is applied (patchStatus).
	events []lifecycle.Event
	// decidedAt is the request's resourceVersion when this reconcile decided it to
	// run a playbook; empty when it did not. A Lease release decided here acts in
	// this reconcile once its intent is journaled, on facts as of this version.
	decidedAt string
	// journaled is true once this reconcile wrote a journal before acting on it
	// (journalThenAct).
	journaled bool
}

// SetupWithManager registers the reconciler and the guards' index.
//
// Status writes do not bump the generation, so filtering on generation (and
// annotations, used to ask for a refresh) keeps the controller from re-triggering
// itself with most of its own patches; the status writes that must start a reconcile
// pass watches.go's predicates. A running playbook goes on with its next step from
// the watch event of the write that journaled the last one, so the next reconcile
// reads that journal from the cache. One request the Go type cannot decode does not
// keep the informer from syncing (package requests).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	// Every Event is bounded; the runnables wired beside it share the recorder.
	r.Recorder = requests.BoundEvents(r.Recorder)
	if err := IndexRequests(context.Background(), mgr.GetFieldIndexer(), r.Playbooks); err != nil {
		return fmt.Errorf("indexing requests for the guards: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.RemediationRequest{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, journalAdvanced, slotGranted, slotGivenBack))).
		Watches(&v1alpha1.RemediationRequest{}, handler.EnqueueRequestsFromMapFunc(r.wake), builder.WithPredicates(stoppedRunning)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.wakePaused), builder.WithPredicates(pause.IsObject(r.PauseKey()))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Workers), RateLimiter: requests.RateLimiter()}).
		Named("remediationrequest").
		Complete(r)
}

// Reconcile is fetch -> ensure finalizer (where a playbook will need a restore) ->
// phases -> one deferred status patch.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	// Read from the cache. The journal it holds is never older than this controller's
	// last write: a reconcile that finds the cache still at the version its last
	// status patch was computed from goes back to the queue until the cache has caught
	// up (the write's own watch event usually brings it back first). A write by
	// anyone else is caught by the optimistic lock on the status patch.
	if !requests.InScope(r.Namespaces, req.Namespace) {
		return ctrl.Result{}, nil
	}
	rr := &v1alpha1.RemediationRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, rr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.written.behind(rr.UID, rr.ResourceVersion) {
		// Requeue, not RequeueAfter: the work queue's rate limiter backs off while the
		// cache catches up with this controller's own write, where a fixed delay would
		// either wait too long or spin.
		return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // see above: the rate-limited requeue is the point
	}
	log := ctrl.LoggerFrom(ctx).WithValues("remediationRequest", klog.KObj(rr))
	ctx = ctrl.LoggerInto(ctx, log)
	if err := rr.DecodeError(); err != nil {
		// Not retried: only an edit of the object (a new generation) can fix it, and
		// that triggers a reconcile. Every other request goes on being decided. What
		// of it was decoded is never written back.
		log.Error(err, "Cannot decode the request; it is not decided until it is fixed")
		r.Recorder.Eventf(rr, corev1.EventTypeWarning, requests.EventUndecodable,
			"The controller cannot decode this request (%v); it is not decided until it is fixed. Other requests are not affected.", err)
		return ctrl.Result{}, nil
	}

	// A finalizer write the API server refuses for good (admission, RBAC) is not
	// retried without end: the playbook is aborted below, before its next step.
	var finalizerRefused error
	if rr.DeletionTimestamp.IsZero() && rr.Status.Phase == v1alpha1.PhaseRunning && remediations.NeedsRestore(rr.Status.Steps) {
		if err := r.ensureFinalizer(ctx, rr); err != nil {
			if !remediations.RefusedForGood(err) {
				return ctrl.Result{}, err
			}
			finalizerRefused = err
		}
	}
	s := &scope{rr: rr, base: rr.DeepCopy(), now: r.clock().Now()}
	if !rr.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if rr.Status.Phase.PlaybookEnded() {
		return ctrl.Result{}, r.reconcileEnded(ctx, s)
	}
	defer func() {
		if retErr == nil {
			rr.Status.ObservedGeneration = rr.Generation
		}
		if err := r.patchStatus(ctx, s); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
			return
		}
		if retErr == nil && rr.Status.Phase.PlaybookEnded() {
			retErr = r.releaseFinalizer(ctx, rr)
		}
	}()

	if finalizerRefused != nil {
		return r.abort(ctx, s, fmt.Sprintf("the API server refused the restore finalizer a playbook that cordons needs (%v)", finalizerRefused))
	}
	// The phases: one that returns a non-zero result or an error ends the reconcile.
	for _, p := range []func(context.Context, *scope) (ctrl.Result, error){r.breakGlass, r.decide, r.runPlaybook} {
		res, err := p(ctx, s)
		if err != nil || !res.IsZero() {
			return res, err
		}
	}
	return ctrl.Result{}, nil
}

// reconcileEnded writes what a request whose playbook ended still needs, and releases
// its finalizer.
func (r *Reconciler) reconcileEnded(ctx context.Context, s *scope) error {
	rr := s.rr
	// Final: a later edit of the spec is seen (observedGeneration, and Ready for
	// that generation, so that kubectl wait and kstatus are not left waiting) but
	// never acted on. A crash (or an older version) may also have come between the
	// terminal status write and the finalizer's release below.
	if rr.Status.ObservedGeneration != rr.Generation {
		s.record(corev1.EventTypeNormal, EventSpecIgnored, fmt.Sprintf(
			"The playbook already ended (%s), so the edit of generation %d is not acted on: to try again, create a new request.", rr.Status.Phase, rr.Generation))
		rr.Status.ObservedGeneration = rr.Generation
	}
	if err := r.patchStatus(ctx, s); err != nil {
		return err
	}
	return r.releaseFinalizer(ctx, rr)
}

func (r *Reconciler) clock() clock.PassiveClock {
	return cmp.Or[clock.PassiveClock](r.Clock, clock.RealClock{})
}

// floor is the floor's minimums, with the heartbeat grace, the driver and the
// Trident namespaces the gatherer classifies, looks for and reads in.
func (r *Reconciler) floor() remediations.Floor {
	g := r.Floor
	if r.Gatherer != nil {
		g.HeartbeatGrace = cmp.Or(g.HeartbeatGrace, r.Gatherer.Config.NodeLeaseGracePeriod)
		g.DriverName = cmp.Or(g.DriverName, r.Gatherer.Config.DriverName)
		if len(g.TridentNamespaces) == 0 {
			g.TridentNamespaces = r.Gatherer.Config.TridentNamespaces()
		}
	}
	return g
}

// gatherer is g on the reconciler's clock.
func (r *Reconciler) gatherer(g *facts.Gatherer) *facts.Gatherer {
	c := *g
	c.Clock = r.clock()
	return &c
}

// decide decides the request when it needs a decision, through the decider that
// `remediator plan` uses too.
func (r *Reconciler) decide(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	if !lifecycle.NeedsDecision(rr, s.now) {
		if d := rr.Status.Decision; d != nil && d.RecheckAt != nil && rr.Status.Phase != v1alpha1.PhaseRunning {
			return ctrl.Result{RequeueAfter: max(d.RecheckAt.Sub(s.now), time.Second)}, nil
		}
		return ctrl.Result{}, nil
	}
	// On the cache's facts (the reconciler's clock) and the guards' view of the
	// others; a request holds a slot when admission granted it one.
	d := &decider.Decider{Policy: r.Policy, Playbooks: r.Playbooks, Floor: r.floor(), MaxConcurrent: r.MaxConcurrent,
		Gather: r.gatherer(r.Gatherer).Gather, Others: r.guardOthers,
		Admitted: func(rr *v1alpha1.RemediationRequest, _ []v1alpha1.RemediationRequest) bool {
			return lifecycle.Granted(rr)
		}}
	// Real time, not the injected clock: this measures the controller, not the facts.
	started := time.Now()
	o, err := d.Decide(ctx, rr, s.now, r.pausedMessage(ctx, s))
	if err != nil {
		return r.gatherFailed(s, err)
	}
	decisionSeconds.WithLabelValues(string(rr.Spec.Remediation)).Observe(time.Since(started).Seconds())
	decidedAt := rr.ResourceVersion
	s.recordTransition(o.Apply(rr, o.Facts))
	if rr.Status.Phase == v1alpha1.PhaseRunning {
		s.decidedAt = decidedAt
	}
	ctrl.LoggerFrom(ctx).Info("Decided", "phase", o.Phase, "rule", o.Decision.Rule, "playbook", o.Decision.Playbook)
	return ctrl.Result{RequeueAfter: o.RequeueAfter}, nil
}

// runPlaybook advances a running playbook by one step. A request in any other
// phase has nothing to restore and does not keep the restore finalizer.
func (r *Reconciler) runPlaybook(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	if rr.Status.Phase != v1alpha1.PhaseRunning {
		return ctrl.Result{}, r.releaseIdle(ctx, s)
	}
	run := r.execution(s)
	run.Paused = r.pausedMessage(ctx, s)
	p, err := remediations.Advance(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	if stop := p.Halt; stop != nil {
		// The gate closed before a step (see remediations.Gate).
		switch stop.Action {
		case remediations.ActionHold:
			return r.hold(ctx, s, stop.Message)
		case remediations.ActionWait:
			return r.windowClosed(ctx, s, run, stop)
		}
		return r.abort(ctx, s, stop.Message)
	}
	lifecycle.Resume(rr)
	log := ctrl.LoggerFrom(ctx)
	if p.Transition != "" {
		log.Info(p.Transition)
	}
	if p.Note != "" {
		s.record(corev1.EventTypeWarning, EventWindowClosedAfterEviction, p.Note)
		log.Info("Maintenance window closed after the eviction; the playbook finishes")
	}
	switch {
	case p.Failure != nil:
		msg := p.Failure.Message
		reason := p.Failure.Reason
		restored, err := remediations.Restore(ctx, run, "the failure")
		if rf, ok := remediations.IsRestoreFailure(err); ok {
			reason, restored, err = remediations.ReasonRestoreFailed, rf.Message, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		switch {
		case reason == remediations.ReasonRestoreFailed:
			msg += "; " + restored
		case restored != "":
			msg += "; restored: " + restored
		}
		s.recordTransition(lifecycle.Fail(rr, reason, v1alpha1.ReasonFailed, msg))
		return ctrl.Result{}, nil
	case p.Finished:
		if p.Transition != "" {
			s.record(corev1.EventTypeNormal, v1alpha1.EventStepSucceeded, p.Transition)
		}
		s.recordTransition(lifecycle.Finish(rr, s.now, r.FixWindow))
		return ctrl.Result{}, nil
	}
	if p.Transition != "" {
		reason := v1alpha1.EventStepSucceeded
		if p.Started {
			reason = v1alpha1.EventStepStarted
		}
		s.record(corev1.EventTypeNormal, reason, p.Transition)
		if p.Started && s.actsAtOnce(r.Playbooks) {
			return r.journalThenAct(ctx, s)
		}
		// One step per reconcile: the journal is written before the next one starts,
		// and the watch event of that write (journalAdvanced) starts it.
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: p.RequeueAfter}, nil
}

// actsAtOnce: the step this reconcile journaled may run in it too. So for the first
// step of a playbook that only releases a Lease, decided in this reconcile: its one
// destructive call follows the decision by the journal write alone, where waiting
// for that write's watch event to start another reconcile would double a release's
// time and, in a storm, leave the workers idle between the two.
func (s *scope) actsAtOnce(playbooks remediations.Playbooks) bool {
	return s.decidedAt != "" && !playbooks.Disruptive(lifecycle.DecidedPlaybook(s.rr))
}

// journalThenAct writes the journal that records the step's start, and only once
// the API server applied it (write-ahead: a crash after it finds the step started,
// and its Done check then sees what the call did) advances the playbook again in
// this reconcile. The step re-reads its facts as of the decision (freshReader).
func (r *Reconciler) journalThenAct(ctx context.Context, s *scope) (ctrl.Result, error) {
	from := s.rr.ResourceVersion
	if err := r.patchStatus(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if s.rr.ResourceVersion == from {
		// No journal was applied (the request is gone): nothing destructive runs
		// without one.
		return ctrl.Result{}, nil
	}
	s.journaled = true
	if s.rr.Status.Phase != v1alpha1.PhaseRunning {
		return ctrl.Result{}, nil
	}
	return r.runPlaybook(ctx, s)
}

// record queues an Event about the request, recorded once the status write that
// carries the change it reports is applied: a write that fails records nothing, and
// the retried reconcile records it again.
func (s *scope) record(eventType, reason, msg string) {
	s.events = append(s.events, lifecycle.Event{Type: eventType, Reason: reason, Message: msg})
}

// recordTransition queues the Event of a transition of the state machine.
func (s *scope) recordTransition(e lifecycle.Event) { s.record(e.Type, e.Reason, e.Message) }
