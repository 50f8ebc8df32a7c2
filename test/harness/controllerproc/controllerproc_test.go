package controllerproc

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv makes the test binary play the controller (fakeController) instead of
// running the tests; fakeMode says how.
const (
	fakeEnv  = "CONTROLLERPROC_FAKE"
	fakeMode = "CONTROLLERPROC_FAKE_MODE"
	// markerEnv names the file in which the port-taken modes count their starts.
	markerEnv = "CONTROLLERPROC_MARKER"
	// versionEnv is what the fake's version command prints.
	versionEnv = "CONTROLLERPROC_VERSION"
	// noControllerEnv makes the fake a remediator CLI without a controller command.
	noControllerEnv = "CONTROLLERPROC_NO_CONTROLLER"
)

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) != "" {
		os.Exit(fakeController(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeController stands in for remediator-controller (or, given the subcommand
// controller first, a remediator binary from before): `version` prints
// $CONTROLLERPROC_VERSION; otherwise it logs its command line,
// serves /readyz on --health-probe-bind-address (unless the mode is "exit" or
// "never-ready") and exits 0 on SIGTERM (unless the mode is "ignore-term").
func fakeController(args []string) int {
	if len(args) == 1 && args[0] == "version" {
		fmt.Println(os.Getenv(versionEnv))
		return 0
	}
	if len(args) == 2 && args[0] == "controller" && args[1] == "--help" {
		if os.Getenv(noControllerEnv) != "" {
			fmt.Println(`Error: unknown command "controller" for "remediator"`)
			return 2
		}
		return 0
	}
	fmt.Println("args:", strings.Join(args, " "))
	fmt.Println("env:", os.Getenv("EXTRA"))
	mode := os.Getenv(fakeMode)
	if mode == "exit" {
		fmt.Println("refusing to start")
		return 3
	}
	// port-taken: the first start (or every one, with port-always-taken) finds its
	// probe port bound by another process, as controller-runtime reports it; each
	// start appends a line to the marker file.
	if mode == "port-taken" || mode == "port-always-taken" {
		marker := os.Getenv(markerEnv)
		b, _ := os.ReadFile(marker)
		_ = os.WriteFile(marker, append(b, "started\n"...), 0o600)
		if len(b) == 0 || mode == "port-always-taken" {
			fmt.Println("problem running manager: listen tcp 127.0.0.1:1: bind: address already in use")
			return 1
		}
	}
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	probe := fs.String("health-probe-bind-address", "", "")
	fs.String("kubeconfig", "", "")
	metrics := fs.String("metrics-bind-address", "", "")
	fs.String("node-lease-grace-period", "", "")
	fs.String("pprof-bind-address", "", "")
	fs.String("leader-elect", "", "")
	if len(args) > 0 && args[0] == "controller" {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	term := make(chan os.Signal, 1)
	if mode == "ignore-term" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(term, syscall.SIGTERM)
	}
	if mode != "never-ready" {
		http.HandleFunc("/readyz", func(http.ResponseWriter, *http.Request) {})
		go func() { _ = http.ListenAndServe(*probe, nil) }()
	}
	if *metrics != "0" {
		// The manager starts its metrics server on its own, possibly after /readyz
		// answers: metrics-late listens half a second after it.
		ms := http.NewServeMux()
		ms.HandleFunc("/metrics", func(http.ResponseWriter, *http.Request) {})
		go func() {
			if mode == "metrics-late" {
				time.Sleep(500 * time.Millisecond)
			}
			_ = http.ListenAndServe(*metrics, ms)
		}()
	}
	<-term
	fmt.Println("stopped by SIGTERM")
	return 0
}

func options(t *testing.T, mode string) Options {
	t.Helper()
	return Options{
		Binary:     os.Args[0],
		Kubeconfig: "/the/kubeconfig",
		Args:       []string{"--leader-elect", "true"},
		Env:        []string{fakeEnv + "=1", fakeMode + "=" + mode, "EXTRA=given"},
		Log:        filepath.Join(t.TempDir(), "controller.log"),
	}
}

func TestStartWaitsForReadinessAndStopsWithSIGTERM(t *testing.T) {
	o := options(t, "")
	o.Metrics = true
	p, err := Start(context.Background(), o)
	require.NoError(t, err)
	resp, err := http.Get("http://" + p.Probe + "/readyz")
	require.NoError(t, err, "Start returned before /readyz answered")
	_ = resp.Body.Close()
	assert.False(t, p.Exited())
	assert.NotEmpty(t, p.Metrics)
	assert.Empty(t, p.Pprof)

	p.Stop()
	assert.True(t, p.Exited())
	assert.NoError(t, p.Err())
	assert.False(t, p.KilledBySIGKILL())
	logs := p.Logs()
	assert.Contains(t, logs, "args: --kubeconfig /the/kubeconfig --metrics-bind-address "+p.Metrics+
		" --health-probe-bind-address "+p.Probe+" --node-lease-grace-period 20s --leader-elect true\n",
		"the flags the harnesses share, then the Options' Args")
	assert.Contains(t, logs, "env: given\n")
	assert.Contains(t, logs, "stopped by SIGTERM")
	p.Stop() // a second stop is a no-op
}

// TestSubcommand: a remediator binary from before the controller had its own runs
// as `remediator controller`, remediator-controller with its flags alone; what it
// is, its version command says.
func TestSubcommand(t *testing.T) {
	t.Setenv(fakeEnv, "1")
	for version, want := range map[string]string{
		"remediator-controller v0.4.0": "",
		"remediator a9f3949":           "controller",
	} {
		t.Setenv(versionEnv, version)
		got, err := Subcommand(context.Background(), os.Args[0])
		require.NoError(t, err, version)
		assert.Equal(t, want, got, version)
	}
	t.Setenv(versionEnv, "kubectl v1.34.2")
	_, err := Subcommand(context.Background(), os.Args[0])
	assert.ErrorContains(t, err, "neither remediator-controller nor remediator")
	// The remediator CLI of today: no controller command.
	t.Setenv(versionEnv, "remediator v0.4.0")
	t.Setenv(noControllerEnv, "1")
	_, err = Subcommand(context.Background(), os.Args[0])
	assert.ErrorContains(t, err, "has no controller command")
	t.Setenv(noControllerEnv, "")

	o := options(t, "")
	o.Subcommand = "controller"
	p, err := Start(context.Background(), o)
	require.NoError(t, err)
	p.Stop()
	assert.Contains(t, p.Logs(), "args: controller --kubeconfig /the/kubeconfig ", "the subcommand before the flags")
}

// TestStartWaitsForTheMetricsEndpoint: /readyz may answer before the metrics
// endpoint listens; a caller that reads the metrics right after Start found the
// port closed (connection refused), and the bench stopped the controller for it.
func TestStartWaitsForTheMetricsEndpoint(t *testing.T) {
	o := options(t, "metrics-late")
	o.Metrics = true
	p, err := Start(context.Background(), o)
	require.NoError(t, err)
	defer p.Stop()
	resp, err := http.Get("http://" + p.Metrics + "/metrics")
	require.NoError(t, err, "Start returned before /metrics answered")
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestMetricsOffAndPprof(t *testing.T) {
	o := options(t, "")
	o.Pprof = true
	p, err := Start(context.Background(), o)
	require.NoError(t, err)
	defer p.Stop()
	assert.Empty(t, p.Metrics)
	assert.NotEmpty(t, p.Pprof)
	assert.Contains(t, p.Logs(), "--metrics-bind-address 0 ")
	assert.Contains(t, p.Logs(), "--pprof-bind-address "+p.Pprof+" ")
	rss, peak, err := p.Memory()
	require.NoError(t, err)
	assert.Positive(t, rss)
	assert.GreaterOrEqual(t, peak, rss)
}

func TestKill(t *testing.T) {
	o := options(t, "never-ready")
	o.NoWait = true
	p, err := Start(context.Background(), o)
	require.NoError(t, err)
	p.Kill()
	assert.True(t, p.Exited())
	assert.True(t, p.KilledBySIGKILL())
	assert.Error(t, p.Err())
}

func TestExitBeforeReadyIsAnError(t *testing.T) {
	o := options(t, "exit")
	_, err := Start(context.Background(), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "controller exited before it was ready: exit status 3")
	assert.Contains(t, err.Error(), o.Log)
	b, _ := os.ReadFile(o.Log)
	assert.Contains(t, string(b), "refusing to start")
}

func TestStopKillsAProcessThatIgnoresSIGTERM(t *testing.T) {
	defer func(d time.Duration) { stopTimeout = d }(stopTimeout)
	stopTimeout = time.Second
	o := options(t, "ignore-term")
	p, err := Start(context.Background(), o)
	require.NoError(t, err)
	start := time.Now()
	p.Stop()
	assert.True(t, p.KilledBySIGKILL())
	assert.GreaterOrEqual(t, time.Since(start), stopTimeout)
}

func TestWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := Start(ctx, options(t, "never-ready"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestStartAgainWhenThePortWasTaken(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		starts   int
		startErr string
	}{
		{mode: "port-taken", starts: 2},
		{mode: "port-always-taken", starts: startAttempts, startErr: "controller exited before it was ready: exit status 1"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			o := options(t, tc.mode)
			marker := filepath.Join(t.TempDir(), "starts")
			o.Env = append(o.Env, markerEnv+"="+marker)
			p, err := Start(context.Background(), o)
			if tc.startErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.startErr)
				assert.Nil(t, p)
			} else {
				require.NoError(t, err)
				p.Stop()
			}
			b, err := os.ReadFile(marker)
			require.NoError(t, err)
			assert.Equal(t, tc.starts, strings.Count(string(b), "started"), "starts")
		})
	}
}
