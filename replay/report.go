package replay

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The HTML report: one self-contained page (no script, style or font from the network) with
// inline SVG charts drawn here:
//   - prepared input tokens per call for each strategy on one trajectory, with the window
//     limit and the compaction events marked;
//   - cost and recall per strategy over all trajectories (bars);
//   - what the agent pays (cost plus read-back) against recall (scatter), with the Pareto frontier;
// and the tables of the text output. A tiny inline script checks that every chart rendered
// (each SVG and its data marks have a non-empty bounding box) and records the verdict in
// body[data-rendered] ("ok" or "fail:<chart ids>"), which tests read in headless Chromium.

// WriteReportDir writes the report to dir/index.html (creating dir) and returns the path.
// trajectory names the run charted call by call ("" picks the one with the most calls).
func (r *Result) WriteReportDir(dir, trajectory string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "index.html")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := r.WriteReport(f, trajectory); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// WriteReport writes the HTML report. trajectory names the run charted call by call ("":
// the one with the most calls, the first of those in input order).
func (r *Result) WriteReport(w io.Writer, trajectory string) error {
	if trajectory == "" {
		best := -1
		for _, t := range r.Trajs {
			if t.Calls > best {
				best, trajectory = t.Calls, t.Name
			}
		}
	} else {
		found := false
		for _, t := range r.Trajs {
			found = found || t.Name == trajectory
		}
		if !found {
			return fmt.Errorf("replay: report: no trajectory %q", trajectory)
		}
	}
	page := reportPage{Result: r, Trajectory: trajectory}
	page.Charts = append(page.Charts, r.callsChart(trajectory))
	cost := r.barChart("cost", "Cost per strategy, all trajectories (units of 1M input tokens)", func(t *Totals) float64 { return t.Cost }, "%.3f", false)
	cost.mark(r.Floor.Cost, fmt.Sprintf("floor %.3f", r.Floor.Cost))
	cost.Caption = "The dashed line is the floor: every message sent once, whole, uncached."
	page.Charts = append(page.Charts, cost)
	page.Charts = append(page.Charts, r.barChart("recall", "Reference recall per strategy, all trajectories", func(t *Totals) float64 { return t.Recall }, "%.4f", true))
	page.Charts = append(page.Charts, r.scatterChart())
	for _, s := range r.Strategies {
		page.Legend = append(page.Legend, legendItem{Name: s.Name, Color: strategyColor(s.Name)})
	}
	return reportTemplate.Execute(w, page)
}

type reportPage struct {
	*Result
	Trajectory string
	Charts     []*scene
	Legend     []legendItem
}

type legendItem struct{ Name, Color string }

// scene is one SVG chart: marks with coordinates in pixels. Every mark of class "data"
// carries data; the render check wants at least one with a non-empty bounding box.
type scene struct {
	ID, Title, Caption string
	W, H               int
	Lines              []sLine
	Polys              []sPoly
	Rects              []sRect
	Circles            []sCircle
	Texts              []sText

	frame *frame // the bar chart's, for mark
}

type sLine struct {
	X1, Y1, X2, Y2 float64
	Stroke         string
	Dash           string
	Width          float64
}

type sPoly struct {
	Points string
	Stroke string
	Width  float64
	Dash   string
	Class  string
	Title  string
}

type sRect struct {
	X, Y, W, H float64
	Fill       string
	Title      string
}

type sCircle struct {
	X, Y, R      float64
	Fill, Stroke string
	Title        string
	Class        string
}

type sText struct {
	X, Y   float64
	Anchor string
	Size   int
	Fill   string
	Text   string
	Rotate bool
	Class  string // "label": a data label, checked for overlaps in the browser
}

var palette = map[string]string{
	"raw":       "#7f7f7f",
	"default":   "#1f5fbf",
	"masking":   "#e67e22",
	"copaw":     "#2ca02c",
	"qwenpaw":   "#d62728",
	"picoclaw":  "#9467bd",
	"cowagent":  "#8c564b",
	"baseagent": "#e377c2",
}

