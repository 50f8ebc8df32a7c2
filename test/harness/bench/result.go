package main

import "time"

// Result is one `make bench` run: what results.json holds, what the summary table
// and the plots are made from. Durations are in seconds (float) or milliseconds
// where the name says so, so that the JSON reads without a Go decoder.
type Result struct {
	Preset    string    `json:"preset"`
	StartedAt time.Time `json:"startedAt"`
	// Commit is `git describe --always --dirty` of the tree the controller was built from.
	Commit  string  `json:"commit"`
	Machine Machine `json:"machine"`
	// Command reproduces the run.
	Command string `json:"command"`

	Latency *Latency `json:"latency,omitempty"`
	// Storm is the storm at the preset's largest size, Scale the storm and the API
	// server's floor at every size, smallest first (the last is Storm's).
	Storm *Storm       `json:"storm,omitempty"`
	Scale []ScalePoint `json:"scale,omitempty"`
	// Baseline is the same storm at the largest size with an earlier controller
	// (-baseline), recorded next to Storm and never checked against the call budget.
	Baseline   *Baseline   `json:"baseline,omitempty"`
	Disruptive *Disruptive `json:"disruptive,omitempty"`
	Memory     *Memory     `json:"memory,omitempty"`
	Writes     *Writes     `json:"writes,omitempty"`
}

// Machine is where the run happened.
type Machine struct {
	NProc       int    `json:"nproc"`
	MemTotalMiB int    `json:"memTotalMiB"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"goVersion"`
}

// Latency is scenario 1: sequential shut-down-holder requests, created -> Lease
// deleted, next to the seed runbook run as a kubectl script on the same cluster.
type Latency struct {
	Requests int `json:"requests"`
	// ControllerMs are the per-request latencies, created -> Lease deleted, in order.
	ControllerMs []float64 `json:"controllerMs"`
	// ScriptMs are the per-incident latencies of the kubectl runbook script.
	ScriptMs []float64 `json:"scriptMs"`
	// ScriptCalls is how many kubectl invocations the script makes per incident.
	ScriptCalls int `json:"scriptCalls"`

	P50Ms       float64 `json:"p50Ms"`
	P99Ms       float64 `json:"p99Ms"`
	ScriptP50Ms float64 `json:"scriptP50Ms"`
	ScriptP99Ms float64 `json:"scriptP99Ms"`
	// Ratio is ScriptP50Ms / P50Ms: how many times faster the controller is.
	Ratio float64 `json:"ratio"`
	// APICallsPerRequest is the controller's rest_client_requests_total delta over
	// the scenario divided by Requests, and ByVerb its breakdown by verb and resource.
	APICallsPerRequest float64        `json:"apiCallsPerRequest"`
	APICallsByKind     map[string]int `json:"apiCallsByKind"`
}

// Point is one sample of a storm's progress.
type Point struct {
	Seconds  float64 `json:"seconds"`
	Decided  int     `json:"decided"`
	Running  int     `json:"running"`
	Terminal int     `json:"terminal"`
}

// Storm is scenario 2: many shut-down-holder requests at once, with default flags,
// on a cluster that also carries many pods on kwok nodes.
type Storm struct {
	Requests      int `json:"requests"`
	ShutdownNodes int `json:"shutdownNodes"`
	KwokNodes     int `json:"kwokNodes"`
	Pods          int `json:"pods"`
	// DecidedSeconds: from the first create until every request had a decision.
	DecidedSeconds float64 `json:"decidedSeconds"`
	// TerminalSeconds: from the first create until every request was terminal.
	TerminalSeconds float64 `json:"terminalSeconds"`
	// Succeeded counts the requests that ended Succeeded (all of them should).
	Succeeded int `json:"succeeded"`
	// PeakRSSMiB is the controller's VmHWM at the end of the storm; RSSMiB its VmRSS.
	PeakRSSMiB         float64        `json:"peakRSSMiB"`
	RSSMiB             float64        `json:"rssMiB"`
	APICallsPerRequest float64        `json:"apiCallsPerRequest"`
	APICallsByKind     map[string]int `json:"apiCallsByKind"`
	Progress           []Point        `json:"progress"`
	// ControlPlane is the API server's and etcd's CPU seconds from the first create
	// until every request was terminal (nil: not read).
	ControlPlane *ControlPlaneCPU `json:"controlPlaneCPUSeconds,omitempty"`
}

// ControlPlaneCPU is CPU time of the local cluster's API server and etcd: seconds
// over a floor or a storm, or milliseconds per request (ScalePoint). It includes
// the cluster's background work over the same time (simulated kubelets' heartbeats,
// the controllers of kube-controller-manager), which a longer storm pays more of.
type ControlPlaneCPU struct {
	APIServer float64 `json:"apiServer"`
	Etcd      float64 `json:"etcd"`
}

