package chart_test

// This file owns values.schema.json: `helm lint` and `helm template` (here, Helm's
// lint and render through its Go API, which both validate values against the
// schema) refuse a value of the wrong type or a key the chart does not know, and the
// schema covers every value in values.yaml.

import (
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/test/harness/helmchart"
)

const schemaError = "values don't meet the specifications of the schema"

func TestSchemaRefusesWrongValues(t *testing.T) {
	c, err := helmchart.Load()
	require.NoError(t, err)
	require.NotNil(t, c.Schema, "the chart has no values.schema.json")
	for _, tc := range []struct {
		name   string
		values map[string]any
		field  string // what the error names
	}{
		{"replicaCount a string", map[string]any{"replicaCount": "two"}, "replicaCount"},
		{"replicaCount negative", map[string]any{"replicaCount": -1}, "replicaCount"},
		{"a misspelt key", map[string]any{"replicas": 2}, "replicas"},
		{"a misspelt nested key", map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enable": true}}}, "enable"},
		{"port a string", map[string]any{"metrics": map[string]any{"port": "http"}}, "port"},
		{"port out of range", map[string]any{"metrics": map[string]any{"port": 70000}}, "port"},
		{"a boolean as a string", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": "true"}}}, "enabled"},
		{"not a duration", map[string]any{"evictionTimeout": "ten minutes"}, "evictionTimeout"},
		{"a duration without unit", map[string]any{"nodeLeaseGracePeriod": 40}, "nodeLeaseGracePeriod"},
		{"qps a string", map[string]any{"kubeAPI": map[string]any{"qps": "fast"}}, "qps"},
		{"qps negative", map[string]any{"kubeAPI": map[string]any{"qps": -1}}, "qps"},
		{"no reconcile workers", map[string]any{"maxConcurrentReconciles": 0}, "maxConcurrentReconciles"},
		{"extraArgs a string", map[string]any{"extraArgs": "--v=4"}, "extraArgs"},
		{"an env value that is no string", map[string]any{"extraEnv": []any{map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": 6443}}}, "extraEnv"},
		{"a misspelt env key", map[string]any{"sync": map[string]any{"extraEnv": []any{map[string]any{"name": "A", "valeu": "b"}}}}, "valeu"},
		{"an unknown pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "pullPolicy"},
		{"runAsUser a string", map[string]any{"podSecurityContext": map[string]any{"runAsUser": "root"}}, "runAsUser"},
		{"requestNamespaces a string", map[string]any{"requestNamespaces": "remediator"}, "requestNamespaces"},
		{"a policy that is no string", map[string]any{"policies": map[string]any{"a.cue": 1}}, "a.cue"},
		{"a log format the binary does not know", map[string]any{"logFormat": "logfmt"}, "logFormat"},
		{"an alert severity not critical, warning or info", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"severities": map[string]any{"TridentLeaseStuck": "page"}}}}, "TridentLeaseStuck"},
		{"a Git writer's ServiceAccount without a namespace", map[string]any{"admissionPolicy": map[string]any{"gitWriters": map[string]any{
			"serviceAccounts": []any{map[string]any{"name": "kustomize-controller"}}}}}, "namespace"},
		{"an on-call ServiceAccount as a user name", map[string]any{"pause": map[string]any{
			"serviceAccounts": []any{"system:serviceaccount:ops:incident-bot"}}}, "serviceAccounts"},
		{"a break-glass ServiceAccount with a misspelt key", map[string]any{"admissionPolicy": map[string]any{"breakGlass": map[string]any{
			"serviceAccounts": []any{map[string]any{"namespace": "ops", "nmae": "incident-bot"}}}}}, "nmae"},
		{"a severity of an alert the chart has not", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"severities": map[string]any{"TridentLeaseStruck": "critical"}}}}, "TridentLeaseStruck"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// helm template
			_, err := helmchart.Render(release, namespace, tc.values)
			if assert.Error(t, err, "helm template accepted %v", tc.values) {
				assert.Contains(t, err.Error(), schemaError)
				assert.Contains(t, err.Error(), tc.field)
			}
			// helm lint
			err = helmchart.LintValues(tc.values)
			if assert.Error(t, err, "helm lint accepted %v", tc.values) {
				assert.Contains(t, err.Error(), tc.field)
			}
			// the schema alone, on the values as Helm merges them
			merged, err := chartutil.CoalesceValues(c, tc.values)
			require.NoError(t, err)
			assert.Error(t, chartutil.ValidateAgainstSchema(c, merged))
		})
	}
}

