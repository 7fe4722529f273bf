package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"reflect"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/sample"
)

// tauBenchFile returns the tau-bench airline runs of the embedded sample (package
// internal/sample): the first 30 of the 200 runs of gpt-4o-airline.json, as a JSON array.
func tauBenchFile(t testing.TB) []byte {
	t.Helper()
	raw, err := fs.ReadFile(sample.FS(), path.Join(sample.Dir, "tau-bench", "gpt-4o-airline.json"))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func jsonEqual(t *testing.T, want, got []byte) {
	t.Helper()
	var a, b any
	da := json.NewDecoder(bytes.NewReader(want))
	da.UseNumber()
	if err := da.Decode(&a); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	db := json.NewDecoder(bytes.NewReader(got))
	db.UseNumber()
	if err := db.Decode(&b); err != nil {
		t.Fatalf("got is not JSON: %v\n%s", err, got)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("round trip differs\nwant: %s\ngot:  %s", want, got)
	}
}

func TestRoundTripTauBench(t *testing.T) {
	raw := tauBenchFile(t)
	var runs []struct {
		Traj json.RawMessage `json:"traj"`
	}
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatal("no runs")
	}
	total := 0
	for _, run := range runs {
		msgs, err := DecodeOpenAIMessages(run.Traj)
		if err != nil {
			t.Fatal(err)
		}
		if err := chat.Validate(msgs); err != nil {
			t.Fatalf("tau-bench history invalid: %v", err)
		}
		out, err := EncodeOpenAIMessages(msgs)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, run.Traj, out)
		// As a request body too, with tools, and through Anthropic and back to the model.
		body := []byte(`{"model":"gpt-4o","temperature":0,"messages":` + string(run.Traj) + `}`)
		req, err := DecodeOpenAI(body)
		if err != nil {
			t.Fatal(err)
		}
		again, err := EncodeOpenAI(req)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, body, again)
		ab, err := EncodeAnthropic(req)
		if err != nil {
			t.Fatal(err)
		}
		areq, err := DecodeAnthropic(ab)
		if err != nil {
			t.Fatalf("anthropic form does not decode: %v\n%s", err, ab)
		}
		if err := chat.Validate(areq.Messages); err != nil {
			t.Fatalf("anthropic form invalid: %v", err)
		}
		total += len(msgs)
	}
	t.Logf("%d runs, %d messages round-tripped", len(runs), total)
}

var openAIBodies = []string{
	`{"model":"gpt-4o","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
	`{"model":"o3","messages":[{"role":"developer","content":[{"type":"text","text":"rules"}]},{"role":"user","name":"ann","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}},{"type":"input_audio","input_audio":{"data":"AAA=","format":"wav"}}]}],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"gpt-4.1","tools":[{"type":"function","function":{"name":"ls","description":"list","parameters":{"type":"object","properties":{"p":{"type":"string"}}},"strict":true}},{"type":"custom","custom":{"name":"grammar"}}],"tool_choice":"auto","messages":[{"role":"user","content":"list"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"p\":\"/\"}"}},{"id":"c2","type":"function","function":{"name":"ls","arguments":"not json"}}],"refusal":null},{"role":"tool","tool_call_id":"c1","content":"a\nb"},{"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"err"}]},{"role":"assistant","content":"done","reasoning_content":"thought","annotations":[]}]}`,
	`{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f-1","filename":"a.pdf"}},{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]},{"role":"assistant"}]}`,
	`[{"role":"user","content":""},{"role":"assistant","content":"","tool_calls":[]}]`,
	`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAYAAAC56t6BAAAAEklEQVR4nGP4z8DAwMDAxMAAAAwpAQMBv7HSAAAAAElFTkSuQmCC"}}]}]}`,
	`{"model":"gpt-3.5-turbo","functions":[{"name":"f","parameters":{"type":"object"}}],"messages":[{"role":"user","content":"call f"},{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},{"role":"function","name":"f","content":"42"}]}`,
}

