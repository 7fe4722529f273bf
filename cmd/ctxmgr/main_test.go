package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// result is what one run of the command produced.
type result struct {
	code           int
	stdout, stderr string
}

func runCmd(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func counter(t *testing.T, enc string) tokens.Counter {
	t.Helper()
	c, err := tokens.ForEncoding(enc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// russian costs differently under o200k_base and cl100k_base, so it tells which encoding a
// model chose.
const russian = "Привет, мир! Здравствуйте, как дела?"

func TestTokensText(t *testing.T) {
	o200k := counter(t, tokens.O200kBase).Text(russian)
	cl100k := counter(t, tokens.CL100kBase).Text(russian)
	if o200k == cl100k {
		t.Fatalf("test text does not tell the encodings apart: %d under both", o200k)
	}
	o, c := strconv.Itoa(o200k)+"\n", strconv.Itoa(cl100k)+"\n"

	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string
		stderr []string // substrings of stderr
	}{
		{name: "hello world o200k_base", stdin: "hello world", args: []string{"tokens"}, stdout: "2\n"},
		{name: "stdin dash", stdin: "hello world", args: []string{"tokens", "-"}, stdout: "2\n"},
		{name: "empty stdin", stdin: "", args: []string{"tokens"}, stdout: "0\n"},
		{name: "default encoding is o200k_base", stdin: russian, args: []string{"tokens"}, stdout: o},
		{name: "encoding cl100k_base", stdin: russian, args: []string{"tokens", "--encoding", "cl100k_base"}, stdout: c},
		{name: "model gpt-4o", stdin: russian, args: []string{"tokens", "--model", "gpt-4o"}, stdout: o},
		{name: "model gpt-4 is cl100k", stdin: russian, args: []string{"tokens", "--model", "gpt-4"}, stdout: c},
		{name: "model gpt-3.5-turbo is cl100k", stdin: russian, args: []string{"tokens", "-m", "gpt-3.5-turbo"}, stdout: c},
		{name: "dated model gpt-4o-2024-08-06", stdin: russian, args: []string{"tokens", "--model", "gpt-4o-2024-08-06"}, stdout: o},
		{name: "dated model gpt-4-0613", stdin: russian, args: []string{"tokens", "--model=gpt-4-0613"}, stdout: c},
		{name: "provider prefix", stdin: russian, args: []string{"tokens", "--model", "openai/gpt-4.1-mini"}, stdout: o},
		{
			name: "unknown model", stdin: "x", args: []string{"tokens", "--model", "foo-9000"}, code: 1,
			stderr: []string{"ctxmgr: ", "unknown model", `"foo-9000"`, "--encoding", "o200k_base"},
		},
		{
			name: "non-OpenAI model without --heuristic", stdin: "x", args: []string{"tokens", "--model", "claude-sonnet-4-5"}, code: 1,
			stderr: []string{"not an OpenAI model", "--heuristic"},
		},
		{
			name: "gemini without --heuristic", stdin: "x", args: []string{"tokens", "--model", "gemini-2.5-pro"}, code: 1,
			stderr: []string{"not an OpenAI model", "--heuristic"},
		},
		{
			name: "unknown encoding", stdin: "x", args: []string{"tokens", "--encoding", "p50k_base"}, code: 1,
			stderr: []string{"unknown encoding", "p50k_base", "o200k_base", "cl100k_base"},
		},
		{
			name: "model and encoding", stdin: "x", args: []string{"tokens", "--model", "gpt-4o", "--encoding", "o200k_base"}, code: 2,
			stderr: []string{"ctxmgr: ", "mutually exclusive", "--help"},
		},
		{name: "heuristic and encoding", args: []string{"tokens", "--heuristic", "--encoding", "o200k_base"}, code: 2, stderr: []string{"mutually exclusive"}},
		{name: "unknown flag", args: []string{"tokens", "--bogus"}, code: 2, stderr: []string{"unknown flag"}},
		{name: "unknown command", args: []string{"bogus"}, code: 2, stderr: []string{`unknown command "bogus"`}},
		{name: "format without messages", args: []string{"tokens", "--format", "openai"}, code: 2, stderr: []string{"--format needs --messages"}},
		{name: "bad format", args: []string{"tokens", "--messages", "--format", "xml"}, code: 2, stderr: []string{`invalid --format "xml"`}},
		{name: "messages with two files", args: []string{"tokens", "--messages", "a", "b"}, code: 2, stderr: []string{"at most one FILE"}},
		{name: "missing file", args: []string{"tokens", "/nonexistent/file.txt"}, code: 1, stderr: []string{"ctxmgr: ", "/nonexistent/file.txt"}},
		{name: "version", args: []string{"--version"}, stdout: "ctxmgr " + readVersionInfo().String() + "\n"},
		{name: "version command", args: []string{"version"}, stdout: "ctxmgr " + readVersionInfo().String() + "\n"},
		{name: "version -v", args: []string{"-v"}, stdout: "ctxmgr " + readVersionInfo().String() + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCmd(t, tt.stdin, tt.args...)
			if r.code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", r.code, tt.code, r.stderr)
			}
			if tt.code == 0 && r.stdout != tt.stdout {
				t.Errorf("stdout %q, want %q", r.stdout, tt.stdout)
			}
			if tt.code != 0 && r.stdout != "" {
				t.Errorf("stdout %q on failure, want nothing", r.stdout)
			}
			if tt.code == 0 && r.stderr != "" {
				t.Errorf("stderr %q on success", r.stderr)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr %q does not contain %q", r.stderr, s)
				}
			}
		})
	}
}