func strategyColor(name string) string {
	if c, ok := palette[name]; ok {
		return c
	}
	h := 0
	for _, c := range name {
		h = h*31 + int(c)
	}
	return fmt.Sprintf("hsl(%d,60%%,45%%)", (h%360+360)%360)
}

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(max(n, 1))
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	// Each tick is computed from its index (no accumulated rounding error) and rounded to the
	// step's precision, so that a tick meant to be 0 is 0, never -1e-17 (which prints "-0").
	var out []float64
	first := math.Ceil(lo/step - 1e-9)
	for i := 0.0; ; i++ {
		v := (first + i) * step
		if v > hi+step*1e-9 {
			break
		}
		v = math.Round(v/mag*1e6) / 1e6 * mag
		if v == 0 {
			v = 0 // no negative zero
		}
		out = append(out, v)
	}
	return out
}

// fmtTick formats a tick value: 1.5M, 20k, 0.98; never "-0".
func fmtTick(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*1e4)/1e4, 'f', -1, 64)
}

// frame draws the axes of a plot area and returns the mapping of data to pixels.
type frame struct {
	x0, y0, x1, y1         float64 // plot area in pixels (y0 top)
	xmin, xmax, ymin, ymax float64
}

func (f *frame) px(x float64) float64 {
	return f.x0 + (x-f.xmin)/(f.xmax-f.xmin)*(f.x1-f.x0)
}

func (f *frame) py(y float64) float64 {
	return f.y1 - (y-f.ymin)/(f.ymax-f.ymin)*(f.y1-f.y0)
}

func (f *frame) axes(s *scene, xlabel, ylabel string, xticks, yticks []float64) {
	for _, v := range yticks {
		y := f.py(v)
		s.Lines = append(s.Lines, sLine{X1: f.x0, Y1: y, X2: f.x1, Y2: y, Stroke: "#e5e5e5", Width: 1})
		s.Texts = append(s.Texts, sText{X: f.x0 - 6, Y: y + 4, Anchor: "end", Size: 11, Fill: "#444", Text: fmtTick(v)})
	}
	for _, v := range xticks {
		x := f.px(v)
		s.Lines = append(s.Lines, sLine{X1: x, Y1: f.y1, X2: x, Y2: f.y1 + 4, Stroke: "#888", Width: 1})
		s.Texts = append(s.Texts, sText{X: x, Y: f.y1 + 16, Anchor: "middle", Size: 11, Fill: "#444", Text: fmtTick(v)})
	}
	s.Lines = append(s.Lines,
		sLine{X1: f.x0, Y1: f.y1, X2: f.x1, Y2: f.y1, Stroke: "#888", Width: 1},
		sLine{X1: f.x0, Y1: f.y0, X2: f.x0, Y2: f.y1, Stroke: "#888", Width: 1})
	s.Texts = append(s.Texts,
		sText{X: (f.x0 + f.x1) / 2, Y: f.y1 + 34, Anchor: "middle", Size: 12, Fill: "#222", Text: xlabel},
		sText{X: 16, Y: (f.y0 + f.y1) / 2, Anchor: "middle", Size: 12, Fill: "#222", Text: ylabel, Rotate: true})
}

func pt(x, y float64) string {
	return strconv.FormatFloat(x, 'f', 1, 64) + "," + strconv.FormatFloat(y, 'f', 1, 64)
}

