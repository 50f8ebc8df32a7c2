// Package policyreload re-reads the policy directory on every replica: a ConfigMap
// mounted there changes in place, and a policy that fails to load is refused and
// reported while the last good one stays in use.
package policyreload

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/policies"
)

// Event reasons of the policy reloader, on the controller's own Pod.
const (
	EventReloaded     = "PolicyReloaded"
	EventReloadFailed = "PolicyReloadFailed"
)

// Reloader re-reads --policies-dir periodically: a ConfigMap mounted there is
// updated in place by the kubelet, and the controller should decide with the policy
// that was reviewed and merged without a restart.
//
// A policy that cannot be used is never half-used: the engine keeps deciding with the
// last good policy (or, started on files that do not load, decides nothing until they
// do: policies.LoadOrWait), and the reloader says so in all three places an operator looks:
// the log (naming the digest kept and why the new files were refused), the metrics
// (remediator_policy_load_errors_total per attempt, remediator_policy_reload_failing
// by reason, remediator_policy_info still showing the digest in use) and a Warning
// Event. The Event needs an object, and a reload belongs to no request: it is recorded
// on the controller's own Pod (Pod, from the downward API), where `kubectl describe
// pod` shows it; without a Pod (run outside a cluster) there is no Event and the log
// and metrics say it alone. Each replica reloads, and reports, for itself.
type Reloader struct {
	Engine   *policies.Engine
	Interval time.Duration
	// Recorder and Pod receive the reload Events; either nil means none.
	Recorder record.EventRecorder
	Pod      *corev1.ObjectReference

	// lastErr is the last failure reported, so that a directory that stays broken is
	// logged and evented once, not every Interval.
	lastErr string
}

// Start runs until ctx ends.
func (p *Reloader) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("policy-reloader")
	if p.Recorder == nil || p.Pod == nil {
		log.Info("Policy reload failures are reported in the log and metrics only: the controller's Pod is not known (POD_NAME, POD_NAMESPACE)")
	}
	// The first reload is at once: a controller started without a policy says so now
	// (the log, the Event, the gauge the PolicyReloadFailing alert reads), not one
	// Interval later; with a good policy it changes nothing.
	wait.UntilWithContext(ctx, func(context.Context) { p.reload(log) }, p.Interval)
	return nil
}

// reload is one attempt.
func (p *Reloader) reload(log logr.Logger) {
	changed, err := p.Engine.Reload()
	source, digest := p.Engine.Source(), p.Engine.Digest()
	if err != nil {
		reason := "unknown"
		if le := (*policies.LoadError)(nil); errors.As(err, &le) {
			reason = le.Reason
		}
		policyLoadErrors.Inc()
		for _, r := range policies.LoadReasons {
			policyReloadFailing.WithLabelValues(r).Set(0)
		}
		policyReloadFailing.WithLabelValues(reason).Set(1)
		if err.Error() == p.lastErr {
			log.V(1).Info("The policies are still refused; the last good policy stays in use", "reason", reason, "source", source, "digestKept", digest)
			return
		}
		p.lastErr = err.Error()
		if digest == policies.NoPolicy {
			log.Error(err, "Loading policies failed; no policy is in use, so nothing is decided", "reason", reason, "source", source)
			p.event(corev1.EventTypeWarning, EventReloadFailed,
				"The policies in %s were refused (%s: %v); no policy is in use, so nothing is decided: requests wait (reason PolicyInvalid). Fix the policy files; they are read again every %s.",
				source, reason, err, p.Interval)
			return
		}
		log.Error(err, "Reloading policies failed; the last good policy stays in use", "reason", reason, "source", source, "digestKept", digest)
		p.event(corev1.EventTypeWarning, EventReloadFailed,
			"The policies in %s were refused (%s: %v); the last good policy %s stays in use. Fix the policy files; they are read again every %s.", source, reason, err, digest, p.Interval)
		return
	}
	if p.lastErr != "" || changed {
		for _, r := range policies.LoadReasons {
			policyReloadFailing.WithLabelValues(r).Set(0)
		}
	}
	wasFailing := p.lastErr != ""
	p.lastErr = ""
	switch {
	case changed:
		setPolicyInfo(p.Engine)
		log.Info("Reloaded policies", "source", source, "digest", digest)
		p.event(corev1.EventTypeNormal, EventReloaded, "Reloaded the policies in %s: now deciding with policy %s.", source, digest)
	case wasFailing:
		log.Info("The policies load again, unchanged from the policy in use", "source", source, "digest", digest)
	}
}

func (p *Reloader) event(eventType, reason, format string, args ...any) {
	if p.Recorder == nil || p.Pod == nil {
		return
	}
	p.Recorder.Eventf(p.Pod, eventType, reason, format, args...)
}

// NeedLeaderElection is false: every replica must decide with the current policy
// once it becomes the leader.
func (p *Reloader) NeedLeaderElection() bool { return false }
