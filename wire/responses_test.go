package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/turns"
)

// responsesBodies are Responses request bodies as clients send them (Codex CLI with store:false
// and encrypted reasoning, the openai SDKs, AI SDK), in canonical item order.
var responsesBodies = []string{
	`{"model":"gpt-5","input":"hi"}`,
	`{"model":"gpt-5","instructions":"be brief","input":[{"role":"user","content":"hi"}],"max_output_tokens":512,"stream":true}`,
	// Codex: developer + user messages, reasoning with encrypted content, a function call, its
	// output, custom tools, local_shell.
	`{"model":"gpt-5-codex","instructions":"You are Codex.","store":false,"stream":true,"include":["reasoning.encrypted_content"],"parallel_tool_calls":false,"tool_choice":"auto",` +
		`"reasoning":{"effort":"medium","summary":"auto"},"prompt_cache_key":"0199-abc",` +
		`"tools":[{"type":"function","name":"shell","description":"Runs a shell command","strict":false,"parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"],"additionalProperties":false}},` +
		`{"type":"custom","name":"apply_patch","description":"patch","format":{"type":"grammar","syntax":"lark","definition":"start: x"}},{"type":"local_shell"},{"type":"web_search"},{"type":"function","name":"view_image","parameters":{"type":"object","properties":{}}}],` +
		`"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions>...</permissions>"}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the bug"},{"type":"input_image","image_url":"https://x/y.png","detail":"low"},{"type":"input_file","file_id":"file-1","filename":"a.pdf"}]},` +
		`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"**Looking** at files"}],"content":null,"encrypted_content":"gAAAAABo-ENC+/=="},` +
		`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"command\":[\"ls\"]}","status":"completed"},` +
		`{"type":"function_call","call_id":"call_2","name":"shell","arguments":"not json"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"a.go\nb.go"},` +
		`{"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"err"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAYAAAC56t6BAAAAEklEQVR4nGP4z8DAwMDAxMAAAAwpAQMBv7HSAAAAAElFTkSuQmCC"}]},` +
		`{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"gAAAAABo-TWO"},` +
		`{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"I will patch it.","annotations":[],"logprobs":[]},{"type":"refusal","refusal":"no"}]},` +
		`{"type":"custom_tool_call","id":"ctc_1","call_id":"call_3","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"},` +
		`{"type":"custom_tool_call_output","call_id":"call_3","output":"Done!"},` +
		`{"type":"local_shell_call","id":"lsh_1","call_id":"call_4","status":"completed","action":{"type":"exec","command":["pwd"],"env":{}}},` +
		`{"type":"local_shell_call_output","id":"call_4","output":"/src"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Fixed."}]},` +
		`{"role":"assistant","content":"second message of the turn"},` +
		`{"type":"item_reference","id":"msg_0"},` +
		`{"role":"user","content":"thanks","x_future":1}]}`,
	`{"model":"gpt-4.1","input":[],"previous_response_id":"resp_1","metadata":{"k":"v"}}`,
	`{"model":"gpt-4.1","conversation":"conv_1"}`,
	`{"model":"o3","instructions":null,"input":[{"type":"message","role":"system","content":"sys"},{"role":"user","content":[{"type":"output_text","text":"odd but kept"},{"type":"input_text","text":"x","x":1}]},{"role":"assistant","content":null}]}`,
}

func TestRoundTripResponses(t *testing.T) {
	for i, body := range responsesBodies {
		req, err := DecodeResponses([]byte(body))
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		out, err := EncodeResponses(req)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		jsonEqual(t, []byte(body), out)
		if f := Detect([]byte(body)); f != Responses && strings.Contains(body, `"input"`) {
			t.Errorf("%d: detected as %s", i, f)
		}
	}
}