// callsChart: prepared input tokens per call of one trajectory, one line per strategy.
func (r *Result) callsChart(traj string) *scene {
	s := &scene{ID: "calls", W: 960, H: 420,
		Title:   "Prepared input tokens per call: " + traj,
		Caption: "One line per strategy. Filled circles: a summary was made at that call; open circles: another rewrite of sent history (masking, re-truncation, truncation); red crosses: the request overflows the window. Dashed: window − max output."}
	var runs []*Replay
	for i := range r.Runs {
		if r.Runs[i].Trajectory == traj {
			runs = append(runs, &r.Runs[i])
		}
	}
	n, ymax := 1, 0.0
	for _, run := range runs {
		n = max(n, len(run.Calls))
		for _, c := range run.Calls {
			ymax = max(ymax, float64(c.Input))
		}
	}
	limit := float64(r.Window - r.MaxOutput)
	ymax = max(ymax, limit) * 1.05
	f := &frame{x0: 70, y0: 20, x1: float64(s.W) - 20, y1: float64(s.H) - 50, xmin: 1, xmax: float64(max(n, 2)), ymin: 0, ymax: ymax}
	f.axes(s, "call (assistant message) number", "input tokens", niceTicks(1, float64(n), 10), niceTicks(0, ymax, 6))
	s.Lines = append(s.Lines, sLine{X1: f.x0, Y1: f.py(limit), X2: f.x1, Y2: f.py(limit), Stroke: "#c0392b", Dash: "6 4", Width: 1.2})
	s.Texts = append(s.Texts, sText{X: f.x1 - 4, Y: f.py(limit) - 5, Anchor: "end", Size: 11, Fill: "#c0392b", Text: "window − max output = " + strconv.Itoa(int(limit))})
	for _, run := range runs {
		color := strategyColor(run.Strategy)
		pts := make([]string, 0, len(run.Calls))
		for k, c := range run.Calls {
			pts = append(pts, pt(f.px(float64(k+1)), f.py(float64(c.Input))))
		}
		if len(pts) == 1 {
			pts = append(pts, pt(f.px(1)+2, f.py(float64(run.Calls[0].Input))))
		}
		if len(pts) > 0 {
			s.Polys = append(s.Polys, sPoly{Points: strings.Join(pts, " "), Stroke: color, Width: 1.6, Class: "data", Title: run.Strategy})
		}
		for k, c := range run.Calls {
			x, y := f.px(float64(k+1)), f.py(float64(c.Input))
			title := fmt.Sprintf("%s, call %d (message %d): %d tokens", run.Strategy, k+1, c.Index, c.Input)
			switch {
			case c.Compactions > 0:
				s.Circles = append(s.Circles, sCircle{X: x, Y: y, R: 4, Fill: color, Stroke: "#fff", Class: "data event", Title: title + ", summary (" + strings.Join(c.Steps, ", ") + ")"})
			case c.PrefixChanged:
				s.Circles = append(s.Circles, sCircle{X: x, Y: y, R: 3.5, Fill: "#fff", Stroke: color, Class: "data event", Title: title + ", " + strings.Join(c.Steps, ", ")})
			}
			if c.Overflow {
				s.Polys = append(s.Polys, sPoly{Points: pt(x-4, y-4) + " " + pt(x+4, y+4), Stroke: "#c0392b", Width: 1.5, Class: "data", Title: title + ", overflow"},
					sPoly{Points: pt(x-4, y+4) + " " + pt(x+4, y-4), Stroke: "#c0392b", Width: 1.5, Class: "data", Title: title + ", overflow"})
			}
		}
	}
	return s
}

// barChart: one horizontal bar per strategy.
func (r *Result) barChart(id, title string, value func(*Totals) float64, format string, unitRange bool) *scene {
	rowH := 26.0
	s := &scene{ID: id, Title: title, W: 470, H: int(40 + rowH*float64(len(r.Strategies)) + 40)}
	vmax := 0.0
	vmin := math.Inf(1)
	for i := range r.Strategies {
		vmax = max(vmax, value(&r.Strategies[i]))
		vmin = min(vmin, value(&r.Strategies[i]))
	}
	lo := 0.0
	if unitRange {
		// Recall: zoom on the range that differs, from a round value below the minimum.
		lo = math.Floor(min(vmin, 1)*100-1) / 100
		lo = max(0, lo)
		vmax = 1
	}
	if vmax <= lo {
		vmax = lo + 1
	}
	f := &frame{x0: 90, y0: 20, x1: float64(s.W) - 70, y1: float64(s.H) - 45, xmin: lo, xmax: vmax * 1.02, ymin: 0, ymax: 1}
	f.axes(s, "", "", niceTicks(lo, vmax, 4), nil)
	for i := range r.Strategies {
		t := &r.Strategies[i]
		v := value(t)
		y := f.y0 + rowH*float64(i) + 4
		w := math.Max(1, f.px(v)-f.x0)
		s.Rects = append(s.Rects, sRect{X: f.x0, Y: y, W: w, H: rowH - 8, Fill: strategyColor(t.Name), Title: fmt.Sprintf("%s: "+format, t.Name, v)})
		s.Texts = append(s.Texts,
			sText{X: f.x0 - 6, Y: y + rowH/2, Anchor: "end", Size: 12, Fill: "#222", Text: t.Name},
			sText{X: f.x0 + w + 4, Y: y + rowH/2, Anchor: "start", Size: 11, Fill: "#222", Text: fmt.Sprintf(format, v)})
	}
	s.frame = f
	return s
}

