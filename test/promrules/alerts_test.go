package promrules

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"sigs.k8s.io/yaml"
)

// The alerts' unit tests, with the semantics of `promtool test rules`: input series
// in the expanding notation ("0+60x30", "1x4", "_", "stale") loaded at a 1m
// interval, the rendered rules evaluated by Prometheus' rule manager every minute
// from time 0 (time() is seconds since then) with `for` honoured, and, at the eval
// time, the alerts firing for one alert name compared, labels exactly, with the
// expected ones. promtool is a main package; this is its loop
// (cmd/promtool/unittest.go) on the same libraries: promqltest's lazy loader, the
// PromQL engine and rules.Manager.

const evalInterval = time.Minute

// alertCase is one alert_rule_test of promtool: at `at`, exactly the alerts `fire`
// (their labels, besides alertname and severity) fire for alert.
type alertCase struct {
	name string
	// values go over the chart's defaults, with metrics.prometheusRule.enabled.
	values map[string]any
	// series are promqltest load lines: `metric{labels} values`, 1m apart.
	series []string
	at     time.Duration
	// start is when the series and the evaluations begin (promtool's
	// start_timestamp), for series of Unix times; zero is the Unix epoch.
	start time.Time
	fire  []map[string]string
	// annotations, when set, are what the (only) firing alert says, key by key.
	annotations map[string]string
}

