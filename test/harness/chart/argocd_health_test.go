// Package chart_test tests the remediator Helm chart and the files it ships.
//
// This file owns the Argo CD health check in files/argocd. It runs health.lua the way
// Argo CD runs a health script from argocd-cm and checks it against health_test.yaml,
// the format Argo CD uses for its built-in checks, so that the script can be changed
// with confidence without an Argo CD at hand.
package chart_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lua "github.com/yuin/gopher-lua"
	"helm.sh/helm/v3/pkg/ignore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
)

const (
	argoCDDir = "files/argocd"
	// healthKey is Argo CD's argocd-cm key for a health check: group_Kind.
	healthKey = "resource.customizations.health.remediator.io_RemediationRequest"
)

// healthStatus is Argo CD's health.HealthStatus, as health_test.yaml spells it.
type healthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

type healthTestCase struct {
	HealthStatus healthStatus `json:"healthStatus"`
	InputPath    string       `json:"inputPath"`
}

// validStatuses are the statuses Argo CD accepts; it shows any other one as Unknown
// with "Lua returned an invalid health status", which would hide the script's bug.
var validStatuses = []string{"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}

func TestArgoCDHealthCheck(t *testing.T) {
	script := readFile(t, filepath.Join(argoCDDir, "health.lua"))
	for _, tc := range loadHealthTests(t) {
		t.Run(strings.TrimSuffix(path.Base(tc.InputPath), ".yaml"), func(t *testing.T) {
			obj := loadFixture(t, filepath.Join(argoCDDir, filepath.FromSlash(tc.InputPath)))
			got, err := runHealthScript(script, obj)
			require.NoError(t, err, "health.lua on %s", tc.InputPath)
			assert.Equal(t, tc.HealthStatus, got, "health.lua on %s", tc.InputPath)
		})
	}
}

// TestArgoCDHealthCheckSurvivesMalformedObjects feeds shapes no fixture has, since a
// Lua error in Argo CD replaces the request's health with a stack trace.
func TestArgoCDHealthCheckSurvivesMalformedObjects(t *testing.T) {
	script := readFile(t, filepath.Join(argoCDDir, "health.lua"))
	for name, obj := range map[string]any{
		"nil object":               nil,
		"empty object":             map[string]any{},
		"string metadata":          map[string]any{"metadata": "x", "status": map[string]any{"phase": "Running"}},
		"string generation":        map[string]any{"metadata": map[string]any{"generation": "2"}, "status": map[string]any{"observedGeneration": "1"}},
		"string status":            map[string]any{"metadata": map[string]any{"generation": int64(1)}, "status": "Pending"},
		"empty status":             map[string]any{"metadata": map[string]any{"generation": int64(1)}, "status": map[string]any{"observedGeneration": int64(1)}},
		"conditions not a list":    map[string]any{"status": map[string]any{"phase": "Rejected", "conditions": "Accepted"}},
		"conditions of strings":    map[string]any{"status": map[string]any{"phase": "Failed", "conditions": []any{"Succeeded", nil, int64(3)}}},
		"condition without fields": map[string]any{"status": map[string]any{"phase": "Pending", "conditions": []any{map[string]any{}}}},
		"condition message number": map[string]any{"status": map[string]any{"phase": "Succeeded", "conditions": []any{map[string]any{"type": "Succeeded", "status": "True", "message": int64(7)}}}},
		"steps not a list":         map[string]any{"status": map[string]any{"phase": "Running", "steps": "cordon"}},
		"steps of strings":         map[string]any{"status": map[string]any{"phase": "Running", "steps": []any{"cordon", map[string]any{"state": "Running"}}}},
		"decision not a map":       map[string]any{"status": map[string]any{"phase": "Rejected", "decision": []any{"no"}}},
		"phase number":             map[string]any{"status": map[string]any{"phase": int64(3)}},
		"phase table":              map[string]any{"status": map[string]any{"phase": map[string]any{"name": "Running"}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := runHealthScript(script, obj)
			require.NoError(t, err, "health.lua failed")
			assert.NotEmpty(t, got.Message, "health.lua returned %s without a message", got.Status)
		})
	}
}

// TestArgoCDConfigMapEmbedsHealthScript keeps the argocd-cm snippet, which is what
// operators install, from drifting away from the script the tests exercise.
func TestArgoCDConfigMapEmbedsHealthScript(t *testing.T) {
	script := readFile(t, filepath.Join(argoCDDir, "health.lua"))
	var cm corev1.ConfigMap
	require.NoError(t, yaml.UnmarshalStrict([]byte(readFile(t, filepath.Join(argoCDDir, "argocd-cm.yaml"))), &cm), "argocd-cm.yaml")
	assert.Equal(t, "v1", cm.APIVersion, "argocd-cm.yaml apiVersion")
	assert.Equal(t, "ConfigMap", cm.Kind, "argocd-cm.yaml kind")
	assert.Equal(t, "argocd-cm", cm.Name, "argocd-cm.yaml name")
	// Argo CD only reads an argocd-cm that carries this label.
	assert.Equal(t, "argocd", cm.Labels["app.kubernetes.io/part-of"], "argocd-cm.yaml's label app.kubernetes.io/part-of")
	embedded, ok := cm.Data[healthKey]
	require.True(t, ok, "argocd-cm.yaml has no data key %s (keys: %v)", healthKey, mapKeys(cm.Data))
	assert.Equal(t, script, embedded, "argocd-cm.yaml's %s differs from health.lua; copy health.lua into it, indented by four spaces. First difference %s",
		healthKey, firstDifference(embedded, script))
}

// TestEveryArgoCDFixtureIsTested catches a fixture added without its expectation,
// which would otherwise look covered while testing nothing.
// TestArgoCDHealthCheckReasonsAreTheContract: the condition reasons health.lua
// branches on are the ones the controller writes (api/v1alpha1), so a renamed reason
// fails here instead of turning a Suspended request Progressing in Argo CD.
func TestArgoCDHealthCheckReasonsAreTheContract(t *testing.T) {
	script := readFile(t, filepath.Join(argoCDDir, "health.lua"))
	reasons := []string{v1alpha1.ReasonDryRun, v1alpha1.ReasonWaitingForWindow, v1alpha1.ReasonWindowClosed, v1alpha1.ReasonPaused}
	for _, r := range reasons {
		assert.Contains(t, script, `reason == "`+r+`"`, "health.lua checks reason %s", r)
	}
	used := regexp.MustCompile(`reason == "([A-Za-z]+)"`).FindAllStringSubmatch(script, -1)
	require.NotEmpty(t, used)
	for _, m := range used {
		assert.Contains(t, reasons, m[1], "health.lua checks a reason the controller does not write, or one this test does not know")
	}
}

func TestEveryArgoCDFixtureIsTested(t *testing.T) {
	referenced := map[string]bool{}
	for _, tc := range loadHealthTests(t) {
		referenced[path.Clean(tc.InputPath)] = true
	}
	fixtures, err := filepath.Glob(filepath.Join(argoCDDir, "testdata", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, fixtures, "no fixtures in %s/testdata", argoCDDir)
	for _, f := range fixtures {
		rel, err := filepath.Rel(argoCDDir, f)
		require.NoError(t, err)
		rel = filepath.ToSlash(rel)
		assert.True(t, referenced[rel], "%s is not the inputPath of any test in health_test.yaml", rel)
	}
}

// TestHelmignoreKeepsArgoCDTestsOutOfTheChart: the chart ships the health check for
// operators to install, but its test suite and this Go code are no use in a release.
func TestHelmignoreKeepsArgoCDTestsOutOfTheChart(t *testing.T) {
	rules, err := ignore.ParseFile(".helmignore")
	require.NoError(t, err, ".helmignore")
	// Walk the chart the way Helm's loader does: an ignored directory is skipped whole.
	var packaged []string
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if rules.Ignore(filepath.ToSlash(p), fi) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			packaged = append(packaged, filepath.ToSlash(p))
		}
		return nil
	})
	require.NoError(t, err)
	for _, want := range []string{argoCDDir + "/health.lua", argoCDDir + "/argocd-cm.yaml"} {
		assert.Contains(t, packaged, want, "%s is left out of the chart", want)
	}
	for _, p := range packaged {
		assert.False(t, strings.HasSuffix(p, ".go") || strings.HasPrefix(p, argoCDDir+"/testdata/") || p == argoCDDir+"/health_test.yaml",
			"%s would be packaged into the chart", p)
	}
}

