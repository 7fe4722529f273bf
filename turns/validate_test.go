package turns

import (
	"errors"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		pending bool  // AllowPendingTail
		err     error // sentinel, nil = valid
		index   int
		field   string
	}{
		{"empty", "", false, nil, 0, ""},
		{"only assistant messages", "a a a", false, nil, 0, ""},
		{"plain dialog", "s u a u a", false, nil, 0, ""},
		{"starts with an assistant tool call", "a(x) t(x) u a", false, nil, 0, ""},
		{"chained calls in one turn", "u a(x) t(x) a(y) t(y) a", false, nil, 0, ""},
		{"parallel calls in order", "u a(x,y,z) t(x) t(y) t(z) a", false, nil, 0, ""},
		{"parallel calls any order", "u a(x,y,z) t(z) t(x) t(y) a", false, nil, 0, ""},
		{"system message between turns", "u a(x) t(x) s a", false, nil, 0, ""},
		{"pending call, strict", "u a(x)", false, chat.ErrMissingToolResult, 1, "tool_calls[0].id"},
		{"pending call, allowed", "u a(x)", true, nil, 0, ""},
		{"partly answered parallel, allowed", "u a(x,y) t(y)", true, nil, 0, ""},
		{"partly answered parallel, strict", "u a(x,y) t(y)", false, chat.ErrMissingToolResult, 1, "tool_calls[0].id"},
		{"pending not at the tail", "u a(x) u", true, chat.ErrMissingToolResult, 1, "tool_calls[0].id"},
		{"pending call then another assistant", "u a(x) a(y)", true, chat.ErrMissingToolResult, 1, "tool_calls[0].id"},
		{"missing before final reply", "u a(x,y) t(x) a", false, chat.ErrMissingToolResult, 1, "tool_calls[1].id"},
		{"orphan result", "u t(x) a", false, chat.ErrOrphanToolResult, 1, "tool_call_id"},
		{"orphan at start", "t(x) u", false, chat.ErrOrphanToolResult, 0, "tool_call_id"},
		{"result of another id in the run", "u a(x) t(y)", false, chat.ErrOrphanToolResult, 2, "tool_call_id"},
		// A result away from its call: the call is reported first, at its own index.
		{"result after a user message", "u a(x) u t(x)", true, chat.ErrMissingToolResult, 1, "tool_calls[0].id"},
		{"system message inside the run", "u a(x) s t(x)", true, chat.ErrMissingToolResult, 1, "tool_calls[0].id"},
		{"result in a later assistant's run", "u a(x) a(y) t(x) t(y)", true, chat.ErrMissingToolResult, 1, "tool_calls[0].id"},
		{"result before its call", "u t(x) a(x) t(x)", false, chat.ErrOrphanToolResult, 1, "tool_call_id"},
		{"duplicate result", "u a(x) t(x) t(x)", false, chat.ErrDuplicateToolCallID, 3, "tool_call_id"},
		{"duplicate result later", "u a(x) t(x) u t(x)", false, chat.ErrDuplicateToolCallID, 4, "tool_call_id"},
		{"reused call id across turns", "u a(x) t(x) u a(x) t(x)", false, nil, 0, ""},
		{"duplicate call id in one message", "u a(x,x) t(x) t(x)", false, chat.ErrDuplicateToolCallID, 1, "tool_calls[1].id"},
		{"empty call id", "u a(_) t(_)", false, chat.ErrInvalid, 1, "tool_calls[0].id"},
		{"tool call on a user message", "u(x) t(x)", false, chat.ErrInvalid, 0, "tool_calls[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := hist(tt.spec)
			err := Validate(msgs, ValidateOptions{AllowPendingTail: tt.pending})
			if tt.err == nil {
				if err != nil {
					t.Fatalf("Validate(%q) = %v", tt.spec, err)
				}
				if !tt.pending {
					if err := chat.Validate(msgs); err != nil {
						t.Fatalf("turns.Validate accepts what chat.Validate rejects: %v", err)
					}
				}
				return
			}
			var ce *chat.Error
			if !errors.As(err, &ce) || !errors.Is(err, tt.err) {
				t.Fatalf("Validate(%q) = %v, want *chat.Error wrapping %v", tt.spec, err, tt.err)
			}
			if ce.Index != tt.index || ce.Field != tt.field {
				t.Fatalf("Validate(%q) = %v: index %d field %q, want %d %q", tt.spec, err, ce.Index, ce.Field, tt.index, tt.field)
			}
		})
	}
}

func TestValidateToolMessageWithCalls(t *testing.T) {
	msgs := hist("u a(x) t(x)")
	msgs[2].ToolCalls = []chat.ToolCall{{ID: "y"}}
	err := Validate(msgs, ValidateOptions{})
	var ce *chat.Error
	if !errors.As(err, &ce) || !errors.Is(err, chat.ErrInvalid) || ce.Index != 2 {
		t.Fatalf("got %v", err)
	}
}
