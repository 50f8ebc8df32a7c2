// Package admission decides which waiting disruptive requests start, in one place.
//
// A request allowed a disruptive playbook joins the line (Waiting,
// WaitingForRemediationSlot). One reconcile, of one key, reads every request live and
// grants slots to the oldest in line up to --max-concurrent-remediations; the granted
// request's own reconcile decides it again on fresh facts, then starts the playbook
// in the slot or gives it back. As in Cluster API's MachineHealthCheck (not kured's
// lock object), the line and the slots are the requests' own status: no second
// object to keep in step.
//
// Why it holds:
//   - a live List, never the cache, so a lagging cache cannot hide a taken slot or an
//     earlier request;
//   - one key means one admission at a time per process, and leader election one process;
//   - should two leaders overlap, the slots Lease (SlotsLeaseName) still guards the
//     cap: read before the line, each new grant written into it (guarded by its
//     resourceVersion) before it is written to the request (guarded by the listed
//     resourceVersion), so of two admitters only one writes (see slotLedger);
//   - a slot is held by a request's status (Running, or granted), so a restart or a
//     new leader reads the same line and slots;
//   - a grant whose first step has not started within the step timeout is given back,
//     as is an unused grant of a request being deleted; a request deleted mid-run
//     keeps its slot until its reconcile has restored what it changed.
//
// Cost per pass: one GET of the Lease and one List; then one Lease update for all
// grants, and one status patch per grant or give-back.
package admission

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
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
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/pause"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/remediations"
)

// The slots Lease: created on the first grant, read and updated by name only.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=remediator-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=remediator-system,resources=leases,resourceNames=remediator-slots,verbs=get;update

// Events of admission on a request: granted a slot, or gave back one unused in time.
const (
	EventAdmitted    = "Admitted"
	EventSlotExpired = "SlotExpired"
)

// SlotsLeaseName is the Lease, in the controller's namespace, that guards the slots
// of the cap against two admitters (see slotLedger).
const SlotsLeaseName = "remediator-slots"

// SlotsAnnotation holds the slots on the Lease, as JSON (slotEntry).
const SlotsAnnotation = "remediator.io/slots"

// admissionRecheck is how often admission looks at a waiting line again, should a
// watch event that frees a slot be lost (a cut watch re-lists without it).
const admissionRecheck = 30 * time.Second

// admissionKey is the one key the admission reconciles: the whole line at once.
var admissionKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "remediator-admission"}}

// Reconciler grants the slots of the cluster-wide cap to waiting requests.
type Reconciler struct {
	// Reader reads live (the manager's APIReader); Client writes.
	Reader client.Reader
	Client client.Client
	// MaxConcurrent is the cap; zero means none: every request in line is granted a
	// slot, conflicts aside, and no grant expires.
	MaxConcurrent int
	Playbooks     remediations.Playbooks
	// Namespaces are the namespaces whose requests are this controller's; empty: all.
	Namespaces []string
	Recorder   record.EventRecorder
	Clock      clock.PassiveClock
	// Pause is the pause ConfigMap: while it says paused, no slot is granted.
	Pause types.NamespacedName
	// StepTimeout is how long a grant may wait for its first step before the slot is
	// given back; zero means remediations.DefaultTimeouts.Step.
	StepTimeout time.Duration
	// Slots is the slots Lease; empty means SlotsLeaseName in Pause's namespace.
	Slots types.NamespacedName
}

// SetupWithManager runs admission on every change of the line or the slots.
func (a *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toAdmission := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{admissionKey}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("admission").
		Watches(&v1alpha1.RemediationRequest{}, toAdmission, builder.WithPredicates(a.lineChanged())).
		Watches(&corev1.ConfigMap{}, toAdmission, builder.WithPredicates(pause.IsObject(a.Pause))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, RateLimiter: requests.RateLimiter()}).
		Complete(a)
}

