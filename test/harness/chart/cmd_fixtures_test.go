package chart_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/test/harness/helmchart"
)

var update = flag.Bool("update", false, "rewrite internal/cmd/cmdtest/testdata/chart/ from the chart's render")

// cmdFixtures are the chart's renders that the commands' tests read from
// internal/cmd/cmdtest/testdata/chart/<name>.yaml, through cmdtest.ChartRender:
// cmd/remediator's TestChartArgsAreControllerFlags (every arg the Deployment renders
// is a flag the controller parses, and the settings ConfigMap holds plan's settings)
// and internal/cmd/plan's TestPlanFollowsTheChartSettings (plan as the chart's plan
// ClusterRole, reading the settings ConfigMap). Those tests parse flags with the
// commands themselves, and the controller's module does not import Helm, so the
// render is made here and committed there.
var cmdFixtures = []struct {
	name   string
	values map[string]any
}{
	{"defaults", nil},
	{"everything-set", map[string]any{
		"requestNamespaces":         []any{"team-a", "team-b"},
		"maxConcurrentRemediations": 5,
		"logLevel":                  4,
		"logFormat":                 "json",
		"nodeLeaseGracePeriod":      "50s",
		"policies":                  map[string]any{"schema.cue": "package policies\n"},
		"trident":                   map[string]any{"nodePluginSelector": "app in (a, b)"},
	}},
	{"metrics-off", map[string]any{"metrics": map[string]any{"enabled": false}}},
	{"netapp-trident", map[string]any{"trident": map[string]any{"namespace": "netapp-trident"}, "nodeLeaseGracePeriod": "40s"}},
}

const cmdFixturesDir = "../../internal/cmd/cmdtest/testdata/chart" // from the chart's directory (TestMain)

// TestCmdFixturesAreTheChartsRender: internal/cmd/cmdtest/testdata/chart/ holds, for each
// of cmdFixtures, the objects of the chart's current render that the commands' tests
// read through cmdtest.ChartRender (the ConfigMaps, the Deployment, the plan
// ClusterRole), and nothing else.
// -update rewrites them:
//
//	go -C test/harness test ./chart -run TestCmdFixturesAreTheChartsRender -update
func TestCmdFixturesAreTheChartsRender(t *testing.T) {
	var want []string
	for _, f := range cmdFixtures {
		file := f.name + ".yaml"
		want = append(want, file)
		t.Run(f.name, func(t *testing.T) {
			objs, err := helmchart.Render("remediator", "remediator-system", f.values)
			require.NoError(t, err)
			var b bytes.Buffer
			b.WriteString("# The chart's render that internal/cmd/cmdtest.ChartRender reads for the commands' tests, written by\n" +
				"#   go -C test/harness test ./chart -run TestCmdFixturesAreTheChartsRender -update\n" +
				"# from the values of " + f.name + " in test/harness/chart/cmd_fixtures_test.go. Do not edit.\n")
			for _, o := range objs {
				if o.GetKind() != "ConfigMap" && o.GetKind() != "Deployment" && (o.GetKind() != "ClusterRole" || o.GetName() != "remediator-plan") {
					continue
				}
				y, err := yaml.Marshal(o.Object)
				require.NoError(t, err)
				b.WriteString("---\n")
				b.Write(y)
			}
			path := filepath.Join(cmdFixturesDir, file)
			if *update {
				require.NoError(t, os.MkdirAll(cmdFixturesDir, 0o755))
				require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
				return
			}
			got, err := os.ReadFile(path)
			require.NoError(t, err, "run the test with -update to write it")
			assert.Equal(t, b.String(), string(got), "internal/cmd/cmdtest/testdata/chart/%s is not the chart's render: run the test with -update", file)
		})
	}
	entries, err := os.ReadDir(cmdFixturesDir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.True(t, slices.Contains(want, e.Name()) || strings.HasPrefix(e.Name(), "."),
			"internal/cmd/cmdtest/testdata/chart/%s is no fixture of cmdFixtures: delete it", e.Name())
	}
}