func TestRoundTripOpenAI(t *testing.T) {
	for i, body := range openAIBodies {
		req, err := DecodeOpenAI([]byte(body))
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		out, err := EncodeOpenAI(req)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if body[0] == '[' {
			// A bare array comes back as a body with messages.
			var top struct {
				Messages json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal(out, &top); err != nil {
				t.Fatal(err)
			}
			out = top.Messages
		}
		jsonEqual(t, []byte(body), out)
	}
}

func TestImageSizeFromData(t *testing.T) {
	req, err := DecodeOpenAI([]byte(openAIBodies[5]))
	if err != nil {
		t.Fatal(err)
	}
	img := req.Messages[0].Content[0].Image
	if img == nil || img.Width != 2 || img.Height != 3 || img.MediaType != "image/png" {
		t.Fatalf("image = %+v, want 2x3 image/png", img)
	}
}

var anthropicBodies = []string{
	`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"you are terse","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"claude-opus-4-1","max_tokens":2048,"system":[{"type":"text","text":"rules","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"bash","description":"run","input_schema":{"type":"object","properties":{"cmd":{"type":"string"}}},"cache_control":{"type":"ephemeral"}},{"type":"web_search_20250305","name":"web_search","max_uses":5}],"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":[{"type":"text","text":"run ls"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAYAAAC56t6BAAAAEklEQVR4nGP4z8DAwMDAxMAAAAwpAQMBv7HSAAAAAElFTkSuQmCC"}}]},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig=="},{"type":"redacted_thinking","data":"xyz"},{"type":"text","text":"ok"},{"type":"tool_use","id":"toolu_1","name":"bash","input":{"cmd": "ls"}},{"type":"tool_use","id":"toolu_2","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a\nb","cache_control":{"type":"ephemeral"}},{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"boom"}]},{"type":"text","text":"go on"}]},{"role":"assistant","content":[{"type":"text","text":"before"},{"type":"tool_use","id":"toolu_3","name":"bash","input":{"cmd":"pwd"}},{"type":"text","text":"after"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3"},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"}}]}],"metadata":{"user_id":"u-1"},"stream":true}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[]},{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}]}]}`,
	// Claude Code's shape: system entries inside messages (beta mid-conversation-system), adaptive
	// thinking, context_management, citations on a text block, a search_result block.
	`{"model":"claude-opus-4-7","max_tokens":64000,"system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],"thinking":{"type":"adaptive"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"metadata":{"user_id":"user_abc_account__session_1"},"messages":[{"role":"user","content":[{"type":"text","text":"fix the bug"}]},{"role":"system","content":"The date is 2026-11-23."},{"role":"assistant","content":[{"type":"thinking","thinking":"look first","signature":"EqQBCkYI"},{"type":"text","text":"reading","citations":[{"type":"char_location","cited_text":"x","document_index":0,"start_char_index":0,"end_char_index":1}]},{"type":"tool_use","id":"toolu_9","name":"Read","input":{"file_path":"/a.go"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":[{"type":"text","text":"package a"}]},{"type":"search_result","source":"s","title":"t","content":[{"type":"text","text":"r"}]}]},{"role":"system","content":[{"type":"text","text":"Reminder: be brief.","cache_control":{"type":"ephemeral"}}]}]}`,
}

func TestRoundTripAnthropic(t *testing.T) {
	for i, body := range anthropicBodies {
		req, err := DecodeAnthropic([]byte(body))
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if err := chat.Validate(req.Messages); err != nil {
			t.Fatalf("%d: decoded history invalid: %v", i, err)
		}
		out, err := EncodeAnthropic(req)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		jsonEqual(t, []byte(body), out)
	}
}

func TestAnthropicSplitsToolResults(t *testing.T) {
	req, err := DecodeAnthropic([]byte(anthropicBodies[1]))
	if err != nil {
		t.Fatal(err)
	}
	var roles []chat.Role
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	want := []chat.Role{"user", "assistant", "tool", "tool", "user", "assistant", "assistant", "tool", "user"}
	if !reflect.DeepEqual(roles, want) {
		t.Fatalf("roles = %v, want %v", roles, want)
	}
	tr := req.Messages[3]
	if !tr.IsError || tr.ToolCallID != "toolu_2" || tr.Name != "bash" || tr.Text() != "boom" {
		t.Fatalf("tool result = %+v", tr)
	}
	if got := req.Messages[1].ToolCalls[0].Arguments; got != `{"cmd": "ls"}` {
		t.Fatalf("arguments not verbatim: %q", got)
	}
}

func TestCrossFormat(t *testing.T) {
	req, err := DecodeAnthropic([]byte(anthropicBodies[1]))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := EncodeOpenAI(req)
	if err != nil {
		t.Fatal(err)
	}
	oreq, err := DecodeOpenAI(ob)
	if err != nil {
		t.Fatalf("%v\n%s", err, ob)
	}
	if err := chat.Validate(oreq.Messages); err != nil {
		t.Fatal(err)
	}
	if len(oreq.System) != 1 || oreq.System[0].Text() != "rules" {
		t.Fatalf("system = %+v", oreq.System)
	}
	if bytes.Contains(ob, []byte("cache_control")) {
		t.Fatalf("Anthropic-only field leaked into OpenAI body: %s", ob)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name  string
		f     Format
		body  string
		want  error
		index int
		field string
	}{
		{"not json", OpenAI, `{"messages":[`, chat.ErrMalformedJSON, -1, ""},
		{"empty", OpenAI, ``, chat.ErrMalformedJSON, -1, ""},
		{"messages not array", OpenAI, `{"messages":{}}`, chat.ErrMalformedJSON, -1, "messages"},
		{"message not object", OpenAI, `[{"role":"user","content":"a"}, 7]`, chat.ErrMalformedJSON, 1, ""},
		{"unknown role", OpenAI, `[{"role":"user","content":"a"},{"role":"robot","content":"b"}]`, chat.ErrUnknownRole, 1, "role"},
		{"bad content", OpenAI, `[{"role":"user","content":5}]`, chat.ErrMalformedJSON, 0, "content"},
		{"bad tool calls", OpenAI, `[{"role":"assistant","tool_calls":"x"}]`, chat.ErrMalformedJSON, 0, "tool_calls"},
		{"invalid utf8", OpenAI, "[{\"role\":\"user\",\"content\":\"a\xff\"}]", chat.ErrInvalidUTF8, 0, ""},
		{"lone surrogate", OpenAI, `[{"role":"user","content":"a\ud800b"}]`, chat.ErrInvalidUTF8, 0, ""},
		{"anthropic unknown role", Anthropic, `{"messages":[{"role":"developer","content":"x"}]}`, chat.ErrUnknownRole, 0, "role"},
		{"anthropic bad block", Anthropic, `{"messages":[{"role":"user","content":[3]}]}`, chat.ErrMalformedJSON, 0, "content[0]"},
		{"anthropic bad utf8", Anthropic, "{\"system\":\"\xc3\",\"messages\":[]}", chat.ErrInvalidUTF8, -1, "system"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.f, []byte(c.body))
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			var ce *chat.Error
			if !errors.As(err, &ce) || ce.Index != c.index || ce.Field != c.field {
				t.Fatalf("err = %#v, want index %d field %q", err, c.index, c.field)
			}
		})
	}
}

