package proxy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ctxmgr "github.com/ctxmgr/ctxmgr"
)

// chromium returns Debian's chromium, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIPPED: chromium is not installed (Debian package chromium; .ci/run installs it): the inspector's pages are not checked in a browser")
	return ""
}

// browse loads url in headless Chromium, lets its scripts fetch and draw (virtual time),
// and returns the DOM it rendered; with shot set it also saves a screenshot there, of a
// laptop screen's width and the height given (headless Chromium draws a page scrolled by
// its script blank: a tall screenshot holds what is further down).
func browse(t *testing.T, bin, url, shot string, height int) string {
	t.Helper()
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
			"--disable-extensions", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=2500"}, args...)
		cmd := exec.CommandContext(ctx, bin, append(all, url)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	dom := string(run("--dump-dom"))
	if shot != "" {
		run("--window-size=1366,"+strconv.Itoa(height), "--screenshot="+shot)
		if st, err := os.Stat(shot); err != nil || st.Size() < 10000 {
			t.Errorf("screenshot %s: %v", shot, err)
		}
	}
	return dom
}

// TestInspectorChromium drives a session through the proxy until tool results are masked
// and the history compacted, then opens the inspector in headless Chromium and checks what a
// person sees: the session listed with its model and client, its window as a bar of regions
// with their numbers, the summary's text, a compaction in the timeline and the latest user
// message. Screenshots go to $CTXMGR_UI_SHOTS when it names a directory.
func TestInspectorChromium(t *testing.T) {
	bin := chromium(t)
	e, id := inspectorEnv(t, Config{UILoopback: true})
	shots := os.Getenv("CTXMGR_UI_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	}

	dom := browse(t, bin, e.px.URL+"/ui/", filepath.Join(shots, "inspector-list.png"), 900)
	for _, want := range []string{`data-ready="yes"`, `href="/ui/sessions/` + id + `"`, ">gpt-4o<", ">OpenAI/Go<", `class="badge live"`, "1 session."} {
		if !strings.Contains(dom, want) {
			t.Errorf("the list lacks %s:\n%s", want, dom)
		}
	}
	dom = browse(t, bin, e.px.URL+"/ui/?q=no-such-thing", "", 0)
	if !strings.Contains(dom, "No session matches") || strings.Contains(dom, `href="/ui/sessions/`+id+`"`) {
		t.Errorf("the search does not filter:\n%s", dom)
	}

	d := e.srv.mustDetail(t, id)
	dom = browse(t, bin, e.px.URL+"/ui/sessions/"+id, filepath.Join(shots, "inspector-session.png"), 900)
	if !strings.Contains(dom, `data-ready="yes"`) || strings.Contains(dom, "Could not") {
		t.Fatalf("the session page did not draw:\n%s", dom)
	}
	for _, want := range []string{
		`class="seg seg-system"`, `class="seg seg-tools"`, `class="seg seg-summary"`, `class="seg seg-history"`, `class="seg seg-reserve"`,
		">System prompt<", ">Tool definitions<", ">Reply reserve<", ">" + fmtNum(d.Window.History) + "<", ">" + fmtNum(d.Window.Window) + "<",
		"<strong>compaction</strong>", "the last question: is the build green?", "Sending everything", `class="badge state">archived<`,
		`class="badge state">masked<`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the session page lacks %s", want)
		}
	}
	// The summary's text, as the page shows it (text escaped by the DOM serializer).
	first := strings.SplitN(d.Summary.Text, "\n", 2)[0]
	if first == "" || !strings.Contains(dom, strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(first)) {
		t.Errorf("the summary text %q is not on the page", first)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	// A link to an archived message opens it, read back from the archive.
	archived := -1
	for _, v := range e.srv.mustViews(t, id) {
		if v.State == ctxmgr.StateArchived {
			archived = v.Pos
			break
		}
	}
	shot := ""
	if os.Getenv("CTXMGR_UI_SHOTS") != "" {
		shot = filepath.Join(shots, "inspector-message.png")
	}
	dom = browse(t, bin, e.px.URL+"/ui/sessions/"+id+"#msg-"+strconv.Itoa(archived), shot, 6000)
	if !strings.Contains(dom, "Original, from the archive") || !strings.Contains(dom, "turn 0: run the build and check the module graph") {
		t.Errorf("the archived message %d did not open:\n%s", archived, dom)
	}
}

// mustViews returns the session's messages as the next request shows them.
func (s *Server) mustViews(t *testing.T, id string) []ctxmgr.MessageView {
	t.Helper()
	v, err := s.openView(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer v.release()
	return v.sess.Views()
}

// mustDetail returns the session's detail as the inspector serves it.
func (s *Server) mustDetail(t *testing.T, id string) *SessionDetail {
	t.Helper()
	d, err := s.detail(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Summary == nil {
		t.Fatal("the session has no summary")
	}
	return d
}

// fmtNum formats n as the pages do (en-US grouping).
func fmtNum(n int) string {
	s := []byte(strings.TrimSpace(itoa(n)))
	var out []byte
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	return string(out)
}
