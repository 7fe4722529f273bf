package summarize

// The LLM summarizer: prompt in, validated structured summary out, extractive fallback.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/provider"
	"github.com/ctxmgr/ctxmgr/wire"
)

// AnthropicVersion is the anthropic-version header sent with Anthropic requests.
const AnthropicVersion = "2023-06-01"

// maxResponseBytes bounds how much of a response body is read.
const maxResponseBytes = 8 << 20

// ErrInvalidOptions is wrapped by every LLMOptions.Validate error.
var ErrInvalidOptions = errors.New("summarize: invalid options")

// LLMOptions configures NewLLM. Zero values mean the documented defaults.
type LLMOptions struct {
	// Format is the wire format: "openai" (default: POST {BaseURL}/chat/completions with a
	// Bearer key) or "anthropic" (POST {BaseURL}/v1/messages with x-api-key and
	// anthropic-version 2023-06-01).
	Format wire.Format
	// BaseURL is the API root: "https://api.openai.com/v1" for OpenAI-compatible servers,
	// "https://api.anthropic.com" (or ".../v1") for Anthropic. Required.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer" (openai) or "x-api-key" (anthropic) when set.
	APIKey string
	// Model is the model name. Required.
	Model string
	// Timeout bounds each attempt (request and reading the answer). Default 60s.
	Timeout time.Duration
	// MaxOutputTokens is the max_tokens of the request. Default 4096.
	MaxOutputTokens int
	// MaxAttempts is the number of LLM calls before falling back. Default 3.
	MaxAttempts int
	// Backoff is the delay before the second attempt; it doubles for each later one, with
	// jitter (x0.5 to x1.5). Default 1s.
	Backoff time.Duration
	// MaxBackoff caps a delay, a provider's Retry-After included. Default 30s.
	MaxBackoff time.Duration
	// HTTPClient makes the calls. Default: a client without an overall timeout (Timeout
	// applies per attempt).
	HTTPClient *http.Client
	// Header holds extra request headers (proxies, OpenRouter attribution, Azure api-key).
	Header http.Header
	// MaxTokensParam names the OpenAI output-limit field: "max_tokens" (default, what
	// OpenAI-compatible servers accept) or "max_completion_tokens" (OpenAI reasoning models).
	MaxTokensParam string
	// Fallback summarizes when the LLM fails. Default: NewExtractive with Counter.
	Fallback Summarizer
	// Counter counts tokens when the provider reports no usage, and measures answers against
	// the size limit. Default ByteCounter.
	Counter TokenCounter
	// Logger receives a record for each failed attempt and each fallback. Default slog.Default().
	Logger *slog.Logger
	// MaxTranscriptBytes bounds the messages' transcript in the prompt. Default
	// DefaultTranscriptCap (about 100k tokens).
	MaxTranscriptBytes int
}

