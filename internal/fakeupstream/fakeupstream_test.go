package fakeupstream

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/wire"
)

// post sends body to the fake and returns the status, the answer and the request's record.
func post(t *testing.T, s *Server, path, body string, hdr ...string) (int, string, Record) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	recs := s.Records()
	if len(recs) == 0 {
		t.Fatalf("no record for %s", body)
	}
	return w.Code, w.Body.String(), recs[len(recs)-1]
}

// cc is a cache_control field.
const cc = `,"cache_control":{"type":"ephemeral"}`

// breakpointBody is an Anthropic request with n blocks with cache_control, spread over system,
// tools, message blocks and a tool_result's content.
func breakpointBody(n int) string {
	mark := func(i int) string {
		if i < n {
			return cc
		}
		return ""
	}
	return `{"model":"claude-sonnet-4-5","max_tokens":100,` +
		`"system":[{"type":"text","text":"You are terse."` + mark(0) + `}],` +
		`"tools":[{"name":"bash","description":"run","input_schema":{"type":"object"}` + mark(1) + `}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"go"` + mark(2) + `}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"out"` + mark(3) + `}]` + mark(4) + `},` +
		`{"type":"text","text":"and now?"` + mark(5) + `}]}]}`
}

func TestAnthropicCacheControlLimit(t *testing.T) {
	s := New(Options{})
	for n := 0; n <= 6; n++ {
		status, body, rec := post(t, s, "/v1/messages", breakpointBody(n))
		if rec.Breakpoints != n {
			t.Errorf("%d breakpoints: recorded %d", n, rec.Breakpoints)
		}
		if n <= MaxCacheControl {
			if status != 200 || rec.Rule != "" || rec.Valid != "" {
				t.Errorf("%d breakpoints: %d %s (rule %q)", n, status, body, rec.Rule)
			}
			continue
		}
		want := fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":"A maximum of 4 blocks with cache_control may be provided. Found %d."},"request_id":"req_fake"}`, n)
		if status != 400 || body != want {
			t.Errorf("%d breakpoints: %d %s, want 400 %s", n, status, body, want)
		}
		if rec.Rule != RuleCacheControl || rec.Valid == "" || rec.Status != 400 {
			t.Errorf("%d breakpoints: record %+v", n, rec)
		}
	}
}

// anthropicCase is one request and what the fake must answer.
type anthropicCase struct {
	name string
	body string
	rule string // "" : accepted
	msg  string // exact error message when refused
}

func runAnthropic(t *testing.T, s *Server, cases []anthropicCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, rec := post(t, s, "/v1/messages?beta=true", c.body, "Anthropic-Beta", "mid-conversation-system-2026-04-07,context-management-2025-06-27")
			if c.rule == "" {
				if status != 200 || rec.Rule != "" || rec.Valid != "" {
					t.Fatalf("refused: %d %s (record %+v)", status, body, rec)
				}
				return
			}
			if status != 400 || rec.Rule != c.rule {
				t.Fatalf("got %d rule %q %s, want 400 rule %q", status, rec.Rule, body, c.rule)
			}
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("error body %s: %v", body, err)
			}
			if e.Type != "error" || e.Error.Type != "invalid_request_error" || e.Error.Message != c.msg {
				t.Fatalf("error body %s\nwant message %s", body, c.msg)
			}
			if c.rule != RuleWindow && rec.Valid != c.msg {
				t.Fatalf("Valid = %q, want the message", rec.Valid)
			}
		})
	}
}

func anth(msgs string) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":200,"tools":[{"name":"bash","input_schema":{"type":"object"}}],"messages":[` + msgs + `]}`
}

const (
	uGo      = `{"role":"user","content":"go"}`
	aUse1    = `{"role":"assistant","content":[{"type":"text","text":"Let me run that."},{"type":"tool_use","id":"toolu_1","name":"bash","input":{"cmd":"ls"}}]}`
	aUse12   = `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{}},{"type":"tool_use","id":"toolu_2","name":"bash","input":{}}]}`
	uRes1    = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.go"}]}`
	uRes2    = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"b.go"}]}`
	uRes21   = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"b"},{"type":"tool_result","tool_use_id":"toolu_1","content":"a","is_error":true},{"type":"text","text":"go on"}]}`
	aDone    = `{"role":"assistant","content":"done"}`
	uMore    = `{"role":"user","content":"and now?"}`
	sysEntry = `{"role":"system","content":"The user changed directory to /tmp."}`
)

