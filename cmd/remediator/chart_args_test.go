package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// TestChartArgsAreControllerFlags: the chart's Deployment runs the image's
// /remediator-controller with its args, so every arg it renders must be a flag the
// controller accepts, with a value it parses.
func TestChartArgsAreControllerFlags(t *testing.T) {
	// The chart rendered with its defaults, with every controller value set, and with
	// metrics off (chartRender: the values are in test/harness/chart/cmd_fixtures_test.go).
	for _, name := range []string{"defaults", "everything set", "metrics off"} {
		t.Run(name, func(t *testing.T) {
			objs := cmdtest.ChartRender(t, strings.ReplaceAll(name, " ", "-"))
			var command, args []string
			var env []corev1.EnvVar
			configMaps := map[string]map[string]string{}
			for _, o := range objs {
				switch o.GetKind() {
				case "ConfigMap":
					cm := &corev1.ConfigMap{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cm))
					configMaps[cm.Name] = cm.Data
				case "Deployment":
					d := &appsv1.Deployment{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
					c := d.Spec.Template.Spec.Containers[0]
					command, args, env = c.Command, c.Args, c.Env
				}
			}
			require.NotEmpty(t, args, "the chart renders no Deployment args")
			require.Equal(t, []string{"/remediator-controller"}, command, "the Deployment's command")
			// $(VAR) of a variable from a ConfigMap, expanded as the kubelet does.
			var pairs []string
			for _, e := range env {
				if r := e.ValueFrom; r != nil && r.ConfigMapKeyRef != nil {
					v, ok := configMaps[r.ConfigMapKeyRef.Name][r.ConfigMapKeyRef.Key]
					require.True(t, ok, "env %s: the chart renders no ConfigMap %s with key %s", e.Name, r.ConfigMapKeyRef.Name, r.ConfigMapKeyRef.Key)
					pairs = append(pairs, "$("+e.Name+")", v)
				}
			}
			expand := strings.NewReplacer(pairs...)
			for i := range args {
				args[i] = expand.Replace(args[i])
			}
			cmd := newControllerCommand()
			require.NoError(t, cmd.ParseFlags(args), "the controller refuses the chart's args %q", args)
			assert.Empty(t, cmd.Flags().Args(), "args %q leave positional arguments, which the controller refuses", args)
			// The controller runs with the settings plan reads, each parsed as plan parses it.
			settings := configMaps["remediator-settings"]
			require.NotEmpty(t, settings, "the chart renders no remediator-settings ConfigMap")
			plan := newPlanCommand()
			for k, v := range settings {
				if plan.Flags().Lookup(k) == nil {
					// The controller's only (pause-configmap): plan skips it.
					require.NotNil(t, cmd.Flags().Lookup(k), "the settings key %s is a flag of neither plan nor the controller", k)
					continue
				}
				require.NoError(t, plan.Flags().Set(k, v), "plan refuses the setting %s=%q", k, v)
				assert.Equal(t, plan.Flags().Lookup(k).Value.String(), cmd.Flags().Lookup(k).Value.String(), "--%s: plan and the controller differ", k)
			}
			assert.ElementsMatch(t, cmdutil.SettingFlags, slices.Collect(maps.Keys(settings)), "the settings ConfigMap's keys are plan's cmdutil.SettingFlags")
		})
	}
}