// Validate reports the first invalid option.
func (o LLMOptions) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...))
	}
	switch o.Format {
	case "", wire.OpenAI, wire.Anthropic:
	default:
		return bad("Format", "%q is not %q or %q", o.Format, wire.OpenAI, wire.Anthropic)
	}
	if o.BaseURL == "" {
		return bad("BaseURL", "required")
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil {
		return bad("BaseURL", "%v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("BaseURL", "%q is not an http(s) URL", o.BaseURL)
	}
	if strings.TrimSpace(o.Model) == "" {
		return bad("Model", "required")
	}
	switch {
	case o.Timeout < 0:
		return bad("Timeout", "negative")
	case o.MaxOutputTokens < 0:
		return bad("MaxOutputTokens", "negative")
	case o.MaxAttempts < 0:
		return bad("MaxAttempts", "negative")
	case o.Backoff < 0:
		return bad("Backoff", "negative")
	case o.MaxBackoff < 0:
		return bad("MaxBackoff", "negative")
	case o.MaxTranscriptBytes < 0:
		return bad("MaxTranscriptBytes", "negative")
	}
	switch o.MaxTokensParam {
	case "", "max_tokens", "max_completion_tokens":
	default:
		return bad("MaxTokensParam", "%q is not max_tokens or max_completion_tokens", o.MaxTokensParam)
	}
	return nil
}

// withDefaults fills the zero fields.
func (o LLMOptions) withDefaults() LLMOptions {
	if o.Format == "" {
		o.Format = wire.OpenAI
	}
	o.BaseURL = strings.TrimRight(o.BaseURL, "/")
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	if o.MaxOutputTokens == 0 {
		o.MaxOutputTokens = 4096
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 3
	}
	if o.Backoff == 0 {
		o.Backoff = time.Second
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.MaxTokensParam == "" {
		o.MaxTokensParam = "max_tokens"
	}
	if o.Counter == nil {
		o.Counter = ByteCounter{}
	}
	if o.Fallback == nil {
		o.Fallback = NewExtractive(ExtractiveOptions{Counter: o.Counter})
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxTranscriptBytes == 0 {
		o.MaxTranscriptBytes = DefaultTranscriptCap
	}
	return o
}

// NewLLM returns a summarizer that asks an LLM (OpenAI chat completions or Anthropic
// messages) for the structured summary and validates the answer.
//
// A call is retried, with exponential backoff and jitter, on HTTP 408, 409, 425, 429 and any
// 5xx (500, 502, 503, 529 ...), timeouts, transport errors, malformed JSON and invalid
// answers (see validateAnswer), up to MaxAttempts calls; any other 4xx (400, 401, 403, ...)
// is not retried. When every attempt failed, the Fallback summarizer (the extractive one by
// default) produces the summary: its Result comes back with Fallback set, FallbackReason
// saying why, Attempts counted, and a warning is logged. An error text is never returned as a
// summary. A context canceled (or timed out) by the caller returns its error, without
// fallback.
//
// The client is a thin hand-written net/http one rather than a provider SDK, on purpose: the
// summarizer makes one small non-streaming call (a system prompt and one user message in, one
// text out), so an SDK would bring a large dependency tree for two tiny JSON shapes, while the
// hand-written client gives full control over what matters here: the per-attempt timeout, the
// bounded response read, the exact retry policy (statuses, Retry-After, malformed bodies,
// invalid answers) and error texts that never leak into a summary.
func NewLLM(opts LLMOptions) (Summarizer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	s := &llm{o: o, name: "llm:" + o.Model}
	if o.Format == wire.Anthropic {
		if strings.HasSuffix(o.BaseURL, "/v1") {
			s.endpoint = o.BaseURL + "/messages" // "https://api.anthropic.com/v1" works too
		} else {
			s.endpoint = o.BaseURL + "/v1/messages"
		}
	} else {
		s.endpoint = o.BaseURL + "/chat/completions"
	}
	return s, nil
}

type llm struct {
	o        LLMOptions
	name     string
	endpoint string
}

// attemptError is why one attempt failed.
type attemptError struct {
	reason     string
	retry      bool
	retryAfter time.Duration
}

func (e *attemptError) Error() string { return e.reason }

// answer is a successful HTTP exchange.
type answer struct {
	text      string
	truncated bool
	in, out   int // provider-reported usage, 0 if absent
}

// Summarize implements Summarizer.
func (s *llm) Summarize(ctx context.Context, req Request) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	sp := parseInstruction(req.Instruction)
	full := req
	req = answerRequest(req, s.o.Counter)
	system, user := buildPrompt(req, &sp, s.o.MaxTranscriptBytes)
	body, err := s.requestBody(system, user)
	if err != nil {
		return s.fallback(ctx, full, "encoding the request: "+err.Error(), 0)
	}
	reason := ""
	attempts := 0
	for attempt := 1; attempt <= s.o.MaxAttempts; attempt++ {
		attempts++
		ans, err := s.call(ctx, body)
		if cerr := ctx.Err(); cerr != nil {
			return Result{}, cerr
		}
		if err == nil {
			text, verr := finishAnswer(ans, req, &sp, s.o.Counter)
			if verr == nil {
				in, out := ans.in, ans.out
				if in <= 0 {
					in = safeCount(s.o.Counter, system) + safeCount(s.o.Counter, user)
				}
				if out <= 0 {
					out = safeCount(s.o.Counter, ans.text)
				}
				return Result{Text: text, InputTokens: in, OutputTokens: out, Summarizer: s.name, Attempts: attempts}, nil
			}
			err = &attemptError{reason: "invalid answer: " + verr.Error(), retry: true}
		}
		var ae *attemptError
		if !errors.As(err, &ae) {
			ae = &attemptError{reason: err.Error(), retry: true}
		}
		reason = ae.reason
		last := !ae.retry || attempt == s.o.MaxAttempts
		s.o.Logger.LogAttrs(ctx, slog.LevelInfo, "summarize: LLM attempt failed",
			slog.String("summarizer", s.name), slog.Int("attempt", attempt),
			slog.String("reason", reason), slog.Bool("retry", !last))
		if last {
			break
		}
		t := time.NewTimer(s.delay(attempt, ae.retryAfter))
		select {
		case <-ctx.Done():
			t.Stop()
			return Result{}, ctx.Err()
		case <-t.C:
		}
	}
	return s.fallback(ctx, full, reason, attempts)
}

// answerRequest returns req with TargetTokens reduced by what the archive guide costs: the
// guide is placed above the model's answer, and the target covers the whole summary.
func answerRequest(req Request, c TokenCounter) Request {
	if req.TargetTokens <= 0 || strings.TrimSpace(req.ArchiveGuide) == "" {
		return req
	}
	g := safeCount(c, req.ArchiveGuide)
	req.TargetTokens = max(req.TargetTokens-g, req.TargetTokens/4, 1)
	return req
}

func (s *llm) fallback(ctx context.Context, req Request, reason string, attempts int) (Result, error) {
	s.o.Logger.LogAttrs(ctx, slog.LevelWarn, "summarize: LLM summary failed, using the fallback summarizer",
		slog.String("summarizer", s.name), slog.String("reason", reason), slog.Int("attempts", attempts))
	r, err := s.o.Fallback.Summarize(ctx, req)
	if err != nil {
		return Result{}, fmt.Errorf("summarize: %s failed (%s) and the fallback failed: %w", s.name, reason, err)
	}
	r.Fallback = true
	r.Summarizer = FallbackName(r.Summarizer)
	r.FallbackReason = reason
	r.Attempts = attempts
	return r, nil
}

// delay is the wait before attempt+1: Backoff doubled per attempt, jittered to x0.5-x1.5,
// at least the provider's Retry-After, at most MaxBackoff.
func (s *llm) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := s.o.Backoff
	for i := 1; i < attempt && d < s.o.MaxBackoff; i++ {
		d *= 2
	}
	if d > 0 {
		d = d/2 + rand.N(d)
	}
	d = max(d, retryAfter)
	return min(d, s.o.MaxBackoff)
}

// ---- the wire --------------------------------------------------------------------------------

type wireMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (s *llm) requestBody(system, user string) ([]byte, error) {
	if s.o.Format == wire.Anthropic {
		return json.Marshal(struct {
			Model     string    `json:"model"`
			MaxTokens int       `json:"max_tokens"`
			System    string    `json:"system"`
			Messages  []wireMsg `json:"messages"`
		}{s.o.Model, s.o.MaxOutputTokens, system, []wireMsg{{"user", user}}})
	}
	m := map[string]any{
		"model":            s.o.Model,
		"messages":         []wireMsg{{"system", system}, {"user", user}},
		s.o.MaxTokensParam: s.o.MaxOutputTokens,
		"stream":           false,
	}
	return json.Marshal(m)
}

// call makes one attempt.
func (s *llm) call(ctx context.Context, body []byte) (answer, error) {
	actx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return answer{}, &attemptError{reason: "building the request: " + redact.Text(err.Error())}
	}
	for k, vs := range s.o.Header {
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if s.o.Format == wire.Anthropic {
		hreq.Header.Set("anthropic-version", AnthropicVersion)
		if s.o.APIKey != "" {
			hreq.Header.Set("x-api-key", s.o.APIKey)
		}
	} else if s.o.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+s.o.APIKey)
	}
	resp, err := s.o.HTTPClient.Do(hreq)
	if err != nil {
		return answer{}, s.transportError(ctx, actx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return answer{}, s.transportError(ctx, actx, err)
	}
	if len(data) > maxResponseBytes {
		return answer{}, &attemptError{reason: fmt.Sprintf("HTTP %d: response larger than %d bytes", resp.StatusCode, maxResponseBytes), retry: true}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return answer{}, statusError(resp.StatusCode, data, resp.Header)
	}
	return parseAnswer(s.o.Format, data)
}

