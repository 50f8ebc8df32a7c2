package verification

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/remediator/remediator/api/v1alpha1"
)

// fixNotHeld counts the requests whose FixHeld turned False.
var fixNotHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "remediator_fix_not_held_total",
	Help: "Succeeded requests whose incident came back within --verify-fix-for (FixHeld=False: the Lease retained again by the same holder, a FailedMount on the released volume's pods or those pods not Running and Ready at the window's end, or the driver deregistered again), by remediation.",
}, []string{"remediation"})

// RegisterMetrics registers fixNotHeld with a series per remediation from the start,
// so that an alert on its increase sees the first one.
func RegisterMetrics() error {
	if err := metrics.Registry.Register(fixNotHeld); err != nil {
		return err
	}
	for _, r := range []v1alpha1.Remediation{v1alpha1.RemediationReleaseLUKSLease, v1alpha1.RemediationReregisterCSIDriver} {
		fixNotHeld.WithLabelValues(string(r))
	}
	return nil
}

// announceFixHeld emits the Event and counts the metric when before -> after turned
// FixHeld False; called only after the write succeeded, so nothing announces twice.
func (r *Reconciler) announceFixHeld(before, after *v1alpha1.RemediationRequest) {
	c := meta.FindStatusCondition(after.Status.Conditions, v1alpha1.ConditionFixHeld)
	if c == nil || c.Status != metav1.ConditionFalse {
		return
	}
	if b := meta.FindStatusCondition(before.Status.Conditions, v1alpha1.ConditionFixHeld); b != nil && b.Status == metav1.ConditionFalse {
		return
	}
	fixNotHeld.WithLabelValues(string(after.Spec.Remediation)).Inc()
	r.Recorder.Event(after, corev1.EventTypeWarning, v1alpha1.EventFixNotHeld, c.Message)
}
