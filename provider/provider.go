// Package provider classifies error responses from LLM providers.
//
// The one question that matters most to a context manager is "was this
// request rejected because the conversation no longer fits in the model's
// context window?". That answer decides between compacting the history and
// retrying, versus surfacing the error. Every provider words it differently
// (OpenAI's context_length_exceeded code, Anthropic's "prompt is too long",
// Gemini's "input token count ... exceeds the maximum", llama.cpp's
// exceed_context_size_error, ...), and many other errors look similar at a
// glance: rate limits that mention tokens, max_tokens above the model's output
// limit, overloaded servers. IsOverflow answers the question; Classify gives
// the coarser picture used to pick a recovery strategy.
//
// Matching is done on the error text and code fields extracted from the JSON
// envelope when the body parses as JSON (error.message, error.code,
// error.type, message, detail, error as a string, nested upstream errors), and
// on the raw body otherwise (plain text, HTML, SSE). Matching is
// case-insensitive and uses only the fixed phrases in patterns.go.
//
// The package is pure standard library and has no mutable state; every
// function is safe for concurrent use.
package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// Class is the coarse category of a provider error.
type Class int

const (
	// ClassOther is anything not covered below, including non-error statuses.
	ClassOther Class = iota
	// ClassOverflow: the prompt plus requested output does not fit the
	// model's context window. Shrinking the context (compaction, dropping
	// history) is the only fix; retrying the same request cannot succeed.
	ClassOverflow
	// ClassRateLimit: the request was throttled (HTTP 429 or a rate-limit /
	// quota message). Retry after a delay; the request itself is fine.
	ClassRateLimit
	// ClassAuth: credentials were missing, invalid or lack permission.
	ClassAuth
	// ClassOutputLimit: the requested output size (max_tokens,
	// max_completion_tokens, maxOutputTokens) exceeds the model's output
	// limit. Lower max_tokens; the prompt is not the problem.
	ClassOutputLimit
	// ClassInvalidRequest: any other 4xx rejection (bad parameters, unknown
	// model, orphaned tool calls, content filter, ...). Retrying unchanged
	// will fail again.
	ClassInvalidRequest
	// ClassServer: a provider-side failure (5xx, overloaded). Usually
	// transient.
	ClassServer
)