func (s *llm) transportError(ctx, actx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ne net.Error
	if errors.Is(actx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &attemptError{reason: "timeout after " + s.o.Timeout.String(), retry: true}
	}
	// The error quotes the endpoint URL, which may carry a key (?key=...): the reason is
	// logged and stored with the summary's fallback event.
	return &attemptError{reason: "transport error: " + oneLine(redact.Text(err.Error()), 200), retry: true}
}

// retryStatus reports whether an HTTP status is worth another attempt: throttling, conflicts
// and server-side failures (529 is Anthropic's "overloaded"). 400, 401, 403 and other client
// errors would fail the same way again.
func retryStatus(code int) bool {
	switch code {
	case 408, 409, 425, 429:
		return true
	}
	return code >= 500 && code <= 599
}

func statusError(code int, body []byte, h http.Header) error {
	class := provider.Classify(code, body)
	msg := errorMessage(body)
	reason := "HTTP " + strconv.Itoa(code) + " (" + class.String() + ")"
	if msg != "" {
		reason += ": " + msg
	}
	return &attemptError{reason: reason, retry: retryStatus(code), retryAfter: retryAfter(h)}
}

// errorMessage extracts a provider error's message for FallbackReason (OpenAI
// {"error":{"message":...}}, Anthropic {"type":"error","error":{"message":...}}, else the
// start of the body).
func errorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		var e struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		}
		if json.Unmarshal(v.Error, &e) == nil && e.Message != "" {
			return oneLine(e.Message, 200)
		}
		var s string
		if json.Unmarshal(v.Error, &s) == nil && s != "" {
			return oneLine(s, 200)
		}
		if v.Message != "" {
			return oneLine(v.Message, 200)
		}
	}
	return oneLine(validUTF8(firstBytes(string(body), 400)), 200)
}

