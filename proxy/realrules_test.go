package proxy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/wire"
)

// postRaw posts a body to the proxy and returns the status, the X-Ctxmgr-Max-Tokens header
// and the answer.
func postRaw(t *testing.T, url, path, body string, header ...string) (int, string, []byte) {
	t.Helper()
	resp, b := postJSON(t, url+path, body, header...)
	return resp.StatusCode, resp.Header.Get(MaxTokensHeader), b
}

// cacheControls counts the blocks with cache_control in a forwarded Anthropic body.
func cacheControls(t *testing.T, body []byte) int {
	t.Helper()
	return strings.Count(string(body), `"cache_control"`)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestAnthropicBreakpointsDoNotPileUp: four requests, each with two breakpoints (a system
// block and the last message), the breakpoint moving to the newest message every time, on a
// window small enough that the proxy rewrites the request. The real API refuses a fifth
// breakpoint; a proxy that kept the breakpoints of earlier requests would forward 2, 3, 4, 5.
func TestAnthropicBreakpointsDoNotPileUp(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true}, Config{Window: 16000})
	// 48 KB: above the cap of a read (cat) even when it would fit the window.
	big := strings.Repeat("line of a large tool output 0123456789\n", 48000/39)
	cc := `,"cache_control":{"type":"ephemeral"}`
	sys := `"system":[{"type":"text","text":"You are a coding agent."` + cc + `}]`
	tools := `"tools":[{"name":"bash","description":"run","input_schema":{"type":"object","properties":{"cmd":{"type":"string"}}}}]`
	user := `{"role":"user","content":[{"type":"text","text":"go"%s}]}`
	use1 := `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{"cmd":"cat big"}%s}]}`
	res1 := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":` + jsonString(big) + `%s}]}`
	use2 := `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"bash","input":{"cmd":"true"}%s}]}`
	res2 := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"ok"%s}]}`
	done := `{"role":"assistant","content":[{"type":"text","text":"done"%s}]}`
	next := `{"role":"user","content":[{"type":"text","text":"and now?"%s}]}`
	histories := [][]string{{user}, {user, use1, res1}, {user, use1, res1, use2, res2}, {user, use1, res1, use2, res2, done, next}}
	for i, h := range histories {
		msgs := make([]string, len(h))
		for j, m := range h {
			mark := ""
			if j == len(h)-1 {
				mark = cc
			}
			msgs[j] = fmt.Sprintf(m, mark)
		}
		body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"metadata":{"user_id":"bp"},` + sys + `,` + tools + `,"messages":[` + strings.Join(msgs, ",") + `]}`
		if n := cacheControls(t, []byte(body)); n != 2 {
			t.Fatalf("request %d: the client body has %d breakpoints", i, n)
		}
		status, _, answer := postRaw(t, e.px.URL, "/v1/messages", body)
		if status != 200 {
			t.Fatalf("request %d: %d %s", i, status, answer)
		}
	}
	recs := e.fake.Records()
	if len(recs) != len(histories) {
		t.Fatalf("%d upstream requests, want %d", len(recs), len(histories))
	}
	rewritten := false
	for i, r := range recs {
		if n := cacheControls(t, r.Body); n != 2 {
			t.Errorf("request %d forwarded with %d breakpoints, the client sent 2:\n%s", i, n, r.Body)
		}
		dec, err := wire.DecodeAnthropic(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		last := dec.Messages[len(dec.Messages)-1]
		if breakpointOf(&last) == nil {
			t.Errorf("request %d: the breakpoint is not on the last message", i)
		}
		if !strings.Contains(string(r.Body), jsonString(big)) && i > 0 {
			rewritten = true
		}
	}
	if !rewritten {
		t.Fatalf("the proxy never rewrote the history: the test proves nothing")
	}
	// The stored history carries no breakpoint into a later request.
	e.srv.sessMu.Lock()
	ps := e.srv.sessions["user-bp"]
	e.srv.sessMu.Unlock()
	if ps == nil {
		t.Fatal("no session user-bp")
	}
	for i, m := range ps.sess.History() {
		if breakpointOf(&m) != nil {
			t.Errorf("stored message %d keeps a breakpoint", i)
		}
	}
}

