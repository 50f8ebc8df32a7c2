package remediationrequest

// The predicates of the reconciler's watches: which events of a request start a
// reconcile of it (journalAdvanced, slotGranted and slotGivenBack, besides spec and
// annotation changes), and which wake the requests it was holding back (stoppedRunning).

import (
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/requests"
)

// stepStates is status.steps[*].state.
func stepStates(o client.Object) []v1alpha1.StepState {
	steps := requests.ViewOf(o).Status.Steps
	out := make([]v1alpha1.StepState, 0, len(steps))
	for _, st := range steps {
		out = append(out, st.State)
	}
	return out
}

// onUpdate passes only the updates that pass; creations, deletions and generic
// events never do.
func onUpdate(pass func(e event.UpdateEvent) bool) predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc:  pass,
	}
}

// became passes an update that made is true of a request (in the guards' view).
func became(is func(*v1alpha1.RemediationRequest) bool) predicate.Funcs {
	holds := func(o client.Object) bool { rr := requests.ViewOf(o); return is(&rr) }
	return onUpdate(func(e event.UpdateEvent) bool { return holds(e.ObjectNew) && !holds(e.ObjectOld) })
}

// journalAdvanced passes a status write that left a request Running with its journal
// moved on: it started running, or a step changed state. A write that only updates
// a waiting step's message does not pass; that step's own requeue checks it again.
var journalAdvanced = onUpdate(func(e event.UpdateEvent) bool {
	if requests.PhaseOf(e.ObjectNew) != v1alpha1.PhaseRunning {
		return false
	}
	return requests.PhaseOf(e.ObjectOld) != v1alpha1.PhaseRunning || !slices.Equal(stepStates(e.ObjectOld), stepStates(e.ObjectNew))
})

// slotGranted passes admission's grant of a slot: the request is decided again and
// starts in it.
var slotGranted = became(lifecycle.Granted)

// slotGivenBack passes admission's give-back of a slot not used in time: the request
// is decided again, and rejoins the line if the policy still allows it.
var slotGivenBack = became(lifecycle.SlotExpired)

// stoppedRunning passes a request whose playbook just stopped (finished, failed,
// or went back to waiting) or a deleted one that was running. It also passes one the
// cache saw become terminal without seeing it run: after a cut watch, the re-list
// takes a request from New or Waiting straight to Succeeded. Missing that stop left
// the requests waiting on its Lease or node asleep until their recheck (make
// chaos-smoke, R2 through injected faults). Slots are admission's, which watches for
// itself (package admission).
var stoppedRunning = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := requests.PhaseOf(e.ObjectOld), requests.PhaseOf(e.ObjectNew)
		return (old == v1alpha1.PhaseRunning && cur != v1alpha1.PhaseRunning) || (!old.Terminal() && cur.Terminal())
	},
	DeleteFunc: func(e event.DeleteEvent) bool { return requests.PhaseOf(e.Object) == v1alpha1.PhaseRunning },
}
