package controllers

// Admission: which waiting disruptive requests start, decided in one place.
//
// A request whose policy allows a disruptive playbook does not start it: it joins
// the line (Waiting, WaitingForRemediationSlot). One reconcile, of one key, reads
// every request live from the API server and grants slots to the oldest in line, by
// creation time, up to --max-concurrent-remediations; a granted request is decided
// again on fresh facts by its own reconcile (it may have waited for minutes), which
// starts the playbook in the slot or gives it back. This is the shape of Cluster
// API's MachineHealthCheck and medik8s' NodeHealthCheck, which compute who may be
// remediated inside one reconcile of one object, rather than of kured's lock object:
// the line and the slots are already the requests' own status, so a second object to
// keep in step with them would be one more thing that can disagree.
//
// Why it holds without memory of its own:
//   - it reads the requests with a live List, never the informer cache, so a cache
//     that lags behind a write (its own, or another worker's) cannot hide a slot that
//     is taken or a request that came earlier;
//   - one key means one admission at a time in this process (the work queue never
//     hands a key to two workers), and leader election means one process admits;
//   - a grant is a status patch guarded by the resourceVersion it was listed at, so a
//     request that changed in between is listed again rather than admitted on a stale
//     view;
//   - a slot is held by a request's status (Running, or granted), so a restart or a
//     new leader reads the same line and the same slots from the API server.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	"github.com/remediator/remediator/remediations"
)

// EventAdmitted is the Event of a request granted a slot.
const EventAdmitted = "Admitted"

// admissionRecheck is how often admission looks at the line again while requests
// wait in it, should a watch event that frees a slot be lost (a cut watch re-lists
// without an event for what changed in between). Granting is idempotent, so the net
// costs one live List.
const admissionRecheck = 30 * time.Second

// admissionKey is the one key the admission reconciles: the whole line at once.
var admissionKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "remediator-admission"}}

// Admission grants the slots of the cluster-wide cap to waiting requests.
type Admission struct {
	// Reader lists requests live (the manager's APIReader); Client writes.
	Reader client.Reader
	Client client.Client
	// MaxConcurrent is the cap (--max-concurrent-remediations); zero means none:
	// every request in line is granted a slot, conflicts aside.
	MaxConcurrent int
	Playbooks     remediations.Playbooks
	// Namespaces are the namespaces whose requests are this controller's; empty
	// means all.
	Namespaces []string
	Recorder   record.EventRecorder
	Clock      clock.PassiveClock
	// Pause is the pause ConfigMap: while it says paused, no slot is granted.
	Pause types.NamespacedName
}

// SetupWithManager runs admission on every change of the line or the slots.
func (a *Admission) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("admission").
		Watches(NewUnstructuredRequest(), handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{admissionKey}
		}), builder.WithPredicates(a.lineChanged())).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{admissionKey}
		}), builder.WithPredicates(isPauseObject(a.Pause))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, RateLimiter: rateLimiter()}).
		Complete(a)
}

// slotState is what a request is to admission.
type slotState int

const (
	notInLine slotState = iota
	// inLine: allowed a disruptive playbook, decided on its current spec, waiting
	// for a slot.
	inLine
	// holdsSlot: running a disruptive playbook, or granted a slot and about to be
	// decided again.
	holdsSlot
)

func stateOf(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks) slotState {
	switch {
	case rr.Status.Phase == v1alpha1.PhaseRunning && playbooks.Disruptive(decidedPlaybook(rr)), granted(rr):
		return holdsSlot
	case queued(rr) && rr.Status.ObservedGeneration == rr.Generation && rr.DeletionTimestamp.IsZero():
		// A request whose spec changed since it joined (or one being deleted) keeps no
		// place: it is decided again first.
		return inLine
	}
	return notInLine
}

// queued: the policy allowed a disruptive playbook and the request waits in line.
func queued(rr *v1alpha1.RemediationRequest) bool {
	return progressingReason(rr) == v1alpha1.ReasonWaitingForSlot
}

// granted: admission granted the request a slot; its own reconcile decides it again.
func granted(rr *v1alpha1.RemediationRequest) bool {
	return progressingReason(rr) == v1alpha1.ReasonAdmitted
}

// progressingReason is the Progressing reason of a Waiting request, else "".
func progressingReason(rr *v1alpha1.RemediationRequest) string {
	if rr.Status.Phase != v1alpha1.PhaseWaiting {
		return ""
	}
	return anyProgressingReason(rr)
}

// lineChanged passes the events after which the line or the slots may differ: a
// request joining or leaving the line, taking or giving back a slot, or deleted
// while in either; and every request the informer lists at start, so that a new
// leader looks at the line once.
func (a *Admission) lineChanged() predicate.Funcs {
	state := func(o client.Object) slotState {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return notInLine
		}
		rr := guardView(u)
		return stateOf(&rr, a.Playbooks)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return state(e.Object) != notInLine },
		UpdateFunc:  func(e event.UpdateEvent) bool { return state(e.ObjectOld) != state(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return state(e.Object) != notInLine },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// Reconcile grants free slots to the oldest requests in line.
func (a *Admission) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if readPause(ctx, a.Client, a.Pause).Paused {
		// The resume's watch event brings admission back.
		return ctrl.Result{}, nil
	}
	all, listedAt, err := a.list(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	grants, waiting := Admit(all, a.MaxConcurrent, a.Playbooks)
	now := a.now()
	for _, g := range grants {
		if err := a.grant(ctx, g, listedAt, now); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// The request changed since the List: look at the line again.
				return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // the rate-limited requeue is the point
			}
			return ctrl.Result{}, err
		}
	}
	if waiting > len(grants) {
		return ctrl.Result{RequeueAfter: admissionRecheck}, nil
	}
	return ctrl.Result{}, nil
}

