package chat

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Sentinel errors; every validation or decoding failure wraps one of them in an *Error that says
// where. Branch with errors.Is; read the position with errors.As.
var (
	ErrMalformedJSON       = errors.New("malformed JSON")
	ErrUnknownRole         = errors.New("unknown role")
	ErrOrphanToolResult    = errors.New("tool result without a preceding call")
	ErrDuplicateToolCallID = errors.New("duplicate tool call id")
	ErrMissingToolResult   = errors.New("tool call without a result")
	ErrInvalidUTF8         = errors.New("invalid UTF-8")
	ErrInvalid             = errors.New("invalid message")
)

// Error is a validation or decoding error located in a conversation.
type Error struct {
	// Index is the message index (in Request.Messages, or in the wire body's message array);
	// -1 when the error is not about one message (a body that is not JSON at all).
	Index int
	// Field names the field, e.g. "role", "content[2].text", "tool_calls[0].id".
	Field string
	// Err is one of the sentinel errors above, possibly wrapping detail.
	Err error
	// Detail is a human-readable addition (the offending value, a decoder message).
	Detail string
}

func (e *Error) Error() string {
	s := "chat: "
	if e.Index >= 0 {
		s += fmt.Sprintf("message %d: ", e.Index)
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	s += e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Validate checks a message sequence: known roles, valid UTF-8 in every text field, tool call
// ids unique among the calls still waiting for a result, and every tool result answering a call
// made by an earlier assistant message that has not been answered yet. An id may be reused once
// its call has been answered: real agents do this (73 of the 200 tau-bench runs in shared/data
// reuse ids across turns) and providers accept it. Validate does not require every call to have
// a result (see package turns for the full pairing rules a provider enforces). It returns the
// first problem as an *Error.
func Validate(msgs []Message) error {
	seen := make(map[string]bool) // open call ids (made, not yet answered)
	for i := range msgs {
		m := &msgs[i]
		if err := ValidateMessage(i, m); err != nil {
			return err
		}
		for j, tc := range m.ToolCalls {
			if seen[tc.ID] {
				return &Error{Index: i, Field: fmt.Sprintf("tool_calls[%d].id", j), Err: ErrDuplicateToolCallID, Detail: fmt.Sprintf("%q is already waiting for a result", tc.ID)}
			}
			seen[tc.ID] = true
		}
		if m.Role == RoleTool {
			if !seen[m.ToolCallID] {
				return &Error{Index: i, Field: "tool_call_id", Err: ErrOrphanToolResult, Detail: fmt.Sprintf("no open call %q", m.ToolCallID)}
			}
			delete(seen, m.ToolCallID)
		}
	}
	return nil
}

// ValidateMessage checks one message on its own: a known role, valid UTF-8 in every text field,
// tool calls only on assistant messages and with non-empty ids. Errors carry index i.
func ValidateMessage(i int, m *Message) error {
	if !m.Role.Valid() {
		return &Error{Index: i, Field: "role", Err: ErrUnknownRole, Detail: fmt.Sprintf("%q", m.Role)}
	}
	if err := checkUTF8(i, m); err != nil {
		return err
	}
	for j, tc := range m.ToolCalls {
		if m.Role != RoleAssistant {
			return &Error{Index: i, Field: fmt.Sprintf("tool_calls[%d]", j), Err: ErrInvalid, Detail: "only assistant messages make tool calls"}
		}
		if tc.ID == "" {
			return &Error{Index: i, Field: fmt.Sprintf("tool_calls[%d].id", j), Err: ErrInvalid, Detail: "empty tool call id"}
		}
	}
	if m.Role == RoleTool && m.ToolCallID == "" {
		return &Error{Index: i, Field: "tool_call_id", Err: ErrOrphanToolResult, Detail: "empty tool_call_id"}
	}
	return nil
}

func checkUTF8(i int, m *Message) error {
	bad := func(field string) error {
		return &Error{Index: i, Field: field, Err: ErrInvalidUTF8}
	}
	if !utf8.ValidString(m.Name) {
		return bad("name")
	}
	if !utf8.ValidString(m.ToolCallID) {
		return bad("tool_call_id")
	}
	for j := range m.Content {
		p := &m.Content[j]
		if !utf8.ValidString(p.Text) {
			return bad(fmt.Sprintf("content[%d].text", j))
		}
	}
	for j := range m.ToolCalls {
		tc := &m.ToolCalls[j]
		if !utf8.ValidString(tc.ID) || !utf8.ValidString(tc.Name) {
			return bad(fmt.Sprintf("tool_calls[%d]", j))
		}
		if !utf8.ValidString(tc.Arguments) {
			return bad(fmt.Sprintf("tool_calls[%d].arguments", j))
		}
	}
	return nil
}