// TestRecordJSON: the log line the e2e script reads names the broken rule.
func TestRecordJSON(t *testing.T) {
	var log strings.Builder
	s := New(Options{Log: &log})
	post(t, s, "/v1/messages", breakpointBody(5))
	post(t, s, "/v1/messages", breakpointBody(1))
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log %q", log.String())
	}
	var bad, good map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &bad)
	_ = json.Unmarshal([]byte(lines[1]), &good)
	if bad["rule"] != RuleCacheControl || bad["valid"] != "A maximum of 4 blocks with cache_control may be provided. Found 5." || bad["breakpoints"] != 5.0 || bad["status"] != 400.0 {
		t.Fatalf("refused: %s", lines[0])
	}
	if _, ok := good["rule"]; ok || good["valid"] != nil || good["status"] != 200.0 {
		t.Fatalf("answered: %s", lines[1])
	}
}

func TestAnthropicRules(t *testing.T) {
	s := New(Options{})
	runAnthropic(t, s, []anthropicCase{
		{name: "plain", body: anth(uGo)},
		{name: "tool loop", body: anth(uGo + "," + aUse1 + "," + uRes1 + "," + aDone + "," + uMore)},
		{name: "parallel results in any order then text", body: anth(uGo + "," + aUse12 + "," + uRes21)},
		{name: "max_tokens missing", body: `{"model":"m","messages":[` + uGo + `]}`, rule: RuleMaxTokens, msg: "max_tokens: Field required"},
		{name: "max_tokens zero", body: `{"model":"m","max_tokens":0,"messages":[` + uGo + `]}`, rule: RuleMaxTokens, msg: "max_tokens: Input should be greater than or equal to 1"},
		{name: "not json", body: `{"model":`, rule: RuleParse, msg: "There was an error parsing the body of your request: unexpected end of JSON input"},
		{name: "messages missing", body: `{"model":"m","max_tokens":5}`, rule: RuleParse, msg: "messages: Field required"},
		{name: "content a number", body: anth(`{"role":"user","content":5}`), rule: RuleParse, msg: "messages.0.content: Input should be a valid list"},
		{name: "block without type", body: anth(`{"role":"user","content":[{"text":"x"}]}`), rule: RuleParse, msg: "messages.0.content.0.type: Field required"},
		{name: "role tool", body: anth(uGo + `,{"role":"tool","content":"x"}`), rule: RuleRole, msg: "messages.1.role: Input should be 'user', 'assistant' or 'system'"},
		{name: "mid-conversation system", body: anth(uGo + "," + aDone + "," + sysEntry + "," + uMore)},
		{name: "system entry last", body: anth(uGo + "," + sysEntry)},
		{name: "system entry inside a tool loop", body: anth(uGo + "," + aUse1 + "," + sysEntry + "," + uRes1)},
		{name: "consecutive user turns merge", body: anth(uGo + "," + uMore)},
		{name: "results then a separate user text merge", body: anth(uGo + "," + aUse1 + "," + uRes1 + "," + uMore)},
		{name: "final assistant prefill with tool_use", body: anth(uGo + "," + aUse1)},
		{name: "tool_use unanswered", body: anth(uGo + "," + aUse1 + "," + uMore),
			rule: RuleToolPairing, msg: "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{name: "one of two unanswered", body: anth(uGo + "," + aUse12 + "," + uRes2),
			rule: RuleToolPairing, msg: "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{name: "text before the results", body: anth(uGo + "," + aUse1 + `,{"role":"user","content":[{"type":"text","text":"here"},{"type":"tool_result","tool_use_id":"toolu_1","content":"a"}]}`),
			rule: RuleToolPairing, msg: "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{name: "result a turn late", body: anth(uGo + "," + aUse1 + "," + uMore + "," + aDone + "," + uRes1),
			rule: RuleToolPairing, msg: "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{name: "orphan result", body: anth(uGo + "," + aDone + "," + uRes1),
			rule: RuleToolPairing, msg: "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."},
		{name: "result for a call two turns back", body: anth(uGo + "," + aUse1 + "," + uRes1 + "," + aDone + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"again"}]}`),
			rule: RuleToolPairing, msg: "messages.4.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."},
		{name: "content missing", body: anth(`{"role":"user"}`), rule: RuleParse, msg: "messages.0.content: Field required"},
		{name: "empty string content", body: anth(uGo + `,{"role":"assistant","content":""},` + uMore), rule: RuleEmpty,
			msg: "messages.1: all messages must have non-empty content except for the optional final assistant message"},
		{name: "empty list content", body: anth(`{"role":"user","content":[]}`), rule: RuleEmpty,
			msg: "messages.0: all messages must have non-empty content except for the optional final assistant message"},
		{name: "empty final assistant prefill", body: anth(uGo + `,{"role":"assistant","content":""}`)},
		{name: "empty text block", body: anth(uGo + `,{"role":"assistant","content":[{"type":"text","text":""},{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}]},` + uRes1),
			rule: RuleEmpty, msg: "messages: text content blocks must be non-empty"},
		{name: "server tool result without its use", body: anth(uGo + `,{"role":"assistant","content":[{"type":"web_search_tool_result","tool_use_id":"srvtoolu_9","content":[]},{"type":"text","text":"found"}]},` + uMore),
			rule: RuleToolPairing, msg: "messages.1.content.0: unexpected `tool_use_id` found in `web_search_tool_result` blocks: srvtoolu_9. Each `web_search_tool_result` block must have a corresponding `server_tool_use` block before it."},
		{name: "five breakpoints", body: breakpointBody(5), rule: RuleCacheControl, msg: "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{name: "foreign thinking signature", body: anth(uGo + `,{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDdAJm"},{"type":"text","text":"hi"}]},` + uMore),
			rule: RuleSignature, msg: "messages.1.content.0: Invalid `signature` in `thinking` block"},
		{name: "thinking without signature", body: anth(uGo + `,{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"}]},` + uMore),
			rule: RuleSignature, msg: "messages.1.content.0.thinking.signature: Field required"},
		{name: "foreign redacted thinking", body: anth(uGo + `,{"role":"assistant","content":[{"type":"redacted_thinking","data":"RXFRQkNnSVlBaElN"}]},` + uMore),
			rule: RuleSignature, msg: "messages.1.content.0: Invalid `data` in `redacted_thinking` block"},
	})
}

