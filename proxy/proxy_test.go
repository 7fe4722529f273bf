package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	openai "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestOpenAIClient drives the proxy with openai-go: tool calls, streaming and not; headers and
// unknown body fields reach the upstream unchanged.
func TestOpenAIClient(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	ctx := ctxT(t)
	a := newOpenAIAgent(e.px.URL, bigOutput(400),
		ooption.WithHeader("X-Custom", "custom-value"),
		ooption.WithHeader("OpenAI-Organization", "org-test"),
		ooption.WithJSONSet("x_unknown_field", map[string]any{"keep": []int{1, 2, 3}}),
		ooption.WithJSONSet("metadata", map[string]string{"trace": "t1"}))
	for i, stream := range []bool{false, true, false, true} {
		text, err := a.turn(ctx, fmt.Sprintf("turn %d: list the files in parallel", i), stream)
		if err != nil {
			t.Fatalf("turn %d (stream %v): %v", i, stream, err)
		}
		if !strings.HasPrefix(text, "Done: ") {
			t.Fatalf("turn %d: final answer %q", i, text)
		}
	}
	if len(a.called()) != 8 {
		t.Fatalf("calls %v: want 2 parallel calls a turn", a.called())
	}
	recs := e.fake.Records()
	checkRecords(t, recs, 200000)
	if len(recs) != 8 {
		t.Fatalf("upstream saw %d requests, want 8", len(recs))
	}
	for _, r := range recs {
		if r.Headers["Authorization"] != "Bearer sk-test-openai" || r.Headers["X-Custom"] != "custom-value" || r.Headers["Openai-Organization"] != "org-test" {
			t.Errorf("request %d headers %v", r.Seq, r.Headers)
		}
		if string(r.Extra["x_unknown_field"]) != `{"keep":[1,2,3]}` || string(r.Extra["metadata"]) != `{"trace":"t1"}` {
			t.Errorf("request %d lost unknown fields: %v", r.Seq, r.Extra)
		}
		if _, ok := r.Headers["X-Ctxmgr-Session"]; ok {
			t.Errorf("the session header leaked upstream")
		}
	}
	// The history grows append-only: each request has more messages than the one before.
	for i := 1; i < len(recs); i++ {
		if recs[i].Messages <= recs[i-1].Messages {
			t.Errorf("request %d has %d messages, previous %d", i, recs[i].Messages, recs[i-1].Messages)
		}
	}
}

// TestAnthropicClient drives the proxy with anthropic-sdk-go.
func TestAnthropicClient(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	ctx := ctxT(t)
	a := newAnthropicAgent(e.px.URL, bigOutput(400),
		aoption.WithHeader("anthropic-beta", "prompt-caching-2024-07-31"),
		aoption.WithHeader("x-api-key", "sk-ant-key"),
		aoption.WithHeader("X-Custom", "custom-value"),
		aoption.WithJSONSet("x_unknown_field", "kept"))
	a.meta = "user-42"
	for i, stream := range []bool{false, true, true, false} {
		text, err := a.turn(ctx, fmt.Sprintf("turn %d: run it in parallel", i), stream)
		if err != nil {
			t.Fatalf("turn %d (stream %v): %v", i, stream, err)
		}
		if !strings.HasPrefix(text, "Done: ") {
			t.Fatalf("turn %d: final answer %q", i, text)
		}
	}
	recs := e.fake.Records()
	checkRecords(t, recs, 200000)
	for _, r := range recs {
		// This SDK version sends its API key as a bearer token; x-api-key is set explicitly.
		if r.Headers["X-Api-Key"] != "sk-ant-key" || r.Headers["Authorization"] != "Bearer sk-ant-test" || r.Headers["Anthropic-Version"] == "" ||
			r.Headers["Anthropic-Beta"] != "prompt-caching-2024-07-31" || r.Headers["X-Custom"] != "custom-value" {
			t.Errorf("request %d headers %v", r.Seq, r.Headers)
		}
		if string(r.Extra["x_unknown_field"]) != `"kept"` || !strings.Contains(string(r.Extra["metadata"]), "user-42") {
			t.Errorf("request %d extras %v", r.Seq, r.Extra)
		}
	}
	// The session came from metadata.user_id; usage calibrated the heuristic for the model.
	if _, n := e.srv.Calibrator().Ratio("claude-sonnet-4-5"); n == 0 {
		t.Errorf("no usage observed for calibration")
	}
	e.srv.sessMu.Lock()
	_, ok := e.srv.sessions["user-user-42"]
	e.srv.sessMu.Unlock()
	if !ok {
		t.Errorf("session not keyed by metadata.user_id")
	}
}