func TestSchemaAcceptsGoodValues(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"defaults": nil,
		"OpenShift": {
			"podSecurityContext": map[string]any{"runAsUser": nil, "runAsGroup": nil},
			"securityContext":    map[string]any{"runAsUser": nil, "runAsGroup": nil},
		},
		"every kind of identity": {
			"pause": map[string]any{"groups": []any{"oncall"}, "users": []any{"dave@example.com"},
				"serviceAccounts": []any{map[string]any{"namespace": "ops", "name": "incident-bot"}}},
			"admissionPolicy": map[string]any{
				"gitWriters": map[string]any{"users": []any{}, "serviceAccounts": []any{map[string]any{"namespace": "flux-system", "name": "kustomize-controller"}}},
				"breakGlass": map[string]any{"group": "", "groups": []any{"sre"}, "users": []any{"erin@example.com"},
					"serviceAccounts": []any{map[string]any{"namespace": "ops", "name": "incident-bot"}}},
			},
		},
		"everything on": {
			"replicaCount":            1,
			"evictionTimeout":         "1h30m",
			"policyReloadInterval":    "0s",
			"kubeAPI":                 map[string]any{"qps": 12.5, "burst": 20},
			"maxConcurrentReconciles": 1,
			"extraArgs":               []any{"--pprof-bind-address=:6060"},
			"extraEnv":                []any{map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "192.0.2.2"}},
			"policies":                map[string]any{"luks.cue": "package policies\n"},
			"requestNamespace":        map[string]any{"create": false},
			"rbac":                    map[string]any{"aggregateToEdit": false},
			"logFormat":               "json",
			"metrics": map[string]any{
				"serviceMonitor": map[string]any{"enabled": true, "interval": "1m", "labels": map[string]any{"release": "prom"}},
				"prometheusRule": map[string]any{"enabled": true, "syncStale": map[string]any{"thresholdSeconds": 1200}, "severities": map[string]any{"RemediationWaitingTooLong": "info"}},
				"dashboard":      map[string]any{"enabled": true, "namespace": "monitoring"},
			},
			"podSecurityContext": map[string]any{"fsGroup": 2000},
			"global":             map[string]any{"imageRegistry": "registry.example.com"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			assert.NoError(t, helmchart.LintValues(values))
			_, err := helmchart.Render(release, namespace, values)
			assert.NoError(t, err)
		})
	}
}

// TestSchemaCoversEveryValue: each key of values.yaml has its entry in the schema,
// with the type its default has.
func TestSchemaCoversEveryValue(t *testing.T) {
	var values, schema map[string]any
	data, err := os.ReadFile("values.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &values))
	data, err = os.ReadFile("values.schema.json")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &schema))
	assert.Equal(t, "http://json-schema.org/draft-07/schema#", schema["$schema"])

	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		types := schemaTypes(s["type"])
		if slices.Contains(types, "number") {
			types = append(types, "integer") // JSON Schema's number admits integers
		}
		assert.Contains(t, types, jsonType(v), "%s: the schema's type %v does not admit the default %v", path, types, v)
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p, ok := props[k].(map[string]any)
			if !ok {
				// A free-form map (podAnnotations, policies): its entries are the user's.
				if s["additionalProperties"] != false && props == nil {
					continue
				}
				assert.Fail(t, "values.schema.json does not describe "+strings.TrimPrefix(path+"."+k, "."))
				continue
			}
			walk(path+"."+k, m[k], p)
		}
	}
	walk("", values, schema)
}

func schemaTypes(t any) []string {
	switch t := t.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

func jsonType(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	case nil:
		return "null"
	}
	return "unknown"
}