// TestAnthropicAcceptsWhatTheAPIAccepts: the fields and blocks real clients send.
func TestAnthropicAcceptsWhatTheAPIAccepts(t *testing.T) {
	s := New(Options{})
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	body := `{"model":"claude-opus-4-1","max_tokens":64000,"stream":false,
 "metadata":{"user_id":"user_abc_account_x_session_y"},
 "context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},
 "thinking":{"type":"adaptive"},
 "system":[{"type":"text","text":"You are Claude Code."` + cc + `}],
 "tools":[{"name":"Bash","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search","max_uses":3}],
 "messages":[
  {"role":"user","content":[
    {"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}},
    {"type":"document","source":{"type":"text","media_type":"text/plain","data":"The grass is green."},"title":"doc","citations":{"enabled":true}},
    {"type":"text","text":"what colour?"}]},
  {"role":"assistant","content":[
    {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"grass"}},
    {"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://example.com","title":"Grass","encrypted_content":"abc","page_age":null}]},
    {"type":"text","text":"Green.","citations":[{"type":"char_location","cited_text":"The grass is green.","document_index":0,"document_title":"doc","start_char_index":0,"end_char_index":19}]}]},
  {"role":"system","content":[{"type":"text","text":"Reminder: be brief."}]},
  {"role":"user","content":[{"type":"text","text":"thanks, no tools"` + cc + `}]}]}`
	status, out, rec := post(t, s, "/v1/messages?beta=true", body, "Anthropic-Beta", "claude-code-20250219,interleaved-thinking-2025-05-14,mid-conversation-system-2026-04-07")
	if status != 200 || rec.Valid != "" || rec.Rule != "" {
		t.Fatalf("refused: %d %s", status, out)
	}
	if rec.Breakpoints != 2 || rec.Thinking != "adaptive" || rec.MaxTokens != 64000 || rec.Headers["Anthropic-Beta"] == "" {
		t.Fatalf("record %+v", rec)
	}
	// Counted and modelled although package wire may not know system entries: 4 messages.
	if rec.Tokens < 50 || rec.Messages != 4 {
		t.Fatalf("tokens %d, messages %d", rec.Tokens, rec.Messages)
	}
	if _, ok := rec.Extra["context_management"]; !ok {
		t.Fatalf("extra %v", rec.Extra)
	}
	// The reply answers the last user text, not the system entry after it.
	if !strings.Contains(out, `"Echo: thanks, no tools"`) {
		t.Fatalf("reply %s", out)
	}
}