// alertTests holds, per alert, cases where it fires and cases where it does not;
// TestEveryAlertHasUnitTests checks both exist for every alert the chart renders.
var alertTests = map[string][]alertCase{
	"RemediationFailed": {
		{
			name:   "a request failed",
			series: []string{`remediator_requests_total{remediation="release-luks-lease",outcome="Failed"} 0 0 0 1x10`},
			at:     6 * time.Minute,
			fire:   []map[string]string{{"remediation": "release-luks-lease"}},
			annotations: map[string]string{
				"summary": "A release-luks-lease remediation failed",
			},
		},
		{
			name: "requests succeeded and were rejected",
			series: []string{
				`remediator_requests_total{remediation="release-luks-lease",outcome="Failed"} 0x10`,
				`remediator_requests_total{remediation="release-luks-lease",outcome="Succeeded"} 0+1x10`,
				`remediator_requests_total{remediation="reregister-csi-driver",outcome="Rejected"} 0+1x10`,
			},
			at: 10 * time.Minute,
		},
		{
			name:   "a failure 20 minutes ago has left the window",
			series: []string{`remediator_requests_total{remediation="release-luks-lease",outcome="Failed"} 0 1x30`},
			at:     25 * time.Minute,
		},
	},
	"RemediationFixDidNotHold": {
		{
			name: "a released Lease was retained again by the same holder",
			series: []string{
				`remediator_fix_not_held_total{remediation="release-luks-lease"} 0 0 0 1x10`,
				`remediator_fix_not_held_total{remediation="reregister-csi-driver"} 0x13`,
			},
			at:   6 * time.Minute,
			fire: []map[string]string{{"remediation": "release-luks-lease"}},
			annotations: map[string]string{
				"summary": "A release-luks-lease fix did not hold",
			},
		},
		{
			name:   "every fix held",
			series: []string{`remediator_fix_not_held_total{remediation="release-luks-lease"} 0x70`},
			at:     60 * time.Minute,
		},
		{
			name:   "a fix that did not hold 90 minutes ago has left the window",
			series: []string{`remediator_fix_not_held_total{remediation="reregister-csi-driver"} 0 1x100`},
			at:     95 * time.Minute,
		},
	},
	"RemediationWaitingTooLong": {
		{
			name:   "in line for a slot for more than an hour",
			series: []string{`remediator_oldest_waiting_request_age_seconds{remediation="release-luks-lease",reason="WaitingForRemediationSlot"} 0+60x80`},
			at:     70 * time.Minute,
			fire:   []map[string]string{{"remediation": "release-luks-lease", "reason": "WaitingForRemediationSlot"}},
			annotations: map[string]string{
				"summary": "A release-luks-lease request has been waiting for 1h 10m 0s (WaitingForRemediationSlot)",
			},
		},
		{
			name:   "behind another remediation on the same node, with a threshold of 2h",
			values: map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true, "requestWaitingTooLong": map[string]any{"thresholdSeconds": 7200}}}},
			series: []string{`remediator_oldest_waiting_request_age_seconds{remediation="reregister-csi-driver",reason="Waiting"} 0+60x130`},
			at:     130 * time.Minute,
			fire:   []map[string]string{{"remediation": "reregister-csi-driver", "reason": "Waiting"}},
		},
		{
			name:   "within the threshold of 2h",
			values: map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true, "requestWaitingTooLong": map[string]any{"thresholdSeconds": 7200}}}},
			series: []string{`remediator_oldest_waiting_request_age_seconds{remediation="reregister-csi-driver",reason="Waiting"} 0+60x100`},
			at:     100 * time.Minute,
		},
		{
			// The healthy backlog the old RemediationStuck fired on: requests wait
			// and run all along, but none waits long.
			name: "a backlog that moves",
			series: []string{
				`remediator_oldest_waiting_request_age_seconds{remediation="release-luks-lease",reason="WaitingForRemediationSlot"} 0+60x30 0+60x30 0+60x30 0+60x30`,
				`remediator_requests_waiting{remediation="release-luks-lease"} 3x123`,
				`remediator_active_remediations{remediation="release-luks-lease"} 2x123`,
			},
			at: 120 * time.Minute,
		},
		{
			name: "for a maintenance window, or behind a pause",
			series: []string{
				`remediator_oldest_waiting_request_age_seconds{remediation="release-luks-lease",reason="WaitingForMaintenanceWindow"} 0+60x300`,
				`remediator_oldest_waiting_request_age_seconds{remediation="release-luks-lease",reason="MaintenanceWindowClosed"} 0+60x300`,
				`remediator_oldest_waiting_request_age_seconds{remediation="reregister-csi-driver",reason="Paused"} 0+60x300`,
			},
			at: 300 * time.Minute,
		},
	},
	"RemediationStuck": {
		{
			name:   "cordon past --step-timeout (5m) and 5 minutes",
			series: []string{`remediator_running_step_age_seconds{remediation="release-luks-lease",step="cordon"} 0+60x20`},
			at:     12 * time.Minute,
			fire:   []map[string]string{{"remediation": "release-luks-lease", "step": "cordon"}},
			annotations: map[string]string{
				"summary":     "A release-luks-lease playbook is stuck in step cordon",
				"description": "Step cordon of a release-luks-lease playbook has run for 12m 0s, past its timeout: the controller should have failed it and restored. The node it acts on may stay cordoned.",
			},
		},
		{
			name: "every step within its timeout",
			series: []string{
				`remediator_running_step_age_seconds{remediation="release-luks-lease",step="waitPodsGone"} 0+60x9`,
				`remediator_running_step_age_seconds{remediation="release-luks-lease",step="cordon"} 0+60x4`,
				`remediator_running_step_age_seconds{remediation="reregister-csi-driver",step="waitDriverRegistered"} 0+60x4`,
			},
			at: 15 * time.Minute,
		},
		{
			name:   "past --step-timeout (5m) but not yet for 5 minutes",
			series: []string{`remediator_running_step_age_seconds{remediation="reregister-csi-driver",step="uncordon"} 0+60x20`},
			at:     9 * time.Minute,
		},
		{
			name:   "deleteAffectedPods within evictionTimeout: 1h30m",
			values: map[string]any{"evictionTimeout": "1h30m", "metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}},
			series: []string{`remediator_running_step_age_seconds{remediation="release-luks-lease",step="deleteAffectedPods"} 0+60x100`},
			at:     95 * time.Minute,
		},
		{
			name:   "deleteAffectedPods past evictionTimeout: 1h30m",
			values: map[string]any{"evictionTimeout": "1h30m", "metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}},
			series: []string{`remediator_running_step_age_seconds{remediation="release-luks-lease",step="deleteAffectedPods"} 0+60x100`},
			at:     97 * time.Minute,
			fire:   []map[string]string{{"remediation": "release-luks-lease", "step": "deleteAffectedPods"}},
		},
		{
			name:   "a step the chart does not know: the longest timeout (10m)",
			series: []string{`remediator_running_step_age_seconds{remediation="release-luks-lease",step="futureStep"} 0+60x20`},
			at:     17 * time.Minute,
			fire:   []map[string]string{{"remediation": "release-luks-lease", "step": "futureStep"}},
		},
	},
	"PolicyReloadFailing": {
		{
			name:   "refused for 5 minutes",
			series: []string{`remediator_policy_reload_failing{namespace="remediator-system",pod="remediator-0",reason="compile"} 0 0 1x10`},
			at:     10 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system", "pod": "remediator-0", "reason": "compile"}},
			annotations: map[string]string{
				"summary": "The policies in --policies-dir are refused (compile) on remediator-0",
			},
		},
		{
			name: "fixed within 3 minutes, and the other reasons at 0",
			series: []string{
				`remediator_policy_reload_failing{namespace="remediator-system",pod="remediator-0",reason="compile"} 0 1 1 1 0x10`,
				`remediator_policy_reload_failing{namespace="remediator-system",pod="remediator-0",reason="syntax"} 0x14`,
			},
			at: 10 * time.Minute,
		},
	},
	"DecisionsFailedClosed": {
		{
			name:   "the policy timed out",
			series: []string{`remediator_decisions_failed_closed_total{reason="policy-timeout"} 0 0 1x10`},
			at:     5 * time.Minute,
			fire:   []map[string]string{{"reason": "policy-timeout"}},
		},
		{
			name: "no decision failed closed",
			series: []string{
				`remediator_decisions_failed_closed_total{reason="policy-timeout"} 0x20`,
				`remediator_decisions_failed_closed_total{reason="safety-floor"} 0x20`,
			},
			at: 20 * time.Minute,
		},
	},
	"RemediatorPausedTooLong": {
		{
			name:   "paused for more than 4 hours",
			series: []string{`remediator_pause_started_timestamp_seconds{namespace="remediator-system",pod="remediator-0"} 0 60x300`},
			at:     250 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system"}},
			annotations: map[string]string{
				"summary": "Remediations have been paused for 4h 9m 0s",
			},
		},
		{
			name:   "paused for more than 1 hour, the threshold",
			values: map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true, "pausedTooLong": map[string]any{"thresholdSeconds": 3600}}}},
			series: []string{`remediator_pause_started_timestamp_seconds{namespace="remediator-system",pod="remediator-0"} 0 60x100`},
			at:     70 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system"}},
		},
		{
			name:   "paused for 3 hours",
			series: []string{`remediator_pause_started_timestamp_seconds{namespace="remediator-system",pod="remediator-0"} 0 60x300`},
			at:     180 * time.Minute,
		},
		{
			name:   "resumed after 3 hours",
			series: []string{`remediator_pause_started_timestamp_seconds{namespace="remediator-system",pod="remediator-0"} 0 60x180 0x120`},
			at:     300 * time.Minute,
		},
		{
			name:   "never paused",
			series: []string{`remediator_pause_started_timestamp_seconds{namespace="remediator-system",pod="remediator-0"} 0x300`},
			at:     300 * time.Minute,
		},
	},
	"RemediatorSyncStale": {
		{
			name:   "the last success 27 minutes ago",
			values: syncOn(),
			series: []string{`remediator_sync_last_success_timestamp_seconds{namespace="remediator-system",pod="remediator-sync-0"} 0 60 120 180x40`},
			at:     30 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system"}},
		},
		{
			name:   "never succeeded",
			values: syncOn(),
			start:  time.Unix(1800000000, 0),
			series: []string{`remediator_sync_last_success_timestamp_seconds{namespace="remediator-system",pod="remediator-sync-0"} 0x30`},
			at:     6 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system"}},
		},
		{
			name:   "no metrics from the agent",
			values: syncOn(),
			series: []string{`remediator_sync_last_success_timestamp_seconds{namespace="other-release",pod="remediator-sync-0"} 0+60x30`},
			at:     10 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system"}},
			annotations: map[string]string{
				"description": "The sync agent in remediator-system has not completed a successful sync for longer than 15m0s, or exports no metrics: requests merged in Git are not applied, and requests removed from Git are not pruned.",
			},
		},
		{
			name:   "syncing every minute",
			values: syncOn(),
			series: []string{`remediator_sync_last_success_timestamp_seconds{namespace="remediator-system",pod="remediator-sync-0"} 0+60x60`},
			at:     60 * time.Minute,
		},
		{
			name:   "failing for 10 minutes, within the threshold",
			values: syncOn(),
			series: []string{`remediator_sync_last_success_timestamp_seconds{namespace="remediator-system",pod="remediator-sync-0"} 0+60x20 1200x10`},
			at:     30 * time.Minute,
		},
		{
			name:   "a fresh agent, 0 until its first sync 3 minutes in",
			values: syncOn(),
			start:  time.Unix(1800000000, 0),
			series: []string{`remediator_sync_last_success_timestamp_seconds{namespace="remediator-system",pod="remediator-sync-0"} 0 0 0 1800000180+60x30`},
			at:     20 * time.Minute,
		},
	},
	"TridentLeaseStuck": {
		{
			name: "a Lease held by a shut-down node, detected for 10 minutes",
			series: []string{
				`remediator_detected_incident{kind="StuckLease",node="node-2",node_state="Shutdown",lease_namespace="trident",lease="pvc-75a6fd7f",pod="remediator-0"} 1x20`,
				// A node-level incident elsewhere is TridentCSIDriverDeregistered's.
				`remediator_detected_incident{kind="DeregisteredDriver",node="node-3",node_state="Healthy",lease_namespace="",lease="",pod="remediator-0"} 1x20`,
			},
			at:   10 * time.Minute,
			fire: []map[string]string{{"lease_namespace": "trident", "lease": "pvc-75a6fd7f", "node": "node-2"}},
		},
		{
			name: "the holder changes state (fenced: Unreachable, then Shutdown): one alert, never reset",
			series: []string{
				`remediator_detected_incident{kind="StuckLease",node="node-2",node_state="Unreachable",lease_namespace="trident",lease="pvc-75a6fd7f",pod="remediator-0"} 1x4 stale`,
				`remediator_detected_incident{kind="StuckLease",node="node-2",node_state="Shutdown",lease_namespace="trident",lease="pvc-75a6fd7f",pod="remediator-0"} _x4 1x20`,
			},
			at:   8 * time.Minute,
			fire: []map[string]string{{"lease_namespace": "trident", "lease": "pvc-75a6fd7f", "node": "node-2"}},
		},
		{
			name: "a leader change: no series for a minute, then the new leader's",
			series: []string{
				`remediator_detected_incident{kind="StuckLease",node="node-2",node_state="Shutdown",lease_namespace="trident",lease="pvc-75a6fd7f",pod="remediator-0"} 1x4 stale`,
				`remediator_detected_incident{kind="StuckLease",node="node-2",node_state="Shutdown",lease_namespace="trident",lease="pvc-75a6fd7f",pod="remediator-1"} _x6 1x20`,
			},
			at:   8 * time.Minute,
			fire: []map[string]string{{"lease_namespace": "trident", "lease": "pvc-75a6fd7f", "node": "node-2"}},
		},
		{
			name:   "detected for 2 minutes only: an operation that finished",
			series: []string{`remediator_detected_incident{kind="StuckLease",node="node-2",node_state="Healthy",lease_namespace="trident",lease="pvc-75a6fd7f"} 1x2 stale`},
			at:     5 * time.Minute,
		},
		{
			name: "a healthy cluster: the detector scans and finds nothing",
			series: []string{
				`remediator_detection_last_success_timestamp_seconds{namespace="remediator-system",pod="remediator-0"} 0+60x20`,
				`remediator_detected_incident{kind="DeregisteredDriver",node="node-3",node_state="Healthy",lease_namespace="",lease="",pod="remediator-0"} 1x20`,
			},
			at: 10 * time.Minute,
		},
	},
	"TridentCSIDriverDeregistered": {
		{
			name: "the driver missing from a node's CSINode for 10 minutes",
			series: []string{
				`remediator_detected_incident{kind="DeregisteredDriver",node="node-3",node_state="Healthy",lease_namespace="",lease="",pod="remediator-0"} 1x20`,
				`remediator_detected_incident{kind="OverlappingPluginPods",node="node-1",node_state="Healthy",lease_namespace="",lease="",pod="remediator-0"} 1x20`,
				`remediator_detected_incident{kind="StuckLease",node="node-2",node_state="Shutdown",lease_namespace="trident",lease="pvc-75a6fd7f",pod="remediator-0"} 1x20`,
			},
			at:   10 * time.Minute,
			fire: []map[string]string{{"node": "node-3"}},
		},
		{
			name: "missing, caused by old and new plugin pods overlapping: paged by node all the same",
			series: []string{
				`remediator_detected_incident{kind="DeregisteredDriver",node="node-3",node_state="Healthy",lease_namespace="",lease="",cause="OldPluginPodOverlap",pod="remediator-0"} 1x3 stale`,
				`remediator_detected_incident{kind="DeregisteredDriver",node="node-3",node_state="Healthy",lease_namespace="",lease="",cause="",pod="remediator-0"} _x3 1x20`,
			},
			at:   10 * time.Minute,
			fire: []map[string]string{{"node": "node-3"}},
		},
		{
			name:   "missing for 2 minutes during a node-plugin restart",
			series: []string{`remediator_detected_incident{kind="DeregisteredDriver",node="node-3",node_state="Healthy",lease_namespace="",lease=""} 1x2 stale`},
			at:     5 * time.Minute,
		},
	},
	"TridentOldNodePluginOverlap": {
		{
			name: "old and new node-plugin pods overlap on a node, seen by one scan",
			series: []string{
				`remediator_detected_incident{kind="OldPluginPodOverlap",node="node-1",node_state="Healthy",lease_namespace="",lease="",cause="",pod="remediator-0"} 1 stale`,
				`remediator_detected_incident{kind="OverlappingPluginPods",node="node-1",node_state="Healthy",lease_namespace="",lease="",cause="",pod="remediator-0"} 1 stale`,
			},
			at:   time.Minute,
			fire: []map[string]string{{"node": "node-1"}},
			annotations: map[string]string{
				"summary": "Old and new Trident node-plugin pods overlap on node-1",
			},
		},
		{
			name: "the driver deregistered while the pods still overlap: one alert, kept",
			series: []string{
				`remediator_detected_incident{kind="OldPluginPodOverlap",node="node-1",node_state="Healthy",lease_namespace="",lease="",cause="",pod="remediator-0"} 1x2 stale`,
				`remediator_detected_incident{kind="DeregisteredDriver",node="node-1",node_state="Healthy",lease_namespace="",lease="",cause="OldPluginPodOverlap",pod="remediator-0"} _x2 1x10`,
			},
			at:   8 * time.Minute,
			fire: []map[string]string{{"node": "node-1"}},
		},
		{
			name: "a driver deregistered with no overlap, two pods of one DaemonSet elsewhere",
			series: []string{
				`remediator_detected_incident{kind="DeregisteredDriver",node="node-3",node_state="Healthy",lease_namespace="",lease="",cause="",pod="remediator-0"} 1x20`,
				`remediator_detected_incident{kind="OverlappingPluginPods",node="node-1",node_state="Healthy",lease_namespace="",lease="",cause="",pod="remediator-0"} 1x20`,
			},
			at: 10 * time.Minute,
		},
		{
			name:   "an overlap that ended 4 minutes ago",
			series: []string{`remediator_detected_incident{kind="OldPluginPodOverlap",node="node-1",node_state="Healthy",lease_namespace="",lease="",cause="",pod="remediator-0"} 1 stale`},
			at:     5 * time.Minute,
		},
	},
	"RemediatorDetectionFailing": {
		{
			name:   "the last successful scan 20 minutes ago",
			series: []string{`remediator_detection_last_success_timestamp_seconds{namespace="remediator-system",pod="remediator-0"} 0x40`},
			at:     20 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system"}},
		},
		{
			name:   "no scan has ever succeeded, or none runs: no series at all",
			series: []string{`remediator_requests_waiting{namespace="remediator-system",pod="remediator-0",remediation="release-luks-lease"} 0x20`},
			at:     10 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system"}},
		},
		{
			name:   "scanning every 30 seconds",
			series: []string{`remediator_detection_last_success_timestamp_seconds{namespace="remediator-system",pod="remediator-0"} 0+60x40`},
			at:     20 * time.Minute,
		},
		{
			name:   "another release's detector does not count",
			series: []string{`remediator_detection_last_success_timestamp_seconds{namespace="other",pod="remediator-0"} 0+60x40`},
			at:     20 * time.Minute,
			fire:   []map[string]string{{"namespace": "remediator-system"}},
		},
	},
}

