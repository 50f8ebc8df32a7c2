package cmdutil

// The logging flags of Kubernetes components (k8s.io/component-base/logs), so that
// the controller and sync log the way kube-controller-manager does: -v and --vmodule
// as before, and --logging-format=json (also spelt --log-format) for log pipelines
// that parse lines.

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"

	// The json format, which logsapi knows only once it is registered.
	_ "k8s.io/component-base/logs/json/register"
)

// A command run twice in one process (the tests run them in-process) applies the
// same configuration again; a different one is still refused.
func init() { logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged }

// LoggingFlags holds the logging configuration the flags fill in.
type LoggingFlags struct{ config *logsapi.LoggingConfiguration }

// AddLoggingFlags registers the logging flags on fs.
func AddLoggingFlags(fs *pflag.FlagSet) *LoggingFlags {
	l := &LoggingFlags{config: logsapi.NewLoggingConfiguration()}
	logsapi.AddFlags(l.config, fs)
	prev := fs.GetNormalizeFunc()
	fs.SetNormalizeFunc(func(f *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "log-format" {
			name = "logging-format"
		}
		return prev(f, name)
	})
	return l
}

// Apply validates the configuration and switches klog, and so every logger built on
// it (controller-runtime's included), to it.
func (l *LoggingFlags) Apply() error {
	if err := logsapi.ValidateAndApply(l.config, nil); err != nil {
		return fmt.Errorf("logging flags: %w", err)
	}
	return nil
}

// String is the format, for the start-up log line.
func (l *LoggingFlags) String() string { return strings.ToLower(l.config.Format) }
