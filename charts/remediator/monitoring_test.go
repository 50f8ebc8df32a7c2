package chart_test

// This file owns what the chart ships for monitoring besides the metrics Service and
// ServiceMonitor: the PrometheusRule with the controller's alerts and the Grafana
// dashboard. test/promrules (its own Go module, for Prometheus' dependencies) parses
// both with Prometheus' rulefmt and PromQL parser.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/test/helmchart"
)

// prometheusRule is the part of prometheus-operator's monitoring.coreos.com/v1
// PrometheusRule the chart uses, with the upstream JSON names so that strict
// decoding catches a misspelt field.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// registeredMetrics are the metric names controllers/metrics.go registers, read from
// its source (Name: "..." in the collectors' options, and NewDesc's first argument),
// with the series a histogram adds.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "controllers", "metrics.go"))
	require.NoError(t, err)
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(remediator_[a-z0-9_]+)"`).FindAllSubmatch(src, -1) {
		names[string(m[1])] = true
	}
	require.NotEmpty(t, names, "controllers/metrics.go: no metric names found; update registeredMetrics")
	for _, m := range regexp.MustCompile(`NewHistogram(?:Vec)?\(prometheus\.HistogramOpts\{\s*Name:\s*"([a-z0-9_]+)"`).FindAllSubmatch(src, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			names[string(m[1])+suffix] = true
		}
	}
	return names
}

var remediatorMetric = regexp.MustCompile(`\bremediator_[a-z0-9_]+\b`)

// assertQueriesRegistered: every remediator_ metric an expression names exists.
func assertQueriesRegistered(t *testing.T, registered map[string]bool, where, expr string) {
	t.Helper()
	for _, name := range remediatorMetric.FindAllString(expr, -1) {
		assert.True(t, registered[name], "%s queries %s, which controllers/metrics.go does not register", where, name)
	}
}

func renderPrometheusRule(t *testing.T, values map[string]any) *prometheusRule {
	t.Helper()
	o := find(render(t, values), "PrometheusRule", namespace, release)
	require.NotNil(t, o, "no PrometheusRule")
	pr := &prometheusRule{}
	require.NoError(t, strictDecode(o, pr))
	return pr
}

func prometheusRuleOn(extra map[string]any) map[string]any {
	pr := map[string]any{"enabled": true}
	for k, v := range extra {
		pr[k] = v
	}
	return map[string]any{"metrics": map[string]any{"prometheusRule": pr}}
}

func TestPrometheusRule(t *testing.T) {
	t.Run("off by default", func(t *testing.T) {
		for _, o := range render(t, nil) {
			assert.NotEqual(t, "PrometheusRule", o.GetKind(), "%s rendered by default", ref(o))
		}
	})
	registered := registeredMetrics(t)
	pr := renderPrometheusRule(t, prometheusRuleOn(map[string]any{
		"labels":     map[string]any{"release": "kube-prometheus"},
		"ruleLabels": map[string]any{"team": "storage"},
	}))
	assert.Equal(t, "kube-prometheus", pr.Labels["release"])
	require.Len(t, pr.Spec.Groups, 1)
	var alerts []string
	for _, r := range pr.Spec.Groups[0].Rules {
		alerts = append(alerts, r.Alert)
		assert.NotEmpty(t, r.For, "%s: want a for", r.Alert)
		assert.Contains(t, []string{"info", "warning", "critical"}, r.Labels["severity"], "%s: severity label", r.Alert)
		assert.Equal(t, "storage", r.Labels["team"], "%s: ruleLabels", r.Alert)
		for _, a := range []string{"summary", "description", "runbook"} {
			assert.NotEmpty(t, strings.TrimSpace(r.Annotations[a]), "%s: want a %s annotation", r.Alert, a)
		}
		assertQueriesRegistered(t, registered, r.Alert, r.Expr)
		// Helm must have left Prometheus' own templates alone.
		for _, a := range r.Annotations {
			assert.NotContains(t, a, "<no value>", "%s: a template Helm ate", r.Alert)
		}
	}
	// The README's example alerts, and the failed-closed decisions.
	assert.Equal(t, []string{"RemediationFailed", "RemediationStuck", "PolicyReloadFailing", "DecisionsFailedClosed", "TridentLeaseStuck"}, alerts)
	assert.Contains(t, pr.Spec.Groups[0].Rules[0].Annotations["summary"], "{{ $labels.remediation }}", "Prometheus' template kept")

	t.Run("trident namespace", func(t *testing.T) {
		values := prometheusRuleOn(nil)
		values["trident"] = map[string]any{"namespace": "netapp-trident"}
		rules := renderPrometheusRule(t, values).Spec.Groups[0].Rules
		last := rules[len(rules)-1]
		require.Equal(t, "TridentLeaseStuck", last.Alert)
		assert.Equal(t, `time() - kube_lease_renew_time{namespace="netapp-trident"} > 600`, last.Expr)
	})
	t.Run("without TridentLeaseStuck", func(t *testing.T) {
		rules := renderPrometheusRule(t, prometheusRuleOn(map[string]any{"tridentLeaseStuck": map[string]any{"enabled": false}})).Spec.Groups[0].Rules
		for _, r := range rules {
			assert.NotEqual(t, "TridentLeaseStuck", r.Alert)
		}
	})
	t.Run("needs metrics", func(t *testing.T) {
		values := prometheusRuleOn(nil)
		values["metrics"].(map[string]any)["enabled"] = false
		_, err := helmchart.Render(release, namespace, values)
		assert.ErrorContains(t, err, "metrics.enabled")
	})
}