// ScalePoint is the storm at one size next to the API server's floor at that size:
// the same number of fresh shut-down-holder incidents released with the minimum
// writes by 32 workers and no controller.
type ScalePoint struct {
	Requests int `json:"requests"`
	// TerminalSeconds and DecidedSeconds are the storm's (0: not reached).
	TerminalSeconds float64 `json:"terminalSeconds"`
	DecidedSeconds  float64 `json:"decidedSeconds"`
	// FloorSeconds: from the floor's first create to its last Lease delete.
	FloorSeconds float64 `json:"floorSeconds"`
	// Ratio is TerminalSeconds / FloorSeconds: how far above the API server's floor
	// the controller releases (0 when either is missing).
	Ratio float64 `json:"ratio"`
	// APICallsPerRequest is the controller's rest_client_requests_total delta over
	// the storm, Events included, divided by Requests; APICallsByKind its breakdown
	// by method (totals, not per request).
	APICallsPerRequest float64        `json:"apiCallsPerRequest"`
	APICallsByKind     map[string]int `json:"apiCallsByKind"`
	PeakRSSMiB         float64        `json:"peakRSSMiB"`
	Succeeded          int            `json:"succeeded"`
	// FloorControlPlane and StormControlPlane are the API server's and etcd's CPU
	// milliseconds per request over the floor and over the storm (nil: not read):
	// what each release costs the control plane, which shares the machine's cores
	// with everything else.
	FloorControlPlane *ControlPlaneCPU `json:"floorControlPlaneMsPerRequest,omitempty"`
	StormControlPlane *ControlPlaneCPU `json:"stormControlPlaneMsPerRequest,omitempty"`
}

// Baseline is the storm at the preset's largest size with another controller
// binary, the one built from an earlier commit (make bench BASELINE=<git ref>), on
// fresh incidents and with its own API server's floor measured just before it, as
// at every size of the scale.
type Baseline struct {
	// Version is what `<Binary> version` prints ("remediator a9f3949"), or Binary
	// when it prints nothing usable.
	Version string `json:"version"`
	// Binary is the baseline's path, relative to the repository root when inside it.
	Binary string     `json:"binary"`
	Storm  ScalePoint `json:"storm"`
}

// Disruptive is scenario 3: healthy-holder requests (cordon, evict, delete,
// uncordon) under the default cap.
type Disruptive struct {
	Requests int `json:"requests"`
	Cap      int `json:"cap"`
	// TerminalSeconds: from the first create until every request was terminal.
	TerminalSeconds float64 `json:"terminalSeconds"`
	Succeeded       int     `json:"succeeded"`
	// FIFO is true when admission never granted a slot past an older request in line
	// and never held more slots than the cap, as a watch of the requests saw the API
	// server commit them (test/harness/admissionwatch): the order of commits, not of
	// timestamps, so it does not depend on timing.
	FIFO bool `json:"fifo"`
	// OutOfOrder lists what the watch found: a grant past an older request in line,
	// or more slots held than the cap.
	OutOfOrder []string `json:"outOfOrder,omitempty"`
	// MaxHeld is the most slots held at once (Running a disruptive playbook, or
	// granted one), as the watch saw them.
	MaxHeld int `json:"maxHeld"`
	// MaxHandoverSeconds is the longest time from a slot freeing (a request turning
	// terminal) to the next waiting request starting; P50HandoverSeconds the median.
	MaxHandoverSeconds float64 `json:"maxHandoverSeconds"`
	P50HandoverSeconds float64 `json:"p50HandoverSeconds"`
	// MaxConcurrent is the most playbooks seen running at once (must not exceed Cap).
	MaxConcurrent int `json:"maxConcurrent"`
	// Decisions is the controller's decision count over the scenario; a disruptive
	// request is decided once when it arrives (it joins the line) and once when it
	// is granted a slot, so Decisions above 2*Requests means requests in line
	// re-gathered facts because a slot freed.
	Decisions int `json:"decisions"`
	// ExtraDecisions is Decisions minus that minimum.
	ExtraDecisions int     `json:"extraDecisions"`
	Progress       []Point `json:"progress"`
}

// Memory is scenario 4: the controller's RSS on the same requests over a small and a
// large number of pods.
type Memory struct {
	Samples []MemorySample `json:"samples"`
	// DiffPercent is |large - small| / small * 100 of the steady RSS.
	DiffPercent float64 `json:"diffPercent"`
}

// MemorySample is the controller's memory with Pods pods in the cluster.
type MemorySample struct {
	Pods       int     `json:"pods"`
	Requests   int     `json:"requests"`
	RSSMiB     float64 `json:"rssMiB"`
	PeakRSSMiB float64 `json:"peakRSSMiB"`
}
