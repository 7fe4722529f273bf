package replay

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
)

// report replays a small sample (one trajectory with a hostile name, to check escaping) and
// writes the report.
func report(t *testing.T) (dir, page string, res *Result) {
	t.Helper()
	trajs := append([]Trajectory{}, sampleRuns(t)[1:]...)
	trajs[1].Name = `tau-bench/<script>alert("x")</script>&#0`
	res, err := Run(context.Background(), trajs, Options{Window: 12000, MaxOutput: 1024, Counter: measuring(t)})
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	path, err := res.WriteReportDir(filepath.Join(dir, "report"), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(path), string(b), res
}

var svgRe = regexp.MustCompile(`(?s)<svg class="chart" id="([a-z]+)".*?</svg>`)

func TestReportHTML(t *testing.T) {
	_, page, res := report(t)
	charts := svgRe.FindAllStringSubmatch(page, -1)
	ids := map[string]string{}
	for _, c := range charts {
		ids[c[1]] = c[0]
	}
	for _, id := range []string{"calls", "cost", "recall", "frontier"} {
		svg, ok := ids[id]
		if !ok {
			t.Errorf("chart %q missing", id)
			continue
		}
		// Each chart is well-formed XML with data marks.
		dec := xml.NewDecoder(strings.NewReader(svg))
		marks := 0
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Errorf("chart %q is not well-formed: %v", id, err)
				break
			}
			if se, ok := tok.(xml.StartElement); ok {
				for _, a := range se.Attr {
					if a.Name.Local == "class" && strings.Contains(a.Value, "data") {
						marks++
					}
				}
			}
		}
		if marks == 0 {
			t.Errorf("chart %q has no data marks", id)
		}
	}
	// One line per strategy on the call chart, one bar per strategy, one point per strategy.
	n := len(res.Strategies)
	if got := strings.Count(ids["calls"], "<polyline class=\"data\""); got < n {
		t.Errorf("call chart: %d lines, want at least %d", got, n)
	}
	if got := strings.Count(ids["cost"], "<rect class=\"data\""); got != n {
		t.Errorf("cost chart: %d bars, want %d", got, n)
	}
	if got := strings.Count(ids["frontier"], "<circle class=\"data\""); got != n {
		t.Errorf("scatter: %d points, want %d", got, n)
	}
	// The floor: a dashed line on the cost chart, a row in every table.
	if res.Floor.Cost <= 0 || !strings.Contains(ids["cost"], fmt.Sprintf("floor %.3f", res.Floor.Cost)) || !strings.Contains(ids["cost"], `stroke-dasharray="4 3"`) {
		t.Errorf("cost chart has no floor line at %.3f", res.Floor.Cost)
	}
	if got := strings.Count(page, `<tr class="floor">`); got != 1+len(res.Sets) {
		t.Errorf("%d floor rows, want %d (totals and each set)", got, 1+len(res.Sets))
	}
	if !strings.Contains(ids["frontier"], "Pareto frontier") {
		t.Error("scatter has no frontier")
	}
	if !strings.Contains(ids["calls"], `class="data event"`) {
		t.Error("call chart marks no compaction event")
	}
	// Self-contained: no fetch from anywhere.
	for _, bad := range []string{"http://", "https://", "<link", "src="} {
		if i := strings.Index(page, bad); i >= 0 && !strings.Contains(page[max(0, i-20):i], "xmlns=") {
			t.Errorf("page refers outside itself: %q", page[max(0, i-40):min(len(page), i+40)])
		}
	}
	if strings.Contains(page, `<script>alert`) {
		t.Error("a trajectory name is not escaped")
	}
	var buf bytes.Buffer
	if err := res.WriteReport(&buf, "no such run"); err == nil {
		t.Error("unknown trajectory accepted")
	}
	if err := res.WriteReport(&buf, `tau-bench/<script>alert("x")</script>&#0`); err != nil {
		t.Error(err)
	}
}