// thinkingReply sends a request and returns the assistant content blocks of the answer.
func thinkingReply(t *testing.T, s *Server, body string, stream bool) []json.RawMessage {
	t.Helper()
	if stream {
		body = strings.Replace(body, `{"model"`, `{"stream":true,"model"`, 1)
	}
	status, out, _ := post(t, s, "/v1/messages", body)
	if status != 200 {
		t.Fatalf("%d %s", status, out)
	}
	if !stream {
		var m struct {
			Content []json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		return m.Content
	}
	// Reassemble the streamed blocks as an SDK does.
	type block map[string]any
	var blocks []block
	partial := map[int]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type         string         `json:"type"`
			Index        int            `json:"index"`
			ContentBlock block          `json:"content_block"`
			Delta        map[string]any `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "content_block_start":
			blocks = append(blocks, ev.ContentBlock)
		case "content_block_delta":
			b := blocks[ev.Index]
			switch ev.Delta["type"] {
			case "thinking_delta":
				b["thinking"] = b["thinking"].(string) + ev.Delta["thinking"].(string)
			case "signature_delta":
				b["signature"] = ev.Delta["signature"]
			case "text_delta":
				b["text"] = b["text"].(string) + ev.Delta["text"].(string)
			case "input_json_delta":
				partial[ev.Index] += ev.Delta["partial_json"].(string)
			}
		}
	}
	var outBlocks []json.RawMessage
	for i, b := range blocks {
		if p, ok := partial[i]; ok {
			b["input"] = json.RawMessage(p)
		}
		raw, _ := json.Marshal(b)
		outBlocks = append(outBlocks, raw)
	}
	return outBlocks
}

func TestAnthropicThinkingRoundTrip(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			s := New(Options{Thinking: true})
			req := func(msgs ...string) string {
				return `{"model":"claude-sonnet-4-5","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"tools":[{"name":"bash","input_schema":{"type":"object"}}],"messages":[` + strings.Join(msgs, ",") + `]}`
			}
			first := `{"role":"user","content":"list the files, redacted too"}`
			blocks := thinkingReply(t, s, req(first), stream)
			if len(blocks) != 4 {
				t.Fatalf("blocks %s", blocks)
			}
			var types []string
			var useID string
			for _, b := range blocks {
				var x struct{ Type, ID string }
				_ = json.Unmarshal(b, &x)
				types = append(types, x.Type)
				if x.Type == "tool_use" {
					useID = x.ID
				}
			}
			if strings.Join(types, ",") != "thinking,redacted_thinking,text,tool_use" {
				t.Fatalf("types %v", types)
			}
			asst, _ := json.Marshal(map[string]any{"role": "assistant", "content": blocks})
			result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + useID + `","content":"a.go"}]}`
			// Sent back verbatim: accepted.
			if status, out, rec := post(t, s, "/v1/messages", req(first, string(asst), result)); status != 200 {
				t.Fatalf("verbatim thinking refused: %d %s %+v", status, out, rec)
			}
			// Altered text, altered signature, altered redacted data: refused.
			alter := func(i int, field, to string) string {
				var b map[string]any
				_ = json.Unmarshal(blocks[i], &b)
				b[field] = to
				c := append([]json.RawMessage(nil), blocks...)
				c[i], _ = json.Marshal(b)
				a, _ := json.Marshal(map[string]any{"role": "assistant", "content": c})
				return req(first, string(a), result)
			}
			var sig string
			var th map[string]any
			_ = json.Unmarshal(blocks[0], &th)
			sig = th["signature"].(string)
			for name, body := range map[string]string{
				"altered text":      alter(0, "thinking", th["thinking"].(string)+" "),
				"other signature":   alter(0, "signature", New(Options{}).signThinking(th["thinking"].(string))),
				"truncated":         alter(0, "signature", sig[:len(sig)-4]),
				"altered redaction": alter(1, "data", "QUJD"+th["signature"].(string)),
			} {
				status, out, rec := post(t, s, "/v1/messages", body)
				if status != 400 || rec.Rule != RuleSignature || !strings.Contains(out, "messages.1.content.") {
					t.Errorf("%s: %d %s", name, status, out)
				}
			}
			// Thinking dropped from the last assistant turn of the tool loop: refused.
			noThinking, _ := json.Marshal(map[string]any{"role": "assistant", "content": blocks[2:]})
			status, out, rec := post(t, s, "/v1/messages", req(first, string(noThinking), result))
			want := "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`."
			if status != 400 || rec.Rule != RuleThinkingFirst || !strings.Contains(out, want) {
				t.Errorf("thinking dropped: %d %s", status, out)
			}
			// The same without the fake's thinking, or with adaptive thinking: accepted.
			lax := New(Options{})
			if status, out, _ := post(t, lax, "/v1/messages", req(first, string(noThinking), result)); status != 200 {
				t.Errorf("without Options.Thinking: %d %s", status, out)
			}
			adaptive := strings.Replace(req(first, string(noThinking), result), `"type":"enabled","budget_tokens":1024`, `"type":"adaptive"`, 1)
			if status, out, _ := post(t, s, "/v1/messages", adaptive); status != 200 {
				t.Errorf("adaptive: %d %s", status, out)
			}
			// Signatures do not survive a restart of the fake (a new key).
			if status, _, _ := post(t, New(Options{Thinking: true}), "/v1/messages", req(first, string(asst), result)); status != 400 {
				t.Errorf("another fake accepted the signature")
			}
		})
	}
}

