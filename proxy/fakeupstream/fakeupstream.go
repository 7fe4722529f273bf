// Package fakeupstream is a local stand-in for the OpenAI chat-completions and Anthropic
// messages APIs, for tests, benchmarks and the end-to-end script of the ctxmgr proxy.
//
// It speaks the real wire formats, streaming (SSE) and not, with tool calls, usage and the
// providers' real error bodies, and it records every request it receives with its exact
// o200k_base token count, so that a test can check what the proxy forwarded.
//
// Its replies are deterministic, chosen from the last message of the request:
//   - a tool result (OpenAI role "tool", Anthropic tool_result blocks): a text answer
//     "Done: <tool> returned N bytes." (after a ctxmgr_read result: "Read back: <first line>");
//   - a user text containing "read back" when a ctxmgr_read tool is offered and the context
//     holds a reference (an offloaded result's "Full text: LOC" or an archive range
//     "messages A-B: LOC"): a ctxmgr_read call on it;
//   - a user text when tools are offered and the text does not contain "no tools": a call of
//     the first tool (two parallel calls when the text contains "parallel") with arguments
//     {"cmd": "<the user text>"};
//   - otherwise a text answer "Echo: <user text>".
//
// A user text containing "slowly" makes a streamed answer pause 100 ms between events (to
// test a graceful shutdown in the middle of a stream).
//
// The model name selects errors: "error-401" answers 401 and "error-429" answers 429 with the
// provider's error body. Requests whose exact count plus max tokens exceed Options.Window, or
// whose count exceeds Options.RejectAbove, get the provider's context-overflow error (OpenAI
// 400 context_length_exceeded, Anthropic 400 "prompt is too long").
package fakeupstream

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/turns"
	"github.com/ctxmgr/ctxmgr/wire"
)

// Options configures a fake upstream.
type Options struct {
	// Window: a request whose exact token count plus its max tokens exceeds it is rejected
	// with the overflow error. 0: no limit.
	Window int
	// RejectAbove: a request whose exact token count exceeds it is rejected with the overflow
	// error. 0: no limit.
	RejectAbove int
	// Log, if set, receives one JSON line per request (a Record).
	Log io.Writer
	// KeepBodies keeps each request's body in Records (memory grows with traffic).
	KeepBodies bool
	// Delay is added before every answer.
	Delay time.Duration
	// ChunkDelay is slept between streamed events.
	ChunkDelay time.Duration
}

// Record is one request the fake upstream received.
type Record struct {
	Seq    int    `json:"seq"`
	Format string `json:"format"`
	Path   string `json:"path"`
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	// Tokens is the exact o200k_base count of the request (system, tools, messages, priming).
	Tokens int `json:"tokens"`
	// MaxTokens is the request's max_tokens / max_completion_tokens (0: absent).
	MaxTokens int `json:"max_tokens"`
	// Messages is the number of messages of the neutral model.
	Messages int `json:"messages"`
	// Valid is empty when the tool calls and results are paired (turns.Validate), else the error.
	Valid string `json:"valid,omitempty"`
	// Status is the HTTP status answered.
	Status int `json:"status"`
	// Tools names the tools offered.
	Tools []string `json:"tools,omitempty"`
	// Headers holds the request headers that tests check (secrets included: this is a fake).
	Headers map[string]string `json:"headers,omitempty"`
	// Extra holds the body's top-level fields other than messages, system and tools.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
	// Body is the raw body, when Options.KeepBodies.
	Body json.RawMessage `json:"body,omitempty"`
	// Reply says what was answered: "text", "tool_call", "ctxmgr_read", "error".
	Reply string `json:"reply"`
}

// Server is the fake upstream. It is an http.Handler.
type Server struct {
	opts    Options
	counter tokens.Counter
	prefix  string
	ids     atomic.Int64

	mu      sync.Mutex
	records []Record
}