// retryAfter reads a Retry-After header (seconds or an HTTP date), 0 when absent.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 {
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// bodyError turns an error carried in a 200 response body into an attempt error.
func bodyError(raw []byte) error {
	class := provider.Classify(0, raw)
	reason := "error in response body (" + class.String() + "): " + errorMessage(raw)
	retry := class != provider.ClassAuth && class != provider.ClassInvalidRequest && class != provider.ClassOverflow && class != provider.ClassOutputLimit
	return &attemptError{reason: reason, retry: retry}
}

func malformed(err error) error {
	return &attemptError{reason: "malformed JSON response: " + oneLine(err.Error(), 200), retry: true}
}

// parseAnswer reads a completion (wire.DecodeResponse): its text, whether the output limit
// cut it, and the usage it reports.
func parseAnswer(f wire.Format, data []byte) (answer, error) {
	r, err := wire.DecodeResponse(f, data)
	switch {
	case errors.Is(err, wire.ErrErrorResponse):
		return answer{}, bodyError(data)
	case err != nil:
		return answer{}, malformed(err)
	case r.Refusal != "":
		return answer{}, &attemptError{reason: "invalid answer: refusal: " + oneLine(r.Refusal, 120), retry: true}
	}
	a := answer{text: r.Text, truncated: r.Truncated}
	if r.HasUsage {
		a.in, a.out = r.Usage.Input, r.Usage.Output
	}
	return a, nil
}
