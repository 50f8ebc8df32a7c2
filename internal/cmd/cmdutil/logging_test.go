package cmdutil

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
)

// parseLogging parses args into a fresh logging flag set, without applying it: the
// applied configuration is process-wide, and klog's flush daemon reads it.
func parseLogging(t *testing.T, args ...string) *LoggingFlags {
	t.Helper()
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	l := AddLoggingFlags(fs)
	require.NoError(t, fs.Parse(args))
	return l
}

// TestLogFormatFlag: --log-format (component-base's --logging-format) takes json and
// text, and refuses anything else. cmd/remediator's TestLogFormatFlagOnCommands
// checks that both commands that log have it, and -v.
func TestLogFormatFlag(t *testing.T) {
	l := parseLogging(t, "--log-format=json", "-v=2")
	assert.Equal(t, "json", l.String())
	assert.Equal(t, logsapi.VerbosityLevel(2), l.config.Verbosity)
	assert.Empty(t, logsapi.Validate(l.config, nil, field.NewPath("logging")))

	assert.Equal(t, "text", parseLogging(t, "--logging-format", "text").String())

	errs := logsapi.Validate(parseLogging(t, "--log-format=xml").config, nil, field.NewPath("logging"))
	require.NotEmpty(t, errs)
	assert.Contains(t, errs.ToAggregate().Error(), `"xml"`)
}

// TestLogFormatJSONWrites: applied, --log-format=json makes every klog line (and so
// controller-runtime's) a JSON object. It runs in a child process, since applying a
// logging configuration is for the whole process.
func TestLogFormatJSONWrites(t *testing.T) {
	if os.Getenv("REMEDIATOR_LOG_FORMAT_CHILD") == "1" {
		l := parseLogging(t, "--log-format=json")
		require.NoError(t, l.Apply())
		klog.NewKlogr().WithName("setup").Info("Starting manager", "version", "test")
		klog.Flush()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLogFormatJSONWrites$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REMEDIATOR_LOG_FORMAT_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var line map[string]any
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "Starting manager") {
			require.NoError(t, json.Unmarshal([]byte(l), &line), "a JSON log line: %s", l)
		}
	}
	require.NotNil(t, line, "the log line is there:\n%s", out)
	assert.Equal(t, "Starting manager", line["msg"])
	assert.Equal(t, "setup", line["logger"])
	assert.Equal(t, "test", line["version"])
}