// The report opened in headless Chromium renders every chart: its inline check sets
// body[data-rendered] to "ok" when each SVG and its data marks have a bounding box.
func TestReportChromium(t *testing.T) {
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("SKIPPED: chromium is not installed (Debian package chromium; .ci/run installs it): the report's rendering is not checked")
	}
	dir, _, res := report(t)
	dump := func(dir string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		profile := t.TempDir()
		cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
			"--user-data-dir="+profile, "--dump-dom", "file://"+filepath.Join(dir, "index.html"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, stderr.String())
		}
		dom := string(out)
		if !strings.Contains(dom, `data-rendered="ok"`) {
			m := regexp.MustCompile(`data-rendered="[^"]*"`).FindString(dom)
			t.Fatalf("charts did not render: %q (stderr: %s)", m, stderr.String())
		}
		if !strings.Contains(dom, `data-charts="4"`) {
			t.Errorf("want 4 charts: %s", regexp.MustCompile(`data-charts="[^"]*"`).FindString(dom))
		}
		// The page measured the rendered label boxes itself: none may overlap.
		if !strings.Contains(dom, `data-label-overlaps="none"`) {
			t.Errorf("labels overlap in the browser: %s", regexp.MustCompile(`data-label-overlaps="[^"]*"`).FindString(dom))
		}
		return dom
	}
	dump(dir)
	// The same page with the crowded, partly overflowing strategies of a 32K-window replay of
	// the shared trajectories: the labels still do not overlap once rendered.
	res.Strategies = crowded()
	crowdedDir, err := res.WriteReportDir(filepath.Join(t.TempDir(), "crowded"), "")
	if err != nil {
		t.Fatal(err)
	}
	dom := dump(filepath.Dir(crowdedDir))
	if !strings.Contains(dom, "Upper left is better") || strings.Contains(dom, "Lower right") {
		t.Error("the scatter caption does not say that upper left is better")
	}
}

// crowded returns totals like those of the shared trajectories replayed at --window 32768:
// raw is cheapest and recalls most but overflowed 269 times, and several points nearly
// coincide.
func crowded() []Totals {
	return paidAsCost([]Totals{
		{Name: "raw", Cost: 5.724, Recall: 1, Overflows: 269},
		{Name: "default", Cost: 5.793, Recall: 0.9906},
		{Name: "masking", Cost: 8.946, Recall: 0.9855, Overflows: 96},
		{Name: "copaw", Cost: 6.368, Recall: 0.9833},
		{Name: "qwenpaw", Cost: 5.890, Recall: 0.9834, Overflows: 20},
		{Name: "picoclaw", Cost: 7.884, Recall: 0.9564, Overflows: 29},
		{Name: "cowagent", Cost: 6.387, Recall: 0.9901, Overflows: 60},
		{Name: "baseagent", Cost: 6.291, Recall: 0.9876, Overflows: 48},
		// Coinciding points, as at the default window.
		{Name: "same-a", Cost: 5.69, Recall: 0.9990},
		{Name: "same-b", Cost: 5.70, Recall: 0.9991},
		{Name: "same-c", Cost: 5.71, Recall: 0.9989},
	})
}

// paidAsCost sets what each strategy pays to its cost: nothing read back.
func paidAsCost(ts []Totals) []Totals {
	for i := range ts {
		ts[i].CostWithReadBack = ts[i].Cost
	}
	return ts
}