// TestErrorPassthrough: upstream errors reach the client byte for byte, with their status and
// headers, in both formats.
func TestErrorPassthrough(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	cases := []struct {
		path, model, body string
		status            int
	}{
		{"/v1/chat/completions", "error-401", fakeupstream.OpenAI401, 401},
		{"/v1/chat/completions", "error-429", fakeupstream.OpenAI429, 429},
		{"/v1/messages", "error-401", fakeupstream.Anthropic401, 401},
		{"/v1/messages", "error-429", fakeupstream.Anthropic429, 429},
	}
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			body := fmt.Sprintf(`{"model":%q,"max_tokens":100,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, c.model, stream)
			req, _ := http.NewRequest("POST", e.px.URL+c.path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || string(got) != c.body {
				t.Errorf("%s %s: got %d %q, want %d %q", c.path, c.model, resp.StatusCode, got, c.status, c.body)
			}
			if c.status == 429 && resp.Header.Get("Retry-After") != "20" {
				t.Errorf("%s: Retry-After header lost", c.path)
			}
		}
	}
	// The SDKs see the provider's error as such.
	ctx := ctxT(t)
	oa := newOpenAIAgent(e.px.URL, bigOutput(10))
	oa.model = "error-429"
	_, err := oa.turn(ctx, "hi", false)
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != 429 || oerr.Code != "rate_limit_exceeded" {
		t.Errorf("openai-go error %v", err)
	}
	an := newAnthropicAgent(e.px.URL, bigOutput(10))
	an.model = "error-401"
	_, err = an.turn(ctx, "hi", true)
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != 401 {
		t.Errorf("anthropic-sdk-go error %v", err)
	}
}

// TestOverflowRecovery: the upstream rejects a request the proxy thought fit (its limit is
// below the configured window); the proxy compacts, retries, and the client sees a normal
// answer.
func TestOverflowRecovery(t *testing.T) {
	for _, format := range []Format{FormatOpenAI, FormatAnthropic} {
		t.Run(string(format), func(t *testing.T) {
			const limit = 9000
			e := newEnv(t, fakeupstream.Options{RejectAbove: limit}, Config{Window: 40000, Tune: smallTune})
			ctx := ctxT(t)
			var a agent
			if format == FormatOpenAI {
				a = newOpenAIAgent(e.px.URL, bigOutput(2500))
			} else {
				a = newAnthropicAgent(e.px.URL, bigOutput(2500))
			}
			buildTurns(ctx, t, a, 14)
			checkRecovered(t, e.fake.Records())
			_, metrics := get(t, e.px.URL+"/metrics")
			if !strings.Contains(metrics, "ctxmgr_recoveries_total") || strings.Contains(metrics, "ctxmgr_recoveries_total 0\n") {
				t.Errorf("recoveries not counted")
			}
		})
	}
}

func maxTokens(recs []fakeupstream.Record) int {
	m := 0
	for _, r := range recs {
		m = max(m, r.Tokens)
	}
	return m
}

// TestLongConversation: a history far larger than the window; every request the upstream
// receives fits and pairs its tool calls, in both formats, streaming and not.
func TestLongConversation(t *testing.T) {
	const window = 6000
	for _, format := range []Format{FormatOpenAI, FormatAnthropic} {
		t.Run(string(format), func(t *testing.T) {
			e := newEnv(t, fakeupstream.Options{Window: window}, Config{Window: window, Tune: smallTune})
			ctx := ctxT(t)
			var a agent
			if format == FormatOpenAI {
				a = newOpenAIAgent(e.px.URL, bigOutput(1800), ooption.WithHeader(SessionHeader, "long-"+string(format)))
			} else {
				a = newAnthropicAgent(e.px.URL, bigOutput(1800), aoption.WithHeader(SessionHeader, "long-"+string(format)))
			}
			for i := 0; i < 50; i++ {
				msg := fmt.Sprintf("turn %d: run the tests", i)
				if i%3 == 0 {
					msg += " in parallel"
				}
				if _, err := a.turn(ctx, msg, i%2 == 0); err != nil {
					t.Fatalf("turn %d: %v", i, err)
				}
			}
			recs := e.fake.Records()
			checkRecords(t, recs, window)
			for _, r := range recs {
				if r.Status != 200 {
					t.Errorf("request %d answered %d", r.Seq, r.Status)
				}
			}
			// The fake reports the exact o200k count of what it received, so where the proxy
			// counts exactly its estimate of every request sent must match (ratio 1).
			if n, sum := histogram(e.srv.metrics.usageRatio.WithLabelValues("exact")); format == FormatOpenAI && n == 0 || n > 0 && math.Abs(sum-float64(n)) > 1e-9*float64(n) {
				t.Errorf("usage ratio (exact): %d observations, sum %v", n, sum)
			}
			e.srv.sessMu.Lock()
			ps := e.srv.sessions["long-"+string(format)]
			e.srv.sessMu.Unlock()
			st := ps.sess.Stats()
			total := 0
			for _, m := range ps.sess.History() {
				total += e.fake.Count(&chat.Request{Messages: []chat.Message{m}})
			}
			if total < 5*window {
				t.Fatalf("history of %d tokens does not far exceed the window %d", total, window)
			}
			if st.Evicted == 0 || st.SummaryVersion == 0 {
				t.Errorf("no compaction: %+v", st)
			}
			// Nothing lost: every message is in the store.
			stored, err := e.store.Messages(ctx, ps.id, 0, -1)
			if err != nil || len(stored) != st.Total {
				t.Errorf("store holds %d messages (%v), session %d", len(stored), err, st.Total)
			}
		})
	}
}

// TestCommands: /compact, /context and /context clear are answered by the proxy in the
// client's format, streaming and not, without calling the upstream, and never enter the
// history.
func TestCommands(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{Window: 20000, Tune: smallTune})
	ctx := ctxT(t)
	oa := newOpenAIAgent(e.px.URL, bigOutput(1500), ooption.WithHeader(SessionHeader, "cmd-openai"))
	an := newAnthropicAgent(e.px.URL, bigOutput(1500), aoption.WithHeader(SessionHeader, "cmd-anthropic"))
	for _, a := range []agent{oa, an} {
		for i := 0; i < 8; i++ {
			if _, err := a.turn(ctx, fmt.Sprintf("turn %d: build it", i), false); err != nil {
				t.Fatal(err)
			}
		}
		for _, stream := range []bool{false, true} {
			n := len(e.fake.Records())
			out, err := a.turn(ctx, "/context", stream)
			if err != nil || !strings.Contains(out, "/context: session cmd-") || !strings.Contains(out, "of window 20000") {
				t.Fatalf("/context (stream %v): %q %v", stream, out, err)
			}
			out, err = a.turn(ctx, "/compact keep only the decisions", stream)
			if err != nil || !strings.Contains(out, "/compact") {
				t.Fatalf("/compact: %q %v", out, err)
			}
			if stream == false && !strings.Contains(out, "compacted ") {
				t.Fatalf("/compact compacted nothing: %q", out)
			}
			if got := len(e.fake.Records()); got != n {
				t.Fatalf("commands called the upstream (%d requests)", got-n)
			}
			if _, err := a.turn(ctx, "next: build it again", stream); err != nil {
				t.Fatal(err)
			}
			last := e.fake.Records()[len(e.fake.Records())-1]
			if last.Valid != "" {
				t.Fatalf("after commands: %s", last.Valid)
			}
		}
		out, err := a.turn(ctx, "/context clear", true)
		if err != nil || !strings.Contains(out, "/context clear") || !strings.Contains(out, "archived") {
			t.Fatalf("/context clear: %q %v", out, err)
		}
		n := len(e.fake.Records())
		if _, err := a.turn(ctx, "after the clear: no tools please", false); err != nil {
			t.Fatal(err)
		}
		recs := e.fake.Records()
		if len(recs) != n+1 || recs[n].Messages > 2 {
			t.Fatalf("after /context clear the upstream got %d messages", recs[n].Messages)
		}
	}
	// The command messages and the proxy's answers are not history.
	for _, id := range []string{"cmd-openai", "cmd-anthropic"} {
		msgs, _ := e.store.Messages(ctx, id, 0, -1)
		for _, m := range msgs {
			if strings.HasPrefix(m.Text(), "/co") || strings.HasPrefix(m.Text(), replyPrefix) {
				t.Fatalf("%s: command stored in history: %q", id, m.Text())
			}
		}
	}
	_, metrics := get(t, e.px.URL+"/metrics")
	for _, want := range []string{`ctxmgr_commands_total{command="compact"} 4`, `ctxmgr_commands_total{command="clear"} 2`, `ctxmgr_compactions_total{trigger="manual"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestBranch: a client that edits its history gets a new branch; the original session is
// untouched.
func TestBranch(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	ctx := ctxT(t)
	a := newOpenAIAgent(e.px.URL, bigOutput(200), ooption.WithHeader(SessionHeader, "br"))
	for i := 0; i < 3; i++ {
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	orig, _ := e.store.Messages(ctx, "br", 0, -1)
	// Rewind the last turn (user, assistant call, result, final) and say something else.
	a.dropLast(4)
	if _, err := a.turn(ctx, "an edited turn 2", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.turn(ctx, "turn 3 on the branch", true); err != nil {
		t.Fatal(err)
	}
	after, _ := e.store.Messages(ctx, "br", 0, -1)
	if len(after) != len(orig) {
		t.Fatalf("the original session changed: %d -> %d messages", len(orig), len(after))
	}
	infos, _ := e.store.Sessions(ctx)
	var branch string
	for _, s := range infos {
		if strings.HasPrefix(s.ID, "br+") {
			if branch != "" {
				t.Fatalf("two branches %s %s: the branch was not found again", branch, s.ID)
			}
			branch = s.ID
		}
	}
	if branch == "" {
		t.Fatalf("no branch in %v", infos)
	}
	msgs, _ := e.store.Messages(ctx, branch, 0, -1)
	if len(msgs) != len(orig)+4 {
		t.Fatalf("branch has %d messages, want %d", len(msgs), len(orig)+4)
	}
	checkRecords(t, e.fake.Records(), 200000)
}

// TestReplayedHistoryContinuesItsBranch: an agent run replayed under the same session key
// (a deterministic harness running a task again) sends, request after request, a history that
// is a prefix of the stored one, each longer than the last. Each was a rewind whose branch id
// names the whole history sent, so every request opened a new branch and stored the history
// again: the replay of n requests stored O(n^2) messages. It now goes on in the branch its
// first request opened, and once it departs from the first run, on in that branch too.
func TestReplayedHistoryContinuesItsBranch(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	ctx := ctxT(t)
	const n = 12
	send := func(k, other int) { sendReplayed(t, e, k, other) }
	stored := func() (sessions, msgs int) {
		t.Helper()
		infos, err := e.store.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range infos {
			m, _ := e.store.Messages(ctx, s.ID, 0, -1)
			msgs += len(m)
		}
		return len(infos), msgs
	}
	for k := 0; k < n; k++ {
		send(k, n+1)
	}
	_, first := stored()
	for k := 0; k < n-1; k++ { // the replay: each body a prefix of the stored history
		send(k, n+1)
	}
	sessions, all := stored()
	if sessions != 2 || all > 2*first {
		t.Fatalf("the replay of %d requests made %d sessions holding %d messages (the first run %d): a branch per request", n-1, sessions, all, first)
	}
	if v := counterValue(e.srv.metrics.branches); v != 1 {
		t.Fatalf("%v branches, want 1", v)
	}
	// The replay goes another way than the first run: on in its branch.
	send(n-1, n-1)
	sessions, all = stored()
	send(n, n-1)
	send(n+1, n-1)
	if s2, all2 := stored(); s2 != 2 || all2 > all+12 {
		t.Fatalf("after the replay diverged: %d sessions holding %d messages, then %d holding %d", sessions, all, s2, all2)
	}
	checkRecords(t, e.fake.Records(), 200000)
	checkNoneInUse(t, e.srv)
}

// TestInterleavedReplaysShareBranches: two replays of one run under the same key, one two
// requests ahead of the other, interleaved. Each request of the one behind finds the last
// branch taken ahead of it, not a prefix of its history; it goes on in a recent branch that
// is one rather than opening a branch per request, and the one ahead in the longest such
// branch (its own) rather than the most recent (which leaves the one behind none). Measured:
// a branch per request, 11 sessions holding 295 messages for a first run of 45; the most
// recent branch first, 5 sessions holding 157; the longest, 4 holding 120 (the two replays'
// branches, and one nested: the one behind's first request names the same branch as the one
// ahead's, which has moved on).
func TestInterleavedReplaysShareBranches(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	ctx := ctxT(t)
	const n = 12
	send := func(k int) { sendReplayed(t, e, k, n+1) }
	for k := 0; k < n; k++ {
		send(k)
	}
	first, err := e.store.Messages(ctx, "replay", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	// Replay A runs two requests ahead of replay B.
	send(0)
	send(1)
	for k := 2; k < n-1; k++ {
		send(k)     // A
		send(k - 2) // B
	}
	infos, err := e.store.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := 0
	for _, s := range infos {
		m, _ := e.store.Messages(ctx, s.ID, 0, -1)
		all += len(m)
	}
	if len(infos) > 4 || all > 3*len(first) {
		t.Fatalf("two interleaved replays of %d requests made %d sessions holding %d messages (the first run %d)", n-1, len(infos), all, len(first))
	}
	checkRecords(t, e.fake.Records(), 200000)
	checkNoneInUse(t, e.srv)
}

// sendReplayed sends request k of an agent run under the session key "replay": user messages
// 0..k, each earlier one answered by a tool call, its result and an answer; the user messages
// from other on say something else.
func sendReplayed(t *testing.T, e *env, k, other int) {
	t.Helper()
	out := bigOutput(400)
	var b strings.Builder
	b.WriteString(`{"model":"gpt-4o","tools":[{"type":"function","function":{"name":"run","parameters":{"type":"object"}}}],"messages":[{"role":"system","content":"You are a replayed agent."}`)
	for i := 0; i <= k; i++ {
		u := fmt.Sprintf("step %d", i)
		if i >= other {
			u = fmt.Sprintf("another step %d", i)
		}
		fmt.Fprintf(&b, `,{"role":"user","content":%s}`, jsonString(u))
		if i < k {
			fmt.Fprintf(&b, `,{"role":"assistant","tool_calls":[{"id":"c%d","type":"function","function":{"name":"run","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c%d","content":%s},{"role":"assistant","content":"done %d"}`, i, i, jsonString(out(i, 0)), i)
		}
	}
	b.WriteString(`]}`)
	if status, _, answer := postRaw(t, e.px.URL, "/v1/chat/completions", b.String(), SessionHeader, "replay"); status != 200 {
		t.Fatalf("request %d: %d %s", k, status, answer)
	}
}

// TestRestart: a new Server over the same store continues the session: the request after the
// restart starts exactly like the one before it (same summary, same kept messages).
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := files.Open(dir, files.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const window = 6000
	// The same conversation twice, over two stores: one proxy restarted before the last turn,
	// one not. The request after the restart must be the one the other proxy sends.
	run := func(st store.Store, restart bool) (before, after []json.RawMessage, summary bool) {
		e := newEnv(t, fakeupstream.Options{Window: window, KeepBodies: true, IDPrefix: "det"}, Config{Window: window, Store: st, Tune: smallTune})
		ctx := ctxT(t)
		// An OpenAI model: counted exactly. (A model counted by the calibrated heuristic learns
		// its ratio again after a restart, so its decisions may differ until it has.)
		a := newOpenAIAgent(e.px.URL, bigOutput(1500), ooption.WithHeader(SessionHeader, "restart"))
		// 70 turns: old results age out as that pays, and compaction masks down to the newest
		// result before it summarizes, so the first summary comes late.
		for i := 0; i < 70; i++ {
			if _, err := a.turn(ctx, fmt.Sprintf("turn %d: build", i), false); err != nil {
				t.Fatal(err)
			}
		}
		n := len(e.fake.Records())
		if restart {
			e.start() // restart the proxy over the same store
			a.client = newOpenAIAgent(e.px.URL, nil, ooption.WithHeader(SessionHeader, "restart")).client
		}
		if _, err := a.turn(ctx, "turn after restart: build", false); err != nil {
			t.Fatal(err)
		}
		recs := e.fake.Records()
		checkRecords(t, recs, window)
		before, after = msgsOf(t, recs[n-1].Body), msgsOf(t, recs[n].Body)
		for _, m := range before {
			summary = summary || strings.Contains(string(m), "ctxmgr: summary")
		}
		return before, after, summary
	}
	controlDir := t.TempDir()
	control, err := files.Open(controlDir, files.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, want, _ := run(control, false)
	_, got, summary := run(st, true)
	// The two stores are in different directories: the references the model reads name
	// stored content by a ref of its own, so the requests are the same to the byte.
	if len(got) != len(want) {
		t.Fatalf("after the restart the request has %d messages, without a restart %d", len(got), len(want))
	}
	for i := range want {
		if !jsonEqual(want[i], got[i]) {
			t.Fatalf("message %d differs from the request without a restart:\n%s\n%s", i, want[i], got[i])
		}
	}
	if !summary {
		t.Fatalf("no summary before the restart; the test proves little")
	}
}

func msgsOf(t *testing.T, body []byte) []json.RawMessage {
	var v struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v.Messages
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// TestReadTool: offloaded results stay readable: the proxy injects ctxmgr_read, answers the
// model's call itself, and the client never sees it; streaming and not, both formats.
func TestReadTool(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{Tune: smallTune})
	ctx := ctxT(t)
	for _, stream := range []bool{false, true} {
		oa := newOpenAIAgent(e.px.URL, bigOutput(6000), ooption.WithHeader(SessionHeader, fmt.Sprintf("read-oa-%v", stream)))
		an := newAnthropicAgent(e.px.URL, bigOutput(6000), aoption.WithHeader(SessionHeader, fmt.Sprintf("read-an-%v", stream)))
		for _, a := range []agent{oa, an} {
			if _, err := a.turn(ctx, "run the big command", stream); err != nil {
				t.Fatal(err)
			}
			n := len(e.fake.Records())
			out, err := a.turn(ctx, "now read back the full output", stream)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(out, "Read back: [ctxmgr_read") {
				t.Fatalf("stream %v: answer %q", stream, out)
			}
			for _, name := range a.called() {
				if name == readToolName {
					t.Fatalf("the client saw a ctxmgr_read call")
				}
			}
			recs := e.fake.Records()[n:]
			if len(recs) != 2 || recs[0].Reply != "ctxmgr_read" {
				t.Fatalf("want a ctxmgr_read call and a follow-up, got %+v", recs)
			}
			if !contains(recs[0].Tools, readToolName) {
				t.Fatalf("ctxmgr_read not offered: %v", recs[0].Tools)
			}
		}
	}
	// Each read-back was noted for the cost model's learning.
	for _, id := range []string{"read-oa-false", "read-an-true"} {
		e.srv.sessMu.Lock()
		ps := e.srv.sessions[id]
		e.srv.sessMu.Unlock()
		if ps == nil {
			t.Fatalf("no session %s", id)
		}
		if n := ps.sess.Stats().ReadBacks; n != 1 {
			t.Fatalf("session %s: %d read-backs noted, want 1", id, n)
		}
	}
	checkRecords(t, e.fake.Records(), 200000)
	// An agent (its client declares tools) is offered the tool from its first request on,
	// stored content or not, so the tool list never changes within a conversation.
	a := newOpenAIAgent(e.px.URL, bigOutput(100), ooption.WithHeader(SessionHeader, "read-first"))
	n := len(e.fake.Records())
	for _, q := range []string{"small", "again"} {
		if _, err := a.turn(ctx, q, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range e.fake.Records()[n:] {
		if !contains(r.Tools, readToolName) {
			t.Fatalf("ctxmgr_read not offered from the first request: %v", r.Tools)
		}
	}
	// A conversation without tools is never offered it.
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("hello there ", 3000) + `"}]}`
	if status, _, answer := postRaw(t, e.px.URL, "/v1/chat/completions", body); status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	recs := e.fake.Records()
	if len(recs[len(recs)-1].Tools) != 0 {
		t.Fatalf("a conversation without tools was offered %v", recs[len(recs)-1].Tools)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestEndpoints: /healthz, /v1/models pass-through, /metrics, the body size limit.
func TestEndpoints(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{MaxBodyBytes: 4096})
	if code, body := get(t, e.px.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("healthz %d %q", code, body)
	}
	resp, err := http.Get(e.px.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"gpt-4o"`) || resp.Header.Get("X-Fake-Upstream") != "models" {
		t.Errorf("models %d %s %v", resp.StatusCode, b, resp.Header)
	}
	big := fmt.Sprintf(`{"model":"gpt-4o","messages":[{"role":"user","content":%q}]}`, strings.Repeat("x", 5000))
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		resp, err := http.Post(e.px.URL+path, "application/json", strings.NewReader(big))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "request_too_large") {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	ctx := ctxT(t)
	a := newOpenAIAgent(e.px.URL, bigOutput(10))
	if _, err := a.turn(ctx, "hello, no tools", false); err != nil {
		t.Fatal(err)
	}
	// max_tokens larger than the window no longer makes a request unmanageable: it is
	// managed, and lowered to what fits.
	resp, err = http.Post(e.px.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o","max_tokens":250000,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"again"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || counterValue(e.srv.metrics.unmanaged.WithLabelValues("config")) != 0 ||
		resp.Header.Get(MaxTokensHeader) == "" || counterValue(e.srv.metrics.lowered) != 1 {
		t.Errorf("max_tokens above the window: %d, %s %q", resp.StatusCode, MaxTokensHeader, resp.Header.Get(MaxTokensHeader))
	}
	// GET /v1/models, the agent's turn and the max_tokens request.
	wants := []string{`ctxmgr_requests_total{format="openai",status="200"} 3`, `ctxmgr_unmanaged_requests_total{reason="path"} 1`, `ctxmgr_requests_total{format="openai",status="413"} 1`,
		"ctxmgr_upstream_seconds_bucket", "ctxmgr_tokens_before_bucket", "ctxmgr_tokens_after_bucket", "ctxmgr_prefix_kept_total 2",
		"ctxmgr_prefix_changed_total 0", "ctxmgr_compactions_total", "ctxmgr_summarizer_fallbacks_total 0", "ctxmgr_recoveries_total 0"}
	// The request counter is incremented when the handler returns, which can be just after
	// the client has read the whole response: poll until the counts settle.
	var code int
	var missing []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		var metrics string
		code, metrics = get(t, e.px.URL+"/metrics")
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, want := range missing {
		t.Errorf("metrics (%d) lack %q", code, want)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogs: one structured record per request with the session id; API keys never appear.
func TestLogs(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, fakeupstream.Options{RejectAbove: 6000}, Config{Logger: logger, Window: 20000, Tune: smallTune})
	ctx := ctxT(t)
	oa := newOpenAIAgent(e.px.URL, bigOutput(2500), ooption.WithHeader(SessionHeader, "logged"))
	an := newAnthropicAgent(e.px.URL, bigOutput(2500), aoption.WithHeader("x-api-key", "sk-ant-secret"))
	for i := 0; i < 6; i++ {
		if _, err := oa.turn(ctx, fmt.Sprintf("turn %d", i), i%2 == 0); err != nil {
			t.Fatal(err)
		}
		if _, err := an.turn(ctx, fmt.Sprintf("turn %d", i), i%2 == 1); err != nil {
			t.Fatal(err)
		}
	}
	// A handler logs its request after the client has the whole answer
	// (TestAnswerEndsBeforeHandler): wait for the last handlers' lines.
	want := len(e.fake.Records()) - countStatus(e.fake.Records(), 400)
	for deadline := time.Now().Add(10 * time.Second); strings.Count(buf.String(), `"msg":"proxy request"`) < want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	logs := buf.String()
	for _, secret := range []string{"sk-test-openai", "sk-ant-test", "sk-ant-secret"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("an API key was logged")
		}
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		if rec["msg"] == "proxy request" {
			n++
			if s, _ := rec["session"].(string); s == "" {
				t.Errorf("request log without session: %s", line)
			}
		}
	}
	if n != want {
		t.Errorf("%d request logs for %d requests", n, len(e.fake.Records()))
	}
	if countStatus(e.fake.Records(), 400) == 0 || !strings.Contains(logs, "retrying with a tighter request") {
		t.Errorf("no overflow recovery was logged")
	}
	if !strings.Contains(logs, `"session":"logged"`) {
		t.Errorf("the header session id is not logged")
	}
}

func countStatus(recs []fakeupstream.Record, status int) int {
	n := 0
	for _, r := range recs {
		if r.Status == status {
			n++
		}
	}
	return n
}

// TestSmallRealWindow: a local model the proxy does not know gets the default 200,000-token
// window, but the server behind it has 8,192. Its overflow errors state the limit; the proxy
// recovers, keeps the smaller window for the session, and the client sees only answers.
func TestSmallRealWindow(t *testing.T) {
	const window = 8192
	e := newEnv(t, fakeupstream.Options{Window: window}, Config{Tune: smallTune})
	ctx := ctxT(t)
	a := newOpenAIAgent(e.px.URL, bigOutput(1500), ooption.WithHeader(SessionHeader, "small-window"))
	a.model = "local-llama-3-8b"
	buildTurns(ctx, t, a, 24)
	recs := e.fake.Records()
	rejected := 0
	for _, r := range recs {
		if r.Status == 400 {
			rejected++
		}
	}
	if rejected == 0 {
		t.Fatalf("the upstream never overflowed (largest request %d tokens): the test proves nothing", maxTokens(recs))
	}
	// The window learned from the first overflows holds: later requests fit at once.
	if rejected > 3 {
		t.Errorf("%d of %d upstream requests were rejected: the smaller window was not kept", rejected, len(recs))
	}
	e.srv.sessMu.Lock()
	ps := e.srv.sessions["small-window"]
	e.srv.sessMu.Unlock()
	if w := ps.sess.Stats().Window; w > window {
		t.Errorf("window in force %d, above the server's %d", w, window)
	}
}

// buildTurns runs n turns asking for a build (streaming every other one) and fails unless
// each is answered normally.
func buildTurns(ctx context.Context, t *testing.T, a agent, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		text, err := a.turn(ctx, fmt.Sprintf("turn %d: run the build", i), i%2 == 1)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if !strings.HasPrefix(text, "Done: ") {
			t.Fatalf("turn %d: answer %q", i, text)
		}
	}
}
