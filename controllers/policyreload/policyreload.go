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

// Reloader re-reads --policies-dir periodically, so that the controller decides with
// the policy reviewed and merged without a restart (the kubelet updates a mounted
// ConfigMap in place).
//
// A policy that cannot be used is never half-used: the engine keeps the last good
// one (or, started on files that do not load, decides nothing: policies.LoadOrWait),
// and the reloader says so where an operator looks: the log, the metrics and a
// Warning Event on the controller's own Pod (from the downward API; none outside a
// cluster), since a reload belongs to no request. Each replica reports for itself.
type Reloader struct {
	Engine   *policies.Engine
	Interval time.Duration
	// Recorder and Pod receive the reload Events; either nil means none.
	Recorder record.EventRecorder
	Pod      *corev1.ObjectReference

	// lastErr is the last failure reported: a broken directory is reported once.
	lastErr string
}

// Start runs until ctx ends.
func (p *Reloader) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("policy-reloader")
	if p.Recorder == nil || p.Pod == nil {
		log.Info("Policy reload failures are reported in the log and metrics only: the controller's Pod is not known (POD_NAME, POD_NAMESPACE)")
	}
	// The first reload is at once: a controller started without a policy says so now,
	// not one Interval later; with a good policy it changes nothing.
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
		clearReloadFailing()
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
		clearReloadFailing()
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

// NeedLeaderElection is false: every replica must have the current policy once it leads.
func (p *Reloader) NeedLeaderElection() bool { return false }
