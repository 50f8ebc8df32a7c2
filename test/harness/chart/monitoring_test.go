package chart_test

// This file owns what the chart ships for monitoring besides the metrics Service and
// ServiceMonitor: the PrometheusRule with the controller's alerts and the Grafana
// dashboard. test/promrules (its own Go module, for Prometheus' dependencies) parses
// both with Prometheus' rulefmt and PromQL parser.

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/harness/helmchart"
	"github.com/remediator/remediator/test/harness/markdown"
)

// defaultRunbookBase is metrics.prometheusRule.runbookBaseURL's default: the
// on-call page, docs/oncall.md, on GitHub.
const defaultRunbookBase = "https://github.com/remediator/remediator/blob/main/docs/oncall.md"

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

// registeredMetrics are the metric names the controller (every non-test file of
// controllers/ and its packages, controllers/remediationrequest/metrics.go above all) and the sync agent
// (internal/cmd/sync/metrics.go) register, read from their source (Name: "..." in
// the collectors' options, and NewDesc's first argument), with the series a
// histogram adds.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "controllers", "*.go"))
	require.NoError(t, err)
	sub, err := filepath.Glob(filepath.Join("..", "..", "controllers", "*", "*.go"))
	require.NoError(t, err)
	files = append(files, sub...)
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
	files = append(files, filepath.Join("..", "..", "internal", "cmd", "sync", "metrics.go"))
	names := map[string]bool{}
	for _, file := range files {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(remediator_[a-z0-9_]+)"`).FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		for _, m := range regexp.MustCompile(`NewHistogram(?:Vec)?\(prometheus\.HistogramOpts\{\s*Name:\s*"([a-z0-9_]+)"`).FindAllSubmatch(src, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[string(m[1])+suffix] = true
			}
		}
	}
	require.NotEmpty(t, names, "controllers/remediationrequest/metrics.go: no metric names found; update registeredMetrics")
	return names
}

// pendingMetrics are metrics the chart's queries read that another part of issue 26
// adds to the controller: reported, not failed, until they are registered.
var pendingMetrics = map[string]string{
	"remediator_pause_started_timestamp_seconds": "the pause (kubectl remediator pause)",
}

var remediatorMetric = regexp.MustCompile(`\bremediator_[a-z0-9_]+\b`)

