package policyreload

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/remediator/remediator/policies"
)

// The policy's metrics, on controller-runtime's registry next to the controller's.
var (
	policyLoadErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "remediator_policy_load_errors_total",
		Help: "Failed attempts to reload the policies from --policies-dir; the previous policies stay in use.",
	})
	policyInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "remediator_policy_info",
		Help: "The policies in use: 1 for the current digest and source.",
	}, []string{"digest", "source"})
	policyReloadFailing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "remediator_policy_reload_failing",
		Help: "1 for the reason (read, syntax, compile, no-policy, unknown-playbook) the policies in --policies-dir were last refused for, while they are; 0 once a reload succeeds. The policy of remediator_policy_info stays in use meanwhile.",
	}, []string{"reason"})
)

// RegisterMetrics registers the policy's metrics and sets them for engine, every
// reload-failure reason at 0 so that an alert on an increase sees the first one.
func RegisterMetrics(engine *policies.Engine) error {
	for _, c := range []prometheus.Collector{policyLoadErrors, policyInfo, policyReloadFailing} {
		if err := metrics.Registry.Register(c); err != nil {
			return err
		}
	}
	setPolicyInfo(engine)
	clearReloadFailing()
	return nil
}

func clearReloadFailing() {
	for _, r := range policies.LoadReasons {
		policyReloadFailing.WithLabelValues(r).Set(0)
	}
}

func setPolicyInfo(e *policies.Engine) {
	policyInfo.Reset()
	policyInfo.WithLabelValues(e.Digest(), e.Source()).Set(1)
}
