package remediationrequest

// The reconciler's side of the stop button (package pause): a request the pause
// holds waits with reason Paused, and a running playbook holds where it is until the
// resume wakes it.

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/pause"
)

// pausedMessage is the pause's message while Remediator is paused, empty otherwise,
// read from the cache once per reconcile (s.pause).
func (r *Reconciler) pausedMessage(ctx context.Context, s *scope) string {
	if s.pause == nil {
		p := pause.Read(ctx, r.Client, r.PauseKey())
		s.pause = &p
	}
	return s.pause.Message()
}

// wakePaused maps a change of the pause ConfigMap to every request the pause holds:
// on a resume they are decided again or go on with their playbook.
func (r *Reconciler) wakePaused(ctx context.Context, _ client.Object) []reconcile.Request {
	// Each held request rechecks the pause on its own within pauseRecheck should the
	// list fail.
	return r.guarded(ctx, "Listing the requests the pause holds", keyPaused)
}

// pauseRecheck is how often a held request looks at the pause again on its own,
// should the resume's watch event be lost.
const pauseRecheck = time.Minute

// hold keeps a running playbook where it is while Remediator is paused: nothing is
// restored (a cordoned node stays cordoned), and the request says why.
func (r *Reconciler) hold(ctx context.Context, s *scope, msg string) (ctrl.Result, error) {
	if lifecycle.Hold(s.rr, msg) {
		s.record(corev1.EventTypeWarning, v1alpha1.ReasonPaused, msg)
		ctrl.LoggerFrom(ctx).Info("Holding the playbook: paused")
	}
	return ctrl.Result{RequeueAfter: pauseRecheck}, nil
}

// PauseKey is the pause ConfigMap the reconciler reads.
func (r *Reconciler) PauseKey() types.NamespacedName {
	if r.Pause.Name == "" {
		return pause.DefaultConfigMap
	}
	return r.Pause
}
