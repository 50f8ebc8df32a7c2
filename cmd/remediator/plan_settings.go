package main

// The controller's settings, as the chart publishes them: plan on live facts reads
// the ConfigMap <fullname>-settings (charts/remediator/templates/configmap-settings.yaml)
// and takes from it every setting not given on its command line, so that a
// pull-request check decides with the values the controller runs with.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// defaultSettingsConfigMap is the chart's default release's: release remediator in
// namespace remediator-system.
const defaultSettingsConfigMap = "remediator-system/remediator-settings"

// settingFlags are the keys of the settings ConfigMap, each the name of the flag it
// sets, in the order plan reports them. A command without the flag skips its key:
// pause-configmap is the controller's (and where pause and resume find the pause).
var settingFlags = []string{
	"trident-namespace", "allowed-trident-namespaces", "driver-name", "node-plugin-selector", "node-lease-grace-period",
	"max-concurrent-remediations", "floor-unreachable-lease-age", "floor-healthy-lease-age", settingPauseConfigMap,
}

// Where a setting came from.
const (
	settingFromFlag    = "flag"
	settingFromDefault = "default"
)

// planSetting is one controller setting plan decided with.
type planSetting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// From is "flag" (the command line), "default" (plan's own) or "configmap
	// NAMESPACE/NAME".
	From string `json:"from"`
}

func addSettingsFlag(f *pflag.FlagSet, p *string, command string) {
	f.StringVar(p, "settings-configmap", defaultSettingsConfigMap,
		"The chart's settings ConfigMap (NAMESPACE/NAME, the chart's <fullname>-settings): with live facts, its values apply to the settings ("+
			strings.Join(settingFlags, ", ")+") not given as flags; empty: "+command+"'s flags and defaults only")
}

// applySettings reads the settings ConfigMap and sets each flag the command line did
// not give to its value. It returns every setting with its source, and a warning
// when the ConfigMap does not exist. Any other failure to read it is an error: a
// check that cannot see the controller's settings must not pass on plan's defaults.
func (o *planOptions) applySettings(ctx context.Context) ([]planSetting, []string, error) {
	return applySettings(ctx, "plan", o.flags, o.cluster, o.settingsConfigMap)
}

// applySettings is planOptions.applySettings for any command with the cluster flags:
// the keys whose flag the command does not have (scan has no
// --max-concurrent-remediations) are left out.
func applySettings(ctx context.Context, command string, flags *pflag.FlagSet, cluster *clusterFlags, settingsConfigMap string) ([]planSetting, []string, error) {
	from := map[string]string{}
	for _, name := range settingFlags {
		if flags != nil && flags.Changed(name) {
			from[name] = settingFromFlag
		}
	}
	var warnings []string
	if settingsConfigMap != "" {
		ns, name, ok := strings.Cut(settingsConfigMap, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, nil, fmt.Errorf("--settings-configmap %q: want NAMESPACE/NAME, e.g. %s, or empty", settingsConfigMap, defaultSettingsConfigMap)
		}
		r, err := cluster.reader()
		if err != nil {
			return nil, nil, err
		}
		cm := &corev1.ConfigMap{}
		err = r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cm)
		switch {
		case apierrors.IsNotFound(err):
			warnings = append(warnings, fmt.Sprintf("the controller's settings ConfigMap %s does not exist: %s uses its own defaults where no flag is given, which may not be the controller's (install the chart, or give --settings-configmap NAMESPACE/NAME of its <fullname>-settings)", settingsConfigMap, command))
		case apierrors.IsForbidden(err):
			return nil, nil, fmt.Errorf("reading the controller's settings from ConfigMap %s: %w: grant get on configmaps named %q in namespace %q (the chart's remediator-plan ClusterRole has it; bind it to this identity), or pass --settings-configmap= to use %s's flags and defaults only",
				settingsConfigMap, err, name, ns, command)
		case err != nil:
			return nil, nil, fmt.Errorf("reading the controller's settings from ConfigMap %s: %w", settingsConfigMap, err)
		default:
			for _, key := range slices.Sorted(func(yield func(string) bool) {
				for k := range cm.Data {
					if !yield(k) {
						return
					}
				}
			}) {
				if !slices.Contains(settingFlags, key) {
					warnings = append(warnings, fmt.Sprintf("the settings ConfigMap %s has key %q, which this %s does not know (a newer chart?): ignored", settingsConfigMap, key, command))
					continue
				}
				if from[key] == settingFromFlag || flags.Lookup(key) == nil {
					continue
				}
				if err := flags.Set(key, cm.Data[key]); err != nil {
					return nil, nil, fmt.Errorf("the settings ConfigMap %s: %s: %w", settingsConfigMap, key, err)
				}
				from[key] = "configmap " + settingsConfigMap
			}
		}
	}
	out := make([]planSetting, 0, len(settingFlags))
	for _, name := range settingFlags {
		f := flags.Lookup(name)
		if f == nil {
			continue
		}
		s := planSetting{Name: name, From: settingFromDefault, Value: f.Value.String()}
		if src, ok := from[name]; ok {
			s.From = src
		}
		out = append(out, s)
	}
	return out, warnings, nil
}

// writePlanSettings writes the settings and the warnings above the plans.
func writePlanSettings(b *strings.Builder, r planReport) {
	for i, s := range r.Settings {
		label := ""
		if i == 0 {
			label = "settings:"
		}
		from := s.From
		switch from {
		case settingFromFlag:
			from = "--" + s.Name
		case settingFromDefault:
			from = "plan's default"
		}
		fmt.Fprintf(b, "%-10s %s=%s (%s)\n", label, s.Name, s.Value, from)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(b, "warning: %s\n", w)
	}
	if len(r.Settings) > 0 || len(r.Warnings) > 0 {
		b.WriteString("\n")
	}
}

// checkSettings refuses settings the controller would refuse, before plan connects
// for them and again once the settings ConfigMap applied.
func (o *planOptions) checkSettings() error {
	if o.maxConcurrent < 0 {
		return fmt.Errorf("--max-concurrent-remediations must be 0 (no cap) or more, got %d", o.maxConcurrent)
	}
	if _, err := o.cluster.gates(); err != nil {
		return err
	}
	_, err := o.cluster.factsConfig()
	return err
}