func loadHealthTests(t *testing.T) []healthTestCase {
	t.Helper()
	var suite struct {
		Tests []healthTestCase `json:"tests"`
	}
	require.NoError(t, yaml.UnmarshalStrict([]byte(readFile(t, filepath.Join(argoCDDir, "health_test.yaml"))), &suite), "health_test.yaml")
	require.NotEmpty(t, suite.Tests, "health_test.yaml has no tests")
	for i, tc := range suite.Tests {
		require.NotEmpty(t, tc.InputPath, "health_test.yaml test %d needs inputPath and healthStatus.status", i)
		require.NotEmpty(t, tc.HealthStatus.Status, "health_test.yaml test %d needs inputPath and healthStatus.status", i)
	}
	return suite.Tests
}

// loadFixture returns the fixture as Argo CD holds a live object: decoded into an
// unstructured object, so integers are int64 as in its cluster cache. It also decodes
// the fixture strictly into the API type, so that a misspelt field cannot make a case
// pass for the wrong reason.
func loadFixture(t *testing.T, file string) map[string]any {
	t.Helper()
	data := []byte(readFile(t, file))
	var rr v1alpha1.RemediationRequest
	require.NoError(t, yaml.UnmarshalStrict(data, &rr), "%s is not a valid RemediationRequest", file)
	require.Equal(t, v1alpha1.GroupVersion.String(), rr.APIVersion, "%s apiVersion", file)
	require.Equal(t, "RemediationRequest", rr.Kind, "%s kind", file)
	js, err := yaml.YAMLToJSON(data)
	require.NoError(t, err, file)
	u := &unstructured.Unstructured{}
	require.NoError(t, u.UnmarshalJSON(js), file)
	return u.Object
}

