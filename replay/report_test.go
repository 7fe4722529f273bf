package replay

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
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
	trajs := append([]Trajectory{}, sample(t)[1:]...)
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
	dir, _, _ := report(t)
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