// mark draws a dashed vertical line at value v across a bar chart, labelled under the bars
// (the cost chart's floor). A value outside the chart's range draws nothing.
func (s *scene) mark(v float64, label string) {
	f := s.frame
	if f == nil || v <= f.xmin || v > f.xmax {
		return
	}
	x := f.px(v)
	s.Lines = append(s.Lines, sLine{X1: x, Y1: f.y0, X2: x, Y2: f.y1, Stroke: "#333", Dash: "4 3", Width: 1})
	s.Texts = append(s.Texts, sText{X: x, Y: f.y1 + 30, Anchor: "middle", Size: 11, Fill: "#333", Text: label})
}

// scatterCaption is the caption of the cost-recall scatter.
const scatterCaption = "Upper left is better: paying less, reading back included (left), and recalling more (up). The dashed line joins the Pareto frontier " +
	"of the strategies that never overflowed the window nor sent an invalid request: no other such strategy costs less " +
	"and recalls more. Hollow points did overflow (or send invalid requests): their requests would have been rejected, " +
	"so they are not eligible however cheap they look."

// eligible reports whether a strategy may be on the Pareto frontier: every request it
// prepared would have been accepted (no overflow, no invalid tool-call pairing).
func eligible(t *Totals) bool { return t.Overflows == 0 && t.Invalid == 0 }

// scatterChart: what the agent pays (cost plus read-back) against recall, one point per strategy, with the Pareto frontier of the
// eligible strategies (the ones that no other eligible one beats on both: cheaper or as
// cheap, and recalling as much or more). Labels are placed so that they do not overlap.
func (r *Result) scatterChart() *scene {
	s := &scene{ID: "frontier", W: 640, H: 420, Title: "What the agent pays against recall (all trajectories)", Caption: scatterCaption}
	if len(r.Strategies) == 0 {
		return s
	}
	cmin, cmax := math.Inf(1), math.Inf(-1)
	rmin := 1.0
	for _, t := range r.Strategies {
		cmin, cmax = min(cmin, t.CostWithReadBack), max(cmax, t.CostWithReadBack)
		rmin = min(rmin, t.Recall)
	}
	pad := (cmax - cmin) * 0.12
	if pad == 0 {
		pad = math.Max(cmax*0.1, 0.01)
	}
	rlo := math.Max(0, math.Floor((rmin-0.005)*100)/100)
	f := &frame{x0: 70, y0: 20, x1: float64(s.W) - 30, y1: float64(s.H) - 50, xmin: math.Max(0, cmin-pad), xmax: cmax + pad, ymin: rlo, ymax: 1.002}
	f.axes(s, "paid: cost + read-back (units of 1M input tokens) — cheaper is left", "recall — higher is better", niceTicks(f.xmin, f.xmax, 6), niceTicks(rlo, 1, 5))
	idx := make([]int, 0, len(r.Strategies))
	for i := range r.Strategies {
		if eligible(&r.Strategies[i]) {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ta, tb := &r.Strategies[idx[a]], &r.Strategies[idx[b]]
		if ta.CostWithReadBack != tb.CostWithReadBack {
			return ta.CostWithReadBack < tb.CostWithReadBack
		}
		return ta.Recall > tb.Recall
	})
	var front []string
	var names []string
	best := math.Inf(-1)
	for _, i := range idx {
		t := &r.Strategies[i]
		if t.Recall > best {
			best = t.Recall
			front = append(front, pt(f.px(t.CostWithReadBack), f.py(t.Recall)))
			names = append(names, t.Name)
		}
	}
	switch {
	case len(front) > 1:
		s.Polys = append(s.Polys, sPoly{Points: strings.Join(front, " "), Stroke: "#333", Width: 1.2, Dash: "5 3", Title: "Pareto frontier: " + strings.Join(names, ", ")})
	case len(front) == 1:
		// One eligible strategy beats all other eligible ones on both counts: ring it.
		t := &r.Strategies[idx[0]]
		s.Circles = append(s.Circles, sCircle{X: f.px(t.CostWithReadBack), Y: f.py(t.Recall), R: 11, Fill: "none", Stroke: "#333",
			Title: "Pareto frontier: " + t.Name + " is the cheapest of the strategies that never overflowed, and recalls most"})
	default:
		s.Caption += " No strategy was eligible: every one overflowed the window or sent an invalid request."
	}
	pl := &labelPlacer{bounds: box{x0: f.x0 + 2, y0: 2, x1: float64(s.W) - 2, y1: f.y1 - 2}}
	for _, t := range r.Strategies {
		pl.points = append(pl.points, box{x0: f.px(t.CostWithReadBack) - 7, y0: f.py(t.Recall) - 7, x1: f.px(t.CostWithReadBack) + 7, y1: f.py(t.Recall) + 7})
	}
	for _, t := range r.Strategies {
		x, y := f.px(t.CostWithReadBack), f.py(t.Recall)
		fill, title, label := strategyColor(t.Name), fmt.Sprintf("%s: paid %.3f, recall %.4f", t.Name, t.CostWithReadBack, t.Recall), t.Name
		if !eligible(&t) {
			fill = "#fff"
			title += fmt.Sprintf(", %d overflows, %d invalid requests: not eligible for the frontier", t.Overflows, t.Invalid)
			label += " (overflowed)"
			if t.Overflows == 0 {
				label = t.Name + " (invalid)"
			}
		}
		s.Circles = append(s.Circles, sCircle{X: x, Y: y, R: 6, Fill: fill, Stroke: strategyColor(t.Name), Class: "data", Title: title})
		lx, ly, anchor := pl.place(x, y, label, 12)
		s.Texts = append(s.Texts, sText{X: lx, Y: ly, Anchor: anchor, Size: 12, Fill: "#222", Text: label, Class: "label"})
		// A label pushed away from its point gets a leader line to it.
		b := pl.placed[len(pl.placed)-1]
		nx, ny := math.Max(b.x0, math.Min(x, b.x1)), math.Max(b.y0, math.Min(y, b.y1))
		if d := math.Hypot(nx-x, ny-y); d > 14 {
			s.Lines = append(s.Lines, sLine{X1: x + (nx-x)*7/d, Y1: y + (ny-y)*7/d, X2: nx, Y2: ny, Stroke: "#999", Width: 0.8})
		}
	}
	return s
}