func TestThinkingDeterministic(t *testing.T) {
	key := []byte("a fixed key for the test")
	a, b := New(Options{Thinking: true, SigningKey: key}), New(Options{Thinking: true, SigningKey: key})
	body := `{"model":"m","max_tokens":100,"thinking":{"type":"enabled","budget_tokens":50},"messages":[{"role":"user","content":"hi"}]}`
	_, x, _ := post(t, a, "/v1/messages", body)
	_, y, _ := post(t, b, "/v1/messages", body)
	cut := func(s string) string { i := strings.Index(s, `"model"`); return s[i:] } // ids differ
	if cut(x) != cut(y) || !strings.Contains(x, `"thinking":"Thinking about: hi"`) {
		t.Fatalf("not deterministic:\n%s\n%s", x, y)
	}
	// Without thinking asked, none is issued.
	_, z, rec := post(t, a, "/v1/messages", `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
	if strings.Contains(z, "thinking") || rec.Issued != 0 {
		t.Fatalf("thinking issued unasked: %s", z)
	}
}

func TestAnthropicWindow(t *testing.T) {
	const window = 1000
	s := New(Options{Window: window})
	n := s.Count(mustDecode(t, wire.Anthropic, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"go"}]}`))
	for _, c := range []struct {
		name      string
		maxTokens int
		text      string
		status    int
		msg       string
	}{
		{name: "fits exactly", maxTokens: window - n, text: "go", status: 200},
		{name: "input plus max_tokens over", maxTokens: window - n + 1, text: "go", status: 400,
			msg: fmt.Sprintf("input length and `max_tokens` exceed context limit: %d + %d > %d, decrease input length or `max_tokens` and try again", n, window-n+1, window)},
		{name: "input over", maxTokens: 10, text: strings.Repeat("word ", 1200), status: 400, msg: "prompt is too long: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, c.maxTokens, c.text)
			status, out, rec := post(t, s, "/v1/messages", body)
			if status != c.status {
				t.Fatalf("%d %s", status, out)
			}
			if c.status == 200 {
				return
			}
			if rec.Rule != RuleWindow || rec.Valid != "" || !strings.Contains(out, `"type":"invalid_request_error","message":"`+c.msg) {
				t.Fatalf("%s record %+v", out, rec)
			}
			if c.name == "input over" && !strings.Contains(out, fmt.Sprintf("prompt is too long: %d tokens > %d maximum", rec.Tokens, window)) {
				t.Fatalf("%s", out)
			}
		})
	}
}

