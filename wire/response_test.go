package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Response bodies as the providers write them (trimmed of ids and fields nothing reads).
var responseCases = []struct {
	name string
	f    Format
	body string
	want Response
	err  error
}{
	{"openai text with cache", OpenAI,
		`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Done.","refusal":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0}}}`,
		Response{Text: "Done.", Stop: "stop", HasUsage: true, Usage: Usage{Input: 2006, CacheRead: 1920, Output: 300}}, nil},
	{"openai tool call, cut", OpenAI,
		`{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"grep","arguments":"{\"q\":\"x\"}"}}]},"finish_reason":"length"}]}`,
		Response{ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "grep", Arguments: `{"q":"x"}`}}, Stop: "length", Truncated: true}, nil},
	{"openai content parts and refusal", OpenAI,
		`{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"refusal":"no"},"finish_reason":"stop"}]}`,
		Response{Text: "ab", Refusal: "no", Stop: "stop"}, nil},
	{"openai error", OpenAI, `{"error":{"message":"maximum context length is 128000 tokens","type":"invalid_request_error"}}`, Response{}, ErrErrorResponse},
	{"openai no choices", OpenAI, `{"choices":[]}`, Response{}, ErrMalformedResponse},
	{"anthropic text, tool use, cache", Anthropic,
		`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/a.go"}}],"stop_reason":"tool_use","usage":{"input_tokens":12,"cache_creation_input_tokens":3000,"cache_read_input_tokens":90000,"output_tokens":80}}`,
		Response{Text: "Let me look.", ToolCalls: []chat.ToolCall{{ID: "toolu_1", Name: "Read", Arguments: `{"file_path":"/a.go"}`}}, Stop: "tool_use", HasUsage: true,
			Usage: Usage{Input: 93012, CacheRead: 90000, CacheWrite: 3000, Output: 80}}, nil},
	{"anthropic max tokens", Anthropic, `{"type":"message","content":[{"type":"text","text":"part"}],"stop_reason":"max_tokens"}`,
		Response{Text: "part", Stop: "max_tokens", Truncated: true}, nil},
	{"anthropic error", Anthropic, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, Response{}, ErrErrorResponse},
	{"anthropic other type", Anthropic, `{"type":"completion"}`, Response{}, ErrMalformedResponse},
	{"responses message and call", Responses,
		`{"id":"resp_1","object":"response","status":"completed","output":[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[]}]},{"type":"function_call","call_id":"call_9","name":"shell","arguments":"{\"cmd\":\"ls\"}"}],"usage":{"input_tokens":5000,"input_tokens_details":{"cached_tokens":4096},"output_tokens":20,"total_tokens":5020}}`,
		Response{Text: "Hi", ToolCalls: []chat.ToolCall{{ID: "call_9", Name: "shell", Arguments: `{"cmd":"ls"}`}}, Stop: "completed", HasUsage: true,
			Usage: Usage{Input: 5000, CacheRead: 4096, Output: 20}}, nil},
	{"responses incomplete", Responses, `{"object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}`,
		Response{Stop: "incomplete: max_output_tokens", Truncated: true}, nil},
	{"responses failed", Responses, `{"object":"response","status":"failed","error":{"code":"server_error","message":"x"}}`, Response{}, ErrErrorResponse},
	{"not json", OpenAI, `<html>502</html>`, Response{}, ErrMalformedResponse},
}

func TestDecodeResponse(t *testing.T) {
	for _, c := range responseCases {
		got, err := DecodeResponse(c.f, []byte(c.body))
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: error %v, want %v", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if msgs, err := DecodeAnswer(c.f, []byte(c.body)); err != nil || len(msgs) == 0 && len(c.want.ToolCalls)+len(c.want.Text)+len(c.want.Refusal) > 0 {
			t.Errorf("%s: answer %v, %v", c.name, msgs, err)
		}
		if !reflect.DeepEqual(*got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, *got, c.want)
		}
	}
}

func TestDecodeUsage(t *testing.T) {
	if _, ok := DecodeUsage(OpenAI, nil); ok {
		t.Error("no usage reported as one")
	}
	if _, ok := DecodeUsage(Anthropic, []byte("null")); ok {
		t.Error("null usage reported as one")
	}
	// A streamed message_start's usage.
	u, ok := DecodeUsage(Anthropic, []byte(`{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}`))
	if !ok || u != (Usage{Input: 15, CacheRead: 5, Output: 1}) {
		t.Errorf("got %+v, %v", u, ok)
	}
}