// box is a rectangle in pixels (y down).
type box struct{ x0, y0, x1, y1 float64 }

func (a box) overlap(b box) float64 {
	w := min(a.x1, b.x1) - max(a.x0, b.x0)
	h := min(a.y1, b.y1) - max(a.y0, b.y0)
	if w <= 0 || h <= 0 {
		return 0
	}
	return w * h
}

func (a box) inside(b box) bool { return a.x0 >= b.x0 && a.y0 >= b.y0 && a.x1 <= b.x1 && a.y1 <= b.y1 }

// textBox estimates the box of a text of size px drawn at (x, y) (the baseline) with anchor.
// The width errs wide (0.62 em a character; system sans fonts average about 0.55).
func textBox(x, y float64, anchor, text string, size float64) box {
	w := 0.62 * size * float64(len([]rune(text)))
	switch anchor {
	case "end":
		x -= w
	case "middle":
		x -= w / 2
	}
	return box{x0: x - 1, y0: y - 0.8*size - 1, x1: x + w + 1, y1: y + 0.25*size + 1}
}

// labelPlacer puts point labels where they overlap neither each other nor the points, trying
// positions around the point from near to far; when none is free it takes the least covered.
type labelPlacer struct {
	bounds box
	points []box
	placed []box
}

func (p *labelPlacer) place(x, y float64, text string, size float64) (lx, ly float64, anchor string) {
	type cand struct {
		dx, dy float64
		anchor string
	}
	var cands []cand
	for d := 0.0; d < 10; d++ {
		step := d * (size + 3)
		cands = append(cands,
			cand{9, -7 - step, "start"}, cand{9, 15 + step, "start"},
			cand{-9, -7 - step, "end"}, cand{-9, 15 + step, "end"},
			cand{0, -11 - step, "middle"}, cand{0, 21 + step, "middle"})
	}
	bestCost := math.Inf(1)
	var best box
	for _, c := range cands {
		b := textBox(x+c.dx, y+c.dy, c.anchor, text, size)
		cost := 0.0
		if !b.inside(p.bounds) {
			cost += 1e6
		}
		for _, o := range p.placed {
			cost += 100 * b.overlap(o)
		}
		for _, o := range p.points {
			cost += 10 * b.overlap(o)
		}
		// Prefer near positions: a small cost for distance breaks ties.
		cost += math.Abs(c.dy) * 0.01
		if cost < bestCost {
			bestCost, lx, ly, anchor, best = cost, x+c.dx, y+c.dy, c.anchor, b
		}
	}
	p.placed = append(p.placed, best)
	return lx, ly, anchor
}

