package eval

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"regexp"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The charts' colours, one per processor, in report order.
var series = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0x59, 0xa1, 0x4f, 0xff},
	{0xe1, 0x57, 0x59, 0xff}, {0x76, 0xb7, 0xb2, 0xff}, {0xb0, 0x7a, 0xa1, 0xff},
}

func seriesColor(i int) color.Color { return series[i%len(series)] }

func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(12)}
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(10)}
		a.Tick.Label.Font = font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(9)}
	}
	p.Legend.TextStyle.Font = font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(9)}
	return p
}

// svgHeader is what an inline SVG does without: the XML declaration, the
// generator comment and the namespace attributes (HTML5 knows SVG), so
// the page holds no URL at all.
var svgHeader = regexp.MustCompile(`(?s)<\?xml[^>]*\?>|<!--.*?-->|\s+xmlns(:xlink)?="[^"]*"`)

func render(p *plot.Plot, w, h vg.Length) (string, error) {
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", err
	}
	return svgHeader.ReplaceAllString(buf.String(), ""), nil
}

// ran are the processors that were run (not refused).
func ran(r *Report) []ProcessorReport {
	var out []ProcessorReport
	for _, p := range r.Processors {
		if p.Refused == "" {
			out = append(out, p)
		}
	}
	return out
}

// accuracyChart: accuracy per field per processor, bars with their 95 %
// bootstrap intervals.
func accuracyChart(r *Report) (string, error) {
	procs := ran(r)
	p := newPlot("Accuracy per field (bars: 95 % bootstrap interval)")
	p.Y.Min, p.Y.Max = 0, 1.32 // headroom for the legend
	var ticks []plot.Tick
	for v := 0.0; v <= 1.0001; v += 0.2 {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%.0f%%", 100*v)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Label.Text = "exact accuracy"
	names := []string{"document"}
	for _, f := range r.Fields {
		names = append(names, f.Name)
	}
	w := vg.Points(min(28, 160/float64(max(1, len(procs)))))
	for i, pr := range procs {
		vals := plotter.Values{pr.DocumentAccuracy}
		errs := plotter.YErrors{{Low: pr.DocumentAccuracy - pr.DocumentCI.Low, High: pr.DocumentCI.High - pr.DocumentAccuracy}}
		for _, f := range pr.Fields {
			vals = append(vals, f.Accuracy)
			errs = append(errs, struct{ Low, High float64 }{f.Accuracy - f.CI.Low, f.CI.High - f.Accuracy})
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return "", err
		}
		bars.Color = seriesColor(i)
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(float64(i)-float64(len(procs)-1)/2)
		p.Add(bars)
		p.Legend.Add(pr.ID, bars)
		pts := make(plotter.XYs, len(vals))
		for j := range vals {
			pts[j].X, pts[j].Y = float64(j), vals[j]
		}
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{pts, errs})
		if err != nil {
			return "", err
		}
		eb.LineStyle.Width = vg.Points(1.2)
		// Error bars sit on the category's centre; shift them with the bar.
		off := bars.Offset
		p.Add(shifted{eb, off})
	}
	p.NominalX(names...)
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = 0
	p.Legend.YOffs = vg.Points(-4)
	return render(p, 17*vg.Centimeter, 8.5*vg.Centimeter)
}

// shifted draws a plotter moved by off along x.
type shifted struct {
	*plotter.YErrorBars
	off vg.Length
}

func (s shifted) Plot(c draw.Canvas, p *plot.Plot) {
	c.Rectangle.Min.X += s.off
	c.Rectangle.Max.X += s.off
	s.YErrorBars.Plot(c, p)
}

// confusionChart is the heatmap of one enum field's confusion matrix,
// each cell labelled with its count, rows normalized to the labelled
// class so that a rare class shows as clearly as a common one.
func confusionChart(pr ProcessorReport, f FieldReport) (string, error) {
	e := f.Enum
	p := newPlot(fmt.Sprintf("%s · %s", pr.ID, f.Name))
	p.X.Label.Text = "predicted"
	p.Y.Label.Text = "labelled"
	g := confusionGrid{e}
	h := plotter.NewHeatMap(g, palette.Heat(12, 1))
	h.Min, h.Max = 0, 1
	h.Palette = blues{}
	p.Add(h)
	var xys plotter.XYs
	var labels []string
	for r := range e.Confusion {
		for c := range e.Labels {
			n := e.Confusion[r][c]
			if n == 0 {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(c), Y: float64(len(e.Confusion) - 1 - r)})
			labels = append(labels, fmt.Sprint(n))
		}
	}
	if len(xys) > 0 {
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return "", err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].XAlign, l.TextStyle[i].YAlign = draw.XCenter, draw.YCenter
			l.TextStyle[i].Font = font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(9)}
			r := len(e.Confusion) - 1 - int(xys[i].Y)
			if rowShare(e, r, int(xys[i].X)) > 0.55 {
				l.TextStyle[i].Color = color.White
			}
		}
		p.Add(l)
	}
	p.NominalX(short(e.Labels)...)
	rows := make([]string, len(e.Confusion))
	for i := range rows {
		rows[len(rows)-1-i] = short(e.Labels)[i]
	}
	p.NominalY(rows...)
	p.X.Tick.Label.Rotation = math.Pi / 5
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YTop
	return render(p, 9.6*vg.Centimeter, 8.8*vg.Centimeter)
}