// TestPlaceBreakpoints: a breakpoint on an evicted message moves to the summary; one on a kept
// message stays on it; two on one message become one; never more than the room.
func TestPlaceBreakpoints(t *testing.T) {
	v := json.RawMessage(`{"type":"ephemeral"}`)
	text := func(role chat.Role, s string) chat.Message {
		m := chat.TextMessage(role, s)
		m.Wire = string(wire.Anthropic)
		return m
	}
	summary := chat.TextMessage(chat.RoleUser, "[ctxmgr: summary v1]")
	summary.Meta = map[string]string{"ctxmgr": "summary"}
	stale := text(chat.RoleAssistant, "stale breakpoint")
	stale.Content[0].Extra = map[string]json.RawMessage{cacheControl: v}
	// history 0..5; 0..2 evicted; request = [summary, h3, h4, h5]
	msgs := []chat.Message{summary, stale, text(chat.RoleUser, "h4"), text(chat.RoleAssistant, "h5")}
	rep := ctxmgr.Report{Evicted: 3, Pinned: -1}
	out := placeBreakpoints(msgs, rep, []breakpoint{{1, v}, {2, v}, {5, v}}, 4)
	has := func(m chat.Message) bool { return breakpointOf(&m) != nil }
	if !has(out[0]) || has(out[1]) || has(out[2]) || !has(out[3]) {
		t.Fatalf("breakpoints at %v %v %v %v; want on the summary and the last message only", has(out[0]), has(out[1]), has(out[2]), has(out[3]))
	}
	if has(msgs[0]) || !has(msgs[1]) {
		t.Fatalf("the prepared request's messages were modified in place")
	}
	b, err := wire.EncodeAnthropicMessages(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "cache_control"); n != 2 {
		t.Fatalf("%d breakpoints encoded: %s", n, b)
	}
	// Room for one: the latest wins.
	out = placeBreakpoints(msgs, rep, []breakpoint{{1, v}, {5, v}}, 1)
	if has(out[0]) || !has(out[3]) {
		t.Fatalf("with room for one, the latest breakpoint must stay")
	}
	// A tool result and a tool call take the breakpoint on their block.
	tr := chat.ToolResult("toolu_1", "bash", "ok", false)
	tr.Wire = string(wire.Anthropic)
	got, ok := withBreakpoint(tr, v)
	if !ok || breakpointOf(&got) == nil || breakpointOf(&tr) != nil {
		t.Fatalf("tool result: %v %s", ok, got.Extra["block."])
	}
	if stripped := stripBreakpoints(got); breakpointOf(&stripped) != nil || len(stripped.Extra) != 0 {
		t.Fatalf("strip left %v", stripped.Extra)
	}
}

// TestMidConversationSystem: Claude Code's system entries inside messages are managed and
// forwarded with their role.
func TestMidConversationSystem(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true}, Config{})
	body := `{"model":"claude-opus-4-7","max_tokens":1024,"system":"sys","messages":[{"role":"user","content":"hi"},{"role":"system","content":"The date is 2026-11-23."},{"role":"assistant","content":"hello"},{"role":"user","content":"again, no tools"}]}`
	status, _, answer := postRaw(t, e.px.URL, "/v1/messages", body, "anthropic-beta", "mid-conversation-system-2026-04-07")
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	if v := counterValue(e.srv.metrics.unmanaged.WithLabelValues("decode")); v != 0 {
		t.Fatalf("a request with a system message inside messages went unmanaged")
	}
	recs := e.fake.Records()
	if len(recs) != 1 || !strings.Contains(string(recs[0].Body), `{"role":"system","content":"The date is 2026-11-23."}`) {
		t.Fatalf("forwarded: %s", recs[0].Body)
	}
}

