package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
)

// geminiSig is a thoughtSignature as the API issues it, with escapes that a re-encoding
// would spell otherwise: it must come back byte for byte.
const geminiSig = `"CiQB0e2Kb\/7x+Zq\u003d\u003d"`

var geminiBodies = []string{
	// Gemini CLI's shape: systemInstruction, parametersJsonSchema tools, a tool loop with
	// signatures, parallel calls answered in one user content, generationConfig.
	`{"contents":[{"role":"user","parts":[{"text":"list the files"}]},` +
		`{"role":"model","parts":[{"text":"Looking.","thoughtSignature":` + geminiSig + `},{"functionCall":{"name":"ls","args":{"path":"."}},"thoughtSignature":` + geminiSig + `},{"functionCall":{"name":"ls","args":{"path":"src"}}}]},` +
		`{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"a.go\nb.go"}}},{"functionResponse":{"name":"ls","response":{"output":"c.go"}}}]},` +
		`{"role":"model","parts":[{"text":"Done"}]}],` +
		`"systemInstruction":{"role":"user","parts":[{"text":"You are an agent."},{"text":"Be brief."}]},` +
		`"tools":[{"functionDeclarations":[{"name":"ls","description":"list","parametersJsonSchema":{"type":"object","properties":{"path":{"type":"string"}}}}]},{"googleSearch":{}}],` +
		`"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}},"generationConfig":{"maxOutputTokens":8192,"temperature":0,"thinkingConfig":{"includeThoughts":true}}}`,
	// ids on calls and responses, answered out of order; thought parts; error responses;
	// images, files, unknown parts; a response object that is not one string.
	`{"contents":[{"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},{"fileData":{"mimeType":"application/pdf","fileUri":"https://x/f.pdf"}}]},` +
		`{"role":"model","parts":[{"thought":true,"text":"hmm","thoughtSignature":` + geminiSig + `},{"functionCall":{"id":"c1","name":"read","args":{"f":"a"}}},{"functionCall":{"id":"c2","name":"read","args":{"f":"b"}}},{"executableCode":{"language":"PYTHON","code":"1"}}]},` +
		`{"role":"user","parts":[{"functionResponse":{"id":"c2","name":"read","response":{"error":"no such file"}}},{"functionResponse":{"id":"c1","name":"read","response":{"content":"x","lines":3}}},{"text":"and then?"}]}],` +
		`"safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}]}`,
	// A content without a role, a call without args, parameters (OpenAPI schema).
	`{"contents":[{"parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"name":"now"}}]},{"role":"user","parts":[{"functionResponse":{"name":"now","response":{"output":"noon"}}}]}],` +
		`"tools":[{"functionDeclarations":[{"name":"now","parameters":{"type":"OBJECT"}},{"name":"later","description":""}]}]}`,
}

func TestGeminiRoundTrip(t *testing.T) {
	for i, body := range geminiBodies {
		req, err := DecodeGemini([]byte(body))
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		out, err := EncodeGemini(req)
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		jsonEqual(t, []byte(body), out)
		if n := strings.Count(body, geminiSig); bytes.Count(out, []byte(geminiSig)) != n {
			t.Errorf("body %d: %d signatures byte for byte, want %d:\n%s", i, bytes.Count(out, []byte(geminiSig)), n, out)
		}
		if Detect([]byte(body)) != Gemini {
			t.Errorf("body %d detected as %s", i, Detect([]byte(body)))
		}
		// With an encode cache, twice: the same body.
		c := encodecache.New()
		for k := 0; k < 2; k++ {
			got, err := encodecache.AppendGemini(nil, req, c)
			if err != nil || !bytes.Equal(got, out) {
				t.Fatalf("cached encoding %d differs (%v):\n%s\n%s", k, err, got, out)
			}
		}
	}
}