// runHealthScript runs a health script as Argo CD does for argocd-cm entries without
// resource.customizations.useOpenLibs: only the base, table and package libraries are
// open (Argo CD adds a reduced os library, which the script does not use), so a
// script that calls string.* fails here as it would there. The one-second budget is
// Argo CD's too.
func runHealthScript(script string, obj any) (healthStatus, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return healthStatus{}, fmt.Errorf("opening the %s library: %w", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", luaValue(L, obj))
	if err := L.DoString(script); err != nil {
		return healthStatus{}, err
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return healthStatus{}, fmt.Errorf("the script returned %s, want a table", L.Get(-1).Type())
	}
	// Argo CD reads the table through JSON into health.HealthStatus, where status and
	// message are strings; anything else fails to decode.
	status, ok := ret.RawGetString("status").(lua.LString)
	if !ok {
		return healthStatus{}, fmt.Errorf("hs.status is %s, want a string", ret.RawGetString("status").Type())
	}
	if !slices.Contains(validStatuses, string(status)) {
		return healthStatus{}, fmt.Errorf("hs.status %q is not one of %v", status, validStatuses)
	}
	var message string
	switch m := ret.RawGetString("message").(type) {
	case lua.LString:
		message = string(m)
	case *lua.LNilType:
	default:
		return healthStatus{}, fmt.Errorf("hs.message is %s, want a string", m.Type())
	}
	return healthStatus{Status: string(status), Message: message}, nil
}

// luaValue converts a decoded object the way Argo CD's decodeValue does: maps become
// tables with string keys, arrays 1-indexed tables, numbers LNumber. json.Number
// becomes a string there too, which is why fixtures are not decoded with UseNumber.
func luaValue(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case []any:
		arr := L.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(luaValue(L, item))
		}
		return arr
	case map[string]any:
		tbl := L.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), luaValue(L, item))
		}
		return tbl
	}
	return lua.LNil
}

func readFile(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	return string(data)
}

func mapKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// firstDifference says where two texts part, since a whitespace slip in a long
// embedded script is hard to spot otherwise.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl || i >= len(g) || i >= len(w) {
			return fmt.Sprintf("from line %d:\n  argocd-cm.yaml %q\n  health.lua     %q", i+1, gl, wl)
		}
	}
	return ""
}
