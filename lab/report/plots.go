// SPDX-License-Identifier: MIT

package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot writes the PNG plots of every run into its directory and the
// cross-peer plots into dir; it returns the files written.
func (r *Results) Plot(dir string) ([]string, error) {
	var files []string
	for _, run := range r.Runs {
		if run.Dir == "" || run.BinWidth == 0 {
			continue
		}
		f := filepath.Join(run.Dir, "throughput.png")
		if err := plotThroughput(run, f); err != nil {
			return files, err
		}
		files = append(files, f)
		if m, ok := run.PeerMetrics.(*TunnelMetrics); ok && len(m.TimesS) > 0 {
			for name, plotFn := range map[string]func(*Run, *TunnelMetrics, string) error{
				"cwnd.png": plotCwnd, "reorder_hold.png": plotHold} {
				f := filepath.Join(run.Dir, name)
				if err := plotFn(run, m, f); err != nil {
					return files, err
				}
				files = append(files, f)
			}
		}
	}
	for name, plotFn := range map[string]func(*Results, string) (bool, error){
		"owd_ccdf.png": plotOWD, "web_owd_ccdf.png": plotWebOWD} {
		f := filepath.Join(dir, name)
		ok, err := plotFn(r, f)
		if err != nil {
			return files, err
		}
		if ok {
			files = append(files, f)
		}
	}
	return files, nil
}

func binsXY(bins []float64, width float64) plotter.XYs {
	xy := make(plotter.XYs, len(bins))
	for i, v := range bins {
		xy[i].X = (float64(i) + 0.5) * width
		xy[i].Y = v
	}
	return xy
}

// markEvents draws a dashed vertical line per event.
func markEvents(p *plot.Plot, events []Event, ymax float64) error {
	for _, e := range events {
		l, err := plotter.NewLine(plotter.XYs{{X: e.AtS, Y: 0}, {X: e.AtS, Y: ymax}})
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 96}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: e.AtS, Y: ymax}}, Labels: []string{e.Path + " " + e.Action}})
		if err != nil {
			return err
		}
		p.Add(lbl)
	}
	return nil
}

func plotThroughput(run *Run, file string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: throughput per path (emulator, layer 2) and goodput", run.Peer)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "Mbit/s"
	w := run.BinWidth.Seconds()
	ymax := 1.0
	for i, path := range run.Paths {
		l, err := plotter.NewLine(binsXY(path.Bins, w))
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		p.Add(l)
		p.Legend.Add(path.Name, l)
		for _, v := range path.Bins {
			ymax = math.Max(ymax, v)
		}
	}
	if len(run.GoodputBins) > 0 {
		// Reads arrive in bursts; a 500 ms moving average is what a reader
		// can compare with the paths' serialized rate.
		l, err := plotter.NewLine(binsXY(smooth(run.GoodputBins, 5), w))
		if err != nil {
			return err
		}
		l.Color = color.Black
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add("goodput (bulk, 0.5 s avg)", l)
		for _, v := range run.GoodputBins {
			ymax = math.Max(ymax, v)
		}
	}
	if err := markEvents(p, run.Events, ymax*1.08); err != nil {
		return err
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	p.Y.Max = ymax * 1.15
	if err := p.Save(22*vg.Centimeter, 11*vg.Centimeter, file); err != nil {
		return fmt.Errorf("plot %s: %w", file, err)
	}
	return nil
}

// plotOWD draws the complementary CDF of one-way delay of every peer's
// probe on a log scale down to p99.99, or p99.999 with ≥ 10^5 samples.
func plotOWD(r *Results, file string) (bool, error) {
	var series []CCDFSeries
	for _, run := range r.Runs {
		if run.Probe != nil {
			series = append(series, CCDFSeries{Name: run.Peer, Sorted: run.Probe.OWD})
		}
	}
	return PlotCCDF(file, r.Scenario+": probe one-way delay, complementary CDF", "one-way delay (ms)", series)
}

// plotWebOWD draws the web flows' per-packet one-way delay CCDF.
func plotWebOWD(r *Results, file string) (bool, error) {
	var series []CCDFSeries
	for _, run := range r.Runs {
		if run.WebOWD != nil {
			series = append(series, CCDFSeries{Name: run.Peer, Sorted: run.WebOWD.OWD})
		}
	}
	return PlotCCDF(file, r.Scenario+": web flows, per-packet one-way delay, complementary CDF", "one-way delay (ms)", series)
}

// CCDFSeries is one line of a CCDF plot: sorted samples.
type CCDFSeries struct {
	Name   string
	Sorted []float64
}

// PlotCCDF draws complementary CDFs on a log scale down to p99.99, or
// p99.999 when a series has ≥ 10^5 samples. It writes nothing and returns
// false if no series has two points to draw.
func PlotCCDF(file, title, xlabel string, series []CCDFSeries) (bool, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction of packets with larger delay"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	any := false
	floor := 1e-4
	lo, hi := math.Inf(1), 0.0
	for _, s := range series {
		if len(s.Sorted) >= 100000 {
			floor = 1e-5
		}
		if n := len(s.Sorted); n > 0 {
			lo, hi = math.Min(lo, s.Sorted[0]), math.Max(hi, s.Sorted[n-1])
		}
	}
	// Delays spanning decades (a few ms to seconds of recovery) on a
	// log axis, so the body and the tail both show.
	logX := lo > 0 && hi/lo > 50
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.X.Label.Text += " (log scale)"
	}
	for i, s := range series {
		owd := s.Sorted
		n := float64(len(owd))
		// Thin to at most ~2000 points, keeping the tail exact.
		var xy plotter.XYs
		step := max(1, len(owd)/2000)
		for k := 0; k < len(owd); k++ {
			ccdf := 1 - float64(k+1)/n
			if ccdf < floor {
				break
			}
			if k%step == 0 || ccdf < 0.01 {
				x := owd[k]
				if logX {
					x = math.Max(x, lo)
				}
				xy = append(xy, plotter.XY{X: x, Y: ccdf})
			}
		}
		if len(xy) < 2 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return false, err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		p.Add(l)
		p.Legend.Add(s.Name, l)
		any = true
	}
	if !any {
		return false, nil
	}
	p.Y.Min = floor
	p.Y.Max = 1
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	if err := p.Save(18*vg.Centimeter, 11*vg.Centimeter, file); err != nil {
		return false, fmt.Errorf("plot %s: %w", file, err)
	}
	return true, nil
}

// smooth is a centred moving average over k bins.
func smooth(v []float64, k int) []float64 {
	out := make([]float64, len(v))
	for i := range v {
		lo, hi := max(0, i-k/2), min(len(v), i+k/2+1)
		var s float64
		for _, x := range v[lo:hi] {
			s += x
		}
		out[i] = s / float64(hi-lo)
	}
	return out
}