func TestGeminiMapping(t *testing.T) {
	req, err := DecodeGemini([]byte(geminiBodies[0]))
	if err != nil {
		t.Fatal(err)
	}
	if len(req.System) != 1 || req.System[0].Text() != "You are an agent.\nBe brief." {
		t.Fatalf("system %+v", req.System)
	}
	roles := []chat.Role{}
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	want := []chat.Role{chat.RoleUser, chat.RoleAssistant, chat.RoleTool, chat.RoleTool, chat.RoleAssistant}
	if !reflect.DeepEqual(roles, want) {
		t.Fatalf("roles %v, want %v", roles, want)
	}
	a := req.Messages[1]
	if len(a.ToolCalls) != 2 || a.ToolCalls[0].Arguments != `{"path":"."}` || string(a.ToolCalls[0].Extra["thoughtSignature"]) != geminiSig {
		t.Fatalf("calls %+v", a.ToolCalls)
	}
	if req.Messages[2].ToolCallID != a.ToolCalls[0].ID || req.Messages[3].ToolCallID != a.ToolCalls[1].ID || a.ToolCalls[0].ID == a.ToolCalls[1].ID {
		t.Fatalf("pairing by order and name: %q %q for %q %q", req.Messages[2].ToolCallID, req.Messages[3].ToolCallID, a.ToolCalls[0].ID, a.ToolCalls[1].ID)
	}
	if !SyntheticGeminiID(a.ToolCalls[0].ID) || req.Messages[2].Text() != "a.go\nb.go" || req.Messages[2].Name != "ls" {
		t.Fatalf("tool message %+v", req.Messages[2])
	}
	if err := chat.Validate(req.Messages); err != nil {
		t.Fatalf("the decoded history is not valid: %v", err)
	}
	if len(req.Tools) != 2 || req.Tools[0].Name != "ls" || req.Tools[1].Raw == nil {
		t.Fatalf("tools %+v", req.Tools)
	}

	// Pairing by id, answered out of order.
	req, err = DecodeGemini([]byte(geminiBodies[1]))
	if err != nil {
		t.Fatal(err)
	}
	m := req.Messages
	if m[1].Content[0].Type != chat.PartReasoning || m[1].Content[0].Text != "hmm" || m[1].Content[1].Type != chat.PartOther {
		t.Fatalf("model parts %+v", m[1].Content)
	}
	if m[2].ToolCallID != "c2" || !m[2].IsError || m[3].ToolCallID != "c1" || m[3].Text() != `{"content":"x","lines":3}` || !m[4].JoinPrev || m[4].Text() != "and then?" {
		t.Fatalf("messages %+v", m[2:])
	}
	if m[0].Content[1].Type != chat.PartImage || m[0].Content[2].Type != chat.PartFile || m[0].Content[2].File.URL != "https://x/f.pdf" {
		t.Fatalf("user parts %+v", m[0].Content)
	}
	if err := chat.Validate(req.Messages); err != nil {
		t.Fatalf("the decoded history is not valid: %v", err)
	}
}

