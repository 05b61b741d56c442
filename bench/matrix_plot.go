// SPDX-License-Identifier: MIT

package bench

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// heatmapColumns are the impairments on path b, left to right.
var heatmapColumns = []string{"l0", "l0.5", "l2", "l5", "ge", "jitter"}

// HeatmapGrid arranges a per-cell value as rows (a cell without its
// impairment: rate ratio, delays, traffic, direction) by columns (the
// impairment of path b). Missing values are nil.
type HeatmapGrid struct {
	Rows, Cols []string
	Values     [][]*float64 // [row][col]
}

// Grid builds the grid of value over the cells that have one (nil value:
// the cell is left out, e.g. UDP cells have no MPTCP ratio).
func Grid(cells []CellResult, value func(*CellResult) *float64) HeatmapGrid {
	g := HeatmapGrid{}
	rowOf := map[string]int{}
	colOf := map[string]int{}
	used := map[string]bool{}
	for i := range cells {
		if value(&cells[i]) != nil {
			used[cells[i].ImpairmentLabel()] = true
		}
	}
	for _, c := range heatmapColumns {
		if used[c] {
			colOf[c] = len(g.Cols)
			g.Cols = append(g.Cols, c)
		}
	}
	for i := range cells {
		c := &cells[i]
		v := value(c)
		if v == nil {
			continue
		}
		r, ok := rowOf[c.Group()]
		if !ok {
			r = len(g.Rows)
			rowOf[c.Group()] = r
			g.Rows = append(g.Rows, c.Group())
			g.Values = append(g.Values, make([]*float64, len(g.Cols)))
		}
		g.Values[r][colOf[c.ImpairmentLabel()]] = v
	}
	return g
}

// plotHeatmaps writes heatmap_mptun_vs_best.png and
// heatmap_mptun_vs_mptcp.png (when there are values to show).
func plotHeatmaps(dir string, cells []CellResult) ([]string, error) {
	var files []string
	for _, h := range []struct {
		file, title string
		value       func(*CellResult) *float64
	}{
		{"heatmap_mptun_vs_best.png", "mptun goodput / best single path", func(c *CellResult) *float64 { return c.MptunVsBest }},
		{"heatmap_mptun_vs_mptcp.png", "mptun goodput / kernel MPTCP", func(c *CellResult) *float64 { return c.MptunVsMPTCP }},
	} {
		g := Grid(cells, h.value)
		if len(g.Rows) == 0 {
			continue
		}
		f := filepath.Join(dir, h.file)
		if err := plotHeatmap(f, h.title, g); err != nil {
			return files, err
		}
		files = append(files, f)
	}
	return files, nil
}

// plotHeatmap draws the grid: red below 1, white at 1, blue above (the
// colour saturates at 0.5 and 1.5), each value written in its cell.
func plotHeatmap(file, title string, g HeatmapGrid) error {
	cm := moreland.SmoothBlueRed()
	cm.SetMin(0.5)
	cm.SetMax(1.5)
	cm.SetConvergePoint(1)
	colors := palette.Reverse(cm)
	p := plot.New()
	p.Title.Text = title + " (red < 1 < blue)"
	var labels plotter.XYLabels
	for r := range g.Rows {
		for c := range g.Cols {
			v := g.Values[r][c]
			fill := color.Color(color.Gray{Y: 235})
			text := "-"
			if v != nil {
				var err error
				if fill, err = colors.At(min(max(*v, 0.5), 1.5)); err != nil {
					return fmt.Errorf("heatmap: %w", err)
				}
				text = fmt.Sprintf("%.2f", *v)
			}
			x, y := float64(c), float64(len(g.Rows)-1-r)
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x, Y: y}, {X: x + 1, Y: y}, {X: x + 1, Y: y + 1}, {X: x, Y: y + 1}})
			if err != nil {
				return err
			}
			poly.Color = fill
			poly.LineStyle.Color = color.White
			p.Add(poly)
			labels.XYs = append(labels.XYs, plotter.XY{X: x + 0.5, Y: y + 0.5})
			labels.Labels = append(labels.Labels, text)
		}
	}
	lbl, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range lbl.TextStyle {
		lbl.TextStyle[i].XAlign = -0.5
		lbl.TextStyle[i].YAlign = -0.5
	}
	p.Add(lbl)
	var xt, yt []plot.Tick
	for c, name := range g.Cols {
		xt = append(xt, plot.Tick{Value: float64(c) + 0.5, Label: name})
	}
	for r, name := range g.Rows {
		yt = append(yt, plot.Tick{Value: float64(len(g.Rows)-1-r) + 0.5, Label: name})
	}
	p.X.Tick.Marker = plot.ConstantTicks(xt)
	p.Y.Tick.Marker = plot.ConstantTicks(yt)
	p.X.Min, p.X.Max = 0, float64(len(g.Cols))
	p.Y.Min, p.Y.Max = 0, float64(len(g.Rows))
	p.X.Label.Text = "columns: impairment of path b (loss %, Gilbert-Elliott, reordering jitter)\nrows: r(rate a / rate b) or asym(a down x up)+(b down x up)-(one-way delay a)+(b) ms-traffic-direction"
	w := 12*vg.Centimeter + vg.Length(len(g.Cols))*2.2*vg.Centimeter
	h := 5*vg.Centimeter + vg.Length(len(g.Rows))*0.8*vg.Centimeter
	if err := p.Save(w, h, file); err != nil {
		return fmt.Errorf("heatmap %s: %w", file, err)
	}
	return nil
}
