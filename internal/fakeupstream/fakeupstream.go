// Package fakeupstream is a local stand-in for the OpenAI chat-completions, Anthropic
// messages, OpenAI Responses and Gemini APIs (gemini.go), for tests, benchmarks and the end-to-end script of the ctxmgr proxy.
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
// With Options.Thinking, an Anthropic request with thinking {type: enabled|adaptive} gets a
// thinking block first, "Thinking about: <user text>", signed by the fake (and a
// redacted_thinking block after it when the user text contains "redacted").
//
// The model name selects errors: "error-401" answers 401 and "error-429" answers 429 with the
// provider's error body.
//
// # Strictness
//
// The fake is as strict as the real APIs: every rule it enforces is one the provider's API
// enforces (rules.go). It checks the raw JSON body
// with its own small decoders, independently of package wire, and answers a request the real
// API refuses with the provider's real error status and body. Anthropic /v1/messages:
//   - max_tokens is required; roles are user, assistant, or system (mid-conversation system
//     entries, beta mid-conversation-system-...); content is a string or a list of blocks, not
//     empty except in a final assistant message, without empty text blocks;
//   - at most 4 blocks with cache_control, counted over system blocks, tools, message blocks
//     and tool_result contents together ("A maximum of 4 blocks with cache_control may be
//     provided. Found 5.");
//   - thinking and redacted_thinking blocks come back exactly as the fake issued them
//     ("messages.N.content.M: Invalid `signature` in `thinking` block");
//   - consecutive same-role messages are merged into one turn (system entries are transparent),
//     as the API merges them; every tool_use is answered by a tool_result at the start of the
//     next turn, every tool_result answers a tool_use of the turn before, and a server tool's
//     result block follows its server_tool_use in the same turn;
//   - with Options.Thinking and thinking {type: enabled}, the last assistant turn of a tool
//     loop starts with a thinking block;
//   - input over the window: "prompt is too long: N tokens > W maximum"; input plus max_tokens
//     over it: "input length and `max_tokens` exceed context limit: N + M > W, ...".
//
// OpenAI /v1/chat/completions:
//   - roles are system, developer, user, assistant, tool, function; max_tokens,
//     max_completion_tokens or neither;
//   - an assistant message's tool_calls are answered by tool messages with the same
//     tool_call_id before the next message of another role; a tool message answers a call of
//     the assistant message before its run;
//   - overflow: 400 context_length_exceeded, "This model's maximum context length is W tokens.
//     However, your messages resulted in N tokens." (input only, when max tokens is absent) or
//     "However, you requested T tokens (N in the messages, M in the completion)."
//
// Everything else the real APIs accept is accepted: query strings (?beta=true), any headers,
// metadata, context_management, images, documents, server tool blocks, citations. Each refusal
// is recorded with the rule it broke (Record.Rule) and, for a malformed request, the provider's
// message (Record.Valid).
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
	// IDPrefix, if set, replaces the random prefix of the ids the fake issues (tool calls,
	// messages), so that two runs of one conversation get the same ids.
	IDPrefix string
	// Delay is added before every answer.
	Delay time.Duration
	// ChunkDelay is slept between streamed events.
	ChunkDelay time.Duration
	// Thinking makes the fake issue signed thinking blocks when an Anthropic request asks for
	// thinking (type enabled or adaptive), and enforce, with type enabled, that the last
	// assistant turn of a tool loop starts with its thinking. Signatures are verified always.
	Thinking bool
	// SigningKey is the key thinking signatures are made with; empty: a random key per Server.
	SigningKey []byte
	// ProviderContext is how the fake treats the providers' own context management
	// (native.go): ProviderContextNative implements it, ProviderContextNonNative refuses it
	// as upstreams without it do; empty accepts and ignores it.
	ProviderContext string
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
	// Valid is empty when the request is well formed by the real API's rules (see the package
	// doc), else the provider's error message. A request that merely does not fit the window
	// is well formed: its Rule is RuleWindow and its Valid is empty.
	Valid string `json:"valid,omitempty"`
	// Rule names the rule a refused request broke (the Rule... constants); empty when answered.
	Rule string `json:"rule,omitempty"`
	// Breakpoints is the number of blocks with cache_control (Anthropic).
	Breakpoints int `json:"breakpoints,omitempty"`
	// Thinking is the Anthropic thinking.type of the request ("enabled", "adaptive", ...).
	Thinking string `json:"thinking,omitempty"`
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
	// Issued counts the thinking blocks (thinking and redacted) the answer carries.
	Issued int `json:"issued_thinking,omitempty"`
}

