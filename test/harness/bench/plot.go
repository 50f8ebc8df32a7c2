package main

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Plot size of every SVG written by writePlots.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// Series colours: the controller (or the main series) is blue, the comparison orange,
// a third series green.
var (
	plotBlue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	plotOrange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	plotGreen  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	// plotRed marks the baseline (an earlier controller) on the scale plot.
	plotRed = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// percentile returns the p-th percentile (p in [0,100], clamped) of samples by linear
// interpolation between closest ranks: the value at rank p/100*(n-1) of the sorted
// samples, as numpy's default and Excel's PERCENTILE.INC. So p=0 is the minimum,
// p=100 the maximum and p=50 the median (the mean of the two middle samples when n
// is even). It sorts a copy and does not modify samples; it returns 0 for no samples.
func percentile(samples []float64, p float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return percentileSorted(sorted, p)
}

// percentileSorted is percentile on samples already sorted in increasing order.
func percentileSorted(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	p = min(max(p, 0), 100)
	rank := p / 100 * float64(n-1)
	lo := int(rank)
	if lo >= n-1 {
		return sorted[n-1]
	}
	frac := rank - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// writePlots writes the plots of r into dir as SVG and returns the paths written:
// latency.svg (r.Latency), storm.svg (r.Storm), disruptive.svg (r.Disruptive),
// memory.svg (r.Memory) and scale.svg (r.Scale, with r.Baseline marked). A plot is skipped when its section
// is nil or holds no data. dir must exist.
func writePlots(r *Result, dir string) ([]string, error) {
	if r == nil {
		return nil, nil
	}
	plots := []struct {
		name string
		// make returns the plot's panels, stacked top to bottom; none skips it.
		make func() ([]*plot.Plot, error)
	}{
		{"latency.svg", func() ([]*plot.Plot, error) { return panel(latencyPlot(r.Latency)) }},
		{"storm.svg", func() ([]*plot.Plot, error) { return panel(stormPlot(r.Storm)) }},
		{"disruptive.svg", func() ([]*plot.Plot, error) { return panel(disruptivePlot(r.Disruptive)) }},
		{"memory.svg", func() ([]*plot.Plot, error) { return panel(memoryPlot(r.Memory)) }},
		{"scale.svg", func() ([]*plot.Plot, error) { return scalePlots(r.Scale, r.Baseline) }},
	}
	var written []string
	var errs []error
	for _, pl := range plots {
		panels, err := pl.make()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pl.name, err))
			continue
		}
		if len(panels) == 0 {
			continue
		}
		path := filepath.Join(dir, pl.name)
		if err := savePanels(panels, path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pl.name, err))
			continue
		}
		written = append(written, path)
	}
	return written, errors.Join(errs...)
}

// panel is a single plot as the panels of writePlots: none when p is nil.
func panel(p *plot.Plot, err error) ([]*plot.Plot, error) {
	if p == nil || err != nil {
		return nil, err
	}
	return []*plot.Plot{p}, nil
}

// savePanels saves panels into path as one SVG: a single plot at the common size,
// several stacked with their axes aligned, each a little lower than a plot alone.
func savePanels(panels []*plot.Plot, path string) error {
	if len(panels) == 1 {
		return panels[0].Save(plotWidth, plotHeight, path)
	}
	height := vg.Length(len(panels)) * plotHeight * 4 / 5
	c := vgsvg.New(plotWidth, height)
	grid := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		grid[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Points(12), PadTop: vg.Points(2), PadBottom: vg.Points(2), PadLeft: vg.Points(2), PadRight: vg.Points(2)}
	canvases := plot.Align(grid, tiles, draw.New(c))
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// newPlot returns a plot with a title, axis labels, a grid and the legend top left.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), -vg.Points(6) // off the frame
	p.Title.Padding = vg.Points(6)
	p.Add(plotter.NewGrid())
	return p
}

// legendBottomRight moves the legend of a newPlot to the bottom right.
func legendBottomRight(p *plot.Plot) {
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(6), vg.Points(6)
}