// TestGeminiEdited: what the pipeline changes (a masked tool result, a summary, the proxy's
// own tool and its call and result) is written as the Gemini API reads it.
func TestGeminiEdited(t *testing.T) {
	req, err := DecodeGemini([]byte(geminiBodies[0]))
	if err != nil {
		t.Fatal(err)
	}
	req.Messages[2].Content = []chat.Part{{Type: chat.PartText, Text: "[masked]"}}
	req.Messages = append([]chat.Message{{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartText, Text: "summary"}}}}, req.Messages...)
	req.Tools = append(req.Tools, chat.Tool{Name: "ctxmgr_read", Description: "read", Parameters: json.RawMessage(`{"type":"object"}`)})
	call := chat.ToolCall{ID: "~gemini:r0", Name: "ctxmgr_read", Arguments: `{"ref":"x"}`}
	req.Messages = append(req.Messages, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{call}},
		chat.ToolResult(call.ID, "ctxmgr_read", "the text", false))
	out, err := EncodeGemini(req)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Contents []struct {
			Role  string            `json:"role"`
			Parts []json.RawMessage `json:"parts"`
		} `json:"contents"`
		Tools []struct {
			FunctionDeclarations []map[string]json.RawMessage `json:"functionDeclarations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Contents) != 7 || v.Contents[0].Role != "user" || v.Contents[5].Role != "model" || v.Contents[6].Role != "user" {
		t.Fatalf("contents:\n%s", out)
	}
	if got := string(v.Contents[3].Parts[0]); got != `{"functionResponse":{"name":"ls","response":{"output":"[masked]"}}}` {
		t.Errorf("masked result %s", got)
	}
	if got := string(v.Contents[5].Parts[0]); got != `{"functionCall":{"name":"ctxmgr_read","args":{"ref":"x"}}}` {
		t.Errorf("read call %s", got)
	}
	if got := string(v.Contents[6].Parts[0]); got != `{"functionResponse":{"name":"ctxmgr_read","response":{"output":"the text"}}}` {
		t.Errorf("read result %s", got)
	}
	if len(v.Tools) != 2 || len(v.Tools[0].FunctionDeclarations) != 2 || v.Tools[0].FunctionDeclarations[1]["parametersJsonSchema"] == nil {
		t.Errorf("tools:\n%s", out)
	}
	// Cross-format: a Gemini request as the other formats, and another format's as Gemini.
	for _, f := range []Format{OpenAI, Anthropic, Responses} {
		b, err := Encode(f, req)
		if err != nil || !json.Valid(b) {
			t.Fatalf("%s: %v %s", f, err, b)
		}
		back, err := Decode(f, b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		g, err := EncodeGemini(back)
		if err != nil {
			t.Fatalf("%s to gemini: %v", f, err)
		}
		if _, err := DecodeGemini(g); err != nil {
			t.Fatalf("%s to gemini: %v\n%s", f, err, g)
		}
	}
}

func TestGeminiErrors(t *testing.T) {
	cases := []decodeErrorCase{
		{"not json", `{"contents":[`, chat.ErrMalformedJSON, -1, ""},
		{"contents not array", `{"contents":{}}`, chat.ErrMalformedJSON, -1, "contents"},
		{"content not object", `{"contents":[7]}`, chat.ErrMalformedJSON, 0, ""},
		{"unknown role", `{"contents":[{"role":"robot","parts":[]}]}`, chat.ErrUnknownRole, 0, "role"},
		{"role not string", `{"contents":[{"role":1,"parts":[]}]}`, chat.ErrMalformedJSON, 0, "role"},
		{"call without name", `{"contents":[{"role":"model","parts":[{"functionCall":{"args":{}}}]}]}`, chat.ErrMalformedJSON, 0, "parts[0].functionCall"},
		{"invalid utf8", "{\"contents\":[{\"parts\":[{\"text\":\"a\xff\"}]}]}", chat.ErrInvalidUTF8, 0, ""},
		{"tools not array", `{"tools":{}}`, chat.ErrMalformedJSON, -1, "tools"},
	}
	checkDecodeErrors(t, Gemini, cases)
}

// decodeErrorCase is a body a decoder refuses, with the error and its position.
type decodeErrorCase struct {
	name, body string
	want       error
	index      int
	field      string
}

// checkDecodeErrors decodes each case's body in format f and checks the typed error.
func checkDecodeErrors(t *testing.T, f Format, cases []decodeErrorCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(f, []byte(c.body))
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

func TestGeminiResponse(t *testing.T) {
	body := `{"candidates":[{"content":{"role":"model","parts":[{"text":"think","thought":true},{"text":"Hi "},{"text":"there"},{"functionCall":{"name":"ls","args":{"p":1}}}]},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":7,"thoughtsTokenCount":3,"cachedContentTokenCount":100,"totalTokenCount":130},"modelVersion":"gemini-2.5-flash"}`
	r, err := DecodeResponse(Gemini, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "Hi there" || len(r.ToolCalls) != 1 || r.ToolCalls[0].Arguments != `{"p":1}` || r.Stop != "STOP" ||
		r.Usage != (Usage{Input: 120, Output: 10, CacheRead: 100}) {
		t.Fatalf("%+v", r)
	}
	arr := `[{"candidates":[{"content":{"role":"model","parts":[{"text":"a"}]}}]},{"candidates":[{"content":{"role":"model","parts":[{"text":"b"}]},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":5}}]`
	r, err = DecodeResponse(Gemini, []byte(arr))
	if err != nil || r.Text != "ab" || !r.Truncated || r.Usage.Input != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := DecodeResponse(Gemini, []byte(`{"error":{"code":400,"message":"x","status":"INVALID_ARGUMENT"}}`)); !errors.Is(err, ErrErrorResponse) {
		t.Fatalf("error body: %v", err)
	}
}

func FuzzGemini(f *testing.F) {
	for _, b := range geminiBodies {
		f.Add([]byte(b))
	}
	f.Add([]byte(`{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"x","response":"s"}},{"text":"t"}]},{"role":"model"},{"role":"function","parts":null}]}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzRoundTrip(t, Gemini, body) })
}

// fuzzRoundTrip decodes body in format f: a typed error, or a request that every format
// encodes as valid JSON (that the Responses and Gemini decoders read back) and whose encoding
// in f decodes again to the same encoding.
func fuzzRoundTrip(t *testing.T, f Format, body []byte) {
	req, err := Decode(f, body)
	if err != nil {
		var ce *chat.Error
		if !errors.As(err, &ce) {
			t.Fatalf("untyped error: %v", err)
		}
		return
	}
	for _, other := range []Format{OpenAI, Anthropic, Responses, Gemini} {
		cross, err := Encode(other, req)
		if err != nil {
			continue
		}
		if !json.Valid(cross) {
			t.Fatalf("%s encoding is not valid JSON:\n%s", other, cross)
		}
		if other == Responses || other == Gemini {
			if _, err := Decode(other, cross); err != nil {
				t.Fatalf("our %s encoding does not decode: %v\n%s", other, err, cross)
			}
		}
	}
	out, err := Encode(f, req)
	if err != nil {
		return // raw values the encoder refuses; never a panic
	}
	req2, err := Decode(f, out)
	if err != nil {
		t.Fatalf("re-decode of our own output failed: %v\n%s", err, out)
	}
	out2, err := Encode(f, req2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, out2) {
		t.Fatalf("encoding not stable:\n%s\n%s", out, out2)
	}
}

// TestDecodeNextGemini: a growing Gemini conversation is decoded from where it differs from
// the body before (every result equal to Decode's), resuming only where no model turn waits
// for its function responses.
func TestDecodeNextGemini(t *testing.T) {
	contents := []string{
		`{"role":"user","parts":[{"text":"<session_context>cwd /w</session_context>"},{"text":"run ls"}]}`,
		`{"role":"model","parts":[{"text":"Listing."},{"functionCall":{"name":"ls","args":{"p":"."}},"thoughtSignature":` + geminiSig + `}]}`,
		`{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"a\nb"}}}]}`,
		`{"role":"model","parts":[{"functionCall":{"id":"c2","name":"cat","args":{}}},{"functionCall":{"id":"c3","name":"cat","args":{}}}]}`,
		`{"role":"user","parts":[{"functionResponse":{"id":"c3","name":"cat","response":{"output":"3"}}},{"functionResponse":{"id":"c2","name":"cat","response":{"output":"2"}}}]}`,
		`{"role":"model","parts":[{"text":"two files"}]}`,
		`{"role":"user","parts":[{"text":"now patch"}]}`,
		`{"role":"model","parts":[{"functionCall":{"name":"patch","args":{}}}]}`,
		`{"role":"user","parts":[{"functionResponse":{"name":"patch","response":{"output":"done"}}},{"text":"and test"}]}`,
	}
	conv := conversation(`{"systemInstruction":{"parts":[{"text":"You are an agent."}]},"contents":`, `,"tools":[{"functionDeclarations":[{"name":"ls"}]}],"generationConfig":{"maxOutputTokens":100}}`, contents)
	reused := 0
	for i := 1; i < len(conv); i++ {
		if checkNext(t, Gemini, []byte(conv[i-1]), []byte(conv[i])) {
			reused++
		}
		for j := 0; j < i; j++ {
			checkNext(t, Gemini, []byte(conv[j]), []byte(conv[i]))
			checkNext(t, Gemini, []byte(conv[i]), []byte(conv[j]))
		}
	}
	if reused < len(conv)-3 {
		t.Fatalf("reused the previous decoding for %d of %d bodies", reused, len(conv)-1)
	}
}

func FuzzDecodeNextGemini(f *testing.F) {
	for _, b := range geminiBodies {
		f.Add([]byte(b), []byte(strings.Replace(b, `]}],`, `]},{"role":"user","parts":[{"text":"more"}]}],`, 1)))
		f.Add([]byte(b), []byte(strings.Replace(b, `},{"role":"user"`, `}],"x":[{"role":"user"`, 1)))
	}
	f.Fuzz(func(t *testing.T, prev, next []byte) { fuzzNext(t, Gemini, prev, next) })
}
