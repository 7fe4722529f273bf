package turns

import (
	"fmt"

	"github.com/ctxmgr/ctxmgr/chat"
)

// ValidateOptions tunes Validate.
type ValidateOptions struct {
	// AllowPendingTail accepts tool calls of the last assistant message that have no result
	// yet (an agent that has not run, or not finished running, the tools): the calls may be
	// answered partly or not at all, provided nothing but their results follows that message.
	// A request sent to a provider never allows this.
	AllowPendingTail bool
}

// Validate checks the tool-call pairing that OpenAI and Anthropic enforce, on the neutral model
// (Anthropic tool_result blocks are RoleTool messages there):
//
//   - only assistant messages make tool calls (chat.ErrInvalid, field "tool_calls[j]"); a call
//     id is not empty (chat.ErrInvalid) and is not in use: unique within its message and
//     not the id of a call still waiting for its result (chat.ErrDuplicateToolCallID, field
//     "tool_calls[j].id"). Reusing the id of an answered call is allowed: 73 of the 200
//     tau-bench runs in shared/data do, and providers accept it;
//   - the results of an assistant message's calls are the run of tool messages right after it,
//     in any order (parallel calls), before any other message: OpenAI wants the tool messages
//     right after the assistant message, Anthropic wants the tool_result blocks in the very next
//     user message. So every tool result answers a call of the assistant message that precedes
//     its run, hence of the same turn; a tool message with no call before it is an orphan
//     (chat.ErrOrphanToolResult, field "tool_call_id"); a result away from its call's run
//     leaves that call without a result, reported first (at the call's message, see below);
//   - every call has exactly one result: a second one is chat.ErrDuplicateToolCallID (field
//     "tool_call_id"), a missing one chat.ErrMissingToolResult at the assistant message (field
//     "tool_calls[j].id"), unless opts.AllowPendingTail and the message's run reaches the end.
//
// It checks pairing only: roles and UTF-8 are chat.Validate's business (messages with unknown
// roles are treated like user or system messages here). It returns the first problem found, in
// message order, as a *chat.Error whose Err is one of the sentinels above.
func Validate(msgs []chat.Message, opts ValidateOptions) error {
	n := len(msgs)
	var (
		owner    map[string]int  // call id -> index of the assistant message that made it
		answered map[string]bool // call id -> its result has been seen
	)
	for i := 0; i < n; {
		m := &msgs[i]
		if err := checkCallsRole(i, m); err != nil {
			return err
		}
		if m.Role == chat.RoleTool {
			return strayResult(i, m, owner, answered)
		}
		if m.Role != chat.RoleAssistant || len(m.ToolCalls) == 0 {
			i++
			continue
		}
		if owner == nil {
			owner = make(map[string]int)
			answered = make(map[string]bool)
		}
		for j, tc := range m.ToolCalls {
			if tc.ID == "" {
				return &chat.Error{Index: i, Field: fmt.Sprintf("tool_calls[%d].id", j), Err: chat.ErrInvalid, Detail: "empty tool call id"}
			}
			// An id may be reused once its earlier call has been answered (real agents do,
			// and providers accept it); never twice in one message or while still open.
			if prev, dup := owner[tc.ID]; dup && (prev == i || !answered[tc.ID]) {
				return &chat.Error{Index: i, Field: fmt.Sprintf("tool_calls[%d].id", j), Err: chat.ErrDuplicateToolCallID,
					Detail: fmt.Sprintf("%q already used by message %d", tc.ID, prev)}
			}
			owner[tc.ID] = i
			answered[tc.ID] = false
		}
		j := i + 1
		for ; j < n && msgs[j].Role == chat.RoleTool; j++ {
			r := &msgs[j]
			if err := checkCallsRole(j, r); err != nil {
				return err
			}
			if o, ok := owner[r.ToolCallID]; ok && o == i && !answered[r.ToolCallID] {
				answered[r.ToolCallID] = true
				continue
			}
			return strayResult(j, r, owner, answered)
		}
		if !opts.AllowPendingTail || j < n {
			for k, tc := range m.ToolCalls {
				if !answered[tc.ID] {
					return &chat.Error{Index: i, Field: fmt.Sprintf("tool_calls[%d].id", k), Err: chat.ErrMissingToolResult,
						Detail: fmt.Sprintf("%q has no result right after the message", tc.ID)}
				}
			}
		}
		i = j
	}
	return nil
}

func checkCallsRole(i int, m *chat.Message) error {
	if len(m.ToolCalls) > 0 && m.Role != chat.RoleAssistant {
		return &chat.Error{Index: i, Field: "tool_calls[0]", Err: chat.ErrInvalid,
			Detail: fmt.Sprintf("only assistant messages make tool calls, not %q", m.Role)}
	}
	return nil
}

// strayResult describes a tool result that is not where its call wants it.
func strayResult(i int, m *chat.Message, owner map[string]int, answered map[string]bool) error {
	id := m.ToolCallID
	o, ok := owner[id]
	switch {
	case !ok:
		return &chat.Error{Index: i, Field: "tool_call_id", Err: chat.ErrOrphanToolResult,
			Detail: fmt.Sprintf("%q: no earlier assistant message made this call", id)}
	case answered[id]:
		return &chat.Error{Index: i, Field: "tool_call_id", Err: chat.ErrDuplicateToolCallID,
			Detail: fmt.Sprintf("second result for %q", id)}
	default:
		return &chat.Error{Index: i, Field: "tool_call_id", Err: chat.ErrOrphanToolResult,
			Detail: fmt.Sprintf("%q is not in the results right after message %d, which made the call", id, o)}
	}
}