func pct(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", x*100)
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"f3":    func(x float64) string { return fmt.Sprintf("%.3f", x) },
	"f4":    func(x float64) string { return fmt.Sprintf("%.4f", x) },
	"f0":    func(x float64) string { return fmt.Sprintf("%.0f", x) },
	"f1":    func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) },
	"pct":   pct,
	"color": strategyColor,
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ctxmgr replay: {{.Trajectories}} trajectories, window {{.Window}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px; max-width: 1200px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e5e5e5; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 5px; border-radius: 2px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; max-width: 900px; }
.legend span { margin-right: 14px; white-space: nowrap; }
.note { color: #555; font-size: 12px; }
</style>
</head>
<body>
<h1>ctxmgr replay</h1>
<p>{{.Trajectories}} trajectories, {{.Calls}} LLM calls; window {{.Window}} tokens, max output {{.MaxOutput}};
prices “{{.Profile}}” per million tokens: uncached input {{.Prices.Uncached}}, cached input {{.Prices.Cached}}, output {{.Prices.Output}}.</p>
<p class="legend">{{range .Legend}}<span><i class="swatch" style="background: {{.Color}}"></i>{{.Name}}</span>{{end}}</p>
<div class="charts">{{range .Charts}}{{template "chart" .}}{{end}}</div>
<h2>Totals</h2>
<table>
<tr><th>strategy</th><th>paid</th><th>vs raw</th><th>input</th><th>cached</th><th>summary in</th><th>summary out</th><th>cost</th><th>vs raw</th><th>peak</th><th>overflows</th><th>invalid</th><th>lost</th><th>recall</th><th>compactions</th><th>p50 µs</th><th>p99 µs</th></tr>
{{range .Strategies}}<tr><td><i class="swatch" style="background: {{color .Name}}"></i>{{.Name}}</td><td>{{f3 .CostWithReadBack}}</td><td>{{pct .CostWithReadBackVsRaw}}</td><td>{{.InputTokens}}</td><td>{{.CachedTokens}}</td><td>{{.SummaryInputTokens}}</td><td>{{.SummaryOutputTokens}}</td><td>{{f3 .Cost}}</td><td>{{pct .CostVsRaw}}</td><td>{{.PeakTokens}}</td><td>{{.Overflows}}</td><td>{{.Invalid}}</td><td>{{.Lost}}</td><td>{{f4 .Recall}}</td><td>{{.Compactions}}</td><td>{{f0 .PrepareP50US}}</td><td>{{f0 .PrepareP99US}}</td></tr>
{{end}}<tr class="floor"><td>floor</td><td></td><td></td><td>{{.Floor.InputTokens}}</td><td>0</td><td></td><td></td><td>{{f3 .Floor.Cost}}</td><td>{{pct .Floor.CostVsRaw}}</td><td></td><td></td><td></td><td></td><td></td><td></td><td></td><td></td></tr>
</table>
<h2>Per set of trajectories</h2>
{{range .Sets}}<h3>{{.Name}}: {{.Trajectories}} runs, {{.Calls}} calls</h3>
<table>
<tr><th>strategy</th><th>paid</th><th>vs raw</th><th>cost</th><th>vs raw</th><th>recall</th><th>overflows</th><th>invalid</th><th>lost</th><th>compactions</th></tr>
{{range .Strategies}}<tr><td>{{.Name}}</td><td>{{f3 .CostWithReadBack}}</td><td>{{pct .CostWithReadBackVsRaw}}</td><td>{{f3 .Cost}}</td><td>{{pct .CostVsRaw}}</td><td>{{f4 .Recall}}</td><td>{{.Overflows}}</td><td>{{.Invalid}}</td><td>{{.Lost}}</td><td>{{.Compactions}}</td></tr>
{{end}}<tr class="floor"><td>floor</td><td></td><td></td><td>{{f3 .Floor.Cost}}</td><td>{{pct .Floor.CostVsRaw}}</td><td></td><td></td><td></td><td></td><td></td></tr>
</table>
{{if .Recorded}}<p class="note">The recorded runs reported {{.Recorded.InputTokens}} input tokens ({{.Recorded.CachedTokens}} cached) over {{.Recorded.Calls}} calls, in the recorded model's own tokenizer.</p>{{end}}
{{end}}
<p class="note">Floor: every message sent once, whole, at the uncached price, nothing read from a cache. A strategy that shows every message whole costs at least this; one below it cut something before the model saw it.</p>
<p class="note">Input tokens are measured by the exact o200k_base counter for every strategy. Cached tokens: the common prefix with the previous request of the run, message by message, when at least 1024 tokens. Recall: the share of the salient terms (paths, identifiers, numbers) of each recorded assistant message that appeared earlier in the history and are present in the prepared request.</p>
<script>
(function () {
  var svgs = document.querySelectorAll("svg.chart"), bad = [];
  for (var i = 0; i < svgs.length; i++) {
    var s = svgs[i], box = s.getBBox(), marks = s.querySelectorAll(".data"), drawn = false;
    for (var k = 0; k < marks.length && !drawn; k++) {
      var b = marks[k].getBBox();
      drawn = b.width > 0 || b.height > 0;
    }
    if (!(box.width > 0 && box.height > 0 && drawn)) bad.push(s.id);
  }
  // Data labels must not overlap: compare the rendered boxes of every pair in each chart.
  var overlaps = [];
  for (var i = 0; i < svgs.length; i++) {
    var ls = svgs[i].querySelectorAll("text.label"), bx = [];
    for (var k = 0; k < ls.length; k++) bx.push(ls[k].getBBox());
    for (var a = 0; a < bx.length; a++) for (var c = a + 1; c < bx.length; c++) {
      var p = bx[a], q = bx[c];
      if (p.x < q.x + q.width && q.x < p.x + p.width && p.y < q.y + q.height && q.y < p.y + p.height)
        overlaps.push(svgs[i].id + ":" + ls[a].textContent + "/" + ls[c].textContent);
    }
  }
  document.body.setAttribute("data-label-overlaps", overlaps.length === 0 ? "none" : overlaps.join(","));
  document.body.setAttribute("data-charts", String(svgs.length));
  document.body.setAttribute("data-rendered", svgs.length > 0 && bad.length === 0 ? "ok" : "fail:" + bad.join(","));
})();
</script>
</body>
</html>
{{define "chart"}}<figure>
<svg class="chart" id="{{.ID}}" xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="{{.Title}}">
<title>{{.Title}}</title>
<rect x="0" y="0" width="{{.W}}" height="{{.H}}" fill="#fff"/>
{{range .Lines}}<line x1="{{f1 .X1}}" y1="{{f1 .Y1}}" x2="{{f1 .X2}}" y2="{{f1 .Y2}}" stroke="{{.Stroke}}" stroke-width="{{.Width}}"{{if .Dash}} stroke-dasharray="{{.Dash}}"{{end}}/>
{{end}}{{range .Rects}}<rect class="data" x="{{f1 .X}}" y="{{f1 .Y}}" width="{{f1 .W}}" height="{{f1 .H}}" fill="{{.Fill}}"><title>{{.Title}}</title></rect>
{{end}}{{range .Polys}}<polyline{{if .Class}} class="{{.Class}}"{{end}} points="{{.Points}}" fill="none" stroke="{{.Stroke}}" stroke-width="{{.Width}}"{{if .Dash}} stroke-dasharray="{{.Dash}}"{{end}} stroke-linejoin="round"><title>{{.Title}}</title></polyline>
{{end}}{{range .Circles}}<circle class="{{.Class}}" cx="{{f1 .X}}" cy="{{f1 .Y}}" r="{{.R}}" fill="{{.Fill}}" stroke="{{.Stroke}}" stroke-width="1.2"><title>{{.Title}}</title></circle>
{{end}}{{range .Texts}}<text{{if .Class}} class="{{.Class}}"{{end}} x="{{f1 .X}}" y="{{f1 .Y}}" text-anchor="{{.Anchor}}" font-size="{{.Size}}" fill="{{.Fill}}"{{if .Rotate}} transform="rotate(-90 {{f1 .X}} {{f1 .Y}})"{{end}}>{{.Text}}</text>
{{end}}</svg>
<figcaption><b>{{.Title}}</b>{{if .Caption}} — {{.Caption}}{{end}}</figcaption>
</figure>
{{end}}`))