// New returns a fake upstream.
func New(opts Options) *Server {
	c, err := tokens.ForEncoding(tokens.O200kBase)
	if err != nil {
		panic(err) // the vocabulary is embedded: a broken build
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Server{opts: opts, counter: tokens.NewCache(c, 1<<15), prefix: hex.EncodeToString(b[:])}
}

// Records returns a copy of what was received so far.
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

// Reset forgets the records.
func (s *Server) Reset() {
	s.mu.Lock()
	s.records = nil
	s.mu.Unlock()
}

// Count returns the exact o200k_base count of a request as the fake counts it.
func (s *Server) Count(r *chat.Request) int { return s.counter.Request(r).Total }

func (s *Server) id(kind string) string {
	return fmt.Sprintf("%s_%s%04d", kind, s.prefix, s.ids.Add(1))
}

var recordedHeaders = []string{"Authorization", "X-Api-Key", "Anthropic-Version", "Anthropic-Beta",
	"Openai-Organization", "X-Custom", "X-Ctxmgr-Session", "Content-Type", "User-Agent"}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Delay > 0 {
		time.Sleep(s.opts.Delay)
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Fake-Upstream", "models")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1715367049,"owned_by":"system"},{"id":"claude-sonnet-4-5","object":"model","created":1715367049,"owned_by":"anthropic"}]}`)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		s.serveChat(w, r, wire.OpenAI)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.serveChat(w, r, wire.Anthropic)
	default:
		http.Error(w, `{"error":{"message":"Unknown request URL","type":"invalid_request_error"}}`, http.StatusNotFound)
	}
}

func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, f wire.Format) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rec := Record{Format: string(f), Path: r.URL.Path, Headers: map[string]string{}}
	for _, h := range recordedHeaders {
		if v := r.Header.Get(h); v != "" {
			rec.Headers[h] = v
		}
	}
	if s.opts.KeepBodies {
		rec.Body = json.RawMessage(body)
	}
	req, err := wire.Decode(f, body)
	if err != nil {
		rec.Status, rec.Reply = 400, "error"
		s.record(&rec)
		writeError(w, f, 400, "invalid_request_error", "could not parse the request: "+err.Error())
		return
	}
	rec.Extra = map[string]json.RawMessage{}
	for k, v := range req.Extra {
		rec.Extra[k] = v
	}
	_ = json.Unmarshal(req.Extra["model"], &rec.Model)
	_ = json.Unmarshal(req.Extra["stream"], &rec.Stream)
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		var n int
		if json.Unmarshal(req.Extra[k], &n) == nil && n > 0 {
			rec.MaxTokens = n
		}
	}
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, t.Name)
	}
	rec.Messages = len(req.Messages)
	rec.Tokens = s.counter.Request(req).Total
	if err := turns.Validate(req.Messages, turns.ValidateOptions{}); err != nil {
		rec.Valid = err.Error()
	}

	switch rec.Model {
	case "error-401":
		rec.Status, rec.Reply = 401, "error"
		s.record(&rec)
		if f == wire.OpenAI {
			writeRaw(w, 401, OpenAI401)
		} else {
			writeRaw(w, 401, Anthropic401)
		}
		return
	case "error-429":
		rec.Status, rec.Reply = 429, "error"
		s.record(&rec)
		w.Header().Set("Retry-After", "20")
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		if f == wire.OpenAI {
			writeRaw(w, 429, OpenAI429)
		} else {
			writeRaw(w, 429, Anthropic429)
		}
		return
	}
	if f == wire.Anthropic && rec.MaxTokens == 0 {
		rec.Status, rec.Reply = 400, "error"
		s.record(&rec)
		writeError(w, f, 400, "invalid_request_error", "max_tokens: Field required")
		return
	}
	over := s.opts.Window > 0 && rec.Tokens+rec.MaxTokens > s.opts.Window ||
		s.opts.RejectAbove > 0 && rec.Tokens > s.opts.RejectAbove
	if over {
		rec.Status, rec.Reply = 400, "error"
		s.record(&rec)
		limit := s.opts.Window
		if s.opts.RejectAbove > 0 && (limit == 0 || s.opts.RejectAbove < limit) {
			limit = s.opts.RejectAbove
		}
		if f == wire.OpenAI {
			writeRaw(w, 400, fmt.Sprintf(`{
  "error": {
    "message": "This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded"
  }
}`, limit, rec.Tokens+rec.MaxTokens))
		} else {
			writeRaw(w, 400, fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: %d tokens > %d maximum"},"request_id":"req_fake"}`, rec.Tokens, limit))
		}
		return
	}

	rep := s.decide(req)
	if n := len(req.Messages); n > 0 && strings.Contains(req.Messages[n-1].Text(), "slowly") {
		rep.slow = true
	}
	rec.Status, rec.Reply = 200, rep.kind
	s.record(&rec)
	usage := rec.Tokens
	if f == wire.OpenAI {
		var opts struct {
			IncludeUsage bool `json:"include_usage"`
		}
		_ = json.Unmarshal(req.Extra["stream_options"], &opts)
		if rec.Stream {
			s.streamOpenAI(w, rec.Model, rep, usage, opts.IncludeUsage)
		} else {
			s.answerOpenAI(w, rec.Model, rep, usage)
		}
	} else {
		if rec.Stream {
			s.streamAnthropic(w, rec.Model, rep, usage)
		} else {
			s.answerAnthropic(w, rec.Model, rep, usage)
		}
	}
}

