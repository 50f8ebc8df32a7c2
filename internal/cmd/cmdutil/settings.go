package cmdutil

// The controller's settings, as the chart publishes them: plan and scan on live
// facts read the ConfigMap <fullname>-settings
// (charts/remediator/templates/configmap-settings.yaml) and take from it every
// setting not given on their command line, so that a pull-request check decides
// with the values the controller runs with.

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

// SettingPauseConfigMap is the settings key that publishes the pause ConfigMap, as
// namespace/name: the controller's --pause-configmap.
const SettingPauseConfigMap = "pause-configmap"

// DefaultSettingsConfigMap is the chart's default release's: release remediator in
// namespace remediator-system.
const DefaultSettingsConfigMap = "remediator-system/remediator-settings"

// SettingFlags are the keys of the settings ConfigMap, each the name of the flag it
// sets, in the order plan reports them. A command without the flag skips its key:
// pause-configmap is the controller's (and where pause and resume find the pause).
var SettingFlags = []string{
	"trident-namespace", "allowed-trident-namespaces", "driver-name", "node-plugin-selector", "node-lease-grace-period",
	"max-concurrent-remediations", "floor-unreachable-lease-age", "floor-healthy-lease-age", SettingPauseConfigMap,
}

// Where a setting came from.
const (
	SettingFromFlag    = "flag"
	SettingFromDefault = "default"
)

// Setting is one controller setting a command decided with.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// From is "flag" (the command line), "default" (plan's own) or "configmap
	// NAMESPACE/NAME".
	From string `json:"from"`
}

// AddSettingsFlag registers --settings-configmap; command names the command in its help.
func AddSettingsFlag(f *pflag.FlagSet, p *string, command string) {
	f.StringVar(p, "settings-configmap", DefaultSettingsConfigMap,
		"The chart's settings ConfigMap (NAMESPACE/NAME, the chart's <fullname>-settings): with live facts, its values apply to the settings ("+
			strings.Join(SettingFlags, ", ")+") not given as flags; empty: "+command+"'s flags and defaults only")
}

// ApplySettings reads the settings ConfigMap and sets each flag the command line did
// not give to its value. It returns every setting with its source, and a warning
// when the ConfigMap does not exist. Any other failure to read it is an error: a
// check that cannot see the controller's settings must not pass on plan's defaults.
// It serves any command with the cluster flags: the keys whose flag the command
// does not have (scan has no --max-concurrent-remediations) are left out.
func ApplySettings(ctx context.Context, command string, flags *pflag.FlagSet, cluster *ClusterFlags, settingsConfigMap string) ([]Setting, []string, error) {
	from := map[string]string{}
	for _, name := range SettingFlags {
		if flags != nil && flags.Changed(name) {
			from[name] = SettingFromFlag
		}
	}
	var warnings []string
	if settingsConfigMap != "" {
		ns, name, ok := strings.Cut(settingsConfigMap, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, nil, fmt.Errorf("--settings-configmap %q: want NAMESPACE/NAME, e.g. %s, or empty", settingsConfigMap, DefaultSettingsConfigMap)
		}
		r, err := cluster.Reader()
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
				if !slices.Contains(SettingFlags, key) {
					warnings = append(warnings, fmt.Sprintf("the settings ConfigMap %s has key %q, which this %s does not know (a newer chart?): ignored", settingsConfigMap, key, command))
					continue
				}
				if from[key] == SettingFromFlag || flags.Lookup(key) == nil {
					continue
				}
				if err := flags.Set(key, cm.Data[key]); err != nil {
					return nil, nil, fmt.Errorf("the settings ConfigMap %s: %s: %w", settingsConfigMap, key, err)
				}
				from[key] = "configmap " + settingsConfigMap
			}
		}
	}
	out := make([]Setting, 0, len(SettingFlags))
	for _, name := range SettingFlags {
		f := flags.Lookup(name)
		if f == nil {
			continue
		}
		s := Setting{Name: name, From: SettingFromDefault, Value: f.Value.String()}
		if src, ok := from[name]; ok {
			s.From = src
		}
		out = append(out, s)
	}
	return out, warnings, nil
}