// TestMaxTokensLowered: a max_tokens at or above the window (Claude Code and @ai-sdk/anthropic
// send 64000) is managed, and lowered in the forwarded body when it does not fit.
func TestMaxTokensLowered(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{Window: 16000, KeepBodies: true}, Config{Window: 16000})
	var msgs []string
	for i := 0; i < 8; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%s},{"role":"assistant","content":"ok %d"}`,
			jsonString(fmt.Sprintf("message %d: %s", i, strings.Repeat("words and more words ", 60))), i))
	}
	body := `{"model":"claude-sonnet-4-5","max_tokens":64000,"messages":[` + strings.Join(msgs, ",") + `,{"role":"user","content":"go on, no tools"}]}`
	status, lowered, answer := postRaw(t, e.px.URL, "/v1/messages", body)
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	recs := e.fake.Records()
	if len(recs) != 1 {
		t.Fatalf("%d upstream requests", len(recs))
	}
	r := recs[0]
	if r.MaxTokens >= 64000 || r.MaxTokens < ReplyCap(16000) || r.Tokens+r.MaxTokens > 16000 {
		t.Fatalf("forwarded %d input + max_tokens %d in a 16000 window", r.Tokens, r.MaxTokens)
	}
	if lowered != fmt.Sprint(r.MaxTokens) {
		t.Fatalf("%s header %q, forwarded %d", MaxTokensHeader, lowered, r.MaxTokens)
	}
	if v := counterValue(e.srv.metrics.lowered); v != 1 {
		t.Fatalf("ctxmgr_max_tokens_lowered_total = %v", v)
	}
	for _, reason := range []string{"config", "decode", "does_not_fit", "history"} {
		if v := counterValue(e.srv.metrics.unmanaged.WithLabelValues(reason)); v != 0 {
			t.Fatalf("unmanaged (%s)", reason)
		}
	}
}

// TestNoMaxTokensSmallModel: an OpenAI request without max_tokens, default configuration, in
// front of an 8,192-token model: the reply reserve shrinks with the learned window, so the
// overflow is recovered instead of reaching the client.
func TestNoMaxTokensSmallModel(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{RejectAbove: 8192}, Config{})
	var msgs []string
	for i := 0; i < 60; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%s},{"role":"assistant","content":"ok %d"}`,
			jsonString(fmt.Sprintf("message %d: %s", i, strings.Repeat("several words of text ", 40))), i))
	}
	body := `{"model":"gpt-4o","messages":[` + strings.Join(msgs, ",") + `,{"role":"user","content":"go on, no tools"}]}`
	status, _, answer := postRaw(t, e.px.URL, "/v1/chat/completions", body)
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	recs := e.fake.Records()
	if countStatus(recs, 400) == 0 {
		t.Fatalf("the upstream never refused: the test proves nothing (largest %d tokens)", maxTokens(recs))
	}
	if last := recs[len(recs)-1]; last.Status != 200 || last.Tokens > 8192 {
		t.Fatalf("last upstream request: status %d, %d tokens", last.Status, last.Tokens)
	}
}