// TestResponsesModel: what the items become in the neutral model.
func TestResponsesModel(t *testing.T) {
	req, err := DecodeResponses([]byte(responsesBodies[2]))
	if err != nil {
		t.Fatal(err)
	}
	if len(req.System) != 2 || req.System[0].Text() != "You are Codex." || req.System[1].WireRole != "developer" {
		t.Fatalf("system = %+v", req.System)
	}
	type row struct {
		role  chat.Role
		calls int
		id    string
		join  bool
	}
	var got []row
	for _, m := range req.Messages {
		got = append(got, row{m.Role, len(m.ToolCalls), m.ToolCallID, m.JoinPrev})
	}
	want := []row{
		{"user", 0, "", false}, {"user", 0, "", false},
		{"assistant", 2, "", false}, {"tool", 0, "call_1", false}, {"tool", 0, "call_2", false},
		{"assistant", 1, "", false}, {"tool", 0, "call_3", false},
		{"assistant", 0, "", false}, {"user", 0, "", false},
		{"assistant", 0, "", false}, {"assistant", 0, "", true}, // the item_reference joins the second
		{"user", 0, "", false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("messages:\n got %v\nwant %v", got, want)
	}
	// The calls pair with their outputs: a provider would accept this history.
	if err := turns.Validate(req.Messages, turns.ValidateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := req.Messages[2]
	if a.Content[0].Type != chat.PartReasoning || a.Content[0].Text != "**Looking** at files" ||
		!bytes.Contains(a.Content[0].Raw, []byte(`"encrypted_content":"gAAAAABo-ENC+/=="`)) {
		t.Fatalf("reasoning part = %+v", a.Content[0])
	}
	if a.ToolCalls[0].ID != "call_1" || a.ToolCalls[0].Arguments != `{"command":["ls"]}` || string(a.ToolCalls[0].Extra["id"]) != `"fc_1"` {
		t.Fatalf("call = %+v", a.ToolCalls[0])
	}
	custom := req.Messages[5]
	if custom.Text() != "I will patch it." || custom.ToolCalls[0].Arguments != "*** Begin Patch\n*** End Patch" {
		t.Fatalf("custom turn = %+v", custom)
	}
	if req.Messages[6].Text() != "Done!" || string(req.Messages[6].Extra["type"]) != `"custom_tool_call_output"` {
		t.Fatalf("custom output = %+v", req.Messages[6])
	}
	img := req.Messages[4].Content[1].Image
	if img == nil || img.Width != 2 || img.Height != 3 {
		t.Fatalf("output image = %+v", req.Messages[4].Content[1])
	}
	if req.Tools[0].Name != "shell" || req.Tools[0].Raw != nil || req.Tools[1].Raw == nil || req.Tools[1].Name != "apply_patch" || req.Tools[2].Name != "local_shell" {
		t.Fatalf("tools = %+v", req.Tools)
	}
}

// TestResponsesReasoningByteExact: encrypted reasoning comes back byte for byte, whitespace
// and escapes included.
func TestResponsesReasoningByteExact(t *testing.T) {
	item := `{ "type" : "reasoning", "id":"rs_9", "summary": [ ], "encrypted_content" : "gAAA\u002fBB==" }`
	body := `{"input":[{"role":"user","content":"go"},` + item + `,{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]}`
	req, err := DecodeResponses([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	out, err := EncodeResponses(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(item)) {
		t.Fatalf("reasoning item not verbatim:\n%s", out)
	}
}

// TestResponsesProxyEdits: what the proxy does to a request (its own tool, a summary as a user
// message, tool results of its own, messages dropped) encodes to a valid Responses body.
func TestResponsesProxyEdits(t *testing.T) {
	req, err := DecodeResponses([]byte(responsesBodies[2]))
	if err != nil {
		t.Fatal(err)
	}
	req.Tools = append(req.Tools, chat.Tool{Name: "ctxmgr_read", Description: "read", Parameters: json.RawMessage(`{"type":"object","properties":{"ref":{"type":"string"}}}`)})
	summary := chat.TextMessage(chat.RoleUser, "[summary] earlier: fixed things")
	asst := chat.Message{Role: chat.RoleAssistant, Wire: string(Responses), ToolCalls: []chat.ToolCall{{ID: "call_r", Name: "ctxmgr_read", Arguments: `{"ref":"x"}`}}}
	msgs := append([]chat.Message{summary}, req.Messages[5:]...)
	msgs = append(msgs, asst, chat.ToolResult("call_r", "ctxmgr_read", "line 1\nline 2", false))
	req.Messages = msgs
	out, err := EncodeResponses(req)
	if err != nil {
		t.Fatal(err)
	}
	var top struct {
		Input []map[string]any `json:"input"`
		Tools []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(out, &top); err != nil {
		t.Fatal(err)
	}
	last := top.Tools[len(top.Tools)-1]
	if last["type"] != "function" || last["name"] != "ctxmgr_read" || last["strict"] != false {
		t.Fatalf("injected tool = %v", last)
	}
	if s := top.Tools[4]; s["strict"] != nil {
		t.Fatalf("a client tool gained strict: %v", s)
	}
	first := top.Input[1] // after the developer message
	if first["type"] != "message" || first["role"] != "user" || first["content"] != "[summary] earlier: fixed things" {
		t.Fatalf("summary item = %v", first)
	}
	n := len(top.Input)
	if top.Input[n-2]["type"] != "function_call" || top.Input[n-2]["call_id"] != "call_r" ||
		top.Input[n-1]["type"] != "function_call_output" || top.Input[n-1]["output"] != "line 1\nline 2" {
		t.Fatalf("read exchange = %v %v", top.Input[n-2], top.Input[n-1])
	}
	again, err := DecodeResponses(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := turns.Validate(again.Messages, turns.ValidateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestResponsesCrossFormat(t *testing.T) {
	req, err := DecodeAnthropic([]byte(anthropicBodies[1]))
	if err != nil {
		t.Fatal(err)
	}
	out, err := EncodeResponses(req)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeResponses(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(back.System) != 1 || back.System[0].Text() != "rules" {
		t.Fatalf("system = %+v\n%s", back.System, out)
	}
	if err := chat.Validate(back.Messages); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("cache_control")) || bytes.Contains(out, []byte("web_search_20250305")) {
		t.Fatalf("Anthropic-only fields leaked: %s", out)
	}
	// And the other way: a Responses body as chat completions.
	rr, err := DecodeResponses([]byte(responsesBodies[2]))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := EncodeOpenAI(rr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeOpenAI(ob); err != nil {
		t.Fatalf("%v\n%s", err, ob)
	}
}

func TestResponsesDecodeErrors(t *testing.T) {
	cases := []decodeErrorCase{
		{"not json", `{"input":[`, chat.ErrMalformedJSON, -1, ""},
		{"empty", ``, chat.ErrMalformedJSON, -1, ""},
		{"input not array", `{"input":{}}`, chat.ErrMalformedJSON, -1, "input"},
		{"item not object", `{"input":[{"role":"user","content":"a"},7]}`, chat.ErrMalformedJSON, 1, ""},
		{"unknown role", `{"input":[{"role":"robot","content":"b"}]}`, chat.ErrUnknownRole, 0, "role"},
		{"no type no role", `{"input":[{"content":"b"}]}`, chat.ErrMalformedJSON, 0, "type"},
		{"type not string", `{"input":[{"type":3}]}`, chat.ErrMalformedJSON, 0, "type"},
		{"no content", `{"input":[{"type":"message","role":"user"}]}`, chat.ErrMalformedJSON, 0, "content"},
		{"bad content", `{"input":[{"role":"user","content":5}]}`, chat.ErrMalformedJSON, 0, "content"},
		{"call without id", `{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, chat.ErrMalformedJSON, 0, ""},
		{"output without id", `{"input":[{"type":"function_call_output","output":"x"}]}`, chat.ErrMalformedJSON, 0, "call_id"},
		{"output null", `{"input":[{"type":"function_call_output","call_id":"c","output":null}]}`, chat.ErrMalformedJSON, 0, "output"},
		{"invalid utf8", "{\"input\":[{\"role\":\"user\",\"content\":\"a\xff\"}]}", chat.ErrInvalidUTF8, 0, ""},
		{"lone surrogate", `{"input":"a\ud800b"}`, chat.ErrInvalidUTF8, 0, ""},
		{"bad instructions", "{\"instructions\":\"\xc3\"}", chat.ErrInvalidUTF8, -1, "instructions"},
		{"tools not array", `{"tools":{}}`, chat.ErrMalformedJSON, -1, "tools"},
	}
	checkDecodeErrors(t, Responses, cases)
}

func FuzzResponses(f *testing.F) {
	for _, b := range responsesBodies {
		f.Add([]byte(b))
	}
	f.Add([]byte(`{"input":[{"type":"function_call","call_id":"a","name":"f","arguments":""},{"type":"reasoning"},{"role":"assistant","content":[]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzRoundTrip(t, Responses, body) })
}
