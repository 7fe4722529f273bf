// Package chat is ctxmgr's provider-neutral conversation model.
//
// Every other package speaks in these types: the wire formats (package wire) convert OpenAI
// chat-completions and Anthropic messages bodies to and from them, the token counters count them,
// the pipeline cuts and compacts them, and the stores persist them. The model is deliberately
// small: a Message has a role, content parts, the assistant's tool calls, and, for a tool result,
// the id of the call it answers. Fields a wire format carries that the model does not understand
// are kept verbatim in Extra maps so that a round trip through the model loses nothing.
package chat

import (
	"encoding/json"
	"unicode/utf8"
)

// Role is who speaks a message.
type Role string

// The four roles. A tool result is a message of its own with RoleTool, whatever the wire format
// (Anthropic carries tool results as blocks inside a user message; package wire splits them out).
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Valid reports whether r is one of the four roles.
func (r Role) Valid() bool {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// PartType is the kind of a content part.
type PartType string

// Content part kinds.
const (
	PartText      PartType = "text"
	PartImage     PartType = "image"
	PartFile      PartType = "file"
	PartReasoning PartType = "reasoning" // assistant thinking; Anthropic thinking/redacted_thinking blocks, OpenAI-style reasoning_content
	PartOther     PartType = "other"     // a block type the model does not know, kept verbatim in Raw
)

// Part is one piece of a message's content.
type Part struct {
	Type PartType `json:"type"`
	// Text is the text of a text part, or the thinking text of a reasoning part.
	Text string `json:"text,omitempty"`
	// Image is set for image parts.
	Image *Image `json:"image,omitempty"`
	// File is set for file parts.
	File *FileRef `json:"file,omitempty"`
	// Signature is the provider's signature of a reasoning part (Anthropic thinking blocks).
	Signature string `json:"signature,omitempty"`
	// Redacted holds the opaque data of a redacted reasoning part.
	Redacted string `json:"redacted,omitempty"`
	// Raw is the verbatim wire JSON of a PartOther block.
	Raw json.RawMessage `json:"raw,omitempty"`
	// Extra holds fields of the wire block that the model does not interpret (cache_control,
	// citations, ...), verbatim.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// Image is an image content part. Either URL or Data is set. Width and Height are zero when
// unknown; token counters then fall back to a flat figure.
type Image struct {
	URL       string `json:"url,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"` // base64
	Detail    string `json:"detail,omitempty"`
	Width     int    `json:"width,omitempty"`
	Height    int    `json:"height,omitempty"`
}

// FileRef is a reference to a file or document attached to a message.
type FileRef struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	URL       string `json:"url,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"` // base64 or plain text, as the wire format carried it
}

// ToolCall is one call an assistant message makes. Arguments is the raw JSON text of the
// arguments exactly as the model produced it (it may not even be valid JSON).
type ToolCall struct {
	ID        string                     `json:"id"`
	Name      string                     `json:"name"`
	Arguments string                     `json:"arguments"`
	Extra     map[string]json.RawMessage `json:"extra,omitempty"`
}

// Shape records how a wire format spelled a message's content, so that it is spelled the same
// way on the way back. It carries no meaning.
type Shape uint8

// Content shapes.
const (
	ShapeAuto   Shape = iota // a plain string when the content is one text part, else an array
	ShapeString              // a plain string
	ShapeParts               // an array of parts/blocks
	ShapeNull                // JSON null
	ShapeAbsent              // no content field at all
)

// Message is one message of a conversation.
type Message struct {
	Role Role `json:"role"`
	// Name is the optional participant name (OpenAI "name"); for tool results, the tool's name.
	Name    string `json:"name,omitempty"`
	Content []Part `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message makes.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is set on tool results: the id of the call answered.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// IsError marks a tool result that reports a failure.
	IsError bool `json:"is_error,omitempty"`
	// Meta is free-form metadata that is never sent to a provider.
	Meta map[string]string `json:"meta,omitempty"`

	// Wire is the format the message was decoded from ("openai", "anthropic" or empty). Extra
	// fields are written back only to the same format.
	Wire string `json:"wire,omitempty"`
	// WireRole is the role as the wire spelled it when it differs from Role (OpenAI "developer").
	WireRole string `json:"wire_role,omitempty"`
	// Shape is how the wire spelled Content.
	Shape Shape `json:"shape,omitempty"`
	// JoinPrev marks a message that shared one wire message with the one before it (Anthropic
	// user messages that carry tool_result blocks and then text).
	JoinPrev bool `json:"join_prev,omitempty"`
	// Extra holds top-level wire fields the model does not interpret, verbatim.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// Tool is a tool definition offered to the model.
type Tool struct {
	Name        string                     `json:"name"`
	Description string                     `json:"description,omitempty"`
	Parameters  json.RawMessage            `json:"parameters,omitempty"` // JSON Schema
	Extra       map[string]json.RawMessage `json:"extra,omitempty"`
	// Raw is the verbatim wire JSON for tools that are not plain functions (server tools).
	Raw json.RawMessage `json:"raw,omitempty"`
}

// Request is a whole LLM request in the neutral model: the four regions that fill a window
// (System, Tools, and the history in Messages; a summary is a message the pipeline inserts) plus
// every other body field (model, max_tokens, stream, ...) kept verbatim in Extra.
type Request struct {
	// System is the system prompt: the leading system messages of an OpenAI body, or the
	// Anthropic top-level system field as one message.
	System   []Message `json:"system,omitempty"`
	Tools    []Tool    `json:"tools,omitempty"`
	Messages []Message `json:"messages"`
	// Wire is the format the request was decoded from.
	Wire string `json:"wire,omitempty"`
	// SystemShape is how Anthropic spelled the system field.
	SystemShape Shape `json:"system_shape,omitempty"`
	// Extra holds every other top-level field, verbatim.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// Text returns the concatenated text of a message's text parts, separated by newlines.
// Reasoning, images and other parts are left out.
func (m *Message) Text() string {
	n := 0
	var first string
	for _, p := range m.Content {
		if p.Type == PartText {
			if n == 0 {
				first = p.Text
			}
			n++
		}
	}
	if n <= 1 {
		return first
	}
	var b []byte
	for _, p := range m.Content {
		if p.Type == PartText {
			if len(b) > 0 {
				b = append(b, '\n')
			}
			b = append(b, p.Text...)
		}
	}
	return string(b)
}

// Clone returns a deep copy of the message. Raw JSON values are shared: they are never mutated.
func (m Message) Clone() Message {
	if m.Content != nil {
		c := make([]Part, len(m.Content))
		copy(c, m.Content)
		for i := range c {
			if c[i].Image != nil {
				im := *c[i].Image
				c[i].Image = &im
			}
			if c[i].File != nil {
				f := *c[i].File
				c[i].File = &f
			}
			c[i].Extra = cloneRawMap(c[i].Extra)
		}
		m.Content = c
	}
	if m.ToolCalls != nil {
		tc := make([]ToolCall, len(m.ToolCalls))
		copy(tc, m.ToolCalls)
		for i := range tc {
			tc[i].Extra = cloneRawMap(tc[i].Extra)
		}
		m.ToolCalls = tc
	}
	if m.Meta != nil {
		mm := make(map[string]string, len(m.Meta))
		for k, v := range m.Meta {
			mm[k] = v
		}
		m.Meta = mm
	}
	m.Extra = cloneRawMap(m.Extra)
	return m
}

func cloneRawMap(in map[string]json.RawMessage) map[string]json.RawMessage {
	if in == nil {
		return nil
	}
	out := make(map[string]json.RawMessage, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// TextMessage returns a message with one text part.
func TextMessage(role Role, text string) Message {
	return Message{Role: role, Content: []Part{{Type: PartText, Text: text}}}
}

// ToolResult returns a tool-result message answering call id.
func ToolResult(id, name, text string, isError bool) Message {
	return Message{Role: RoleTool, ToolCallID: id, Name: name, IsError: isError, Content: []Part{{Type: PartText, Text: text}}}
}

// RuneStart returns the start of the UTF-8 sequence that holds byte i of s (i clamped to
// [0, len(s)]): s[:RuneStart(s, i)] and s[RuneStart(s, i):] never split a character. It is
// the one rune-safe cut of the module (snippets, the summarizer's clips, the proxy's reads).
func RuneStart(s string, i int) int {
	if i >= len(s) {
		return len(s)
	}
	if i <= 0 {
		return 0
	}
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}