func TestValidSurrogatePair(t *testing.T) {
	req, err := DecodeOpenAI([]byte(`[{"role":"user","content":"\ud83d\ude00 \\ud800"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Messages[0].Text(); got != "😀 \\ud800" {
		t.Fatalf("text = %q", got)
	}
}

func TestDetect(t *testing.T) {
	for i, b := range openAIBodies {
		if f := Detect([]byte(b)); f != OpenAI {
			t.Errorf("openai body %d detected as %s", i, f)
		}
	}
	for i, b := range anthropicBodies {
		if f := Detect([]byte(b)); f != Anthropic {
			t.Errorf("anthropic body %d detected as %s", i, f)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, b := range openAIBodies {
		f.Add([]byte(b), false)
	}
	for _, b := range anthropicBodies {
		f.Add([]byte(b), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, anthropic bool) {
		format := OpenAI
		if anthropic {
			format = Anthropic
		}
		fuzzRoundTrip(t, format, body)
	})
}

// TestEncodeRejectsInvalidRaw: raw JSON supplied by the caller is checked where it enters
// the encoder, so an invalid value is an error, never an invalid body.
func TestEncodeRejectsInvalidRaw(t *testing.T) {
	bad := json.RawMessage(`{"a":`)
	user := chat.Message{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartText, Text: "hi"}}}
	cases := map[string]*chat.Request{
		"request extra": {Extra: map[string]json.RawMessage{"model": bad}, Messages: []chat.Message{user}},
		"message extra": {Messages: []chat.Message{{Role: chat.RoleUser, Extra: map[string]json.RawMessage{"x": bad},
			Content: []chat.Part{{Type: chat.PartText, Text: "hi"}}}}},
		"part extra": {Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartText, Text: "hi",
			Extra: map[string]json.RawMessage{"cache_control": bad}}, {Type: chat.PartText, Text: "there"}}}}},
		"raw part":        {Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartOther, Raw: bad}, {Type: chat.PartText, Text: "x"}}}}},
		"raw tool":        {Messages: []chat.Message{user}, Tools: []chat.Tool{{Name: "t", Raw: bad}}},
		"tool parameters": {Messages: []chat.Message{user}, Tools: []chat.Tool{{Name: "t", Parameters: bad}}},
		"tool call extra": {Messages: []chat.Message{user, {Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "c", Name: "t",
			Arguments: "{}", Extra: map[string]json.RawMessage{"x": bad}}}}}},
	}
	for name, req := range cases {
		for _, f := range []Format{OpenAI, Anthropic} {
			out, err := Encode(f, req)
			if err == nil {
				t.Errorf("%s, %s: no error; body %s (valid JSON: %v)", name, f, out, json.Valid(out))
			}
		}
	}
}
