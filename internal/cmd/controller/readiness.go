package controller

import (
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// suspendable is what the readiness check reads of the policy engine
// (policies.Engine.Suspended).
type suspendable interface {
	Suspended() (bool, string)
}

// policyReadiness is the controller's readiness check: not ready while the policy
// engine is suspended, that is while runaway evaluations of the policy in use make
// every decision a rejection (rule policy-timeout) until they end or a reload swaps
// in another policy. The pod is then alive (a restart would only lose the runaways'
// evidence, and a reload can fix it) but visibly not deciding: kubectl shows it not
// ready and a rollout waits. The endpoint withholds the reason, so each change of
// state is logged with it, once, not at every probe.
func policyReadiness(engine suspendable, log logr.Logger) healthz.Checker {
	var wasSuspended atomic.Bool
	return func(*http.Request) error {
		suspended, why := engine.Suspended()
		if wasSuspended.Swap(suspended) != suspended {
			if suspended {
				log.Info("Not ready: the policy engine is suspended", "reason", why)
			} else {
				log.Info("Ready again: the policy engine decides")
			}
		}
		if suspended {
			return errors.New(why)
		}
		return nil
	}
}
