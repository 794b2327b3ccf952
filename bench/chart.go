package main

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// offScale is how far above the tallest Redis bar the sync.Mutex ceiling
// may reach and still be drawn as a bar instead of named in the title.
const offScale = 5

// writeChart draws one panel per case, cycles/s per library (the crash
// case: median recovery), and saves it as a PNG.
func writeChart(rs *results, path string) error {
	const cols = 3
	rows := (len(rs.cases) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, c := range rs.cases {
		p, err := panel(rs, c)
		if err != nil {
			return err
		}
		plots[i/cols][i%cols] = p
	}
	img := vgimg.NewWith(vgimg.UseWH(16*vg.Inch, vg.Length(rows)*4.2*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 4, PadY: vg.Inch / 4,
		PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	canvases := plot.Align(plots, tiles, dc)
	for j := range plots {
		for i, p := range plots[j] {
			if p != nil {
				p.Draw(canvases[j][i])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// bar is one library's value in a panel.
type bar struct {
	label string
	value float64
	text  string
	color int
}

// panel is one case's bar chart.
func panel(rs *results, c caseSpec) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Y.Label.Text = "cycles/s (higher is better)"
	if c.crash {
		p.Y.Label.Text = "recovery p50, ms after lease end (lower is better)"
	}
	p.X.Tick.Label.Font.Size = vg.Points(9)

	bars, mutex, mutexColor, tallest := panelBars(rs, c)
	if mutex != nil {
		if mutex.rate() <= offScale*tallest {
			bars = append(bars, bar{label: rs.libs[mutexColor].shortLabel, value: mutex.rate(), text: shortCount(mutex.rate()), color: mutexColor})
		} else {
			p.Title.Text += fmt.Sprintf("\n(%s: %s cycles/s, off scale)", c.ceiling(), shortCount(mutex.rate()))
		}
	}
	if len(bars) == 0 {
		p.Title.Text += "\n(no results)"
		return p, nil
	}

	if err := drawBars(p, bars); err != nil {
		return nil, err
	}
	p.Y.Max = tallest * 1.15
	if mutex != nil && mutex.rate() <= offScale*tallest {
		p.Y.Max = max(tallest, mutex.rate()) * 1.15
	}
	p.Y.Min = min(p.Y.Min, 0)
	return p, nil
}

// panelBars is the bars of a case's Redis libraries, in the libraries'
// order (a crash case's show the recovery p50, in ms), the in-process
// ceiling's result and color apart, and the tallest bar's value.
func panelBars(rs *results, c caseSpec) (bars []bar, mutex *result, mutexColor int, tallest float64) {
	for i, lib := range rs.libs {
		res := rs.get(c.id, lib.name)
		if !res.ok() {
			continue
		}
		if !lib.redis {
			mutex, mutexColor = res, i
			continue
		}
		b := bar{label: lib.shortLabel, color: i, value: res.rate(), text: shortCount(res.rate())}
		if c.crash {
			d := percentile(res.handoffs, 50)
			b.value, b.text = d.Seconds()*1000, fmtDur(d)
		}
		tallest = max(tallest, b.value)
		bars = append(bars, b)
	}
	return bars, mutex, mutexColor, tallest
}

// drawBars adds the bars to p, one at each position on the x axis under
// its label, with its value printed above it.
func drawBars(p *plot.Plot, bars []bar) error {
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0
	p.Add(grid)
	names := make([]string, len(bars))
	labels := plotter.XYLabels{}
	for i, b := range bars {
		chart, err := plotter.NewBarChart(plotter.Values{b.value}, vg.Points(26))
		if err != nil {
			return err
		}
		chart.XMin = float64(i)
		chart.Color = plotutil.Color(b.color)
		chart.LineStyle.Width = 0
		p.Add(chart)
		names[i] = b.label
		labels.XYs = append(labels.XYs, plotter.XY{X: float64(i), Y: max(b.value, 0)})
		labels.Labels = append(labels.Labels, b.text)
	}
	values, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range values.TextStyle {
		values.TextStyle[i].XAlign = draw.XCenter
		values.TextStyle[i].Font.Size = vg.Points(9)
	}
	values.Offset = vg.Point{Y: vg.Points(3)}
	p.Add(values)
	p.NominalX(names...)
	return nil
}

// shortCount prints a rate as 950, 12.3k or 2.1M.
func shortCount(f float64) string {
	switch {
	case f >= 1e6:
		return fmt.Sprintf("%.1fM", f/1e6)
	case f >= 1e4:
		return fmt.Sprintf("%.1fk", f/1e3)
	default:
		return fmtCount(f)
	}
}