// TestSideRequestsDoNotFork: a client that starts a run with small side requests under the
// same metadata.user_id (Claude Code: a quota check, a title) keeps one whole session for its
// main conversation, with no branch, across a restart; a real rewind still branches.
func TestSideRequestsDoNotFork(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	ctx := ctxT(t)
	side := func(text string, extra string) {
		t.Helper()
		body := `{"model":"claude-haiku-4-5","max_tokens":1,"metadata":{"user_id":"cc-run"},"messages":[{"role":"user","content":` + jsonString(text) + `}` + extra + `]}`
		if status, _, answer := postRaw(t, e.px.URL, "/v1/messages", body); status != 200 {
			t.Fatalf("side request: %d %s", status, answer)
		}
	}
	side("quota", "")
	if v := counterValue(e.srv.metrics.unmanaged.WithLabelValues(ReasonSingleMessage)); v != 1 {
		t.Fatalf("single_message counted %v times", v)
	}
	a := newAnthropicAgent(e.px.URL, bigOutput(300))
	a.meta = "cc-run"
	for i := 0; i < 6; i++ {
		if i == 2 {
			// A side request with a history of its own (a client summarizing for itself).
			side("Write a 5-word title for: fix the bug", `,{"role":"assistant","content":"Title:"},{"role":"user","content":"again, no tools"}`)
		}
		if i == 4 {
			e.start() // a restart: the family is found again from the ids alone
			b := newAnthropicAgent(e.px.URL, bigOutput(300))
			a.client = b.client
		}
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d", i), i%2 == 1); err != nil {
			t.Fatal(err)
		}
	}
	if v := counterValue(e.srv.metrics.branches); v != 0 {
		t.Fatalf("%v branches", v)
	}
	infos, err := e.store.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	main := ""
	for _, s := range infos {
		msgs, _ := e.store.Messages(ctx, s.ID, 0, -1)
		if len(msgs) > 10 {
			if main != "" {
				t.Fatalf("the main conversation is split: %s and %s", main, s.ID)
			}
			main = s.ID
		}
		if msgs, _ := e.store.Messages(ctx, s.ID, 0, -1); len(msgs) > 0 && msgs[0].Text() == "quota" {
			t.Fatalf("the single-message side request was stored as session %s", s.ID)
		}
	}
	msgs, _ := e.store.Messages(ctx, main, 0, -1)
	// The last answer is stored when the client sends it back with its next request.
	if main == "" || len(msgs) != len(a.msgs)-1 {
		t.Fatalf("main session %q holds %d messages, the client sent %d (sessions %v)", main, len(msgs), len(a.msgs)-1, infos)
	}
	// A real edit: the last turn rewound and replaced.
	a.dropLast(4)
	if _, err := a.turn(ctx, "an edited turn", false); err != nil {
		t.Fatal(err)
	}
	if v := counterValue(e.srv.metrics.branches); v != 1 {
		t.Fatalf("a rewind made %v branches, want 1", v)
	}
}

// TestCountTokens: for a known session, /v1/messages/count_tokens answers with the tokens of
// the request the proxy would forward (far below the client's whole history); an unknown
// history goes to the provider.
func TestCountTokens(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{Window: 16000})
	ctx := ctxT(t)
	a := newAnthropicAgent(e.px.URL, bigOutput(20000))
	a.meta = "count"
	for i := 0; i < 4; i++ {
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := json.Marshal(a.msgs)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"claude-sonnet-4-5","metadata":{"user_id":"count"},"system":"You are a coding agent under test. Use the tools.","messages":` + string(msgs) + `}`
	status, _, answer := postRaw(t, e.px.URL, "/v1/messages/count_tokens", body)
	var got struct {
		InputTokens int `json:"input_tokens"`
	}
	if status != 200 || json.Unmarshal(answer, &got) != nil || got.InputTokens <= 0 {
		t.Fatalf("%d %s", status, answer)
	}
	req, err := wire.DecodeAnthropic([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	whole := e.fake.Count(req)
	if got.InputTokens >= whole || got.InputTokens > 16000 {
		t.Fatalf("count_tokens says %d for a history of %d tokens behind a 16000 window", got.InputTokens, whole)
	}
	before := len(e.fake.Records())
	unknown := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"never seen"}]}`
	if status, _, answer := postRaw(t, e.px.URL, "/v1/messages/count_tokens", unknown); status == 200 && strings.Contains(string(answer), "input_tokens") && len(e.fake.Records()) == before {
		t.Fatalf("an unknown history was answered by the proxy: %s", answer)
	}
	checkNoneInUse(t, e.srv)
}