func (a *Admission) now() time.Time {
	if a.Clock == nil {
		return time.Now()
	}
	return a.Clock.Now()
}

// list reads every request in scope live, and says at which resourceVersion: the
// first one's, when each namespace is listed on its own.
func (a *Admission) list(ctx context.Context) ([]v1alpha1.RemediationRequest, string, error) {
	if len(a.Namespaces) == 0 {
		return listRequestsAt(ctx, a.Reader)
	}
	var out []v1alpha1.RemediationRequest
	var at string
	for _, ns := range a.Namespaces {
		l, rv, err := listRequestsAt(ctx, a.Reader, client.InNamespace(ns))
		if err != nil {
			return nil, "", err
		}
		out, at = append(out, l...), cmp.Or(at, rv)
	}
	return out, at, nil
}

// grant writes the slot to the request, guarded by the resourceVersion it was listed
// at. The message names the resourceVersion of the line it was chosen from, so that
// an audit can tell a request that joined the line after that reading from one that
// was passed over (make chaos and make bench check the order this way).
func (a *Admission) grant(ctx context.Context, g Grant, listedAt string, now time.Time) error {
	rr := g.Request
	base := rr.DeepCopy()
	msg := fmt.Sprintf("Granted a slot of the cluster-wide cap of %s (--max-concurrent-remediations), oldest request first%s; the request is decided again on fresh facts before playbook %s starts. (The line as read at resourceVersion %s.)",
		capString(a.MaxConcurrent), holding(g.Holders), decidedPlaybook(&rr), listedAt)
	meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonAdmitted, Message: msg, ObservedGeneration: rr.Generation, LastTransitionTime: metav1.NewTime(now)})
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
}

// Admit is admission's choice, pure: of all the requests, which in line are granted a
// slot now, oldest first, and how many wait in line. A request whose Lease or node a
// slot holder (or a request granted before it) works on is passed over: it would
// only wait on that remediation (one per Lease and node), and must not hold up the
// line behind it.
func Admit(all []v1alpha1.RemediationRequest, maxConcurrent int, playbooks remediations.Playbooks) (grants []Grant, waiting int) {
	var holders, line []v1alpha1.RemediationRequest
	for _, rr := range all {
		switch stateOf(&rr, playbooks) {
		case holdsSlot:
			holders = append(holders, rr)
		case inLine:
			line = append(line, rr)
		}
	}
	slices.SortFunc(line, olderFirst)
	for _, rr := range line {
		if maxConcurrent > 0 && len(holders) >= maxConcurrent {
			break
		}
		if len(conflictsIn(holders, rr.UID, rr.Status.Facts)) > 0 {
			continue
		}
		grants = append(grants, Grant{Request: rr, Holders: names(holders)})
		view := rr
		view.Status.Phase = v1alpha1.PhaseRunning
		holders = append(holders, view)
	}
	return grants, len(line)
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
	self.Status.Phase, self.Status.ObservedGeneration = v1alpha1.PhaseWaiting, self.Generation
	self.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonWaitingForSlot}}
	all := slices.DeleteFunc(slices.Clone(others), func(o v1alpha1.RemediationRequest) bool { return o.UID == self.UID })
	grants, _ := Admit(append(all, self), maxConcurrent, playbooks)
	return slices.ContainsFunc(grants, func(g Grant) bool { return g.Request.UID == self.UID })
}

// lineAhead is what a request joining the line is told: the slot holders, and how
// many requests in line came before it.
func lineAhead(self *v1alpha1.RemediationRequest, others []v1alpha1.RemediationRequest, playbooks remediations.Playbooks) (holders []string, ahead int) {
	var held []v1alpha1.RemediationRequest
	for _, o := range others {
		if o.UID == self.UID {
			continue
		}
		switch stateOf(&o, playbooks) {
		case holdsSlot:
			held = append(held, o)
		case inLine:
			if olderFirst(o, *self) < 0 {
				ahead++
			}
		}
	}
	return names(held), ahead
}

// names are the requests' namespace/name, sorted.
func names(rrs []v1alpha1.RemediationRequest) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		out = append(out, rr.Namespace+"/"+rr.Name)
	}
	slices.Sort(out)
	return out
}

// capString renders the cap; zero means none.
func capString(maxConcurrent int) string {
	if maxConcurrent <= 0 {
		return "none"
	}
	return fmt.Sprint(maxConcurrent)
}

// holding names the slot holders, for a message.
func holding(holders []string) string {
	if len(holders) == 0 {
		return ""
	}
	return "; the other slots are held by " + strings.Join(holders, ", ")
}
