package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	data := []float64{40, 10, 30, 20, 50, 60, 70, 80, 90, 100, 0} // 0..100 step 10, shuffled
	tests := []struct {
		name    string
		samples []float64
		p       float64
		want    float64
	}{
		{"empty", nil, 50, 0},
		{"empty slice", []float64{}, 99, 0},
		{"one sample p0", []float64{7}, 0, 7},
		{"one sample p50", []float64{7}, 50, 7},
		{"one sample p100", []float64{7}, 100, 7},
		{"p0 is the minimum", data, 0, 0},
		{"p50 is the median", data, 50, 50},
		{"p99 interpolates", data, 99, 99},
		{"p100 is the maximum", data, 100, 100},
		{"p25 on a rank", data, 25, 25},
		{"even count median is the mean of the middle two", []float64{4, 1, 3, 2}, 50, 2.5},
		{"p99 of two", []float64{10, 20}, 99, 19.9},
		{"below 0 clamps", data, -5, 0},
		{"above 100 clamps", data, 150, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.samples)
			assert.InDelta(t, tt.want, percentile(in, tt.p), 1e-9)
			assert.Equal(t, tt.samples, in, "percentile must not modify its input")
		})
	}
}

// syntheticResult is a Result with every section filled.
func syntheticResult() *Result {
	lat := &Latency{Requests: 20, ScriptCalls: 9}
	for i := range 20 {
		lat.ControllerMs = append(lat.ControllerMs, 40+float64((i*7)%20)*3)
		lat.ScriptMs = append(lat.ScriptMs, 900+float64((i*11)%20)*25)
	}
	storm := &Storm{Requests: 100, ShutdownNodes: 100, KwokNodes: 40, Pods: 2000}
	for i := 0; i <= 20; i++ {
		storm.Progress = append(storm.Progress, Point{
			Seconds:  float64(i) * 0.5,
			Decided:  min(100, i*15),
			Running:  max(0, min(100, i*15)-min(100, i*6)),
			Terminal: min(100, i*6),
		})
	}
	dis := &Disruptive{Requests: 20, Cap: 5}
	for i := 0; i <= 40; i++ {
		term := min(20, i/2)
		dis.Progress = append(dis.Progress, Point{Seconds: float64(i), Decided: 20, Running: min(5, 20-term), Terminal: term})
	}
	mem := &Memory{
		Samples: []MemorySample{
			{Pods: 20000, Requests: 100, RSSMiB: 61, PeakRSSMiB: 70},
			{Pods: 0, Requests: 100, RSSMiB: 55, PeakRSSMiB: 63},
		},
		DiffPercent: 10.9,
	}
	scale := []ScalePoint{
		{Requests: 1, TerminalSeconds: 0.4, DecidedSeconds: 0.2, FloorSeconds: 0.02, Ratio: 20, APICallsPerRequest: 12, APICallsByKind: map[string]int{"GET": 8, "PATCH": 2, "DELETE": 1, "POST": 1}, PeakRSSMiB: 60, Succeeded: 1},
		{Requests: 250, TerminalSeconds: 0, FloorSeconds: 1.1, APICallsPerRequest: 12.2, PeakRSSMiB: 90, Succeeded: 240},
		{Requests: 100, TerminalSeconds: 6.4, DecidedSeconds: 2.6, FloorSeconds: 0.6, Ratio: 10.7, APICallsPerRequest: 12.5, APICallsByKind: map[string]int{"GET": 830, "PATCH": 200, "DELETE": 100, "POST": 120}, PeakRSSMiB: 111, Succeeded: 100},
	}
	base := &Baseline{Version: "remediator a9f3949", Binary: "bin/remediator-baseline",
		Storm: ScalePoint{Requests: 250, TerminalSeconds: 30, FloorSeconds: 1.2, Ratio: 25, APICallsPerRequest: 14, PeakRSSMiB: 120, Succeeded: 250}}
	return &Result{Preset: "small", Latency: lat, Storm: storm, Scale: scale, Baseline: base, Disruptive: dis, Memory: mem}
}

// requireSVG checks that path is a non-empty, well-formed SVG document.
func requireSVG(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotEmpty(t, data)
	trimmed := bytes.TrimSpace(data)
	require.True(t, bytes.HasPrefix(trimmed, []byte("<?xml")) || bytes.HasPrefix(trimmed, []byte("<svg")),
		"%s does not start like an SVG: %.40q", path, trimmed)

	dec := xml.NewDecoder(bytes.NewReader(data))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "%s is not well-formed XML", path)
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	require.Equal(t, "svg", root, "%s: root element", path)
}

func TestWritePlots(t *testing.T) {
	t.Run("all sections", func(t *testing.T) {
		dir := t.TempDir()
		paths, err := writePlots(syntheticResult(), dir)
		require.NoError(t, err)
		names := []string{"latency.svg", "storm.svg", "disruptive.svg", "memory.svg", "scale.svg"}
		want := make([]string, len(names))
		for i, n := range names {
			want[i] = filepath.Join(dir, n)
		}
		require.Equal(t, want, paths)
		for _, p := range paths {
			requireSVG(t, p)
		}
		latency, err := os.ReadFile(want[0])
		require.NoError(t, err)
		assert.Contains(t, string(latency), "20 sequential requests")
		scale, err := os.ReadFile(want[4])
		require.NoError(t, err)
		assert.Contains(t, string(scale), "API server")
		assert.Contains(t, string(scale), "budget (4)")
		assert.Contains(t, string(scale), "baseline remediator a9f3949")
	})

	t.Run("nil sections are skipped", func(t *testing.T) {
		dir := t.TempDir()
		r := syntheticResult()
		r.Latency, r.Disruptive, r.Memory, r.Scale = nil, nil, nil, nil
		paths, err := writePlots(r, dir)
		require.NoError(t, err)
		require.Equal(t, []string{filepath.Join(dir, "storm.svg")}, paths)
		requireSVG(t, paths[0])
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Len(t, entries, 1)
	})

	t.Run("sections without data are skipped", func(t *testing.T) {
		dir := t.TempDir()
		r := &Result{Latency: &Latency{}, Storm: &Storm{}, Disruptive: &Disruptive{}, Memory: &Memory{}, Scale: []ScalePoint{}}
		paths, err := writePlots(r, dir)
		require.NoError(t, err)
		assert.Empty(t, paths)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries)
	})

	t.Run("single samples", func(t *testing.T) {
		dir := t.TempDir()
		r := &Result{
			Latency: &Latency{Requests: 1, ControllerMs: []float64{12}},
			Storm:   &Storm{Requests: 1, Progress: []Point{{Seconds: 0, Decided: 1, Terminal: 1}}},
			Memory:  &Memory{Samples: []MemorySample{{Pods: 100, RSSMiB: 50, PeakRSSMiB: 55}}},
			Scale:   []ScalePoint{{Requests: 1, TerminalSeconds: 0.3, FloorSeconds: 0.02, APICallsPerRequest: 5}},
		}
		paths, err := writePlots(r, dir)
		require.NoError(t, err)
		require.Len(t, paths, 4)
		for _, p := range paths {
			requireSVG(t, p)
		}
	})

	t.Run("nil result", func(t *testing.T) {
		paths, err := writePlots(nil, t.TempDir())
		require.NoError(t, err)
		assert.Empty(t, paths)
	})
}