// severities are the alerts' severity labels with the chart's defaults
// (metrics.prometheusRule.severities): critical when pods cannot mount or an
// incident is left unfixed, warning for the controller's own health.
var severities = map[string]string{
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

func syncOn() map[string]any {
	return map[string]any{
		"sync":    map[string]any{"enabled": true, "repo": "https://git.example.com/platform/remediation.git"},
		"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}},
	}
}

func TestAlerts(t *testing.T) {
	for _, alert := range slices.Sorted(maps.Keys(alertTests)) {
		for _, tc := range alertTests[alert] {
			t.Run(alert+"/"+tc.name, func(t *testing.T) {
				values := tc.values
				if values == nil {
					values = map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}}
				}
				got := firingAt(t, ruleFile(t, values), tc.series, tc.start, tc.at, alert)
				want := make([]string, 0, len(tc.fire))
				for _, l := range tc.fire {
					l = maps.Clone(l)
					l["alertname"], l["severity"] = alert, severities[alert]
					want = append(want, labels.FromMap(l).String())
				}
				sort.Strings(want)
				gotLabels := make([]string, 0, len(got))
				for _, a := range got {
					gotLabels = append(gotLabels, a.Labels.String())
				}
				sort.Strings(gotLabels)
				if !slices.Equal(want, gotLabels) {
					t.Fatalf("at %s, %s: want firing %v, got %v", tc.at, alert, want, gotLabels)
				}
				for _, a := range got {
					url := a.Annotations.Get("runbook_url")
					if want := "https://github.com/remediator/remediator/blob/main/docs/oncall.md#" + strings.ToLower(alert); url != want {
						t.Errorf("runbook_url %q, want %q", url, want)
					}
					a.Annotations.Range(func(l labels.Label) {
						if strings.Contains(l.Value, "<no value>") || strings.Contains(l.Value, "error expanding") {
							t.Errorf("annotation %s: %q", l.Name, l.Value)
						}
					})
				}
				for k, v := range tc.annotations {
					if len(got) != 1 {
						t.Fatalf("annotations are checked on one firing alert, got %d", len(got))
					}
					if a := got[0].Annotations.Get(k); a != v {
						t.Errorf("annotation %s: got %q, want %q", k, a, v)
					}
				}
			})
		}
	}
}

