package main

// What the floor and the storm cost the control plane itself: the CPU time of the
// local cluster's kube-apiserver and etcd, read from /proc (the bench runs on the
// cluster's machine). A storm's time is the machine's: with every process on the
// same cores, what the controller makes the API server do per request is what it
// pays in seconds.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/remediator/remediator/test/cluster"
)

// controlPlane reads the control plane's CPU time now, to measure a floor or a storm
// from; nil, logged once, when it cannot be read (a cluster that is not the local
// one): the run goes on without the measure.
func (b *bench) controlPlane() *ControlPlaneCPU {
	at, err := readControlPlaneCPU(b.cfg.kubeconfig)
	if err != nil {
		b.cpuUnreadable.Do(func() { logf("Not measuring the control plane's CPU: %v", err) })
		return nil
	}
	return &at
}

// cpuSince is the control plane's CPU seconds from the reading start until now;
// nil when either reading failed.
func (b *bench) cpuSince(start *ControlPlaneCPU) *ControlPlaneCPU {
	now := b.controlPlane()
	if start == nil || now == nil {
		return nil
	}
	return &ControlPlaneCPU{APIServer: now.APIServer - start.APIServer, Etcd: now.Etcd - start.Etcd}
}

// pair renders c as the API server's and etcd's figures: "9.8 + 1.1".
func (c *ControlPlaneCPU) pair() string {
	return fmt.Sprintf("%.1f + %.1f", c.APIServer, c.Etcd)
}

// perRequest is c, in seconds, as milliseconds per request of n.
func (c *ControlPlaneCPU) perRequest(n int) *ControlPlaneCPU {
	return &ControlPlaneCPU{APIServer: c.APIServer * 1000 / float64(n), Etcd: c.Etcd * 1000 / float64(n)}
}

// readControlPlaneCPU reads the CPU seconds the cluster's kube-apiserver and etcd
// have used since they started, found by the pid files kwokctl keeps in the
// cluster's directory (cluster.WorkDir).
func readControlPlaneCPU(kubeconfig string) (ControlPlaneCPU, error) {
	pids := filepath.Join(cluster.WorkDir(kubeconfig), "pids")
	api, err := processCPU(filepath.Join(pids, "kube-apiserver.pid"))
	if err != nil {
		return ControlPlaneCPU{}, err
	}
	etcd, err := processCPU(filepath.Join(pids, "etcd.pid"))
	if err != nil {
		return ControlPlaneCPU{}, err
	}
	return ControlPlaneCPU{APIServer: api, Etcd: etcd}, nil
}

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on every Linux ABI.
const userHZ = 100

// processCPU is the user and system CPU seconds of the process whose pid file is
// pidFile.
func processCPU(pidFile string) (float64, error) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("reading the control plane's pid: %w", err)
	}
	pid := strings.TrimSpace(string(b))
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of %s (pid %s): %w", filepath.Base(pidFile), pid, err)
	}
	return statCPU(string(stat))
}

// statCPU parses utime and stime, fields 14 and 15 of /proc/<pid>/stat, after the
// command name, which may hold spaces and parentheses.
func statCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parsing /proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks float64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing /proc stat's CPU times: %w", err)
		}
		ticks += float64(n)
	}
	return ticks / userHZ, nil
}

// apiServerProfileSeconds is how long the API server is profiled from the start of
// a profiled floor and of its storm: meant to be shorter than the floor of the
// largest size (14 to 21 s for 1,000 in the full preset), so that both profiles
// cover the same kind of window, the releases in full flow. A shorter floor is
// logged (point).
const apiServerProfileSeconds = 12

// apiServerProfileSlack is how long past apiServerProfileSeconds the profile's
// answer may take before the harness gives up on it: a stalled API server must not
// hold the run.
const apiServerProfileSlack = 30 * time.Second

// apiServerProfile profiles kube-apiserver's CPU (its /debug/pprof, on by default)
// for apiServerProfileSeconds from now into path, in the background; wait returns
// once it is saved. Off, it does nothing and wait returns at once. Failing to
// profile is logged, never the run's failure: the profile is for reading, the
// figures come from /proc.
func (b *bench) apiServerProfile(ctx context.Context, on bool, path string) (wait func()) {
	if !on {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(ctx, apiServerProfileSeconds*time.Second+apiServerProfileSlack)
		defer cancel()
		raw, err := b.fastCS.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(apiServerProfileSeconds)).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		if err != nil {
			logf("Profiling kube-apiserver into %s: %v", path, err)
			return
		}
		logf("Profile of kube-apiserver over %d s: %s", apiServerProfileSeconds, path)
	}()
	return func() { <-done }
}
