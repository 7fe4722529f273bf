package summarize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/wire"
)

const goodAnswer = `# Conversation summary
## Goal
- Fix the failing test in ` + "`pkg/store/file.go`" + `.
## Constraints & Preferences
- Must not change the public API; never delete tests.
## Progress
### Done
- ` + "`go test ./pkg/store`" + ` → ok (#5)
### In Progress
- ` + "`make build`" + ` (#12)
### Blocked
- ` + "`golangci-lint run ./...`" + ` → exit 1: declared and not used: tmpDir
## Key Decisions
- Create the directory with ` + "`os.MkdirAll`" + ` before opening the file.
## Next Steps
- Rerun the linter after removing tmpDir.
## Critical Context
- ` + "`pkg/store/file.go`, `/tmp/x/dialog.jsonl`" + `
`

const prevSummary = "# Conversation summary\n## Goal\n- Earlier goal: set up the store package\n## Critical Context\n- Files: `pkg/store/store.go`\n"

// Real provider error bodies.
const (
	openAI429 = `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-abc on tokens per min (TPM): Limit 200000, Used 199000, Requested 4000. Please try again in 1.2s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	openAI500 = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`
	openAI401 = `{"error":{"message":"Incorrect API key provided: sk-abc***xyz. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
	openAI400 = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	openAI503 = `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`
	anth529   = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	anth401   = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`
	anth403   = `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`
	anth500   = `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`
	html502   = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)

func openAIOK(text string, in, out int) string {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-9abc", "object": "chat.completion", "created": 1717171717, "model": "gpt-test",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text, "refusal": nil}, "logprobs": nil, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	})
	return string(b)
}

func anthropicOK(text string, in, out int) string {
	b, _ := json.Marshal(map[string]any{
		"id": "msg_01XyZ", "type": "message", "role": "assistant", "model": "claude-test",
		"content":     []any{map[string]any{"type": "text", "text": text}},
		"stop_reason": "end_turn", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": out, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 200},
	})
	return string(b)
}

// fake is an LLM endpoint: respond gets the 1-based call number.
type fake struct {
	mu      sync.Mutex
	calls   int
	bodies  [][]byte
	headers []http.Header
	paths   []string
	respond func(n int, w http.ResponseWriter, r *http.Request)
}

func newFake(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) (*fake, *httptest.Server) {
	f := &fake{respond: respond}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls++
		n := f.calls
		f.bodies = append(f.bodies, b)
		f.headers = append(f.headers, r.Header.Clone())
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		f.respond(n, w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fake) n() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func reply(status int, body string) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// then answers with first on the first call and with rest afterwards.
func then(first, rest func(int, http.ResponseWriter, *http.Request)) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			first(n, w, r)
		} else {
			rest(n, w, r)
		}
	}
}

func baseURL(format wire.Format, srv string) string {
	if format == wire.Anthropic {
		return srv
	}
	return srv + "/v1"
}