func TestTokensHeuristic(t *testing.T) {
	want := strconv.Itoa(tokens.NewHeuristic(tokens.HeuristicOptions{}).Text(russian)) + "\n"
	for _, args := range [][]string{
		{"tokens", "--model", "claude-sonnet-4-5", "--heuristic"},
		{"tokens", "--model", "gemini-2.5-pro", "--heuristic"},
		{"tokens", "--heuristic"},
	} {
		r := runCmd(t, russian, args...)
		if r.code != 0 || r.stdout != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", args, r.code, r.stdout, r.stderr, want)
		}
	}
	// The help says that the heuristic is an estimate.
	r := runCmd(t, "", "tokens", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "ESTIMATE") || !strings.Contains(r.stdout, "--heuristic") {
		t.Errorf("tokens --help: exit %d, output %q", r.code, r.stdout)
	}
}

func TestTokensFiles(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.txt", "hello world")
	b := writeFile(t, dir, "b.txt", russian)
	empty := writeFile(t, dir, "empty.txt", "")
	nb := counter(t, tokens.O200kBase).Text(russian)

	// One file: just the number.
	if r := runCmd(t, "ignored", "tokens", a); r.code != 0 || r.stdout != "2\n" {
		t.Errorf("one file: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// Several files: one line each and a total.
	want := "2\t" + a + "\n" + strconv.Itoa(nb) + "\t" + b + "\n0\t" + empty + "\n" + strconv.Itoa(2+nb) + "\ttotal\n"
	if r := runCmd(t, "", "tokens", a, b, empty); r.code != 0 || r.stdout != want {
		t.Errorf("several files: exit %d, stdout %q, want %q, stderr %q", r.code, r.stdout, want, r.stderr)
	}

	// A file and stdin.
	want = "2\t" + a + "\n2\t-\n4\ttotal\n"
	if r := runCmd(t, "hello world", "tokens", a, "-"); r.code != 0 || r.stdout != want {
		t.Errorf("file and stdin: exit %d, stdout %q, want %q", r.code, r.stdout, want)
	}

	// A missing file among several: the others are counted, the error reported, exit 1.
	missing := filepath.Join(dir, "missing.txt")
	r := runCmd(t, "", "tokens", a, missing, a)
	want = "2\t" + a + "\n2\t" + a + "\n4\ttotal\n"
	if r.code != 1 || r.stdout != want || !strings.Contains(r.stderr, missing) {
		t.Errorf("missing file: exit %d, stdout %q (want %q), stderr %q", r.code, r.stdout, want, r.stderr)
	}
	if strings.Count(r.stderr, "ctxmgr:") != 1 {
		t.Errorf("missing file: want the error reported once, stderr %q", r.stderr)
	}

	// Invalid UTF-8 is counted, not rejected.
	bad := writeFile(t, dir, "bad.txt", "caf\xe9 \xff\xfe hello")
	r = runCmd(t, "", "tokens", bad)
	if n, err := strconv.Atoi(strings.TrimSpace(r.stdout)); r.code != 0 || err != nil || n < 3 {
		t.Errorf("invalid UTF-8: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestTokensInputLimit(t *testing.T) {
	old := maxInput
	maxInput = 16
	t.Cleanup(func() { maxInput = old })

	if r := runCmd(t, strings.Repeat("a", 16), "tokens"); r.code != 0 {
		t.Errorf("input at the limit: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"tokens"}, {"tokens", "--messages"}} {
		r := runCmd(t, strings.Repeat("a", 17), args...)
		if r.code != 1 || !strings.Contains(r.stderr, "input too large") || !strings.Contains(r.stderr, "16 bytes") {
			t.Errorf("%v over the limit: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if got := formatBytes(256 << 20); got != "256 MiB" {
		t.Errorf("formatBytes(256 MiB) = %q", got)
	}
}

const openAIBody = `{
  "model": "gpt-4o",
  "messages": [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
    ]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
    {"role": "assistant", "content": "It is 18C and sunny in Paris."}
  ],
  "tools": [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
  ]
}`

const anthropicBody = `{
  "model": "claude-sonnet-4-5",
  "max_tokens": 1024,
  "system": "You are helpful.",
  "tools": [
    {"name": "get_weather", "description": "Get the weather for a city",
      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
  ],
  "messages": [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": [
      {"type": "text", "text": "Let me check."},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    ]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C, sunny"}]},
    {"role": "assistant", "content": "It is 18C and sunny in Paris."}
  ]
}`

// weatherTool is the tool both bodies define, in the neutral model.
var weatherTool = chat.Tool{
	Name:        "get_weather",
	Description: "Get the weather for a city",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
}

func assistantCall(text, id, args string) chat.Message {
	m := chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "get_weather", Arguments: args}}}
	if text != "" {
		m.Content = []chat.Part{{Type: chat.PartText, Text: text}}
	}
	return m
}

// breakdown is the JSON the --messages mode prints; pointers tell absent keys from zeros.
type breakdown struct {
	System   *int   `json:"system"`
	Tools    *int   `json:"tools"`
	Messages []int  `json:"messages"`
	Priming  int    `json:"priming"`
	Total    *int   `json:"total"`
	Model    string `json:"model"`
	Counter  string `json:"counter"`
	Estimate bool   `json:"estimate"`
}

func parseBreakdown(t *testing.T, out string) breakdown {
	t.Helper()
	if !strings.HasSuffix(out, "}\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("output %q is not one JSON object and a newline", out)
	}
	var b breakdown
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if b.System == nil || b.Tools == nil || b.Messages == nil || b.Total == nil {
		t.Fatalf("output %q lacks a field", out)
	}
	sum := *b.System + *b.Tools + b.Priming
	for _, n := range b.Messages {
		sum += n
	}
	if sum != *b.Total {
		t.Errorf("output %q: total %d, parts sum to %d", out, *b.Total, sum)
	}
	return b
}

func TestTokensMessages(t *testing.T) {
	o200k := counter(t, tokens.O200kBase)
	cl100k := counter(t, tokens.CL100kBase)

	tests := []struct {
		name  string
		args  []string
		stdin string
		// want is the same conversation built by hand in the neutral model, counted with c.
		want *chat.Request
		c    tokens.Counter
		// counter and estimate are what the output says counted, and whether it is an estimate.
		counter  string
		estimate bool
	}{
		{
			name:  "openai body with tools and tool calls",
			stdin: openAIBody,
			c:     o200k,
			want: &chat.Request{
				System: []chat.Message{chat.TextMessage(chat.RoleSystem, "You are helpful.")},
				Tools:  []chat.Tool{weatherTool},
				Messages: []chat.Message{
					chat.TextMessage(chat.RoleUser, "What is the weather in Paris?"),
					assistantCall("", "call_1", `{"city":"Paris"}`),
					chat.ToolResult("call_1", "", "18C, sunny", false),
					chat.TextMessage(chat.RoleAssistant, "It is 18C and sunny in Paris."),
				},
			},
		},
		{
			name:  "openai body with gpt-4",
			args:  []string{"--model", "gpt-4"},
			stdin: openAIBody,
			c:     cl100k,
			want: &chat.Request{
				System: []chat.Message{chat.TextMessage(chat.RoleSystem, "You are helpful.")},
				Tools:  []chat.Tool{weatherTool},
				Messages: []chat.Message{
					chat.TextMessage(chat.RoleUser, "What is the weather in Paris?"),
					assistantCall("", "call_1", `{"city":"Paris"}`),
					chat.ToolResult("call_1", "", "18C, sunny", false),
					chat.TextMessage(chat.RoleAssistant, "It is 18C and sunny in Paris."),
				},
			},
		},
		{
			// The body's model is a claude model: its tokenizer is not public, so the
			// heuristic counts, and the output says it is an estimate.
			name:     "anthropic body with system, tool_use and tool_result",
			stdin:    anthropicBody,
			c:        tokens.NewHeuristic(tokens.HeuristicOptions{Options: tokens.Options{Images: tokens.ImagesAnthropic}}),
			counter:  "heuristic",
			estimate: true,
			want: &chat.Request{
				System: []chat.Message{chat.TextMessage(chat.RoleSystem, "You are helpful.")},
				Tools:  []chat.Tool{weatherTool},
				Messages: []chat.Message{
					chat.TextMessage(chat.RoleUser, "What is the weather in Paris?"),
					// Anthropic's input object is kept verbatim, spaces included.
					assistantCall("Let me check.", "toolu_1", `{"city": "Paris"}`),
					chat.ToolResult("toolu_1", "get_weather", "18C, sunny", false),
					chat.TextMessage(chat.RoleAssistant, "It is 18C and sunny in Paris."),
				},
			},
		},
		{
			name:  "anthropic body forced with --format",
			args:  []string{"--format", "anthropic"},
			stdin: `{"messages":[{"role":"user","content":"hi"}]}`,
			c:     o200k,
			want:  &chat.Request{Messages: []chat.Message{chat.TextMessage(chat.RoleUser, "hi")}},
		},
		{
			name:  "bare openai array",
			stdin: `[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]`,
			c:     o200k,
			want: &chat.Request{
				System: []chat.Message{chat.TextMessage(chat.RoleSystem, "Be brief.")},
				Messages: []chat.Message{
					chat.TextMessage(chat.RoleUser, "hi"),
					chat.TextMessage(chat.RoleAssistant, "hello"),
				},
			},
		},
		{
			name:  "anthropic body counted with an encoding given",
			args:  []string{"--encoding", "o200k_base"},
			stdin: anthropicBody,
			c:     o200k,
			want: &chat.Request{
				System: []chat.Message{chat.TextMessage(chat.RoleSystem, "You are helpful.")},
				Tools:  []chat.Tool{weatherTool},
				Messages: []chat.Message{
					chat.TextMessage(chat.RoleUser, "What is the weather in Paris?"),
					assistantCall("Let me check.", "toolu_1", `{"city": "Paris"}`),
					chat.ToolResult("toolu_1", "get_weather", "18C, sunny", false),
					chat.TextMessage(chat.RoleAssistant, "It is 18C and sunny in Paris."),
				},
			},
			counter:  "o200k_base",
			estimate: true,
		},
		{
			name:    "the body's model picks the encoding",
			stdin:   `{"model":"gpt-4-0613","messages":[{"role":"user","content":"Привет, мир!"}]}`,
			c:       cl100k,
			want:    &chat.Request{Messages: []chat.Message{chat.TextMessage(chat.RoleUser, "Привет, мир!")}},
			counter: "cl100k_base",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCmd(t, tt.stdin, append([]string{"tokens", "--messages"}, tt.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			got := parseBreakdown(t, r.stdout)
			want := tt.c.Request(tt.want)
			if *got.System != want.System || *got.Tools != want.Tools || *got.Total != want.Total ||
				len(got.Messages) != len(want.Messages) {
				t.Fatalf("got %s, want %+v", strings.TrimSpace(r.stdout), want)
			}
			for i := range want.Messages {
				if got.Messages[i] != want.Messages[i] {
					t.Errorf("message %d: got %d tokens, want %d", i, got.Messages[i], want.Messages[i])
				}
			}
			if len(tt.want.Tools) > 0 && *got.Tools == 0 {
				t.Errorf("tools counted as 0")
			}
			wantCounter := tt.counter
			if wantCounter == "" {
				wantCounter = tt.c.Name()
			}
			if got.Counter != wantCounter || got.Estimate != tt.estimate {
				t.Errorf("counter %q, estimate %v; want %q, %v", got.Counter, got.Estimate, wantCounter, tt.estimate)
			}
		})
	}

	// A hand-checked figure: a user message "hi" costs 3 (framing) + 1 ("user") + 1 ("hi"),
	// and the request 3 for the reply priming.
	r := runCmd(t, `[{"role":"user","content":"hi"}]`, "tokens", "--messages")
	if want := `{"system":0,"tools":0,"messages":[5],"priming":3,"total":8,"counter":"o200k_base","estimate":false}` + "\n"; r.code != 0 || r.stdout != want {
		t.Errorf("bare array: exit %d, stdout %q, want %q", r.code, r.stdout, want)
	}

	// A file argument works like stdin.
	p := writeFile(t, t.TempDir(), "body.json", openAIBody)
	fromFile := runCmd(t, "", "tokens", "--messages", p)
	fromStdin := runCmd(t, openAIBody, "tokens", "--messages")
	if fromFile.code != 0 || fromFile.stdout != fromStdin.stdout {
		t.Errorf("file: exit %d, stdout %q; stdin gave %q", fromFile.code, fromFile.stdout, fromStdin.stdout)
	}
}

func TestTokensMessagesErrors(t *testing.T) {
	tests := []struct {
		name   string
		stdin  string
		args   []string
		stderr []string
	}{
		{name: "malformed JSON", stdin: `{"messages": [`, stderr: []string{"malformed JSON"}},
		{name: "malformed array", stdin: `[{"role":"user","content":"hi"},]`, stderr: []string{"malformed JSON"}},
		{name: "not JSON", stdin: `hello world`, stderr: []string{"malformed JSON"}},
		{name: "empty stdin", stdin: ``, stderr: []string{"malformed JSON", "empty body"}},
		{name: "null", stdin: `null`, stderr: []string{"malformed JSON"}},
		{name: "message not an object", stdin: `[{"role":"user","content":"hi"}, 42]`, stderr: []string{"message 1", "malformed JSON"}},
		{
			name:   "unknown role",
			stdin:  `[{"role":"user","content":"hi"},{"role":"wizard","content":"abracadabra"}]`,
			stderr: []string{"message 1", "role", "unknown role", `"wizard"`},
		},
		{
			name: "unknown role in anthropic body",
			// (wire takes mid-conversation "system" entries in Anthropic bodies since b496f66.)
			stdin:  `{"system":"s","messages":[{"role":"user","content":"hi"},{"role":"wizard","content":"x"}]}`,
			stderr: []string{"message 1", "unknown role", `"wizard"`},
		},
		{
			name: "orphan tool result after system messages",
			// The index is the one in the body's messages array, system message included.
			stdin:  `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"nope","content":"x"}]}`,
			stderr: []string{"message 2", "tool_call_id", "tool result without a preceding call"},
		},
		{
			name: "orphan anthropic tool_result after a split message",
			// Wire message 1 becomes two neutral messages (a tool result, then text); the
			// error names wire message 2, not neutral message 3.
			stdin: `{"messages":[
				{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"},{"type":"text","text":"thanks"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9","content":"?"}]}]}`,
			stderr: []string{"message 2:", "tool result without a preceding call"},
		},
		{
			name:   "duplicate tool call id",
			stdin:  `[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}]`,
			stderr: []string{"message 0", "tool_calls[1].id", "duplicate tool call id"},
		},
		{
			name:   "invalid UTF-8 in a message",
			stdin:  "[{\"role\":\"user\",\"content\":\"caf\xe9\"}]",
			stderr: []string{"message 0", "invalid UTF-8"},
		},
		{name: "wrong format forced", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"--format", "anthropic"}, stderr: []string{"malformed JSON"}},
		{name: "empty array", stdin: `[]`, stderr: []string{"no messages", "empty"}},
		{name: "model without messages", stdin: `{"model":"x"}`, stderr: []string{"no messages", `"model"`}},
		{name: "empty object", stdin: `{}`, stderr: []string{"no messages"}},
		{name: "empty messages", stdin: `{"model":"gpt-4o","messages":[]}`, stderr: []string{"no messages", "empty"}},
		{
			name: "openai forced on an anthropic body", stdin: `{"model":"claude-sonnet-4-5","system":"Be brief.","messages":[{"role":"user","content":"hi"}]}`,
			args: []string{"--format", "openai"}, stderr: []string{"--format openai", "an Anthropic body", `top-level "system"`},
		},
		{
			name: "anthropic forced on an openai body", stdin: `{"messages":[{"role":"developer","content":"s"},{"role":"user","content":"hi"}]}`,
			args: []string{"--format", "anthropic"}, stderr: []string{"--format anthropic", "an OpenAI body", `role "developer"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCmd(t, tt.stdin, append([]string{"tokens", "--messages"}, tt.args...)...)
			if r.code != 1 {
				t.Errorf("exit code %d, want 1 (stdout %q, stderr %q)", r.code, r.stdout, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q on failure", r.stdout)
			}
			if !strings.HasPrefix(r.stderr, "ctxmgr: ") {
				t.Errorf("stderr %q does not start with \"ctxmgr: \"", r.stderr)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr %q does not contain %q", r.stderr, s)
				}
			}
		})
	}
}

// Odd inputs never panic and always end with exit code 0 or 1.
func TestTokensMessagesOddInputs(t *testing.T) {
	inputs := []string{
		`{}`, `[]`, `42`, `"x"`, `true`, `{"messages":null}`, `{"messages":{}}`, `[null]`, `[[]]`,
		`{"messages":[{"role":"user"}]}`, `{"messages":[{"role":"user","content":[null]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`,
		`{"system":[{"type":"text"}],"messages":[{"role":"assistant","content":[{"type":"tool_use"}]}]}`,
		`{"tools":[null],"messages":[]}`, `{"tools":[{"input_schema":5}],"messages":[]}`,
		"\xff\xfe", `[{"role":"user","content":"\ud800"}]`,
	}
	for _, in := range inputs {
		for _, f := range []string{"", "openai", "anthropic"} {
			args := []string{"tokens", "--messages"}
			if f != "" {
				args = append(args, "--format", f)
			}
			r := runCmd(t, in, args...)
			if r.code != 0 && r.code != 1 {
				t.Errorf("%q %v: exit %d, stderr %q", in, args, r.code, r.stderr)
			}
			if r.code == 0 {
				parseBreakdown(t, r.stdout)
			}
		}
	}
}

func TestRootCommand(t *testing.T) {
	// Every subcommand is listed in the help.
	r := runCmd(t, "", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "tokens") {
		t.Errorf("--help: exit %d, stdout %q", r.code, r.stdout)
	}
	// No arguments prints the help.
	if r := runCmd(t, ""); r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
		t.Errorf("no arguments: exit %d, stdout %q", r.code, r.stdout)
	}
	// Usage errors do not dump the whole usage text (SilenceUsage) but point to --help.
	r = runCmd(t, "", "tokens", "--model")
	if r.code != 2 || strings.Contains(r.stderr, "Flags:") || !strings.Contains(r.stderr, "ctxmgr tokens --help") {
		t.Errorf("flag without value: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestVersionString(t *testing.T) {
	for _, tc := range []struct {
		v    versionInfo
		want string
	}{
		{versionInfo{Version: "v1.2.3", Go: "go1.26.0"}, "v1.2.3 go1.26.0"},
		{versionInfo{Version: "v0.0.0-20261123033145-f0e82bd0a77d", Revision: "f0e82bd0a77d02faef6d7afda9cc2a526a482dda", Time: "2026-11-23T03:31:45Z", Go: "go1.26.8"},
			"v0.0.0-20261123033145-f0e82bd0a77d (rev f0e82bd0a77d, 2026-11-23T03:31:45Z) go1.26.8"},
		{versionInfo{Version: "dev", Revision: "abc", Dirty: true, Go: "go1.26.8"}, "dev (rev abc+dirty) go1.26.8"},
		{versionInfo{Version: "dev", Go: "go1.26.8"}, "dev (no VCS revision recorded) go1.26.8"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.v, got, tc.want)
		}
	}
}
