package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/test/cluster"
)

func TestStatCPU(t *testing.T) {
	// A real line's shape: the command name holds a space and a parenthesis.
	line := "8805 (kube (api) server) S 1 8805 8805 0 -1 4194560 123 0 0 0 2500 730 0 0 20 0 12 0 4321 0 0"
	got, err := statCPU(line)
	require.NoError(t, err)
	assert.InDelta(t, 32.30, got, 1e-9)

	for _, bad := range []string{"no name", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 5"} {
		_, err := statCPU(bad)
		assert.Error(t, err, bad)
	}
}

func TestReadControlPlaneCPU(t *testing.T) {
	// This process stands in for both: its CPU time only grows.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	pids := filepath.Join(cluster.WorkDir(kubeconfig), "pids")
	require.NoError(t, os.MkdirAll(pids, 0o755))
	self := []byte(strconv.Itoa(os.Getpid()))
	require.NoError(t, os.WriteFile(filepath.Join(pids, "kube-apiserver.pid"), self, 0o600))
	_, err := readControlPlaneCPU(kubeconfig)
	require.Error(t, err, "etcd's pid file is missing")

	require.NoError(t, os.WriteFile(filepath.Join(pids, "etcd.pid"), self, 0o600))
	got, err := readControlPlaneCPU(kubeconfig)
	require.NoError(t, err)
	assert.Positive(t, got.APIServer, "a test binary has used some CPU by now")
	assert.InDelta(t, got.APIServer, got.Etcd, 0.05, "the same process, read twice")
}

func TestPerRequest(t *testing.T) {
	c := &ControlPlaneCPU{APIServer: 12.5, Etcd: 2}
	assert.Equal(t, &ControlPlaneCPU{APIServer: 12.5, Etcd: 2}, c.perRequest(1000).perRequest(1000), "seconds over 1000 are ms per request")
	assert.Equal(t, &ControlPlaneCPU{APIServer: 125, Etcd: 20}, c.perRequest(100))
}

func TestSummaryShowsControlPlaneCost(t *testing.T) {
	floor, storm := &ControlPlaneCPU{APIServer: 9.84, Etcd: 1.1}, &ControlPlaneCPU{APIServer: 31.2, Etcd: 2}
	assert.Equal(t, "9.8 + 1.1 -> 31.2 + 2.0 ms", controlPlaneCost(100, floor, storm))
	assert.Equal(t, "-", controlPlaneCost(1, floor, storm), "a storm of one is mostly the cluster's background")
	assert.Equal(t, "-", controlPlaneCost(1000, nil, storm), "not read")

	r := &Result{Writes: &Writes{Writes: 400, Rounds: 3, Costs: []WriteCost{
		{Status: "as the controller leaves a release", Bytes: 7616, APIServerMs: 11.52, EtcdMs: 1.2},
		{Status: "as the floor writes it", Bytes: 1819, APIServerMs: 4.6, EtcdMs: 0.6},
	}}}
	s := summarise(r)
	assert.Contains(t, s, "One status write, by what the request carries (400 requests each, 5 writes each a round, no controller running; the median of 3 rounds)")
	assert.Regexp(t, `as the controller leaves a release\s+7616 bytes\s+11\.5 ms\s+1\.2 ms`, s)
	assert.Regexp(t, `as the floor writes it\s+1819 bytes\s+4\.6 ms\s+0\.6 ms`, s)
}

func TestMedian(t *testing.T) {
	api := func(c ControlPlaneCPU) float64 { return c.APIServer }
	assert.Zero(t, median(nil, api))
	assert.Equal(t, 2.0, median([]ControlPlaneCPU{{APIServer: 9}, {APIServer: 1}, {APIServer: 2}}, api))
	assert.Equal(t, 1.5, median([]ControlPlaneCPU{{APIServer: 2}, {APIServer: 1}}, api))
}

func TestWritesWithoutAReleasedRequestMeasureNothing(t *testing.T) {
	// No storm or memory scenario ran: the run goes on without the measure.
	w, err := (&bench{}).writes(context.Background(), 10)
	require.NoError(t, err)
	assert.Nil(t, w)
	assert.NotContains(t, summarise(&Result{}), "One status write")
}