func (s *Server) record(rec *Record) {
	s.mu.Lock()
	rec.Seq = len(s.records) + 1
	s.records = append(s.records, *rec)
	s.mu.Unlock()
	if s.opts.Log != nil {
		b, _ := json.Marshal(rec)
		s.mu.Lock()
		_, _ = s.opts.Log.Write(append(b, '\n'))
		s.mu.Unlock()
	}
}

// Real error bodies of the providers.
const (
	OpenAI401    = `{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
	OpenAI429    = `{"error":{"message":"Rate limit reached for gpt-4o in organization org-test on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	Anthropic401 = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`
	Anthropic429 = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50,000 input tokens per minute."},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fz"}`
)

func writeRaw(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", "req_fake_error")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func writeError(w http.ResponseWriter, f wire.Format, status int, typ, msg string) {
	m, _ := json.Marshal(msg)
	if f == wire.OpenAI {
		writeRaw(w, status, fmt.Sprintf(`{"error":{"message":%s,"type":%q,"param":null,"code":null}}`, m, typ))
		return
	}
	writeRaw(w, status, fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%s}}`, typ, m))
}

// reply is what the fake answers.
type reply struct {
	kind  string // text, tool_call, ctxmgr_read
	text  string
	calls []call
	slow  bool
}

type call struct {
	id, name, args string
}

var (
	offloadRef = regexp.MustCompile(`Full text: (\S+)`)
	archiveRef = regexp.MustCompile(`messages (\d+)-(\d+): (\S+)`)
)

func (s *Server) decide(req *chat.Request) reply {
	if rep, ok := s.agentScript(req); ok { // agent.go
		return rep
	}
	msgs := req.Messages
	if len(msgs) == 0 {
		return reply{kind: "text", text: "Hello."}
	}
	last := &msgs[len(msgs)-1]
	if last.Role == chat.RoleTool {
		name := last.Name
		if name == "" {
			name = "tool"
		}
		text := last.Text()
		if name == "ctxmgr_read" || strings.Contains(text, "[ctxmgr_read") {
			first, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
			return reply{kind: "text", text: "Read back: " + first}
		}
		return reply{kind: "text", text: fmt.Sprintf("Done: %s returned %d bytes.", name, len(text))}
	}
	text := last.Text()
	hasRead := false
	var first string
	for _, t := range req.Tools {
		if t.Name == "ctxmgr_read" {
			hasRead = true
		} else if first == "" && t.Raw == nil {
			first = t.Name
		}
	}
	if last.Role == chat.RoleUser && hasRead && strings.Contains(text, "read back") {
		if ref := findRef(msgs); ref != "" {
			args, _ := json.Marshal(map[string]any{"ref": ref, "from_line": 1, "lines": 20})
			return reply{kind: "ctxmgr_read", calls: []call{{id: s.id("call"), name: "ctxmgr_read", args: string(args)}}}
		}
	}
	if last.Role == chat.RoleUser && first != "" && !strings.Contains(text, "no tools") {
		n := 1
		if strings.Contains(text, "parallel") {
			n = 2
		}
		var calls []call
		for i := 0; i < n; i++ {
			args, _ := json.Marshal(map[string]string{"cmd": fmt.Sprintf("%s #%d", trim(text, 200), i+1)})
			calls = append(calls, call{id: s.id("call"), name: first, args: string(args)})
		}
		return reply{kind: "tool_call", text: "Let me run that.", calls: calls}
	}
	return reply{kind: "text", text: "Echo: " + trim(text, 200)}
}

func findRef(msgs []chat.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		t := msgs[i].Text()
		if m := offloadRef.FindStringSubmatch(t); m != nil {
			return m[1]
		}
	}
	for i := range msgs {
		t := msgs[i].Text()
		if m := archiveRef.FindStringSubmatch(t); m != nil {
			return "messages " + m[1] + "-" + m[2]
		}
	}
	return ""
}

func trim(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		s = s[:n]
	}
	return s
}