func rowShare(e *EnumScores, r, c int) float64 {
	sum := 0
	for _, n := range e.Confusion[r] {
		sum += n
	}
	if sum == 0 {
		return 0
	}
	return float64(e.Confusion[r][c]) / float64(sum)
}

func short(labels []string) []string {
	out := make([]string, len(labels))
	for i, l := range labels {
		switch l {
		case "unsafe_medical_advice":
			l = "unsafe_med"
		case "privacy_exposure":
			l = "privacy"
		case "misinformation":
			l = "misinfo"
		}
		out[i] = l
	}
	return out
}

type confusionGrid struct{ e *EnumScores }

func (g confusionGrid) Dims() (c, r int) { return len(g.e.Labels), len(g.e.Confusion) }
func (g confusionGrid) Z(c, r int) float64 {
	return rowShare(g.e, len(g.e.Confusion)-1-r, c)
}
func (g confusionGrid) X(c int) float64 { return float64(c) }
func (g confusionGrid) Y(r int) float64 { return float64(r) }

// blues is a white-to-blue palette.
type blues struct{}

func (blues) Colors() []color.Color {
	var out []color.Color
	for i := range 12 {
		t := float64(i) / 11
		out = append(out, color.RGBA{uint8(247 - t*(247-8)), uint8(251 - t*(251-69)), uint8(255 - t*(255-148)), 255})
	}
	return out
}

// latencyChart: box plots of the call latency and the latency to a review
// record, per processor, on a log scale.
func latencyChart(r *Report) (string, error) {
	procs := ran(r)
	p := newPlot("Latency per call and to a review record (ms, log scale)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "milliseconds"
	var names []string
	w := vg.Points(22)
	for i, pr := range procs {
		for k, sample := range [][]int64{pr.Latency.Calls, pr.Latency.Records} {
			vals := make(plotter.Values, 0, len(sample))
			for _, v := range sample {
				vals = append(vals, math.Max(1, float64(v))) // log scale: 0 ms shows as 1 ms
			}
			if len(vals) == 0 {
				vals = append(vals, 1)
			}
			b, err := plotter.NewBoxPlot(w, float64(2*i+k), vals)
			if err != nil {
				return "", err
			}
			b.FillColor = seriesColor(i)
			if k == 1 {
				c := series[i%len(series)]
				c.A = 0x70
				b.FillColor = c
			}
			p.Add(b)
			names = append(names, map[int]string{0: pr.ID + "\ncall", 1: pr.ID + "\nto record"}[k])
		}
	}
	p.NominalX(names...)
	// Room beside the outer boxes, so that their two-line labels are not
	// cut at the canvas's edges.
	p.X.Min, p.X.Max = -0.75, float64(len(names))-0.25
	p.Y.Min = 1
	return render(p, 17*vg.Centimeter, 8*vg.Centimeter)
}

// costChart: cost per 1,000 documents.
func costChart(r *Report) (string, error) {
	procs := ran(r)
	// A title short enough for the chart's width: where the figure comes
	// from goes on the axis.
	p := newPlot("Cost per 1,000 documents")
	p.Y.Label.Text = "USD (processors[].price)"
	var names []string
	for i, pr := range procs {
		b, err := plotter.NewBarChart(plotter.Values{pr.Cost.Per1000Docs}, vg.Points(40))
		if err != nil {
			return "", err
		}
		b.Color = seriesColor(i)
		b.LineStyle.Width = 0
		b.XMin = float64(i)
		p.Add(b)
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(i), Y: pr.Cost.Per1000Docs}}, Labels: []string{costLabel(pr.Cost)}})
		if err != nil {
			return "", err
		}
		l.TextStyle[0].XAlign = draw.XCenter
		l.TextStyle[0].Font = font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(9)}
		l.Offset = vg.Point{Y: vg.Points(3)}
		p.Add(l)
		names = append(names, pr.ID)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.75, float64(len(names))-0.25
	p.Y.Min = 0
	if p.Y.Max <= 0 {
		p.Y.Max = 1
	}
	p.Y.Max *= 1.2
	return render(p, 12*vg.Centimeter, 7*vg.Centimeter)
}

func costLabel(c Cost) string {
	if !c.Priced {
		return "no price"
	}
	return fmt.Sprintf("$%.2f", c.Per1000Docs)
}
