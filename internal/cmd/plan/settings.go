package plan

// The controller's settings, as the chart publishes them: plan on live facts reads
// the ConfigMap <fullname>-settings (charts/remediator/templates/configmap-settings.yaml)
// and takes from it every setting not given on its command line, so that a
// pull-request check decides with the values the controller runs with.

import (
	"context"
	"fmt"
	"strings"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// applySettings reads the settings ConfigMap and sets each flag the command line did
// not give to its value. It returns every setting with its source, and a warning
// when the ConfigMap does not exist. Any other failure to read it is an error: a
// check that cannot see the controller's settings must not pass on plan's defaults.
func (o *Options) applySettings(ctx context.Context) ([]cmdutil.Setting, []string, error) {
	return cmdutil.ApplySettings(ctx, "plan", o.flags, o.cluster, o.settingsConfigMap)
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
		case cmdutil.SettingFromFlag:
			from = "--" + s.Name
		case cmdutil.SettingFromDefault:
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
func (o *Options) checkSettings() error {
	if o.maxConcurrent < 0 {
		return fmt.Errorf("--max-concurrent-remediations must be 0 (no cap) or more, got %d", o.maxConcurrent)
	}
	if _, err := o.cluster.Floor(); err != nil {
		return err
	}
	_, err := o.cluster.FactsConfig()
	return err
}