// String returns a short lowercase name such as "overflow" or "rate_limit".
func (c Class) String() string {
	switch c {
	case ClassOther:
		return "other"
	case ClassOverflow:
		return "overflow"
	case ClassRateLimit:
		return "rate_limit"
	case ClassAuth:
		return "auth"
	case ClassOutputLimit:
		return "output_limit"
	case ClassInvalidRequest:
		return "invalid_request"
	case ClassServer:
		return "server"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// maxScan bounds how much of a body is examined. Provider error bodies are a
// few hundred bytes; anything far larger is an HTML page or a proxy dump and
// the decisive text, if any, is near the start.
const maxScan = 64 << 10

// maxDepth bounds recursion into nested JSON error envelopes.
const maxDepth = 8

// IsOverflow reports whether an HTTP error response from an LLM provider means the request's
// context (prompt + requested output) is too long for the model.
//
// The contract:
//   - 413 (Request Entity Too Large) is always an overflow, whatever the body.
//   - 429 is never an overflow, whatever the body: a request that is merely
//     too large for a per-minute token budget must be retried later, not
//     compacted.
//   - Any other 4xx or 5xx status is an overflow when the body carries one of
//     the providers' context-window messages or codes. 5xx is included because
//     some llama.cpp and Ollama builds report overflow as 500.
//   - Statuses below 400 (and above 599) are never an overflow.
//   - Status 0 means "unknown": the body alone decides.
//
// IsOverflow is equivalent to Classify(status, body) == ClassOverflow.
func IsOverflow(status int, body []byte) bool {
	return Classify(status, body) == ClassOverflow
}

// Classify sorts an HTTP error response from an LLM provider into a Class.
// See IsOverflow for the overflow contract. In order of precedence:
// 429 is ClassRateLimit, 413 is ClassOverflow, 401 and 403 are ClassAuth,
// statuses outside 400-599 (other than 0) are ClassOther; then the body is
// matched for rate-limit, overflow, output-limit and auth messages; what is
// left is ClassServer for 5xx and ClassInvalidRequest for 4xx. With status 0
// the body alone decides, falling back to ClassOther.
func Classify(status int, body []byte) Class {
	switch {
	case status == 429:
		return ClassRateLimit
	case status == 413:
		return ClassOverflow
	case status == 401 || status == 403:
		return ClassAuth
	case status != 0 && (status < 400 || status > 599):
		return ClassOther
	}
	return classifyText(status, extractText(body))
}

// classifyText classifies lowercased error text for a status that is 0 or in
// 400-599 (other than the statuses Classify settles by itself).
func classifyText(status int, text string) Class {
	switch {
	case containsAny(text, rateLimitPhrases):
		return ClassRateLimit
	case matchesOverflow(text):
		return ClassOverflow
	case containsAny(text, outputLimitPhrases) || matchesAny(text, outputLimitRegexps):
		return ClassOutputLimit
	case containsAny(text, authPhrases):
		return ClassAuth
	case status >= 500:
		return ClassServer
	case status >= 400:
		return ClassInvalidRequest
	case containsAny(text, serverPhrases):
		return ClassServer
	case containsAny(text, invalidRequestPhrases):
		return ClassInvalidRequest
	}
	return ClassOther
}

func matchesOverflow(text string) bool {
	return containsAny(text, overflowPhrases) || matchesAny(text, overflowRegexps)
}

// HTTPError is implemented by errors that carry an HTTP status code and
// response body from an LLM provider, so that IsOverflowError can classify
// them with IsOverflow instead of guessing from the error message.
type HTTPError interface {
	StatusCode() int
	ResponseBody() []byte
}

// StatusError is an HTTP error response from an LLM provider: the status code
// and the raw response body. IsOverflowError classifies it with
// IsOverflow(Status, Body).
type StatusError struct {
	Status int
	Body   []byte
}

// maxErrorBody is how much of the body Error includes.
const maxErrorBody = 200

// Error returns "provider: HTTP <status>: <first 200 bytes of body>".
func (e *StatusError) Error() string {
	if e == nil {
		return "provider: <nil>"
	}
	msg := "provider: HTTP " + strconv.Itoa(e.Status)
	b := e.Body
	if len(b) > maxErrorBody {
		b = b[:maxErrorBody]
	}
	// Drop invalid UTF-8, including a rune cut in half by the truncation.
	body := strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
	if body == "" {
		return msg
	}
	return msg + ": " + body
}

// StatusCode returns e.Status, or 0 for a nil *StatusError.
func (e *StatusError) StatusCode() int {
	if e == nil {
		return 0
	}
	return e.Status
}

// ResponseBody returns e.Body, or nil for a nil *StatusError.
func (e *StatusError) ResponseBody() []byte {
	if e == nil {
		return nil
	}
	return e.Body
}

// ResponseDumper is implemented by errors that keep the HTTP response that
// carried them and render it in HTTP/1.x wire format, body included, as
// DumpResponse(true). The errors of the official Go SDKs do: openai-go's
// *openai.Error and anthropic-sdk-go's *anthropic.Error. IsOverflowError and
// ErrorLimits read the status and body from that rendering, so that such an
// error is classified by what the provider said, not by its Error() text
// (openai-go's is only "OpenAI API error: 400 Bad Request").
type ResponseDumper interface {
	DumpResponse(body bool) []byte
}

// IsOverflowError reports whether err means the request's context was too
// long for the model.
//
// It returns false for nil and for any error that wraps context.Canceled or
// context.DeadlineExceeded (checked with errors.Is), even if it also wraps an
// HTTP error: a timed-out or cancelled call says nothing about the prompt.
// Otherwise, if err wraps a *StatusError or an HTTPError (found with
// errors.As), the result is IsOverflow of its status and body; else, if it
// wraps a ResponseDumper (an SDK's error, found with errors.As) whose
// response parses, IsOverflow of that response's status and body. Failing
// that, the error's message is matched against the same phrases as response
// bodies.
func IsOverflowError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if status, body, ok := httpParts(err); ok {
		return IsOverflow(status, body)
	}
	msg := err.Error()
	if len(msg) > maxScan {
		msg = msg[:maxScan]
	}
	return classifyText(0, strings.ToLower(msg)) == ClassOverflow
}

// extractText returns the lowercased text to match for a response body. If
// the body is JSON, that is the strings found under the error-bearing keys
// (see textKeys), one per line; otherwise, or if none are found, it is the
// raw body.
func extractText(body []byte) string {
	if len(body) > maxScan {
		body = body[:maxScan]
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[' || trimmed[0] == '"') {
		var v any
		if json.Unmarshal(trimmed, &v) == nil {
			var sb strings.Builder
			collect(&sb, v, 0)
			if sb.Len() > 0 {
				return strings.ToLower(sb.String())
			}
		}
	}
	return strings.ToLower(string(body))
}

// collect appends to sb the string values found under textKeys in v,
// descending into objects and arrays that are at the top level or under a
// text key. Each string is followed by a newline, which no pattern contains,
// so the order in which map keys are visited cannot affect a match.
func collect(sb *strings.Builder, v any, depth int) {
	if depth > maxDepth {
		return
	}
	switch t := v.(type) {
	case string:
		sb.WriteString(t)
		sb.WriteByte('\n')
	case []any:
		for _, e := range t {
			collect(sb, e, depth+1)
		}
	case map[string]any:
		for k, e := range t {
			if textKeys[strings.ToLower(k)] {
				collect(sb, e, depth+1)
			}
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func matchesAny(s string, res []*regexp.Regexp) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// httpParts returns the HTTP status and response body err carries: an
// HTTPError's, else the response of a ResponseDumper (when its body is empty,
// the error's RawJSON(), which the SDKs' errors also have). ok is false when
// err carries neither.
func httpParts(err error) (status int, body []byte, ok bool) {
	var he HTTPError
	if errors.As(err, &he) && he != nil {
		return he.StatusCode(), he.ResponseBody(), true
	}
	var rd ResponseDumper
	if !errors.As(err, &rd) || rd == nil {
		return 0, nil, false
	}
	status, body, ok = parseDump(rd)
	if ok && len(bytes.TrimSpace(body)) == 0 {
		var rj interface{ RawJSON() string }
		if errors.As(err, &rj) && rj != nil {
			body = []byte(rj.RawJSON())
		}
	}
	return status, body, ok
}

// parseDump reads the status and the body (at most maxScan bytes) of rd's
// response. A dumper that panics (an SDK error built by hand, without its
// response) or renders nothing that parses carries no response.
func parseDump(rd ResponseDumper) (status int, body []byte, ok bool) {
	defer func() {
		if recover() != nil {
			status, body, ok = 0, nil, false
		}
	}()
	dump := rd.DumpResponse(true)
	if len(dump) == 0 {
		return 0, nil, false
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(dump)), nil)
	if err != nil {
		return 0, nil, false
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(io.LimitReader(resp.Body, maxScan))
	return resp.StatusCode, body, true
}