func (s *Server) answerOpenAI(w http.ResponseWriter, model string, rep reply, prompt int) {
	msg := map[string]any{"role": "assistant", "content": rep.text, "refusal": nil, "annotations": []any{}}
	finish := "stop"
	if len(rep.calls) > 0 {
		var tcs []any
		for _, c := range rep.calls {
			tcs = append(tcs, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		msg["tool_calls"] = tcs
		finish = "tool_calls"
		if rep.text == "" {
			msg["content"] = nil
		}
	}
	out := map[string]any{
		"id": s.id("chatcmpl"), "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices":            []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage":              map[string]any{"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12, "prompt_tokens_details": map[string]any{"cached_tokens": 0, "audio_tokens": 0}},
		"service_tier":       "default",
		"system_fingerprint": "fp_fake",
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", s.id("req"))
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) streamOpenAI(w http.ResponseWriter, model string, rep reply, prompt int, includeUsage bool) {
	send := func(event string, v any) { s.send(w, event, v, rep.slow) }
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Request-Id", s.id("req"))
	w.WriteHeader(200)
	id := s.id("chatcmpl")
	created := time.Now().Unix()
	chunk := func(delta map[string]any, finish any) {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "system_fingerprint": "fp_fake",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
		if includeUsage {
			c["usage"] = nil
		}
		send("", c)
	}
	chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)
	for _, piece := range pieces(rep.text, 3) {
		chunk(map[string]any{"content": piece}, nil)
	}
	for i, c := range rep.calls {
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": ""}}}}, nil)
		for _, piece := range pieces(c.args, 3) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil)
		}
	}
	finish := "stop"
	if len(rep.calls) > 0 {
		finish = "tool_calls"
	}
	chunk(map[string]any{}, finish)
	if includeUsage {
		send("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "system_fingerprint": "fp_fake",
			"choices": []any{}, "usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12}})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
}

// anthropicUsage splits the prompt as a cached conversation would: half read from the cache.
func anthropicUsage(prompt, output int) map[string]any {
	cached := prompt / 2
	return map[string]any{"input_tokens": prompt - cached, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached, "output_tokens": output,
		"service_tier": "standard"}
}

func (s *Server) anthropicContent(rep reply) ([]any, string) {
	var content []any
	if rep.text != "" {
		content = append(content, map[string]any{"type": "text", "text": rep.text})
	}
	for _, c := range rep.calls {
		var input any = map[string]any{}
		_ = json.Unmarshal([]byte(c.args), &input)
		content = append(content, map[string]any{"type": "tool_use", "id": strings.Replace(c.id, "call_", "toolu_", 1), "name": c.name, "input": input})
	}
	stop := "end_turn"
	if len(rep.calls) > 0 {
		stop = "tool_use"
	}
	if content == nil {
		content = []any{}
	}
	return content, stop
}

func (s *Server) answerAnthropic(w http.ResponseWriter, model string, rep reply, prompt int) {
	content, stop := s.anthropicContent(rep)
	out := map[string]any{"id": s.id("msg"), "type": "message", "role": "assistant", "model": model, "content": content,
		"stop_reason": stop, "stop_sequence": nil, "usage": anthropicUsage(prompt, 12)}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", s.id("req"))
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) streamAnthropic(w http.ResponseWriter, model string, rep reply, prompt int) {
	send := func(event string, v any) { s.send(w, event, v, rep.slow) }
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Request-Id", s.id("req"))
	w.WriteHeader(200)
	content, stop := s.anthropicContent(rep)
	start := anthropicUsage(prompt, 1)
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": s.id("msg"), "type": "message", "role": "assistant",
		"model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": start}})
	send("ping", map[string]any{"type": "ping"})
	for i, blk := range content {
		b := blk.(map[string]any)
		switch b["type"] {
		case "text":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, piece := range pieces(b["text"].(string), 3) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			args, _ := json.Marshal(b["input"])
			for _, piece := range pieces(string(args), 3) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 12}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

func (s *Server) send(w http.ResponseWriter, event string, v any, slow ...bool) {
	b, _ := json.Marshal(v)
	var buf bytes.Buffer
	if event != "" {
		buf.WriteString("event: " + event + "\n")
	}
	buf.WriteString("data: ")
	buf.Write(b)
	buf.WriteString("\n\n")
	_, _ = w.Write(buf.Bytes())
	flush(w)
	if s.opts.ChunkDelay > 0 {
		time.Sleep(s.opts.ChunkDelay)
	}
	if len(slow) > 0 && slow[0] {
		time.Sleep(100 * time.Millisecond)
	}
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// pieces cuts s into at most n pieces on rune boundaries.
func pieces(s string, n int) []string {
	if s == "" {
		return nil
	}
	r := []rune(s)
	size := (len(r) + n - 1) / n
	var out []string
	for i := 0; i < len(r); i += size {
		out = append(out, string(r[i:min(len(r), i+size)]))
	}
	return out
}