// The scatter says that upper left is better, draws the Pareto frontier over the strategies
// that never overflowed only, places labels without overlaps and shows no "-0" on any axis.
func TestReportScatter(t *testing.T) {
	for _, tc := range []struct {
		name      string
		totals    []Totals
		front     []string // on the frontier
		notFront  []string
		ringFront bool
	}{
		{"32K window", crowded(), []string{"same-a", "same-b"}, []string{"raw", "qwenpaw", "masking"}, false},
		{"raw overflows, one eligible", []Totals{{Name: "raw", Cost: 1, Recall: 1, Overflows: 269}, {Name: "default", Cost: 2, Recall: 0.99}, {Name: "copaw", Cost: 3, Recall: 0.98}},
			[]string{"default"}, []string{"raw", "copaw"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Result{Strategies: paidAsCost(tc.totals), Window: 32768, MaxOutput: 4096}
			s := r.scatterChart()
			if !strings.Contains(s.Caption, "Upper left is better") || strings.Contains(s.Caption, "Lower right") {
				t.Errorf("caption %q", s.Caption)
			}
			frontier := ""
			for _, p := range s.Polys {
				if strings.HasPrefix(p.Title, "Pareto frontier") {
					frontier = p.Title
				}
			}
			for _, c := range s.Circles {
				if strings.HasPrefix(c.Title, "Pareto frontier") {
					frontier = c.Title
				}
			}
			if tc.ringFront != (frontier != "" && len(s.Polys) == 0) {
				t.Errorf("frontier drawn as ring %v, want %v (%q)", !tc.ringFront, tc.ringFront, frontier)
			}
			for _, n := range tc.front {
				if !strings.Contains(frontier, n) {
					t.Errorf("frontier %q lacks %s", frontier, n)
				}
			}
			for _, n := range tc.notFront {
				if regexp.MustCompile(`\b` + n + `\b`).MatchString(frontier) {
					t.Errorf("frontier %q includes %s, which overflowed or is dominated", frontier, n)
				}
			}
			var labels []box
			var texts []string
			for _, x := range s.Texts {
				if x.Class == "label" {
					labels = append(labels, textBox(x.X, x.Y, x.Anchor, x.Text, float64(x.Size)))
					texts = append(texts, x.Text)
				}
			}
			if len(labels) != len(tc.totals) {
				t.Fatalf("%d labels for %d strategies", len(labels), len(tc.totals))
			}
			for i := range labels {
				for j := i + 1; j < len(labels); j++ {
					if labels[i].overlap(labels[j]) > 0 {
						t.Errorf("labels %q and %q overlap", texts[i], texts[j])
					}
				}
				if !labels[i].inside(box{0, 0, float64(s.W), float64(s.H)}) {
					t.Errorf("label %q leaves the chart", texts[i])
				}
			}
			for _, c := range s.Circles {
				if strings.HasPrefix(c.Title, "raw:") && c.Fill != "#fff" {
					t.Errorf("raw overflowed but is drawn filled: %+v", c)
				}
			}
		})
	}
}

// No axis shows "-0": ticks computed by index and rounded, zero printed as "0".
func TestTicksNoNegativeZero(t *testing.T) {
	for _, r := range [][2]float64{{-1e-17, 9}, {0, 80000}, {1e-12, 1.002}, {0.94, 1}, {-0.5, 0.5}, {5.3, 9.4}, {0, 0}} {
		for _, v := range niceTicks(r[0], r[1], 5) {
			if s := fmtTick(v); s == "-0" || strings.HasPrefix(s, "-0.0000") {
				t.Errorf("niceTicks(%v, %v): tick %v prints %q", r[0], r[1], v, s)
			}
		}
	}
	if got := fmtTick(math.Copysign(0, -1)); got != "0" {
		t.Errorf("fmtTick(-0) = %q", got)
	}
	_, page, _ := report(t)
	if strings.Contains(page, ">-0<") {
		t.Error("the report shows -0 on an axis")
	}
}

// A report of runs without calls (no assistant message) still renders its charts.
func TestReportEmpty(t *testing.T) {
	tr := Trajectory{Name: "x/empty", Set: "x", Messages: []chat.Message{chat.TextMessage(chat.RoleUser, "hi")}}
	res, err := Run(context.Background(), []Trajectory{tr}, Options{Counter: measuring(t), Strategies: []string{"raw", "default"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := res.WriteReport(&buf, ""); err != nil {
		t.Fatal(err)
	}
	if got := len(svgRe.FindAllString(buf.String(), -1)); got != 4 {
		t.Errorf("%d charts", got)
	}
}