// TestEveryAlertHasUnitTests: every alert the chart can render has a case where it
// fires and one where it does not.
func TestEveryAlertHasUnitTests(t *testing.T) {
	values := syncOn()
	var rendered []string
	for _, r := range ruleGroups(t, values) {
		rendered = append(rendered, r.Alert)
	}
	for _, alert := range rendered {
		fires, silent := 0, 0
		for _, tc := range alertTests[alert] {
			if len(tc.fire) > 0 {
				fires++
			} else {
				silent++
			}
		}
		if fires == 0 || silent == 0 {
			t.Errorf("%s: %d case(s) where it fires and %d where it does not; want at least one of each in alertTests", alert, fires, silent)
		}
	}
	for alert := range alertTests {
		if !slices.Contains(rendered, alert) {
			t.Errorf("alertTests tests %s, which the chart does not render", alert)
		}
	}
}

type ruleSpec struct {
	Alert string `json:"alert"`
}

// ruleGroups renders the PrometheusRule's one group's rules.
func ruleGroups(t *testing.T, values map[string]any) []ruleSpec {
	t.Helper()
	var spec struct {
		Groups []struct {
			Rules []ruleSpec `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(ruleSpecYAML(t, values), &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Groups) != 1 {
		t.Fatalf("want one group, got %d", len(spec.Groups))
	}
	return spec.Groups[0].Rules
}

func ruleSpecYAML(t *testing.T, values map[string]any) []byte {
	t.Helper()
	rules := render(t, values)["PrometheusRule"]
	if len(rules) != 1 {
		t.Fatalf("want one PrometheusRule, got %d", len(rules))
	}
	spec, err := yaml.Marshal(rules[0]["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// ruleFile writes the rendered PrometheusRule's groups as a Prometheus rule file.
func ruleFile(t *testing.T, values map[string]any) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "remediator.rules.yaml")
	if err := os.WriteFile(file, ruleSpecYAML(t, values), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// firingAt loads series from start, evaluates the rules of file every evalInterval
// from start to start+at, and returns the alerts named alert that fire then.
func firingAt(t *testing.T, file string, series []string, start time.Time, at time.Duration, alert string) []*rules.Alert {
	t.Helper()
	load := "load " + evalInterval.String() + "\n  " + strings.Join(series, "\n  ")
	if start.IsZero() {
		start = time.Unix(0, 0)
	}
	start = start.UTC()
	suite, err := promqltest.NewLazyLoader(load, promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true, StartTime: start})
	if err != nil {
		t.Fatalf("%s: %v", load, err)
	}
	defer func() {
		if err := suite.Close(); err != nil {
			t.Error(err)
		}
	}()
	suite.SubqueryInterval = evalInterval
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Queryable:    suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
	})
	groups, errs := m.LoadGroups(evalInterval, labels.EmptyLabels(), "", nil, false, file)
	if errs != nil {
		t.Fatalf("loading the rules: %v", errs)
	}
	var named *rules.AlertingRule
	for _, g := range groups {
		for _, r := range g.AlertingRules() {
			// As promtool does: the ALERTS series are written from the first eval.
			r.SetRestored(true)
			if r.Name() == alert {
				named = r
			}
		}
	}
	if named == nil {
		t.Fatalf("the rendered rules have no alert %s", alert)
	}
	for ts := start; !ts.After(start.Add(at)); ts = ts.Add(evalInterval) {
		var evalErr error
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErr = err
				return
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if r.LastError() != nil {
						evalErr = fmt.Errorf("rule %s at %s: %w", r.Name(), ts.Sub(start), r.LastError())
					}
				}
			}
		})
		if evalErr != nil {
			t.Fatal(evalErr)
		}
	}
	var firing []*rules.Alert
	for _, a := range named.ActiveAlerts() {
		if a.State == rules.StateFiring {
			firing = append(firing, a)
		}
	}
	return firing
}