func newTestLLM(t *testing.T, format wire.Format, srvURL string, tweak func(*LLMOptions)) Summarizer {
	t.Helper()
	o := LLMOptions{
		Format: format, BaseURL: baseURL(format, srvURL), APIKey: "sk-test", Model: "test-model",
		Timeout: 2 * time.Second, MaxOutputTokens: 777, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if tweak != nil {
		tweak(&o)
	}
	s, err := NewLLM(o)
	if err != nil {
		t.Fatalf("NewLLM: %v", err)
	}
	return s
}

func testRequest() Request {
	return Request{Messages: history(), Previous: prevSummary, Instruction: "keep the lint errors", ArchiveGuide: guide, TargetTokens: 1000}
}

func TestLLMOpenAIGood(t *testing.T) {
	f, srv := newFake(t, reply(200, openAIOK(goodAnswer, 1234, 321)))
	s := newTestLLM(t, wire.OpenAI, srv.URL, nil)
	r, err := s.Summarize(context.Background(), testRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r.Fallback || r.Attempts != 1 || r.Summarizer != "llm:test-model" || r.InputTokens != 1234 || r.OutputTokens != 321 {
		t.Errorf("result: %+v", r)
	}
	if want := guide + "\n\n" + goodAnswer; r.Text != want {
		t.Errorf("text:\n%s\nwant:\n%s", r.Text, want)
	}
	if f.paths[0] != "/v1/chat/completions" || f.headers[0].Get("Authorization") != "Bearer sk-test" || f.headers[0].Get("Content-Type") != "application/json" {
		t.Errorf("request: path %s headers %v", f.paths[0], f.headers[0])
	}
	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
		Messages  []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f.bodies[0], &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "test-model" || body.MaxTokens != 777 || body.Stream || len(body.Messages) != 2 || body.Messages[0].Role != "system" || body.Messages[1].Role != "user" {
		t.Fatalf("body: %s", f.bodies[0])
	}
	checkPrompt(t, body.Messages[0].Content, body.Messages[1].Content)
}

func checkPrompt(t *testing.T, system, user string) {
	t.Helper()
	// The target covers the whole summary: the model's part is what the archive guide leaves.
	about := fmt.Sprintf("about %d tokens", 1000-ByteCounter{}.Text(guide))
	for _, h := range append(Headings, hDone, hInProgress, hBlocked, about) {
		if !strings.Contains(system, h) {
			t.Errorf("system prompt lacks %q", h)
		}
	}
	for _, w := range []string{
		"<previous_summary>\n" + strings.TrimSpace(prevSummary) + "\n</previous_summary>",
		"<instruction>keep the lint errors</instruction>",
		"<archive_note>\n" + guide + "\n</archive_note>",
		`<new_messages first="0" count="13">`,
		"[#2 tool bash id=c1]", "[#10 tool read_file id=c4 ERROR]", `-> call bash id=c5: {"command":"make build"}`,
		"golangci-lint run ./...", "declared and not used: tmpDir",
	} {
		if !strings.Contains(user, w) {
			t.Errorf("user prompt lacks %q:\n%s", w, user)
		}
	}
}

func TestLLMAnthropicGood(t *testing.T) {
	f, srv := newFake(t, reply(200, anthropicOK(goodAnswer, 1000, 300)))
	s := newTestLLM(t, wire.Anthropic, srv.URL+"/v1/", nil)
	r, err := s.Summarize(context.Background(), testRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r.Fallback || r.Attempts != 1 || r.InputTokens != 1200 || r.OutputTokens != 300 || r.Text != guide+"\n\n"+goodAnswer {
		t.Errorf("result: %+v", r)
	}
	h := f.headers[0]
	if f.paths[0] != "/v1/messages" || h.Get("x-api-key") != "sk-test" || h.Get("anthropic-version") != "2023-06-01" || h.Get("Authorization") != "" {
		t.Errorf("request: path %s headers %v", f.paths[0], h)
	}
	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		System    string `json:"system"`
		Messages  []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f.bodies[0], &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "test-model" || body.MaxTokens != 777 || len(body.Messages) != 1 || body.Messages[0].Role != "user" {
		t.Fatalf("body: %s", f.bodies[0])
	}
	checkPrompt(t, body.System, body.Messages[0].Content)
}

func TestLLMAnswerShapes(t *testing.T) {
	cases := map[string]struct {
		answer string
		want   string
	}{
		"guide copied":       {guide + "\n\n" + goodAnswer, guide + "\n\n" + goodAnswer},
		"preamble":           {"Here is the updated summary:\n\n" + goodAnswer, guide + "\n\n" + goodAnswer},
		"fenced":             {"```markdown\n" + goodAnswer + "```", guide + "\n\n" + goodAnswer},
		"no title":           {strings.TrimPrefix(goodAnswer, Title+"\n"), guide + "\n\n" + goodAnswer},
		"think block":        {"<think>let me see</think>\n" + goodAnswer, guide + "\n\n" + goodAnswer},
		"rate limit in body": {strings.Replace(goodAnswer, "- Rerun the linter", "- Handle the rate limit (HTTP 429) in the client; rerun the linter", 1), ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, srv := newFake(t, reply(200, openAIOK(c.answer, 10, 10)))
			r, err := newTestLLM(t, wire.OpenAI, srv.URL, nil).Summarize(context.Background(), testRequest())
			if err != nil || r.Fallback {
				t.Fatalf("err %v, fallback %q", err, r.FallbackReason)
			}
			want := c.want
			if want == "" {
				want = guide + "\n\n" + c.answer
			}
			if r.Text != want {
				t.Errorf("text:\n%s\nwant:\n%s", r.Text, want)
			}
		})
	}
}

func TestLLMNoUsageCounted(t *testing.T) {
	_, srv := newFake(t, reply(200, `{"choices":[{"message":{"role":"assistant","content":`+jsonString(goodAnswer)+`},"finish_reason":"stop"}]}`))
	r, err := newTestLLM(t, wire.OpenAI, srv.URL, func(o *LLMOptions) { o.Counter = wordCounter{} }).Summarize(context.Background(), testRequest())
	if err != nil || r.Fallback {
		t.Fatal(err, r.FallbackReason)
	}
	req := testRequest()
	sp := parseInstruction(req.Instruction)
	system, user := buildPrompt(req, &sp, DefaultTranscriptCap)
	wc := wordCounter{}
	if r.InputTokens != wc.Text(system)+wc.Text(user) || r.OutputTokens != wc.Text(goodAnswer) {
		t.Errorf("tokens %d/%d, want %d/%d", r.InputTokens, r.OutputTokens, wc.Text(system)+wc.Text(user), wc.Text(goodAnswer))
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestLLMMaxCompletionTokens(t *testing.T) {
	f, srv := newFake(t, reply(200, openAIOK(goodAnswer, 1, 1)))
	_, err := newTestLLM(t, wire.OpenAI, srv.URL, func(o *LLMOptions) {
		o.MaxTokensParam = "max_completion_tokens"
		o.Header = http.Header{"X-Title": {"ctxmgr"}}
	}).Summarize(context.Background(), testRequest())
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.Unmarshal(f.bodies[0], &body)
	if body["max_completion_tokens"] != float64(777) || body["max_tokens"] != nil || f.headers[0].Get("X-Title") != "ctxmgr" {
		t.Errorf("body %s headers %v", f.bodies[0], f.headers[0])
	}
}

func TestLLMRetryThenSuccess(t *testing.T) {
	cases := []struct {
		name   string
		format wire.Format
		first  func(int, http.ResponseWriter, *http.Request)
	}{
		{"openai 429", wire.OpenAI, reply(429, openAI429)},
		{"openai 500", wire.OpenAI, reply(500, openAI500)},
		{"openai 503", wire.OpenAI, reply(503, openAI503)},
		{"nginx 502", wire.OpenAI, reply(502, html502)},
		{"anthropic 529", wire.Anthropic, reply(529, anth529)},
		{"anthropic 500", wire.Anthropic, reply(500, anth500)},
		{"greeting", wire.OpenAI, reply(200, openAIOK("Hello! How can I help you today?", 5, 9))},
		{"malformed", wire.Anthropic, reply(200, `{"id":"msg_1","type":"message","content":[{"type":"text","text":"# Conv`)},
		{"slow", wire.OpenAI, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok := reply(200, openAIOK(goodAnswer, 100, 50))
			if c.format == wire.Anthropic {
				ok = reply(200, anthropicOK(goodAnswer, 100, 50))
			}
			f, srv := newFake(t, then(c.first, ok))
			s := newTestLLM(t, c.format, srv.URL, func(o *LLMOptions) { o.Timeout = 300 * time.Millisecond })
			r, err := s.Summarize(context.Background(), testRequest())
			if err != nil {
				t.Fatal(err)
			}
			if r.Fallback || r.Attempts != 2 || f.n() != 2 || r.Text != guide+"\n\n"+goodAnswer {
				t.Errorf("result %+v after %d calls", r, f.n())
			}
		})
	}
}

func TestLLMFailuresFallBack(t *testing.T) {
	oversize := goodAnswer + strings.Repeat("- `pkg/store/file.go` line with more detail about the store\n", 400)
	cases := []struct {
		name     string
		format   wire.Format
		respond  func(int, http.ResponseWriter, *http.Request)
		reason   string
		attempts int
	}{
		{"openai 401", wire.OpenAI, reply(401, openAI401), "HTTP 401 (auth): Incorrect API key provided", 1},
		{"openai 400 overflow", wire.OpenAI, reply(400, openAI400), "HTTP 400 (overflow): This model's maximum context length", 1},
		{"anthropic 401", wire.Anthropic, reply(401, anth401), "HTTP 401 (auth): invalid x-api-key", 1},
		{"anthropic 403", wire.Anthropic, reply(403, anth403), "HTTP 403 (auth)", 1},
		{"openai 429 always", wire.OpenAI, reply(429, openAI429), "HTTP 429 (rate_limit): Rate limit reached", 3},
		{"anthropic 529 always", wire.Anthropic, reply(529, anth529), "HTTP 529 (server): Overloaded", 3},
		{"502 html always", wire.OpenAI, reply(502, html502), "HTTP 502", 3},
		{"slow", wire.Anthropic, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, "timeout after 150ms", 3},
		{"slow body", wire.OpenAI, func(_ int, w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			io.WriteString(w, `{"choices":[`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, "timeout", 3},
		{"empty content", wire.OpenAI, reply(200, openAIOK("", 10, 0)), "invalid answer: empty answer", 3},
		{"null content", wire.OpenAI, reply(200, `{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}`), "empty answer", 3},
		{"anthropic no content", wire.Anthropic, reply(200, `{"id":"msg_1","type":"message","role":"assistant","content":[],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":0}}`), "empty answer", 3},
		{"greeting", wire.OpenAI, reply(200, openAIOK("Hello! How can I help you today?", 10, 9)), "invalid answer: greeting", 3},
		{"greeting anthropic", wire.Anthropic, reply(200, anthropicOK("Hi there! What can I help you with?", 10, 9)), "greeting", 3},
		{"error string", wire.OpenAI, reply(200, openAIOK("Error: rate limit exceeded, please try again later.", 10, 9)), "invalid answer: error text", 3},
		{"sorry", wire.Anthropic, reply(200, anthropicOK("I'm sorry, but I can't help with summarizing this conversation.", 10, 9)), "error text", 3},
		{"error preamble", wire.OpenAI, reply(200, openAIOK("Upstream provider returned: internal server error\n\n"+goodAnswer, 10, 9)), "error text", 3},
		{"refusal", wire.OpenAI, reply(200, `{"choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't assist with that."},"finish_reason":"stop"}]}`), "refusal", 3},
		{"refusal in sections", wire.OpenAI, reply(200, openAIOK(refusalInSections("- I'm sorry, I can't help with that."), 10, 90)), "invalid answer: refusal inside a section", 3},
		{"error in sections", wire.Anthropic, reply(200, anthropicOK(refusalInSections("- Internal Server Error"), 10, 90)), "invalid answer: error text inside a section", 3},
		{"malformed json", wire.OpenAI, reply(200, `{"choices":[{"message":{"content":"# Conversation summary`), "malformed JSON response", 3},
		{"html 200", wire.OpenAI, reply(200, "<html><body>Gateway</body></html>"), "malformed JSON response", 3},
		{"no choices", wire.OpenAI, reply(200, `{"choices":[]}`), "no choices", 3},
		{"error in 200 body", wire.OpenAI, reply(200, `{"error":{"message":"upstream overloaded, retry later","type":"server_error"}}`), "error in response body", 3},
		{"anthropic error in 200", wire.Anthropic, reply(200, anth529), "error in response body", 3},
		{"no headings", wire.OpenAI, reply(200, openAIOK("The user wants to fix a failing test. We ran go test and it passed after the fix.", 10, 20)), "answer without headings ## Goal", 3},
		{"some headings", wire.Anthropic, reply(200, anthropicOK(strings.Replace(goodAnswer, "## Key Decisions", "## Decisions", 1), 10, 20)), "without headings ## Key Decisions", 3},
		{"oversize", wire.OpenAI, reply(200, openAIOK(oversize, 10, 9000)), "oversize answer", 3},
		{"truncated", wire.OpenAI, reply(200, strings.Replace(openAIOK(goodAnswer, 10, 777), `"finish_reason":"stop"`, `"finish_reason":"length"`, 1)), "cut at the output token limit", 3},
		{"anthropic max_tokens", wire.Anthropic, reply(200, strings.Replace(anthropicOK(goodAnswer, 10, 777), `"stop_reason":"end_turn"`, `"stop_reason":"max_tokens"`, 1)), "cut at the output token limit", 3},
	}
	want, err := NewExtractive(ExtractiveOptions{}).Summarize(context.Background(), testRequest())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, srv := newFake(t, c.respond)
			var logs bytes.Buffer
			var mu sync.Mutex
			s := newTestLLM(t, c.format, srv.URL, func(o *LLMOptions) {
				o.Timeout = 150 * time.Millisecond
				o.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
			})
			r, err := s.Summarize(context.Background(), testRequest())
			if err != nil {
				t.Fatal(err)
			}
			if !r.Fallback || r.Summarizer != "extractive (fallback)" || r.Text != want.Text {
				t.Errorf("not the extractive fallback: %+v", r)
			}
			if !strings.Contains(r.FallbackReason, c.reason) {
				t.Errorf("FallbackReason %q lacks %q", r.FallbackReason, c.reason)
			}
			if r.Attempts != c.attempts || f.n() != c.attempts {
				t.Errorf("attempts %d, calls %d, want %d", r.Attempts, f.n(), c.attempts)
			}
			mu.Lock()
			l := logs.String()
			mu.Unlock()
			if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "using the fallback summarizer") {
				t.Errorf("fallback not logged:\n%s", l)
			}
		})
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestLLMTransportErrorFallsBack(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // connection refused
	r, err := newTestLLM(t, wire.OpenAI, url, nil).Summarize(context.Background(), testRequest())
	if err != nil || !r.Fallback || r.Attempts != 3 || !strings.Contains(r.FallbackReason, "transport error") {
		t.Errorf("err %v result %+v", err, r)
	}
}

func TestLLMCanceled(t *testing.T) {
	started := make(chan struct{}, 4)
	_, srv := newFake(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	s := newTestLLM(t, wire.OpenAI, srv.URL, func(o *LLMOptions) { o.Timeout = 10 * time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	r, err := s.Summarize(ctx, testRequest())
	if !errors.Is(err, context.Canceled) || r.Text != "" || r.Fallback {
		t.Errorf("err %v result %+v", err, r)
	}
	// The caller's deadline, during the backoff between attempts.
	_, srv2 := newFake(t, reply(429, openAI429))
	s = newTestLLM(t, wire.OpenAI, srv2.URL, func(o *LLMOptions) { o.Backoff, o.MaxBackoff = time.Hour, time.Hour })
	ctx, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := s.Summarize(ctx, testRequest()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want DeadlineExceeded", err)
	}
}

func TestLLMFallbackError(t *testing.T) {
	_, srv := newFake(t, reply(401, openAI401))
	s := newTestLLM(t, wire.OpenAI, srv.URL, func(o *LLMOptions) { o.Fallback = failing{} })
	r, err := s.Summarize(context.Background(), testRequest())
	if err == nil || r.Text != "" || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("err %v result %+v", err, r)
	}
}

type failing struct{}

func (failing) Summarize(context.Context, Request) (Result, error) { return Result{}, errors.New("no") }

func TestLLMOptionsValidate(t *testing.T) {
	ok := LLMOptions{BaseURL: "https://api.openai.com/v1", Model: "gpt-4o-mini"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(*LLMOptions){
		"format":     func(o *LLMOptions) { o.Format = "gemini" },
		"no url":     func(o *LLMOptions) { o.BaseURL = "" },
		"url scheme": func(o *LLMOptions) { o.BaseURL = "ftp://x" },
		"url parse":  func(o *LLMOptions) { o.BaseURL = "http://[::1" },
		"no host":    func(o *LLMOptions) { o.BaseURL = "http://" },
		"no model":   func(o *LLMOptions) { o.Model = " " },
		"timeout":    func(o *LLMOptions) { o.Timeout = -1 },
		"max out":    func(o *LLMOptions) { o.MaxOutputTokens = -1 },
		"attempts":   func(o *LLMOptions) { o.MaxAttempts = -1 },
		"backoff":    func(o *LLMOptions) { o.Backoff = -1 },
		"maxbackoff": func(o *LLMOptions) { o.MaxBackoff = -1 },
		"transcript": func(o *LLMOptions) { o.MaxTranscriptBytes = -1 },
		"param":      func(o *LLMOptions) { o.MaxTokensParam = "maxTokens" },
	}
	for name, f := range bad {
		o := ok
		f(&o)
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: err %v", name, err)
		}
		if _, err := NewLLM(o); err == nil {
			t.Errorf("%s: NewLLM accepted", name)
		}
	}
}

func TestValidateAnswer(t *testing.T) {
	all := parseInstruction("")
	only := parseInstruction("keep only decisions")
	cases := []struct {
		text   string
		sp     *instrSpec
		target int
		ok     bool
	}{
		{goodAnswer, &all, 0, true},
		{goodAnswer, &all, 400, true},
		{goodAnswer, &all, 60, false},
		{"# Conversation summary\n## Key Decisions\n- use X\n", &only, 0, true},
		{"# Conversation summary\n## Goal\n- x\n", &only, 0, false},
		{"   ", &all, 0, false},
		{"As an AI language model, I cannot summarize.", &all, 0, false},
		{"Hello! " + goodAnswer, &all, 0, false},
		{"Sure! How can I help you today?\n" + goodAnswer, &all, 0, false},
		{"**Goal**\n- x", &all, 0, false},
		// Refusals and error texts inside the required headings.
		{refusalInSections("- I'm sorry, I can't help with that."), &all, 0, false},
		{refusalInSections("I’m sorry, but I cannot summarize this conversation."), &all, 0, false},
		{refusalInSections("- As an AI language model, I don't have access to the files."), &all, 0, false},
		{refusalInSections("1. Unfortunately, I am unable to comply."), &all, 0, false},
		{refusalInSections(`- {"error":{"message":"The server had an error","type":"server_error"}}`), &all, 0, false},
		{refusalInSections("- <!DOCTYPE html><title>502 Bad Gateway</title>"), &all, 0, false},
		{refusalInSections("- Internal Server Error"), &all, 0, false},
		{refusalInSections("- How can I help you today?"), &all, 0, false},
		// Errors of the conversation, quoted after a label, are content.
		{refusalInSections("- Error: `internal server error` from the staging API (#14)"), &all, 0, true},
		{refusalInSections("- `curl api/health` → 503 Service Unavailable (#9)"), &all, 0, true},
		{refusalInSections("- The user said the sorry state of the tests must be fixed"), &all, 0, true},
	}
	for i, c := range cases {
		err := validateAnswer(normalizeAnswer(c.text), c.sp, c.target, ByteCounter{})
		if (err == nil) != c.ok {
			t.Errorf("case %d: err %v, want ok=%v", i, err, c.ok)
		}
	}
}

// refusalInSections is an answer with every required heading and item under Key Decisions.
func refusalInSections(item string) string {
	return strings.Replace(goodAnswer, "## Key Decisions\n", "## Key Decisions\n"+item+"\n", 1)
}

func TestBackoffDelay(t *testing.T) {
	s := &llm{o: LLMOptions{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second}}
	for attempt, lim := range map[int][2]time.Duration{1: {50 * time.Millisecond, 150 * time.Millisecond}, 2: {100 * time.Millisecond, 300 * time.Millisecond}, 5: {0, time.Second}} {
		for range 50 {
			if d := s.delay(attempt, 0); d < lim[0] || d > lim[1] {
				t.Errorf("delay(%d) = %v, want in %v", attempt, d, lim)
			}
		}
	}
	if d := s.delay(1, 700*time.Millisecond); d != 700*time.Millisecond {
		t.Errorf("Retry-After not honored: %v", d)
	}
	if d := s.delay(1, time.Hour); d != time.Second {
		t.Errorf("Retry-After not capped: %v", d)
	}
	h := http.Header{}
	h.Set("Retry-After", "2")
	if retryAfter(h) != 2*time.Second {
		t.Errorf("retryAfter")
	}
}
