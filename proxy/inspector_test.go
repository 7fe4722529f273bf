package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ooption "github.com/openai/openai-go/v3/option"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
)

// inspectorEnv drives a session through the proxy in a window small enough that tool
// results are masked or offloaded and the history is compacted, and returns the env and the
// session id.
func inspectorEnv(t *testing.T, cfg Config) (*env, string) {
	t.Helper()
	const window = 6000
	cfg.Window, cfg.Tune = window, smallTune
	e := newEnv(t, fakeupstream.Options{Window: window}, cfg)
	const id = "inspect-me"
	a := newOpenAIAgent(e.px.URL, bigOutput(1800), ooption.WithHeader(SessionHeader, id))
	ctx := ctxT(t)
	for i := 0; i < 16; i++ {
		// Long requests: the history outgrows what masking frees, and is compacted.
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d: run the build and check %s", i, strings.Repeat("the module graph, ", 40)), i%2 == 1); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	if _, err := a.turn(ctxT(t), "the last question: is the build green?", false); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, e, 34)
	return e, id
}

// waitRecords waits until the proxy has recorded n requests.
func waitRecords(t *testing.T, e *env, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.insp.rec.rev.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests recorded, want %d", e.srv.insp.rec.rev.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// getJSONAs GETs an inspector path and decodes its JSON into v; it returns the status.
func getJSONAs(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// TestInspectorJSON: the inspector's JSON says what the session holds and how it got there:
// listed with its model and client, the window by region, a compaction in the timeline with
// what it freed, the summary's versions and a diff, the messages as the next request shows
// them with archived ones read back from the archive, and the money.
func TestInspectorJSON(t *testing.T) {
	e, id := inspectorEnv(t, Config{UILoopback: true})
	base := e.px.URL + "/ui/api/sessions"

	var list struct{ Sessions []SessionRow }
	if code := getJSONAs(t, base+"?q=inspect", &list); code != 200 || len(list.Sessions) != 1 {
		t.Fatalf("list: %d %+v", code, list)
	}
	row := list.Sessions[0]
	if row.ID != id || !row.Live || row.Model == "" || !strings.HasPrefix(row.Client, "OpenAI/") || row.Requests != 34 || row.LastWindow != 6000 {
		t.Errorf("row %+v", row)
	}
	if row.Cost <= 0 || row.CostAll <= 0 || row.Saved != row.CostAll-row.Cost || !row.Estimated || row.Prices.Uncached != ctxmgr.PricesOpenAI.Uncached {
		t.Errorf("money %+v", row.Money)
	}
	if row.OverWindow == 0 {
		t.Errorf("no client request over the window of 6000: %+v", row.Money)
	}
	if getJSONAs(t, base+"?q=no-such-model", &list); len(list.Sessions) != 0 {
		t.Errorf("search matched %+v", list.Sessions)
	}

	var d SessionDetail
	if code := getJSONAs(t, base+"/"+id, &d); code != 200 {
		t.Fatalf("detail: %d", code)
	}
	w := d.Window
	if w.Window != 6000 || w.Input != w.System+w.Tools+w.Summary+w.History || w.Summary == 0 || w.History == 0 || w.MaxOutput == 0 {
		t.Errorf("window %+v", w)
	}
	if d.Summary == nil || d.Summary.Text == "" {
		t.Fatalf("no summary: %+v", d)
	}

	var tl Timeline
	getJSONAs(t, base+"/"+id+"/timeline", &tl)
	if len(tl.Requests) != 34 {
		t.Fatalf("%d requests in the timeline", len(tl.Requests))
	}
	compactions := 0
	for _, r := range tl.Requests {
		if r.Raw < r.Sent && r.Managed {
			t.Errorf("request %d: sent %d more than the client's %d", r.N, r.Sent, r.Raw)
		}
		for _, s := range r.Steps {
			if s.Step == ctxmgr.StepSummarize {
				compactions++
				if s.Freed <= 0 || s.Reason == "" {
					t.Errorf("compaction step %+v", s)
				}
			}
		}
	}
	if compactions == 0 {
		t.Errorf("no compaction in the timeline: %+v", tl.Requests)
	}
	// What a request shares with the one before it: all of it when the prefix was kept, less
	// when the pipeline rewrote what was sent.
	for i := 1; i < len(tl.Requests); i++ {
		r, prev := tl.Requests[i], tl.Requests[i-1]
		switch {
		case r.Kept > r.Sent:
			t.Errorf("request %d kept %d of %d", r.N, r.Kept, r.Sent)
		case !r.PrefixChanged && r.Kept != prev.Sent:
			t.Errorf("request %d kept %d of the previous %d, its prefix unchanged", r.N, r.Kept, prev.Sent)
		case r.PrefixChanged && r.Kept >= prev.Sent:
			t.Errorf("request %d kept %d of the previous %d, its prefix changed", r.N, r.Kept, prev.Sent)
		}
	}
	last := tl.Requests[len(tl.Requests)-1]
	if last.Raw <= last.Sent {
		t.Errorf("the last request sent %d of the client's %d", last.Sent, last.Raw)
	}

	var sums struct{ Versions []json.RawMessage }
	getJSONAs(t, base+"/"+id+"/summaries", &sums)
	if len(sums.Versions) == 0 {
		t.Fatal("no summary versions")
	}
	var diff struct {
		From, To int
		Lines    []DiffLine
	}
	if code := getJSONAs(t, base+"/"+id+"/summaries/diff?from=0&to=1", &diff); code != 200 || len(diff.Lines) == 0 || diff.Lines[0].Op != "+" {
		t.Errorf("diff v0..v1: %d %+v", code, diff)
	}
	if code := getJSONAs(t, base+"/"+id+"/summaries/diff?from=9", nil); code != 400 {
		t.Errorf("diff from a version that does not exist: %d", code)
	}

	var ms struct{ Messages []MessageRow }
	getJSONAs(t, base+"/"+id+"/messages", &ms)
	states := map[string]int{}
	archived := -1
	for _, m := range ms.Messages {
		states[m.State]++
		if m.State == ctxmgr.StateArchived && archived < 0 {
			archived = m.Pos
		}
	}
	if states[ctxmgr.StateArchived] == 0 || states["original"] == 0 {
		t.Errorf("message states %v", states)
	}
	latestUser := ""
	for _, m := range ms.Messages {
		if m.Role == "user" {
			latestUser = m.Text
		}
	}
	if latestUser != "the last question: is the build green?" {
		t.Errorf("the latest user message: %q", latestUser)
	}
	var full MessageFull
	if code := getJSONAs(t, base+"/"+id+"/messages/"+itoa(archived), &full); code != 200 || full.Original == "" {
		t.Errorf("archived message %d: %d %+v", archived, code, full)
	}
	offloaded := 0
	for _, m := range ms.Messages {
		if m.Ref == "" || m.State == ctxmgr.StateArchived {
			continue
		}
		offloaded++
		var off struct {
			Text       string
			TotalLines int `json:"total_lines"`
		}
		if code := getJSONAs(t, e.px.URL+"/ui/api/sessions/"+id+"/offloads/"+m.Ref, &off); code != 200 || !strings.Contains(off.Text, " line 0: ") || off.TotalLines < 10 {
			t.Errorf("offload %s: %d %+v", m.Ref, code, off)
		}
		var full MessageFull
		if getJSONAs(t, base+"/"+id+"/messages/"+itoa(m.Pos), &full); full.Offload != off.Text || len(full.Original) < len(full.Text) {
			t.Errorf("message %d opened: offload %d chars, original %d, view %d", m.Pos, len(full.Offload), len(full.Original), len(full.Text))
		}
		break
	}
	if offloaded == 0 {
		t.Errorf("no live message has a stored full text: %v", states)
	}
	// After a restart the session is no longer live: it is loaded from the store, the same.
	e.start()
	base = e.px.URL + "/ui/api/sessions"
	var again SessionDetail
	if code := getJSONAs(t, base+"/"+id, &again); code != 200 || again.Live || again.Window != d.Window || again.Summary.Version != d.Summary.Version {
		t.Errorf("after a restart: %d live %v window %+v (was %+v)", code, again.Live, again.Window, d.Window)
	}
	var ms2 struct{ Messages []MessageRow }
	getJSONAs(t, base+"/"+id+"/messages", &ms2)
	if fmt.Sprint(ms2.Messages) != fmt.Sprint(ms.Messages) {
		for i := range ms.Messages {
			if i < len(ms2.Messages) && fmt.Sprint(ms2.Messages[i]) != fmt.Sprint(ms.Messages[i]) {
				t.Errorf("after a restart message %d is %+v, was %+v", i, ms2.Messages[i], ms.Messages[i])
			}
		}
		t.Errorf("after a restart the messages differ (%d, were %d)", len(ms2.Messages), len(ms.Messages))
	}
	if getJSONAs(t, base+"/"+id+"/timeline", &tl); len(tl.Requests) != 34 {
		t.Errorf("after a restart: %d requests in the timeline", len(tl.Requests))
	}

	// A new request moves the revision the pages poll.
	var rev struct{ Rev int64 }
	getJSONAs(t, e.px.URL+"/ui/api/rev", &rev)
	a := newOpenAIAgent(e.px.URL, bigOutput(100), ooption.WithHeader(SessionHeader, "another"))
	if _, err := a.turn(ctxT(t), "hello", false); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, e, rev.Rev+1)
	if code := getJSONAs(t, base+"/"+id+"/messages/99999", nil); code != 404 {
		t.Errorf("a message past the end: %d", code)
	}
	if code := getJSONAs(t, base+"/nope", nil); code != 404 {
		t.Errorf("an unknown session: %d", code)
	}
	// The proxy's answers never carry what the client's requests held in headers.
	resp, err := http.Get(base + "/" + id)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Cache-Control") != "no-store" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("headers %v", resp.Header)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestInspectorSafety: without UILoopback and a token the inspector refuses everything;
// with a token every request must carry it (header or the cookie a ?token= sets); on
// loopback it answers only requests addressed to the loopback; it is read-only; nothing
// under /ui/ is ever passed upstream.
func TestInspectorSafety(t *testing.T) {
	do := func(h http.Handler, method, target string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	newSrv := func(cfg Config) http.Handler {
		cfg.UpstreamOpenAI, cfg.Logger = "http://127.0.0.1:1", quietLogger()
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s.Handler()
	}
	off := newSrv(Config{})
	for _, p := range []string{"/ui/", "/ui/sessions/x", "/ui/api/sessions", "/ui/api/rev", "/ui/assets/app.js", "/ui/whatever"} {
		if rec := do(off, "GET", "http://127.0.0.1:8088"+p, nil); rec.Code != http.StatusForbidden {
			t.Errorf("no loopback, no token: %s answered %d", p, rec.Code)
		}
	}

	lo := newSrv(Config{UILoopback: true})
	for _, host := range []string{"127.0.0.1:8088", "localhost:8088", "[::1]:8088"} {
		if rec := do(lo, "GET", "http://"+host+"/ui/", nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "ctxmgr inspector") {
			t.Errorf("loopback, Host %s: %d", host, rec.Code)
		}
	}
	if rec := do(lo, "GET", "http://evil.example:8088/ui/api/sessions", nil); rec.Code != http.StatusForbidden {
		t.Errorf("loopback listener, foreign Host: %d", rec.Code)
	}
	if rec := do(lo, "POST", "http://127.0.0.1:8088/ui/api/sessions", nil); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
	if rec := do(lo, "GET", "http://127.0.0.1:8088/ui/assets/", nil); rec.Code != http.StatusNotFound {
		t.Errorf("the assets' directory is listed: %d", rec.Code)
	}
	if rec := do(lo, "GET", "http://127.0.0.1:8088/ui/assets/app.js", nil); rec.Code != http.StatusOK || !strings.Contains(rec.Header().Get("Content-Type"), "javascript") {
		t.Errorf("app.js: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	if rec := do(lo, "GET", "http://127.0.0.1:8088/ui/nothing-here", nil); rec.Code != http.StatusNotFound {
		t.Errorf("an unknown inspector path: %d (never passed upstream)", rec.Code)
	}

	tok := newSrv(Config{UIToken: "t0ken"})
	if rec := do(tok, "GET", "http://10.0.0.5/ui/api/sessions", nil); rec.Code != http.StatusUnauthorized {
		t.Errorf("token set, none given: %d", rec.Code)
	}
	if rec := do(tok, "GET", "http://10.0.0.5/ui/api/sessions", map[string]string{"Authorization": "Bearer nope"}); rec.Code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", rec.Code)
	}
	if rec := do(tok, "GET", "http://10.0.0.5/ui/api/sessions", map[string]string{"Authorization": "Bearer t0ken"}); rec.Code != http.StatusOK {
		t.Errorf("bearer token: %d", rec.Code)
	}
	rec := do(tok, "GET", "http://10.0.0.5/ui/sessions/x?token=t0ken", nil)
	cookie := rec.Header().Get("Set-Cookie")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/sessions/x" || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("?token=: %d %v", rec.Code, rec.Header())
	}
	if rec := do(tok, "GET", "http://10.0.0.5/ui/api/rev", map[string]string{"Cookie": strings.Split(cookie, ";")[0]}); rec.Code != http.StatusOK {
		t.Errorf("cookie: %d", rec.Code)
	}
	if rec := do(tok, "GET", "http://10.0.0.5/ui/?token=bad", nil); rec.Code != http.StatusUnauthorized {
		t.Errorf("?token= wrong: %d", rec.Code)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8088": true, "localhost:1": true, "[::1]:80": true, "127.1.2.3:9": true,
		":8088": false, "0.0.0.0:8088": false, "[::]:80": false, "10.0.0.1:8088": false, "example.com:80": false} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

func TestDiffLines(t *testing.T) {
	got := diffLines("a\nb\nc", "a\nc\nd")
	want := []DiffLine{{"=", "a"}, {"-", "b"}, {"=", "c"}, {"+", "d"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("diff %v, want %v", got, want)
	}
	if got := diffLines("", "x\n\ny"); fmt.Sprint(got) != fmt.Sprint([]DiffLine{{"+", "x"}, {"+", ""}, {"+", "y"}}) {
		t.Errorf("from nothing: %v", got)
	}
}
