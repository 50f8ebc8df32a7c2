//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// detectionWithin is how soon after an incident is staged (its symptom seen) the
// controller must export it: issue 26's "within a minute", at the default
// --detect-interval of 30s.
const detectionWithin = time.Minute

// waitDetected waits until the controller whose metrics are on addr exports the
// incident with exactly these labels (remediator_detected_incident) and, for each
// symptom, a positive count in remediator_detected_symptoms, before any request
// exists: detection reads the cluster, not the requests. It returns how long it took.
func waitDetected(t *testing.T, addr string, incident map[string]string, symptoms ...string) time.Duration {
	t.Helper()
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		families := scrape(c, addr)
		v, ok := metricValue(families, "remediator_detected_incident", incident)
		assert.True(c, ok && v == 1, "remediator_detected_incident%v not exported; detected: %v", incident, series(families, "remediator_detected_incident"))
		for _, s := range symptoms {
			labels := map[string]string{"kind": incident["kind"], "node": incident["node"],
				"lease_namespace": incident["lease_namespace"], "lease": incident["lease"], "symptom": s}
			n, ok := metricValue(families, "remediator_detected_symptoms", labels)
			assert.True(c, ok && n > 0, "no %s symptom: %v", s, series(families, "remediator_detected_symptoms"))
		}
	}, detectionWithin, poll, "the controller did not export %v with symptoms %v within %s", incident, symptoms, detectionWithin)
	took := time.Since(start)
	t.Logf("detected %v with symptoms %v in %s", incident, symptoms, took.Round(time.Second))
	return took
}

// series lists a family's series, for failure messages.
func series(families map[string]*dto.MetricFamily, name string) []string {
	f, ok := families[name]
	if !ok {
		return nil
	}
	var out []string
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		out = append(out, fmt.Sprint(labels))
	}
	return out
}
