package main

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// TestLogFormatFlag: --log-format=json (component-base's --logging-format) is
// accepted and applied, an unknown format is refused, and -v is still there.
func TestLogFormatFlag(t *testing.T) {
	t.Cleanup(func() { _ = logsapi.ResetForTest(nil) })
	parse := func(args ...string) (*loggingFlags, error) {
		require.NoError(t, logsapi.ResetForTest(nil))
		fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
		l := addLoggingFlags(fs)
		require.NoError(t, fs.Parse(args))
		return l, l.apply()
	}
	l, err := parse("--log-format=json", "-v=2")
	require.NoError(t, err)
	assert.Equal(t, "json", l.String())
	assert.Equal(t, logsapi.VerbosityLevel(2), l.config.Verbosity)

	l, err = parse("--logging-format", "text")
	require.NoError(t, err)
	assert.Equal(t, "text", l.String())

	_, err = parse("--log-format=xml")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"xml"`)

	for _, c := range []string{"controller", "sync"} {
		cmd := map[string]func() *pflag.FlagSet{
			"controller": func() *pflag.FlagSet { return newControllerCommand().Flags() },
			"sync":       func() *pflag.FlagSet { return newSyncCommand().Flags() },
		}[c]()
		assert.NotNil(t, cmd.Lookup("logging-format"), "%s --logging-format", c)
		assert.NotNil(t, cmd.Lookup("log-format"), "%s --log-format", c)
		assert.NotNil(t, cmd.Lookup("v"), "%s -v", c)
	}
}