func mustDecode(t *testing.T, f wire.Format, body string) *chat.Request {
	t.Helper()
	r, err := wire.Decode(f, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// openAICase is one OpenAI request and what the fake must answer.
type openAICase struct {
	name  string
	msgs  string
	extra string
	rule  string
	body  string // the exact error body when refused
}

func TestOpenAIRules(t *testing.T) {
	s := New(Options{})
	const (
		sys    = `{"role":"system","content":"be terse"}`
		dev    = `{"role":"developer","content":"be terse"}`
		user   = `{"role":"user","content":"go"}`
		calls  = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"bash","arguments":"{}"}},{"id":"call_b","type":"function","function":{"name":"bash","arguments":"{}"}}]}`
		toolA  = `{"role":"tool","tool_call_id":"call_a","content":"a"}`
		toolB  = `{"role":"tool","tool_call_id":"call_b","content":"b"}`
		toolX  = `{"role":"tool","tool_call_id":"call_x","content":"x"}`
		answer = `{"role":"assistant","content":"done"}`
	)
	for _, c := range []openAICase{
		{name: "developer", msgs: dev + "," + user},
		{name: "tool loop, results in any order", msgs: sys + "," + user + "," + calls + "," + toolB + "," + toolA + "," + answer + "," + user},
		{name: "max_completion_tokens", msgs: user, extra: `"max_completion_tokens":100,`},
		{name: "max_tokens", msgs: user, extra: `"max_tokens":100,`},
		{name: "unknown role", msgs: `{"role":"model","content":"x"}`, rule: RuleRole,
			body: `{"error":{"message":"Invalid value: 'model'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.","type":"invalid_request_error","param":"messages[0].role","code":"invalid_value"}}`},
		{name: "empty messages", msgs: ``, rule: RuleParse,
			body: `{"error":{"message":"Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.","type":"invalid_request_error","param":"messages","code":"empty_array"}}`},
		{name: "orphan tool message", msgs: user + "," + toolA, rule: RuleToolPairing,
			body: `{"error":{"message":"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.","type":"invalid_request_error","param":"messages.[1].role","code":null}}`},
		{name: "tool message after the answer", msgs: user + "," + calls + "," + toolA + "," + toolB + "," + answer + "," + toolA, rule: RuleToolPairing,
			body: `{"error":{"message":"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.","type":"invalid_request_error","param":"messages.[5].role","code":null}}`},
		{name: "unanswered call", msgs: user + "," + calls + "," + toolA + "," + user, rule: RuleToolPairing,
			body: `{"error":{"message":"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_b","type":"invalid_request_error","param":"messages.[3].role","code":null}}`},
		{name: "calls last", msgs: user + "," + calls, rule: RuleToolPairing,
			body: `{"error":{"message":"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_a, call_b","type":"invalid_request_error","param":"messages.[1].role","code":null}}`},
		{name: "answer to another call", msgs: user + "," + calls + "," + toolA + "," + toolX, rule: RuleToolPairing,
			body: `{"error":{"message":"Invalid parameter: 'tool_call_id' of 'call_x' not found in 'tool_calls' of previous message.","type":"invalid_request_error","param":"messages.[3].tool_call_id","code":null}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `{"model":"gpt-4o",` + c.extra + `"messages":[` + c.msgs + `]}`
			status, out, rec := post(t, s, "/v1/chat/completions", body)
			if c.rule == "" {
				if status != 200 || rec.Rule != "" || rec.Valid != "" {
					t.Fatalf("refused: %d %s", status, out)
				}
				return
			}
			if status != 400 || out != c.body || rec.Rule != c.rule || rec.Valid == "" {
				t.Fatalf("got %d %s (rule %q)\nwant 400 %s (rule %q)", status, out, rec.Rule, c.body, c.rule)
			}
		})
	}
}