// lineChanged passes the events after which the line or the slots may differ, and
// every request in either listed at start, so that a new leader looks once.
func (a *Reconciler) lineChanged() predicate.Funcs {
	state := func(o client.Object) lifecycle.SlotState {
		rr := requests.ViewOf(o)
		return lifecycle.StateOf(&rr, a.Playbooks)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return state(e.Object) != lifecycle.NotInLine },
		UpdateFunc:  func(e event.UpdateEvent) bool { return state(e.ObjectOld) != state(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return state(e.Object) != lifecycle.NotInLine },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// Reconcile gives back the slots not used in time, and grants free slots to the
// oldest requests in line.
func (a *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if pause.Read(ctx, a.Client, a.Pause).Paused {
		// The resume's watch event brings admission back.
		return ctrl.Result{}, nil
	}
	capped := a.MaxConcurrent > 0
	var ledger *slotLedger
	if capped {
		// Before the line: see slotLedger.
		var err error
		if ledger, err = a.readLedger(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	all, listedAt, err := a.list(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := a.now()
	var next time.Time
	if capped {
		if next, err = a.giveBackExpired(ctx, all, now); err != nil {
			return requeueOnConflict(err)
		}
	}
	grants, holders, waiting := Admit(all, ledger.pending(all), a.MaxConcurrent, a.Playbooks)
	if ledger != nil && slices.ContainsFunc(grants, func(g Grant) bool { return !g.reserved }) {
		if err := a.writeLedger(ctx, ledger, holders, grants, listedAt); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				// Another admitter wrote it first: read it, and the line, again.
				return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // the rate-limited requeue is the point
			}
			return ctrl.Result{}, err
		}
	}
	for _, g := range grants {
		if err := a.grant(ctx, g, cmp.Or(g.line, listedAt), now); err != nil {
			return requeueOnConflict(err)
		}
		if capped {
			next = earliest(next, now.Add(a.stepTimeout()))
		}
	}
	if waiting > len(grants) {
		next = earliest(next, now.Add(admissionRecheck))
	}
	if next.IsZero() {
		return ctrl.Result{}, nil
	}
	// The next grant to expire or recheck, should nothing else bring admission back first.
	return ctrl.Result{RequeueAfter: max(next.Sub(now), time.Second)}, nil
}

// requeueOnConflict looks at the line again when a request changed or went since it
// was listed.
func requeueOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // the rate-limited requeue is the point
	}
	return ctrl.Result{}, err
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func (a *Reconciler) now() time.Time {
	return cmp.Or[clock.PassiveClock](a.Clock, clock.RealClock{}).Now()
}

func (a *Reconciler) stepTimeout() time.Duration {
	return cmp.Or(a.StepTimeout, remediations.DefaultTimeouts.Step)
}

// list reads every request in scope live, at the (first list's) resourceVersion.
func (a *Reconciler) list(ctx context.Context) ([]v1alpha1.RemediationRequest, string, error) {
	if len(a.Namespaces) == 0 {
		return requests.ListAt(ctx, a.Reader)
	}
	var out []v1alpha1.RemediationRequest
	var at string
	for _, ns := range a.Namespaces {
		l, rv, err := requests.ListAt(ctx, a.Reader, client.InNamespace(ns))
		if err != nil {
			return nil, "", err
		}
		out, at = append(out, l...), cmp.Or(at, rv)
	}
	return out, at, nil
}

// giveBackExpired gives back the expired grants in all, and returns when the next
// one expires (zero if none).
func (a *Reconciler) giveBackExpired(ctx context.Context, all []v1alpha1.RemediationRequest, now time.Time) (next time.Time, err error) {
	for i := range all {
		at, ok := lifecycle.GrantExpiry(&all[i], a.Playbooks, a.stepTimeout())
		if !ok {
			continue
		}
		if now.Before(at) {
			next = earliest(next, at)
			continue
		}
		if err := a.giveBack(ctx, &all[i], now); err != nil {
			return time.Time{}, err
		}
	}
	return next, nil
}

// giveBack sends a request that did not start its first step in time back to
// Waiting, to be decided again. The write is guarded by the listed resourceVersion:
// a reconcile that journals the first step's start first makes it fail, and one
// that comes after finds the request waiting and starts nothing.
func (a *Reconciler) giveBack(ctx context.Context, rr *v1alpha1.RemediationRequest, now time.Time) error {
	base := rr.DeepCopy()
	since := "its grant"
	if at := rr.Status.AdmittedAt; at != nil {
		since = "its grant at " + at.UTC().Format(time.RFC3339)
	}
	msg := fmt.Sprintf("The slot of the cluster-wide cap was given back: playbook %s did not start its first step within the step timeout (%s, --step-timeout) of %s, so the slot went to the next request in line. The request is decided again on fresh facts, and rejoins the line in its place if the policy still allows it.",
		lifecycle.DecidedPlaybook(rr), a.stepTimeout(), since)
	lifecycle.GiveBack(rr, metav1.NewTime(now), msg)
	if err := a.Client.Status().Patch(ctx, rr, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("giving back the slot of %s/%s: %w", rr.Namespace, rr.Name, err)
	}
	a.Recorder.Event(rr, corev1.EventTypeWarning, EventSlotExpired, msg)
	ctrl.LoggerFrom(ctx).Info("Gave back an unused slot", "remediationRequest", klog.KObj(rr), "stepTimeout", a.stepTimeout())
	return nil
}

// grant writes the slot to the request, guarded by the listed resourceVersion. The
// message names the line's resourceVersion, so that an audit (make chaos, make
// bench) can tell a request that joined later from one passed over.
func (a *Reconciler) grant(ctx context.Context, g Grant, listedAt string, now time.Time) error {
	rr := g.Request
	base := rr.DeepCopy()
	expiry, others := "", ""
	if len(g.Holders) > 0 {
		others = "; the other slots are held by " + strings.Join(g.Holders, ", ")
	}
	if a.MaxConcurrent > 0 {
		expiry = fmt.Sprintf("; the slot is given back unless its first step starts by %s (--step-timeout)", now.Add(a.stepTimeout()).UTC().Format(time.RFC3339))
	}
	msg := fmt.Sprintf("Granted a slot of the cluster-wide cap of %s (--max-concurrent-remediations), oldest request first%s; the request is decided again on fresh facts before playbook %s starts%s. (The line as read at resourceVersion %s.)",
		lifecycle.CapString(a.MaxConcurrent), others, lifecycle.DecidedPlaybook(&rr), expiry, listedAt)
	lifecycle.Grant(&rr, metav1.NewTime(now), msg)
	if err := a.Client.Status().Patch(ctx, &rr, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("granting a slot to %s/%s: %w", rr.Namespace, rr.Name, err)
	}
	a.Recorder.Event(&rr, corev1.EventTypeNormal, EventAdmitted, msg)
	ctrl.LoggerFrom(ctx).Info("Granted a slot", "remediationRequest", klog.KObj(&rr), "holders", g.Holders)
	return nil
}

// Grant is one slot granted: the request, and the requests that held the others.
type Grant struct {
	Request v1alpha1.RemediationRequest
	Holders []string
	// reserved: another pass wrote the grant into the slots Lease, not yet to the
	// request; line is the resourceVersion of the line it was chosen from.
	reserved bool
	line     string
}

// Admit is admission's choice, pure: which requests in line are granted a slot now,
// which hold the slots then, and how many wait. The reserved (by UID, with their
// line) were granted by another pass not yet written to them: they are granted
// first. Then the oldest in line, up to the cap, passing over a request whose Lease
// or node a holder works on (it would only wait on that one, and must not hold up
// the line behind it) and one the controller cannot decode.
func Admit(all []v1alpha1.RemediationRequest, reserved map[types.UID]string, maxConcurrent int, playbooks remediations.Playbooks) (grants []Grant, holders []v1alpha1.RemediationRequest, waiting int) {
	var line []v1alpha1.RemediationRequest
	for _, rr := range all {
		switch lifecycle.StateOf(&rr, playbooks) {
		case lifecycle.HoldsSlot:
			holders = append(holders, rr)
		case lifecycle.InLine:
			line = append(line, rr)
		}
	}
	slices.SortFunc(line, requests.OlderFirst)
	held := func(rr v1alpha1.RemediationRequest) {
		view := rr
		view.Status.Phase = v1alpha1.PhaseRunning
		holders = append(holders, view)
	}
	var rest []v1alpha1.RemediationRequest
	for _, rr := range line {
		if at, ok := reserved[rr.UID]; ok {
			grants = append(grants, Grant{Request: rr, Holders: lifecycle.Names(holders), reserved: true, line: at})
			held(rr)
			continue
		}
		rest = append(rest, rr)
	}
	for _, rr := range rest {
		if maxConcurrent > 0 && len(holders) >= maxConcurrent {
			break
		}
		if rr.DecodeError() != nil {
			// Its spec is unknown, so no playbook of it may start: a slot granted
			// would only wait out the step timeout. It keeps its place in line.
			continue
		}
		if len(lifecycle.ConflictsIn(holders, rr.UID, rr.Status.Facts)) > 0 {
			continue
		}
		grants = append(grants, Grant{Request: rr, Holders: lifecycle.Names(holders)})
		held(rr)
	}
	return grants, holders, len(line)
}

// WouldAdmit predicts admission for a request about to join the line (remediator
// plan): whether Admit would grant it a slot now, with the others as they are.
func WouldAdmit(rr *v1alpha1.RemediationRequest, others []v1alpha1.RemediationRequest, maxConcurrent int, playbooks remediations.Playbooks, now time.Time) bool {
	self := *rr.DeepCopy()
	if self.CreationTimestamp.IsZero() {
		self.CreationTimestamp = metav1.NewTime(now)
	}
	if self.UID == "" {
		self.UID = "remediator-plan"
	}
	self.Status.Phase, self.Status.ObservedGeneration, self.Status.WaitingFor = v1alpha1.PhaseWaiting, self.Generation, v1alpha1.WaitingForSlot
	self.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonWaitingForSlot}}
	all := slices.DeleteFunc(slices.Clone(others), func(o v1alpha1.RemediationRequest) bool { return o.UID == self.UID })
	grants, _, _ := Admit(append(all, self), nil, maxConcurrent, playbooks)
	return slices.ContainsFunc(grants, func(g Grant) bool { return g.Request.UID == self.UID })
}