// FuzzDecodeResponse: any body gives a response or a typed error, never a panic.
func FuzzDecodeResponse(f *testing.F) {
	for _, c := range responseCases {
		f.Add(string(c.f), c.body)
	}
	f.Fuzz(func(t *testing.T, format, body string) {
		r, err := DecodeResponse(Format(format), []byte(body))
		if (r == nil) == (err == nil) {
			t.Fatalf("response %v and error %v", r, err)
		}
		if _, err := DecodeAnswer(Format(format), []byte(body)); err != nil && !errors.Is(err, ErrMalformedResponse) && slices.Contains([]Format{OpenAI, Anthropic, Responses, Gemini}, Format(format)) {
			t.Fatalf("answer: untyped error %v", err)
		}
	})
}

// DecodeAnswer is lossless: encoded back as the format's message array they are the
// provider's own message (its content blocks, items or parts, every field kept), so an agent
// that keeps its own history sends back exactly what it was sent: Anthropic thinking with
// its signature, Responses reasoning items, Gemini thought signatures, unknown fields.
func TestDecodeAnswerLossless(t *testing.T) {
	cases := []struct {
		name, body string
		f          Format
		// want is the message array the answer is, as a request would carry it.
		want string
	}{
		{"openai", `{"choices":[{"message":{"role":"assistant","content":"Done.","refusal":null,"annotations":[]},"finish_reason":"stop"}]}`, OpenAI,
			`[{"role":"assistant","content":"Done.","refusal":null,"annotations":[]}]`},
		{"openai tool call", `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"grep","arguments":"{\"q\":\"x\"}"}}]},"finish_reason":"tool_calls"}]}`, OpenAI,
			`[{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"grep","arguments":"{\"q\":\"x\"}"}}]}]`},
		{"anthropic thinking", `{"type":"message","role":"assistant","content":[{"type":"thinking","thinking":"Let me think.","signature":"EqQBCkYIBRgCKkB+sig=="},{"type":"redacted_thinking","data":"EmwKAhgBEgy3"},{"type":"text","text":"Let me look.","citations":null},{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/a.go"}}],"stop_reason":"tool_use"}`, Anthropic,
			`[{"role":"assistant","content":[{"type":"thinking","thinking":"Let me think.","signature":"EqQBCkYIBRgCKkB+sig=="},{"type":"redacted_thinking","data":"EmwKAhgBEgy3"},{"type":"text","text":"Let me look.","citations":null},{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/a.go"}}]}]`},
		{"responses", `{"object":"response","status":"completed","output":[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAA"},{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi","annotations":[]}]},{"type":"function_call","id":"fc_1","call_id":"call_9","name":"shell","arguments":"{}"}]}`, Responses,
			`[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAA"},{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi","annotations":[]}]},{"type":"function_call","id":"fc_1","call_id":"call_9","name":"shell","arguments":"{}"}]`},
		{"gemini", `{"candidates":[{"content":{"role":"model","parts":[{"text":"thinking...","thought":true,"thoughtSignature":"CiQB"},{"functionCall":{"name":"ls","args":{"dir":"."}},"thoughtSignature":"CiUB"}]},"finishReason":"STOP"}]}`, Gemini,
			`[{"role":"model","parts":[{"text":"thinking...","thought":true,"thoughtSignature":"CiQB"},{"functionCall":{"name":"ls","args":{"dir":"."}},"thoughtSignature":"CiUB"}]}]`},
	}
	for _, c := range cases {
		msgs, err := DecodeAnswer(c.f, []byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := EncodeMessages(c.f, msgs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !sameJSON(t, got, []byte(c.want)) {
			t.Errorf("%s: the answer encodes as\n%s\nwant\n%s", c.name, got, c.want)
		}
		// And the array decodes to the same messages.
		back, err := DecodeMessages(c.f, got)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		again, err := EncodeMessages(c.f, back)
		if err != nil || !sameJSON(t, again, got) {
			t.Errorf("%s: decoded and encoded again: %s (%v)", c.name, again, err)
		}
	}
	if _, err := EncodeMessages(Anthropic, []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}); err == nil {
		t.Error("a system message in an Anthropic message array: no error")
	}
	if _, err := DecodeMessages("nope", json.RawMessage("[]")); err == nil {
		t.Error("an unknown format: no error")
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return reflect.DeepEqual(x, y)
}