func TestOpenAIWindow(t *testing.T) {
	const window = 1000
	s := New(Options{Window: window})
	long := strings.Repeat("word ", 1200)
	body := func(extra, text string) string {
		return fmt.Sprintf(`{"model":"gpt-4o",%s"messages":[{"role":"user","content":%q}]}`, extra, text)
	}
	n := s.Count(mustDecode(t, wire.OpenAI, body("", "go")))
	// Without max tokens, the input alone is checked.
	if status, out, _ := post(t, s, "/v1/chat/completions", body("", "go")); status != 200 {
		t.Fatalf("%d %s", status, out)
	}
	status, out, rec := post(t, s, "/v1/chat/completions", body("", long))
	want := fmt.Sprintf(`{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, window, rec.Tokens)
	if status != 400 || out != want || rec.Rule != RuleWindow || rec.Valid != "" {
		t.Fatalf("input over: %d %s\nwant %s", status, out, want)
	}
	// With max tokens, input plus max tokens.
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if status, out, _ := post(t, s, "/v1/chat/completions", body(fmt.Sprintf(`%q:%d,`, k, window-n), "go")); status != 200 {
			t.Fatalf("%s fits exactly: %d %s", k, status, out)
		}
		status, out, _ := post(t, s, "/v1/chat/completions", body(fmt.Sprintf(`%q:%d,`, k, window-n+1), "go"))
		want := fmt.Sprintf(`{"error":{"message":"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, window, window+1, n, window-n+1)
		if status != 400 || out != want {
			t.Fatalf("%s one over: %d %s\nwant %s", k, status, out, want)
		}
	}
}

// TestRejectAbove: Options.RejectAbove refuses on the input alone, the smaller limit named.
func TestRejectAbove(t *testing.T) {
	s := New(Options{RejectAbove: 50, Window: 100000})
	status, out, rec := post(t, s, "/v1/messages", fmt.Sprintf(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("word ", 100)))
	if status != 400 || !strings.Contains(out, fmt.Sprintf("prompt is too long: %d tokens > 50 maximum", rec.Tokens)) {
		t.Fatalf("%d %s", status, out)
	}
}

func TestRoutes(t *testing.T) {
	srv := httptest.NewServer(New(Options{}))
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/models", 200},
		{"GET", "/v1/messages", 404},
		{"POST", "/v1/unknown", 404},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
}

// FuzzChecks: arbitrary bodies never panic the checks, and a refusal always has a rule and a
// JSON error body.
func FuzzChecks(f *testing.F) {
	for n := 0; n <= 5; n++ {
		f.Add(breakpointBody(n))
	}
	f.Add(anth(uGo + "," + aUse1 + "," + sysEntry + "," + uRes1))
	f.Add(anth(uGo + "," + aUse12 + "," + uRes21))
	f.Add(`{"model":"gpt-4o","messages":[{"role":"tool","tool_call_id":"x"}]}`)
	f.Add(`{"model":"gpt-4o","messages":[{"role":"assistant","tool_calls":[{"id":"a"}]},{"role":"tool","tool_call_id":"a"}]}`)
	f.Add(`{"messages":[{"role":"user","content":[{"type":"tool_result","content":[5]}]}]}`)
	f.Add(`null`)
	s := New(Options{Thinking: true})
	f.Fuzz(func(t *testing.T, body string) {
		for _, c := range []checked{s.checkAnthropic([]byte(body)), checkOpenAI([]byte(body))} {
			if c.v == nil {
				continue
			}
			if c.v.rule == "" || c.v.status != 400 || !json.Valid([]byte(c.v.body)) {
				t.Fatalf("bad violation %+v", c.v)
			}
		}
	})
}

// TestFindRefGuideLines: the fake finds an archive range in every form of the summary's
// guide line, so a "read back" request is answered with a ctxmgr_read call.
func TestFindRefGuideLines(t *testing.T) {
	for text, want := range map[string]string{
		"- messages 0-4: dialog/a.jsonl":                            "messages 0-4",
		"- messages 3-40":                                           "messages 3-40",
		"- messages 0-4, 9-12":                                      "messages 0-4",
		"- messages 0-4, 9-12: dialog/a.jsonl":                      "messages 0-4",
		"- messages 0-1994 (in part): 399 locations, a.jsonl to b":  "messages 0-1994",
		"[ctxmgr: x masked. Full text: mem:s/tool_result/1 (read)]": "mem:s/tool_result/1",
	} {
		msgs := []chat.Message{chat.TextMessage(chat.RoleUser, "summary\n"+text)}
		if got := findRef(msgs); got != want {
			t.Errorf("%q: %q, want %q", text, got, want)
		}
	}
}
