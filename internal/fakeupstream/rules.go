package fakeupstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The rules the fake upstream enforces, as named in Record.Rule. Every one of them is a rule of
// the real API, as documented by the provider and observed; the fake checks them on the raw JSON body with its own
// small decoders, independently of package wire, so that it does not merely agree with the
// proxy's own reading of the formats.
const (
	// RuleParse: the body is not the JSON object the API expects (or a field has the wrong type).
	RuleParse = "parse"
	// RuleMaxTokens: an Anthropic request without max_tokens.
	RuleMaxTokens = "max_tokens"
	// RuleEmpty: an Anthropic message with empty content (other than a final assistant
	// message), or a text block with empty text.
	RuleEmpty = "empty_content"
	// RuleRole: a message role the API does not accept.
	RuleRole = "role"
	// RuleCacheControl: more than MaxCacheControl blocks with cache_control in one Anthropic request.
	RuleCacheControl = "cache_control"
	// RuleSignature: an Anthropic thinking or redacted_thinking block that the fake did not issue,
	// or whose text or data was altered.
	RuleSignature = "thinking_signature"
	// RuleThinkingFirst: with thinking enabled, the last assistant turn of a tool loop does not
	// start with its thinking block.
	RuleThinkingFirst = "thinking_first"
	// RuleToolPairing: a tool call without its result right after it, or a result without its call.
	RuleToolPairing = "tool_pairing"
	// RuleWindow: the request does not fit the model's context window (Options.Window,
	// Options.RejectAbove). Not a structural violation: Record.Valid stays empty.
	RuleWindow = "window"
)

// MaxCacheControl is the most blocks with cache_control one Anthropic request may carry.
const MaxCacheControl = 4

// violation is a request the real API would refuse, with the provider's answer.
type violation struct {
	rule   string
	status int
	msg    string // the error message, as the provider words it
	body   string // the provider's whole error body
}

// structural reports whether the violation is a malformed request (whatever the window), as
// opposed to one that merely does not fit.
func (v *violation) structural() bool { return v != nil && v.rule != RuleWindow }

// anthropicViolation is a 400 invalid_request_error in Anthropic's error shape.
func anthropicViolation(rule, msg string) *violation {
	m := jsonString(msg)
	return &violation{rule: rule, status: 400, msg: msg,
		body: fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":%s},"request_id":"req_fake"}`, m)}
}

// openAIViolation is a 400 invalid_request_error in OpenAI's error shape; param and code may be
// empty (JSON null).
func openAIViolation(rule, msg, param, code string) *violation {
	m := jsonString(msg)
	return &violation{rule: rule, status: 400, msg: msg,
		body: fmt.Sprintf(`{"error":{"message":%s,"type":"invalid_request_error","param":%s,"code":%s}}`, m, jsonOrNull(param), jsonOrNull(code))}
}

func jsonOrNull(s string) string {
	if s == "" {
		return "null"
	}
	return jsonString(s)
}

// jsonString is s as a JSON string, without HTML escaping (the providers write "<" and ">" as
// they are).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// checked is what the raw check of a request found: the fields the fake needs, and the first
// rule the request breaks (nil: none). The window rule is checked later, once the request is
// counted.
type checked struct {
	model     string
	stream    bool
	maxTokens int // 0: absent
	// breakpoints is the number of blocks with cache_control (Anthropic).
	breakpoints int
	// thinking is the Anthropic thinking.type ("enabled", "adaptive", "disabled" or "").
	thinking string
	// extra holds the top-level fields other than messages, system and tools.
	extra map[string]json.RawMessage
	v     *violation
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case 'n':
			return true
		}
		return false
	}
	return true
}

// firstByte is the first non-space byte of raw (0 when empty).
func firstByte(raw json.RawMessage) byte {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

// topLevel decodes the top-level object of a body, keeping every field verbatim.
func topLevel(body []byte) (map[string]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	if top == nil {
		return nil, fmt.Errorf("the body is null")
	}
	return top, nil
}

// intField reads an optional integer field; absent or null is 0, false.
func intField(top map[string]json.RawMessage, k string) (int, bool, error) {
	raw, ok := top[k]
	if !ok || isNull(raw) {
		return 0, false, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, false, err
	}
	return n, true, nil
}

// commonFields fills model, stream and extra from the top-level object.
func commonFields(top map[string]json.RawMessage, c *checked) error {
	if raw, ok := top["model"]; ok {
		if err := json.Unmarshal(raw, &c.model); err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	if raw, ok := top["stream"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &c.stream); err != nil {
			return fmt.Errorf("stream: %w", err)
		}
	}
	c.extra = map[string]json.RawMessage{}
	for k, v := range top {
		switch k {
		case "messages", "system", "tools":
		default:
			c.extra[k] = v
		}
	}
	return nil
}
