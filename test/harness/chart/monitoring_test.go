package chart_test

// This file owns what the chart ships for monitoring besides the metrics Service and
// ServiceMonitor: the PrometheusRule with the controller's alerts and the Grafana
// dashboard. test/promrules (its own Go module, for Prometheus' dependencies) parses
// both with Prometheus' rulefmt and PromQL parser.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/test/harness/helmchart"
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

// grafanaDashboard is the part of a Grafana dashboard the test reads.
type grafanaDashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestGrafanaDashboard(t *testing.T) {
	const cm = release + "-dashboard"
	t.Run("off by default", func(t *testing.T) {
		assert.Nil(t, find(render(t, nil), "ConfigMap", namespace, cm))
	})
	file, err := os.ReadFile(filepath.Join("files", "dashboards", "remediator.json"))
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		values map[string]any
		ns     string
	}{
		"release namespace": {map[string]any{"metrics": map[string]any{"dashboard": map[string]any{
			"enabled": true, "annotations": map[string]any{"grafana_folder": "Storage"},
		}}}, namespace},
		"Grafana's namespace": {map[string]any{"metrics": map[string]any{"dashboard": map[string]any{
			"enabled": true, "namespace": "monitoring",
		}}}, "monitoring"},
	} {
		t.Run(name, func(t *testing.T) {
			o := find(render(t, tc.values), "ConfigMap", tc.ns, cm)
			require.NotNil(t, o, "no ConfigMap %s/%s", tc.ns, cm)
			c := typed[corev1.ConfigMap](t, o)
			assert.Equal(t, "1", c.Labels["grafana_dashboard"], "the Grafana sidecar's label")
			if tc.ns == namespace {
				assert.Equal(t, "Storage", c.Annotations["grafana_folder"])
			}
			assert.Equal(t, strings.TrimSpace(string(file)), strings.TrimSpace(c.Data["remediator.json"]), "the dashboard goes in as it is")
		})
	}

	var d grafanaDashboard
	dec := json.NewDecoder(bytes.NewReader(file))
	require.NoError(t, dec.Decode(&d), "files/dashboards/remediator.json is not valid JSON")
	assert.False(t, dec.More(), "files/dashboards/remediator.json: trailing data")
	assert.Equal(t, "remediator", d.UID)
	require.NotEmpty(t, d.Panels)
	registered := registeredMetrics(t)
	seen := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		if !assert.NotEmpty(t, p.Targets, "panel %q has no query", p.Title) {
			continue
		}
		for _, tg := range p.Targets {
			assert.NotEmpty(t, tg.Expr, "panel %q: empty query", p.Title)
			assertQueriesRegistered(t, registered, "panel "+p.Title, tg.Expr)
			for _, m := range remediatorMetric.FindAllString(tg.Expr, -1) {
				seen[strings.TrimSuffix(m, "_bucket")] = true
			}
		}
	}
	// The metrics the dashboard was drawn over each have a panel; a metric added to
	// the controller since is only reported, for a panel to follow.
	for _, name := range []string{
		"remediator_requests_total", "remediator_decision_duration_seconds", "remediator_step_duration_seconds",
		"remediator_active_remediations", "remediator_policy_info", "remediator_policy_load_errors_total",
		"remediator_policy_reload_failing", "remediator_decisions_failed_closed_total",
	} {
		assert.True(t, seen[name] || seen[name+"_count"], "no panel shows %s", name)
	}
	for name := range registered {
		if !strings.HasSuffix(name, "_bucket") && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") &&
			!seen[name] && !seen[name+"_count"] {
			t.Logf("files/dashboards/remediator.json has no panel for %s yet", name)
		}
	}
}