// Server is the fake upstream. It is an http.Handler.
type Server struct {
	opts    Options
	counter tokens.Counter
	prefix  string
	key     []byte
	mux     *http.ServeMux
	ids     atomic.Int64

	mu      sync.Mutex
	records []Record
	// cut counts the requests whose body ended before its Content-Length.
	cut int

	resp responsesState // the Responses API's memory (responses.go)
}

// New returns a fake upstream.
func New(opts Options) *Server {
	c, err := tokens.ForEncoding(tokens.O200kBase)
	if err != nil {
		panic(err) // the vocabulary is embedded: a broken build
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &Server{opts: opts, counter: tokens.NewCache(c, 1<<15), prefix: hex.EncodeToString(b[:]), key: opts.SigningKey}
	if opts.IDPrefix != "" {
		s.prefix = opts.IDPrefix
	}
	if len(s.key) == 0 {
		s.key = make([]byte, 32)
		_, _ = rand.Read(s.key)
	}
	// The routes. A new endpoint is one more line here.
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /v1/models", s.serveModels)
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveChat(w, r, wire.OpenAI) })
	s.mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { s.serveChat(w, r, wire.Anthropic) })
	s.mux.HandleFunc("POST /v1/responses", s.serveResponses)
	s.mux.HandleFunc("POST /v1/responses/input_tokens", s.serveInputTokens)
	s.mux.HandleFunc("POST /v1/responses/compact", s.serveResponsesCompact)
	s.mux.HandleFunc("POST /v1beta/models/{action}", s.serveGemini)
	s.mux.HandleFunc("POST /v1/models/{action}", s.serveGemini)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"Unknown request URL","type":"invalid_request_error"}}`, http.StatusNotFound)
	})
	return s
}

// CutShort returns how many requests ended before their body did (the connection closed
// or the stream reset before the last byte its Content-Length announced): requests a real
// API never acts on, and that Records does not hold.
func (s *Server) CutShort() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

// readRequest reads a request's body; a body cut short is counted (CutShort), answered 400,
// and reported false.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.mu.Lock()
		s.cut++
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
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
	s.mux.ServeHTTP(w, r)
}

func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Fake-Upstream", "models")
	_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1715367049,"owned_by":"system"},{"id":"claude-sonnet-4-5","object":"model","created":1715367049,"owned_by":"anthropic"}]}`)
}