// addLine adds a line through xys, with glyphs at the points when points is set, and
// its legend entry.
func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, dashes []vg.Length, points bool) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	l.Dashes = dashes
	if !points {
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	s, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	s.Color = c
	s.Shape = draw.CircleGlyph{}
	s.Radius = vg.Points(2.5)
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

// percentileCurve is the curve of sorted: sample i of n at percentile 100*i/(n-1),
// so that the curve at x is percentile(samples, x). One sample is a flat line.
func percentileCurve(sorted []float64) plotter.XYs {
	n := len(sorted)
	if n == 1 {
		return plotter.XYs{{X: 0, Y: sorted[0]}, {X: 100, Y: sorted[0]}}
	}
	xys := make(plotter.XYs, n)
	for i, v := range sorted {
		xys[i] = plotter.XY{X: 100 * float64(i) / float64(n-1), Y: v}
	}
	return xys
}

// latencyPlot is the percentile curves of the controller's and the script's
// latencies, with their p50 and p99 marked; nil without latencies.
func latencyPlot(l *Latency) (*plot.Plot, error) {
	if l == nil || len(l.ControllerMs) == 0 && len(l.ScriptMs) == 0 {
		return nil, nil
	}
	n := l.Requests
	if n == 0 {
		n = len(l.ControllerMs)
	}
	p := newPlot(fmt.Sprintf("Created -> Lease deleted, %d sequential requests", n), "percentile", "latency (ms)")
	p.X.Min, p.X.Max = 0, 100
	p.Y.Min = 0
	series := []struct {
		name    string
		samples []float64
		c       color.Color
		dashes  []vg.Length
	}{
		{"controller", l.ControllerMs, plotBlue, nil},
		{"kubectl runbook script", l.ScriptMs, plotOrange, []vg.Length{vg.Points(6), vg.Points(3)}},
	}
	for _, s := range series {
		if len(s.samples) == 0 {
			continue
		}
		sorted := slices.Clone(s.samples)
		slices.Sort(sorted)
		p50, p99 := percentileSorted(sorted, 50), percentileSorted(sorted, 99)
		name := fmt.Sprintf("%s (p50 %.0f ms, p99 %.0f ms)", s.name, p50, p99)
		if err := addLine(p, name, percentileCurve(sorted), s.c, s.dashes, false); err != nil {
			return nil, err
		}
		marks := plotter.XYs{{X: 50, Y: p50}, {X: 99, Y: p99}}
		sc, err := plotter.NewScatter(marks)
		if err != nil {
			return nil, err
		}
		sc.Color = s.c
		sc.Shape = draw.CircleGlyph{}
		sc.Radius = vg.Points(3.5)
		labels, err := plotter.NewLabels(plotter.XYLabels{
			XYs:    marks,
			Labels: []string{fmt.Sprintf("p50 %.1f", p50), fmt.Sprintf("p99 %.1f", p99)},
		})
		if err != nil {
			return nil, err
		}
		// Labels sit above left of their points, clear of the curve rising to the right.
		labels.Offset = vg.Point{X: vg.Points(-38), Y: vg.Points(5)}
		p.Add(sc, labels)
	}
	headroom(p, 0.15)
	return p, nil
}

// progressLines adds one line per selected field of progress, seconds on x.
func progressLines(p *plot.Plot, progress []Point, lines ...progressLine) error {
	for _, pl := range lines {
		xys := make(plotter.XYs, len(progress))
		for i, pt := range progress {
			xys[i] = plotter.XY{X: pt.Seconds, Y: float64(pl.value(pt))}
		}
		if err := addLine(p, pl.name, xys, pl.c, pl.dashes, false); err != nil {
			return err
		}
	}
	return nil
}

// progressLine is one line of a progress plot.
type progressLine struct {
	name   string
	value  func(Point) int
	c      color.Color
	dashes []vg.Length
}

// headroom raises the top of the y axis by frac of its range, keeping lines that
// reach the maximum off the frame and leaving room for a legend at the top.
func headroom(p *plot.Plot, frac float64) {
	span := p.Y.Max - p.Y.Min
	if span <= 0 {
		span = max(1, p.Y.Max)
	}
	p.Y.Max += frac * span
}

// stormPlot is the storm's decided and terminal counts over time; nil without progress.
// It shows the storm alone: the disruptive scenario has its own plot, with far fewer
// requests and its own start, which would be flattened here.
func stormPlot(s *Storm) (*plot.Plot, error) {
	if s == nil || len(s.Progress) == 0 {
		return nil, nil
	}
	p := newPlot(fmt.Sprintf("Storm: %d requests, %d pods on %d kwok nodes", s.Requests, s.Pods, s.KwokNodes),
		"seconds since first create", "requests")
	p.X.Min, p.Y.Min = 0, 0
	legendBottomRight(p) // under the curves, which rise to the top left
	err := progressLines(p, s.Progress,
		progressLine{"decided", func(pt Point) int { return pt.Decided }, plotOrange, []vg.Length{vg.Points(6), vg.Points(3)}},
		progressLine{"terminal", func(pt Point) int { return pt.Terminal }, plotBlue, nil},
	)
	if err != nil {
		return nil, err
	}
	headroom(p, 0.05)
	return p, nil
}

// disruptivePlot is the disruptive scenario's terminal and running counts over time
// (running should stay at or under the cap in the title); nil without progress.
func disruptivePlot(d *Disruptive) (*plot.Plot, error) {
	if d == nil || len(d.Progress) == 0 {
		return nil, nil
	}
	p := newPlot(fmt.Sprintf("Disruptive: %d healthy-holder requests, cap %d", d.Requests, d.Cap),
		"seconds since first create", "requests")
	p.X.Min, p.Y.Min = 0, 0
	err := progressLines(p, d.Progress,
		progressLine{fmt.Sprintf("disruptive (cap %d) terminal", d.Cap), func(pt Point) int { return pt.Terminal }, plotBlue, nil},
		progressLine{"running", func(pt Point) int { return pt.Running }, plotGreen, []vg.Length{vg.Points(6), vg.Points(3)}},
	)
	if err != nil {
		return nil, err
	}
	headroom(p, 0.2)
	return p, nil
}

// memoryPlot is the controller's RSS and peak RSS against the pods in the cluster;
// nil without samples.
func memoryPlot(m *Memory) (*plot.Plot, error) {
	if m == nil || len(m.Samples) == 0 {
		return nil, nil
	}
	samples := slices.Clone(m.Samples)
	slices.SortStableFunc(samples, func(a, b MemorySample) int { return a.Pods - b.Pods })
	title := "Controller memory vs pods in the cluster"
	if len(samples) > 1 {
		title += fmt.Sprintf(" (RSS diff %.1f%%)", m.DiffPercent)
	}
	p := newPlot(title, "pods", "MiB")
	p.X.Min, p.Y.Min = 0, 0
	legendBottomRight(p) // under the lines, which stay near the top
	rss := make(plotter.XYs, len(samples))
	peak := make(plotter.XYs, len(samples))
	for i, s := range samples {
		rss[i] = plotter.XY{X: float64(s.Pods), Y: s.RSSMiB}
		peak[i] = plotter.XY{X: float64(s.Pods), Y: s.PeakRSSMiB}
	}
	if err := addLine(p, "RSS (VmRSS)", rss, plotBlue, nil, true); err != nil {
		return nil, err
	}
	if err := addLine(p, "peak RSS (VmHWM)", peak, plotOrange, []vg.Length{vg.Points(6), vg.Points(3)}, true); err != nil {
		return nil, err
	}
	headroom(p, 0.1)
	return p, nil
}

// scalePlots are the storm at each size: its seconds to all terminal next to the
// API server's floor (top), and the controller's API calls per request against the
// call budget (bottom), with the baseline's storm (if any) marked at its size in
// both; none without sizes.
func scalePlots(points []ScalePoint, base *Baseline) ([]*plot.Plot, error) {
	if len(points) == 0 {
		return nil, nil
	}
	points = slices.Clone(points)
	slices.SortStableFunc(points, func(a, b ScalePoint) int { return a.Requests - b.Requests })
	largest := float64(points[len(points)-1].Requests)
	dashed := []vg.Length{vg.Points(6), vg.Points(3)}

	secs := newPlot("Storm vs the API server's floor (the same releases, minimum calls, no controller)", "requests at once", "seconds")
	secs.X.Min, secs.X.Max, secs.Y.Min = 0, largest, 0
	var terminal, floor, calls plotter.XYs
	for _, p := range points {
		x := float64(p.Requests)
		// A storm that never got terminal has no time to plot; the summary says so.
		if p.TerminalSeconds > 0 {
			terminal = append(terminal, plotter.XY{X: x, Y: p.TerminalSeconds})
		}
		if p.FloorSeconds > 0 {
			floor = append(floor, plotter.XY{X: x, Y: p.FloorSeconds})
		}
		calls = append(calls, plotter.XY{X: x, Y: p.APICallsPerRequest})
	}
	if len(terminal) > 0 {
		if err := addLine(secs, "storm, all terminal", terminal, plotBlue, nil, true); err != nil {
			return nil, err
		}
	}
	if len(floor) > 0 {
		if err := addLine(secs, "API server's floor", floor, plotOrange, dashed, true); err != nil {
			return nil, err
		}
	}
	if base != nil && base.Storm.TerminalSeconds > 0 {
		pt := plotter.XYs{{X: float64(base.Storm.Requests), Y: base.Storm.TerminalSeconds}}
		if err := addMarker(secs, "baseline "+base.Version+", all terminal", pt); err != nil {
			return nil, err
		}
	}
	headroom(secs, 0.15)

	perReq := newPlot(fmt.Sprintf("Controller API calls per request (budget %d)", callBudget), "requests at once", "API calls per request")
	perReq.X.Min, perReq.X.Max, perReq.Y.Min = 0, largest, 0
	if err := addLine(perReq, "API calls per request", calls, plotBlue, nil, true); err != nil {
		return nil, err
	}
	budget := plotter.XYs{{X: 0, Y: callBudget}, {X: largest, Y: callBudget}}
	if err := addLine(perReq, fmt.Sprintf("budget (%d)", callBudget), budget, plotGreen, dashed, false); err != nil {
		return nil, err
	}
	if base != nil {
		pt := plotter.XYs{{X: float64(base.Storm.Requests), Y: base.Storm.APICallsPerRequest}}
		if err := addMarker(perReq, "baseline "+base.Version, pt); err != nil {
			return nil, err
		}
	}
	// The lines run level across: room above them for the legend, top left.
	perReq.Y.Max = max(perReq.Y.Max, callBudget)
	headroom(perReq, 0.4)
	return []*plot.Plot{secs, perReq}, nil
}

// addMarker adds the baseline's points xys to p as red triangles, with their
// legend entry.
func addMarker(p *plot.Plot, name string, xys plotter.XYs) error {
	s, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	s.Color = plotRed
	s.Shape = draw.TriangleGlyph{}
	s.Radius = vg.Points(4)
	p.Add(s)
	p.Legend.Add(name, s)
	return nil
}