// assertQueriesRegistered: every remediator_ metric an expression names exists.
func assertQueriesRegistered(t *testing.T, registered map[string]bool, where, expr string) {
	t.Helper()
	for _, name := range remediatorMetric.FindAllString(expr, -1) {
		if !registered[name] && pendingMetrics[name] != "" {
			t.Logf("%s queries %s (%s), which the controller does not register yet", where, name, pendingMetrics[name])
			continue
		}
		assert.True(t, registered[name], "%s queries %s, which the controller and the sync agent do not register", where, name)
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
		for _, a := range []string{"summary", "description", "runbook_url"} {
			assert.NotEmpty(t, strings.TrimSpace(r.Annotations[a]), "%s: want a %s annotation", r.Alert, a)
		}
		assert.NotContains(t, r.Annotations, "runbook", "%s: runbook_url, which Alertmanager and Grafana read, not a prose runbook", r.Alert)
		assert.Equal(t, defaultRunbookBase+"#"+strings.ToLower(r.Alert), r.Annotations["runbook_url"], "%s: runbook_url", r.Alert)
		assertQueriesRegistered(t, registered, r.Alert, r.Expr)
		// Helm must have left Prometheus' own templates alone.
		for _, a := range r.Annotations {
			assert.NotContains(t, a, "<no value>", "%s: a template Helm ate", r.Alert)
		}
	}
	// An alert per failure mode; RemediatorSyncStale only with the chart's sync agent.
	assert.Equal(t, []string{"RemediationFailed", "RemediationWaitingTooLong", "RemediationStuck", "PolicyReloadFailing",
		"DecisionsFailedClosed", "RemediationFixDidNotHold", "RemediatorPausedTooLong", "TridentLeaseStuck", "TridentCSIDriverDeregistered", "TridentOldNodePluginOverlap", "RemediatorDetectionFailing"}, alerts)
	assert.Contains(t, pr.Spec.Groups[0].Rules[0].Annotations["summary"], "{{ $labels.remediation }}", "Prometheus' template kept")

	t.Run("detection", func(t *testing.T) {
		values := prometheusRuleOn(nil)
		values["trident"] = map[string]any{"driverName": "csi.example.com"}
		values["detectInterval"] = "2m"
		exprs, summaries, descriptions := map[string]string{}, map[string]string{}, map[string]string{}
		for _, r := range renderPrometheusRule(t, values).Spec.Groups[0].Rules {
			exprs[r.Alert], summaries[r.Alert], descriptions[r.Alert] = r.Expr, r.Annotations["summary"], r.Annotations["description"]
		}
		assert.Contains(t, summaries["TridentCSIDriverDeregistered"], "does not list csi.example.com", "the configured driver")
		assert.Contains(t, descriptions["TridentOldNodePluginOverlap"], "kubelet deregisters csi.example.com", "the configured driver")
		assert.Equal(t, `time() - max by (namespace) (remediator_detection_last_success_timestamp_seconds{namespace="remediator-system"}) > 1200`+
			` or absent(remediator_detection_last_success_timestamp_seconds{namespace="remediator-system"})`,
			exprs["RemediatorDetectionFailing"], "ten scans missed, or none ever succeeded")
		values["detectInterval"] = "0s"
		for _, r := range renderPrometheusRule(t, values).Spec.Groups[0].Rules {
			assert.NotContains(t, []string{"TridentLeaseStuck", "TridentCSIDriverDeregistered", "TridentOldNodePluginOverlap", "RemediatorDetectionFailing"}, r.Alert,
				"with detection off (detectInterval: 0s) nothing exports what %s reads", r.Alert)
		}
	})
	t.Run("with the sync agent", func(t *testing.T) {
		values := prometheusRuleOn(nil)
		values["sync"] = map[string]any{"enabled": true, "repo": "https://git.example.com/r.git"}
		rules := renderPrometheusRule(t, values).Spec.Groups[0].Rules
		var sync []string
		for _, r := range rules {
			if r.Alert == "RemediatorSyncStale" {
				sync = append(sync, r.Expr)
			}
		}
		require.Len(t, sync, 1, "RemediatorSyncStale")
		assert.Equal(t, `time() - max by (namespace) (remediator_sync_last_success_timestamp_seconds{namespace="remediator-system"}) > 900`+
			` or absent(remediator_sync_last_success_timestamp_seconds{namespace="remediator-system"})`, sync[0])

		values["sync"].(map[string]any)["metrics"] = map[string]any{"enabled": false}
		for _, r := range renderPrometheusRule(t, values).Spec.Groups[0].Rules {
			assert.NotEqual(t, "RemediatorSyncStale", r.Alert, "without the sync agent's metrics")
		}
	})
	t.Run("thresholds", func(t *testing.T) {
		rules := renderPrometheusRule(t, prometheusRuleOn(map[string]any{
			"requestWaitingTooLong": map[string]any{"thresholdSeconds": 7200},
			"pausedTooLong":         map[string]any{"thresholdSeconds": 3600},
		})).Spec.Groups[0].Rules
		exprs := map[string]string{}
		for _, r := range rules {
			exprs[r.Alert] = r.Expr
		}
		assert.True(t, strings.HasSuffix(exprs["RemediationWaitingTooLong"], "> 7200"), exprs["RemediationWaitingTooLong"])
		assert.Contains(t, exprs["RemediatorPausedTooLong"], "(remediator_pause_started_timestamp_seconds) > 3600 and ")
	})
	t.Run("severities", func(t *testing.T) {
		// By the alert's impact on the workloads: critical when pods cannot mount
		// their volumes, or an incident is left unfixed (and perhaps a node
		// cordoned); warning for the controller's own health.
		want := map[string]string{
			"RemediationFailed":            "critical",
			"RemediationWaitingTooLong":    "warning",
			"RemediationStuck":             "critical",
			"PolicyReloadFailing":          "warning",
			"DecisionsFailedClosed":        "warning",
			"RemediationFixDidNotHold":     "critical",
			"RemediatorPausedTooLong":      "warning",
			"RemediatorSyncStale":          "warning",
			"TridentLeaseStuck":            "critical",
			"TridentCSIDriverDeregistered": "critical",
			"TridentOldNodePluginOverlap":  "warning",
			"RemediatorDetectionFailing":   "warning",
		}
		values := prometheusRuleOn(nil)
		values["sync"] = map[string]any{"enabled": true, "repo": "https://git.example.com/r.git"}
		got := map[string]string{}
		for _, r := range renderPrometheusRule(t, values).Spec.Groups[0].Rules {
			got[r.Alert] = r.Labels["severity"]
		}
		assert.Equal(t, want, got, "every alert's severity")

		// metrics.prometheusRule.severities overrides one alert's, the others keep theirs.
		values = prometheusRuleOn(map[string]any{"severities": map[string]any{"TridentLeaseStuck": "warning", "RemediatorPausedTooLong": "info"}})
		for _, r := range renderPrometheusRule(t, values).Spec.Groups[0].Rules {
			switch r.Alert {
			case "TridentLeaseStuck":
				assert.Equal(t, "warning", r.Labels["severity"], r.Alert)
			case "RemediatorPausedTooLong":
				assert.Equal(t, "info", r.Labels["severity"], r.Alert)
			default:
				assert.Equal(t, want[r.Alert], r.Labels["severity"], r.Alert)
			}
		}
		for name, severities := range map[string]map[string]any{
			"a severity Alertmanager routes nowhere": {"TridentLeaseStuck": "page"},
			"a misspelt alert":                       {"TridentLeaseStruck": "critical"},
		} {
			_, err := helmchart.Render(release, namespace, prometheusRuleOn(map[string]any{"severities": severities}))
			assert.ErrorContains(t, err, "severities", name)
		}
	})
	t.Run("runbook base URL", func(t *testing.T) {
		rules := renderPrometheusRule(t, prometheusRuleOn(map[string]any{"runbookBaseURL": "https://git.example.com/mirror/remediator/docs/oncall.md"})).Spec.Groups[0].Rules
		for _, r := range rules {
			assert.Equal(t, "https://git.example.com/mirror/remediator/docs/oncall.md#"+strings.ToLower(r.Alert), r.Annotations["runbook_url"])
		}
		_, err := helmchart.Render(release, namespace, prometheusRuleOn(map[string]any{"runbookBaseURL": "https://x.example.com/docs/oncall.md#alerts"}))
		assert.ErrorContains(t, err, "runbookBaseURL", "a base URL with a fragment")
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
		// Waiting requests, durations, the pause and the sync agent (issue 26).
		"remediator_requests_waiting", "remediator_oldest_waiting_request_age_seconds",
		"remediator_remediation_duration_seconds", "remediator_running_step_age_seconds",
		"remediator_pause_started_timestamp_seconds",
		"remediator_sync_last_success_timestamp_seconds", "remediator_sync_failures_total", "remediator_sync_revision_info",
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

// allAlertsValues turns on every alert the chart has: the PrometheusRule, and the
// sync agent for RemediatorSyncStale.
func allAlertsValues() map[string]any {
	values := prometheusRuleOn(nil)
	values["sync"] = map[string]any{"enabled": true, "repo": "https://git.example.com/r.git"}
	return values
}

// TestRunbookURLsResolveToOnCallHeadings: every alert's runbook_url is the on-call
// page on GitHub and the anchor of one of its headings.
func TestRunbookURLsResolveToOnCallHeadings(t *testing.T) {
	t.Run("GitHub's anchors", func(t *testing.T) {
		// As the docs' own links spell them.
		for heading, anchor := range map[string]string{
			"Metrics and alerts":                                   "metrics-and-alerts",
			"Finding incidents: `remediator scan`":                 "finding-incidents-remediator-scan",
			"remediator plan, the pull-request check":              "remediator-plan-the-pull-request-check",
			"remediator sync, the built-in agent on gitops-engine": "remediator-sync-the-built-in-agent-on-gitops-engine",
			"RemediationWaitingTooLong":                            "remediationwaitingtoolong",
			"The [chart](charts/remediator/README.md)'s values":    "the-charts-values",
		} {
			assert.Equal(t, anchor, markdown.Anchor(heading), heading)
		}
	})
	anchors, err := markdown.FileAnchors(filepath.Join("..", "..", "docs", "oncall.md"))
	require.NoError(t, err)
	require.True(t, anchors["alerts"], "docs/oncall.md's headings: %v", anchors)
	rules := renderPrometheusRule(t, allAlertsValues()).Spec.Groups[0].Rules
	require.NotEmpty(t, rules)
	for _, r := range rules {
		url := r.Annotations["runbook_url"]
		base, anchor, ok := strings.Cut(url, "#")
		if !assert.True(t, ok, "%s: runbook_url %q has no anchor", r.Alert, url) {
			continue
		}
		assert.Equal(t, defaultRunbookBase, base, "%s: runbook_url", r.Alert)
		assert.True(t, anchors[anchor], "%s: runbook_url %q: docs/oncall.md has no heading with the anchor %q", r.Alert, url, anchor)
	}
}

var (
	// v1alpha1.StepCordon: {cordon{}.Done, cordon{}.Run, Timeouts.step},
	stepLibraryEntry = regexp.MustCompile(`v1alpha1\.(Step\w+):\s*\{[^{}]*(?:\{\}[^{}]*)*,\s*Timeouts\.(\w+)\}`)
	// StepCordon = "cordon"
	stepNameConst  = regexp.MustCompile(`\b(Step\w+)\s*=\s*"(\w+)"`)
	stuckThreshold = regexp.MustCompile(`remediator_running_step_age_seconds\{step(=~|!~)"([^"]*)"\}\) > ([0-9.e+]+)`)
)

// TestRemediationStuckKnowsEveryStepTimeout: RemediationStuck holds each step to the
// timeout the controller bounds it with (the step's Timeout in remediations), read
// from the chart's values for the timeouts.
func TestRemediationStuckKnowsEveryStepTimeout(t *testing.T) {
	read := func(glob string) string {
		files, err := filepath.Glob(glob)
		require.NoError(t, err)
		var b strings.Builder
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			b.Write(src)
		}
		return b.String()
	}
	steps, api := read(filepath.Join("..", "..", "remediations", "*.go")), read(filepath.Join("..", "..", "api", "v1alpha1", "*.go"))
	names := map[string]string{}
	for _, m := range stepNameConst.FindAllStringSubmatch(api, -1) {
		names[m[1]] = m[2]
	}
	// Distinct timeouts, to tell which one a step is held to.
	values := prometheusRuleOn(nil)
	values["stepTimeout"], values["evictionTimeout"], values["podTerminationTimeout"], values["pluginRestartTimeout"] = "1m", "2m30s", "1h", "4m"
	seconds := map[string]string{"step": "60", "eviction": "150", "podTermination": "3600", "pluginRestart": "240"}
	want := map[string]string{}
	for _, m := range stepLibraryEntry.FindAllStringSubmatch(steps, -1) {
		name := names[m[1]]
		require.NotEmpty(t, name, "no constant v1alpha1.%s", m[1])
		require.NotEmpty(t, seconds[m[2]], "step %s: its timeout is Timeouts.%s, which this test does not know", name, m[2])
		want[name] = seconds[m[2]]
	}
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	for name, pb := range playbooks {
		for _, step := range pb.Steps {
			require.Contains(t, want, step, "playbook %s's step %s: not found in the step library's source", name, step)
		}
	}

	var expr string
	for _, r := range renderPrometheusRule(t, values).Spec.Groups[0].Rules {
		if r.Alert == "RemediationStuck" {
			expr = r.Expr
		}
	}
	require.NotEmpty(t, expr, "no RemediationStuck")
	got, rest := map[string]string{}, ""
	for _, m := range stuckThreshold.FindAllStringSubmatch(expr, -1) {
		if m[1] == "!~" {
			assert.Empty(t, rest, "one catch-all clause")
			rest = m[3]
			assert.ElementsMatch(t, slices.Collect(maps.Keys(want)), strings.Split(m[2], "|"), "the catch-all leaves out the known steps")
			continue
		}
		for _, step := range strings.Split(m[2], "|") {
			assert.NotContains(t, got, step, "%s in two clauses", step)
			got[step] = m[3]
		}
	}
	assert.Equal(t, want, got, "each step's timeout, in seconds: %s", expr)
	assert.Equal(t, "3600", rest, "a step the chart does not know: the longest timeout")
}

// TestRemediationWaitingTooLongLeavesOutWaitsByDesign: a request waiting for its
// maintenance window, or behind a pause, does not fire RemediationWaitingTooLong;
// the reasons it leaves out are the controller's.
func TestRemediationWaitingTooLongLeavesOutWaitsByDesign(t *testing.T) {
	var expr string
	for _, r := range renderPrometheusRule(t, prometheusRuleOn(nil)).Spec.Groups[0].Rules {
		if r.Alert == "RemediationWaitingTooLong" {
			expr = r.Expr
		}
	}
	m := regexp.MustCompile(`reason!~"([^"]*)"`).FindStringSubmatch(expr)
	require.NotNil(t, m, expr)
	// "Paused": the Progressing reason of a request held by `kubectl remediator pause`
	// (v1alpha1.ReasonPaused).
	assert.ElementsMatch(t, []string{v1alpha1.ReasonWaitingForWindow, v1alpha1.ReasonWindowClosed, "Paused"}, strings.Split(m[1], "|"))
}
