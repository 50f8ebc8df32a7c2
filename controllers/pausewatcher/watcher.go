// Package pausewatcher follows the pause ConfigMap (package pause): it exports when
// the pause began and records who paused or resumed, and why, as Events on the
// ConfigMap and in the log. Requests read the pause themselves; this runnable only
// reports it.
package pausewatcher

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/pause"
)

// pausedSince is remediator_pause_started_timestamp_seconds.
var pausedSince = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "remediator_pause_started_timestamp_seconds",
	Help: "When the current pause began (unix seconds, from the pause ConfigMap); 0 when Remediator is not paused.",
})

// Watcher follows the pause ConfigMap: it exports when the pause began and
// records who paused or resumed, and why, on the ConfigMap as Events and in the log.
type Watcher struct {
	Client   client.Client
	Key      types.NamespacedName
	Recorder record.EventRecorder

	last *pause.State
}

// SetupWithManager watches the one ConfigMap.
func (w *Watcher) SetupWithManager(mgr ctrl.Manager) error {
	if err := metrics.Registry.Register(pausedSince); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return fmt.Errorf("registering the pause metric: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("pause").
		For(&corev1.ConfigMap{}, builder.WithPredicates(pause.IsObject(w.Key))).
		Complete(w)
}

// Reconcile exports the pause state and says when it changed.
func (w *Watcher) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	p := pause.Read(ctx, w.Client, w.Key)
	if p.Paused {
		pausedSince.Set(float64(p.At.Unix()))
	} else {
		pausedSince.Set(0)
	}
	if w.last != nil && w.last.Paused == p.Paused {
		return ctrl.Result{}, nil
	}
	first := w.last == nil
	w.last = &p
	log := ctrl.LoggerFrom(ctx).WithValues("configMap", klog.KRef(w.Key.Namespace, w.Key.Name))
	cm := &corev1.ConfigMap{}
	haveCM := w.Client.Get(ctx, w.Key, cm) == nil
	switch {
	case p.Paused:
		log.Info("Paused", "by", p.By, "reason", p.Reason, "since", p.At)
		if haveCM {
			w.Recorder.Eventf(cm, corev1.EventTypeWarning, v1alpha1.ReasonPaused, "Paused by %s: %s", pause.OrUnknown(p.By), p.Reason)
		}
	case !first:
		log.Info("Resumed", "by", cm.Data[v1alpha1.PauseKeyBy], "reason", cm.Data[v1alpha1.PauseKeyReason])
		if haveCM {
			w.Recorder.Eventf(cm, corev1.EventTypeNormal, "Resumed", "Resumed by %s: %s", pause.OrUnknown(cm.Data[v1alpha1.PauseKeyBy]), cm.Data[v1alpha1.PauseKeyReason])
		}
	}
	return ctrl.Result{}, nil
}