func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, f wire.Format) {
	body, ok := s.readRequest(w, r)
	if !ok {
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
	var chk checked
	if f == wire.Anthropic {
		chk = s.checkAnthropic(body)
	} else {
		chk = checkOpenAI(body)
	}
	rec.Model, rec.Stream, rec.MaxTokens = chk.model, chk.stream, chk.maxTokens
	rec.Breakpoints, rec.Thinking, rec.Extra = chk.breakpoints, chk.thinking, chk.extra
	if chk.v != nil && chk.v.rule == RuleParse {
		s.refuse(w, &rec, chk.v)
		return
	}
	if f == wire.Anthropic && s.opts.ProviderContext == ProviderContextNonNative {
		if v := nonNativeAnthropic(r.Header, body); v != nil {
			s.refuse(w, &rec, v)
			return
		}
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
	// The neutral model, for the token count and the reply.
	req, err := s.decode(f, body)
	if err == nil {
		for _, t := range req.Tools {
			rec.Tools = append(rec.Tools, t.Name)
		}
		rec.Messages = len(req.Messages)
		rec.Tokens = s.counter.Request(req).Total
	}
	if chk.v != nil {
		s.refuse(w, &rec, chk.v)
		return
	}
	if err != nil {
		// The request passed the fake's own checks but package wire cannot read it: the fake
		// cannot count it. Refused, and marked invalid, so that a test notices.
		s.refuse(w, &rec, errorFor(f, RuleParse, "the fake upstream could not decode the request: "+err.Error()))
		return
	}
	if v := s.window(f, rec.Tokens, rec.MaxTokens); v != nil {
		s.refuse(w, &rec, v)
		return
	}

	rep := s.decide(req)
	if last := lastSpoken(req.Messages); last != nil && strings.Contains(last.Text(), "slowly") {
		rep.slow = true
	}
	if f == wire.Anthropic && s.opts.Thinking && (chk.thinking == "enabled" || chk.thinking == "adaptive") {
		text := "Hello."
		if last := lastSpoken(req.Messages); last != nil {
			text = last.Text()
		}
		rep.thinking = "Thinking about: " + trim(text, 120)
		rep.redacted = strings.Contains(text, "redacted")
		rec.Issued = 1
		if rep.redacted {
			rec.Issued = 2
		}
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

// refuse records a refused request and answers the provider's error.
func (s *Server) refuse(w http.ResponseWriter, rec *Record, v *violation) {
	rec.Status, rec.Reply, rec.Rule = v.status, "error", v.rule
	if v.structural() {
		rec.Valid = v.msg
	}
	s.record(rec)
	writeRaw(w, v.status, v.body)
}

// errorFor is a 400 invalid_request_error in the format's error shape.
func errorFor(f wire.Format, rule, msg string) *violation {
	if f == wire.OpenAI {
		return openAIViolation(rule, msg, "", "")
	}
	return anthropicViolation(rule, msg)
}

// window checks a counted request against Options.Window (input plus max tokens) and
// Options.RejectAbove (input alone), with the providers' real overflow errors.
func (s *Server) window(f wire.Format, input, maxTokens int) *violation {
	limit, inputOver := 0, false
	if s.opts.RejectAbove > 0 && input > s.opts.RejectAbove {
		limit, inputOver = s.opts.RejectAbove, true
	}
	if s.opts.Window > 0 && input > s.opts.Window && (limit == 0 || s.opts.Window < limit) {
		limit, inputOver = s.opts.Window, true
	}
	totalOver := !inputOver && s.opts.Window > 0 && input+maxTokens > s.opts.Window
	if totalOver {
		limit = s.opts.Window
	}
	if !inputOver && !totalOver {
		return nil
	}
	if f == wire.OpenAI {
		msg := fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", limit, input)
		if maxTokens > 0 {
			msg = fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", limit, input+maxTokens, input, maxTokens)
		}
		v := openAIViolation(RuleWindow, msg, "messages", "context_length_exceeded")
		return v
	}
	if inputOver {
		return anthropicViolation(RuleWindow, fmt.Sprintf("prompt is too long: %d tokens > %d maximum", input, limit))
	}
	return anthropicViolation(RuleWindow, fmt.Sprintf("input length and `max_tokens` exceed context limit: %d + %d > %d, decrease input length or `max_tokens` and try again", input, maxTokens, limit))
}

// decode converts a request to the neutral model with package wire, for the token count and
// the reply (the rules are checked on the raw body, apart from wire).
func (s *Server) decode(f wire.Format, body []byte) (*chat.Request, error) {
	return wire.Decode(f, body)
}

// lastSpoken is the last message that is not a system entry (nil: none).
func lastSpoken(msgs []chat.Message) *chat.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != chat.RoleSystem {
			return &msgs[i]
		}
	}
	return nil
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

// reply is what the fake answers.
type reply struct {
	kind  string // text, tool_call, ctxmgr_read
	text  string
	calls []call
	slow  bool
	// thinking, when set, is issued as a signed thinking block first (Anthropic); redacted
	// adds a redacted_thinking block after it.
	thinking string
	redacted bool
}

type call struct {
	id, name, args string
}

var (
	offloadRef = regexp.MustCompile(`Full text: (\S+)`)
	// An archive line of the summary's guide: "- messages A-B", several ranges ("- messages
	// A-B, C-D") or a span ("- messages A-B (in part)"); older guides named a location after
	// a colon.
	archiveRef = regexp.MustCompile(`(?m)^- messages (\d+)-(\d+)(?:, \d+-\d+)*(?: \(in part\))?(?:: (\S+))?`)
)

func (s *Server) decide(req *chat.Request) reply {
	if rep, ok := s.agentScript(req); ok { // agent.go
		return rep
	}
	msgs := req.Messages
	last := lastSpoken(msgs)
	if last == nil {
		return reply{kind: "text", text: "Hello."}
	}
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
	if rep.thinking != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": rep.thinking, "signature": s.signThinking(rep.thinking)})
		if rep.redacted {
			content = append(content, map[string]any{"type": "redacted_thinking", "data": s.redactedData("redacted: " + rep.thinking)})
		}
	}
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
		case "thinking":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
			for _, piece := range pieces(b["thinking"].(string), 3) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": piece}})
			}
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "signature_delta", "signature": b["signature"]}})
		case "redacted_thinking":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": b})
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