// TestUnchangedForwardedVerbatim: a request the pipeline leaves as it is goes upstream as the
// client's own bytes, in every format, also for a model counted by a calibrated estimate
// (Claude: no exact tokenizer; each region's count is scaled and rounded up, and a total
// counted another way differed by a few tokens, so every Claude request was re-encoded).
func TestUnchangedForwardedVerbatim(t *testing.T) {
	cc := `,"cache_control":{"type":"ephemeral"}`
	cases := []struct {
		path  string
		turns func(n int) string
	}{
		{"/v1/messages", func(n int) string {
			var msgs []string
			for i := 0; i < n; i++ {
				msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"step %d: what next?"}]}`, i),
					fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%d","name":"bash","input":{"cmd":"ls %d"}}]}`, i, i),
					fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":"a.go b.go %d"}]}`, i, i))
			}
			msgs = append(msgs, `{"role":"user","content":[{"type":"text","text":"go on"`+cc+`}]}`)
			return `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"You are a coding agent."` + cc + `}],` +
				`"tools":[{"name":"bash","description":"run","input_schema":{"type":"object","properties":{"cmd":{"type":"string"}}}}],"messages":[` + strings.Join(msgs, ",") + `]}`
		}},
		{"/v1/chat/completions", func(n int) string {
			msgs := []string{`{"role":"system","content":"You are a coding agent."}`}
			for i := 0; i < n; i++ {
				msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"step %d: what next?"}`, i),
					fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"ls %d\"}"}}]}`, i, i),
					fmt.Sprintf(`{"role":"tool","tool_call_id":"call_%d","content":"a.go b.go %d"}`, i, i))
			}
			msgs = append(msgs, `{"role":"user","content":"go on"}`)
			return `{"model":"gpt-4o","tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}}],"messages":[` + strings.Join(msgs, ",") + `]}`
		}},
		{"/v1/responses", func(n int) string {
			var items []string
			for i := 0; i < n; i++ {
				items = append(items, fmt.Sprintf(`{"type":"message","role":"user","content":[{"type":"input_text","text":"step %d: what next?"}]}`, i),
					fmt.Sprintf(`{"type":"function_call","call_id":"call_%d","name":"shell","arguments":"{\"cmd\":\"ls %d\"}"}`, i, i),
					fmt.Sprintf(`{"type":"function_call_output","call_id":"call_%d","output":"a.go b.go %d"}`, i, i))
			}
			items = append(items, `{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}`)
			return `{"model":"gpt-5-codex","instructions":"You are Codex.","store":false,"tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}],"input":[` + strings.Join(items, ",") + `]}`
		}},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.path, "/v1/"), func(t *testing.T) {
			e := newEnv(t, fakeupstream.Options{KeepBodies: true}, Config{DisableReadTool: true})
			for n := 1; n <= 4; n++ {
				body := c.turns(n)
				if status, _, answer := postRaw(t, e.px.URL, c.path, body); status != 200 {
					t.Fatalf("request %d: %d %s", n, status, answer)
				}
				recs := e.fake.Records()
				if got := string(recs[len(recs)-1].Body); got != body {
					t.Fatalf("request %d was not forwarded verbatim:\nsent %s\ngot  %s", n, body, got)
				}
			}
			if got := counterSum(e.srv.metrics.verbatim); got != 4 {
				t.Fatalf("ctxmgr_verbatim_requests_total = %v, want 4", got)
			}
		})
		// With the read tool (the default), every request of the conversation, from the
		// first, is the client's with ctxmgr_read appended to its tools, and nothing else
		// changed: the tool list is the same for the whole conversation.
		t.Run(strings.TrimPrefix(c.path, "/v1/")+"/read-tool", func(t *testing.T) {
			e := newEnv(t, fakeupstream.Options{KeepBodies: true}, Config{})
			for n := 1; n <= 4; n++ {
				body := c.turns(n)
				if status, _, answer := postRaw(t, e.px.URL, c.path, body); status != 200 {
					t.Fatalf("request %d: %d %s", n, status, answer)
				}
				recs := e.fake.Records()
				var sent, got map[string]any
				if err := json.Unmarshal([]byte(body), &sent); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(recs[len(recs)-1].Body, &got); err != nil {
					t.Fatal(err)
				}
				tools, _ := got["tools"].([]any)
				if len(tools) != 2 || !strings.Contains(fmt.Sprint(tools[1]), readToolName) {
					t.Fatalf("request %d: tools %v, want the client's and %s", n, tools, readToolName)
				}
				got["tools"] = tools[:1]
				if !reflect.DeepEqual(sent, got) {
					t.Fatalf("request %d changed beyond the read tool:\nsent %s\ngot  %s", n, body, recs[len(recs)-1].Body)
				}
			}
		})
	}
}
