package chat

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	call := func(ids ...string) Message {
		m := Message{Role: RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Name: "f", Arguments: "{}"})
		}
		return m
	}
	res := func(id string) Message { return ToolResult(id, "f", "ok", false) }
	u := TextMessage(RoleUser, "u")
	cases := []struct {
		name  string
		msgs  []Message
		want  error
		index int
		field string
	}{
		{"empty", nil, nil, 0, ""},
		{"parallel", []Message{u, call("a", "b"), res("b"), res("a")}, nil, 0, ""},
		{"id reused after its result", []Message{u, call("a"), res("a"), u, call("a"), res("a")}, nil, 0, ""},
		{"unknown role", []Message{u, {Role: "robot"}}, ErrUnknownRole, 1, "role"},
		{"orphan", []Message{u, res("x")}, ErrOrphanToolResult, 1, "tool_call_id"},
		{"second result", []Message{u, call("a"), res("a"), res("a")}, ErrOrphanToolResult, 3, "tool_call_id"},
		{"duplicate open id", []Message{u, call("a"), call("a")}, ErrDuplicateToolCallID, 2, "tool_calls[0].id"},
		{"duplicate in one message", []Message{u, call("a", "a")}, ErrDuplicateToolCallID, 1, "tool_calls[1].id"},
		{"empty id", []Message{u, call("")}, ErrInvalid, 1, "tool_calls[0].id"},
		{"call on user", []Message{{Role: RoleUser, ToolCalls: []ToolCall{{ID: "a"}}}}, ErrInvalid, 0, "tool_calls[0]"},
		{"invalid utf8", []Message{TextMessage(RoleUser, "a\xffb")}, ErrInvalidUTF8, 0, "content[0].text"},
		{"invalid utf8 args", []Message{u, {Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a", Arguments: "\xc3"}}}}, ErrInvalidUTF8, 1, "tool_calls[0].arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.msgs)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *Error
			if !errors.Is(err, c.want) || !errors.As(err, &ce) || ce.Index != c.index || ce.Field != c.field {
				t.Fatalf("err = %v, want %v at %d %q", err, c.want, c.index, c.field)
			}
		})
	}
}

func TestValidateMessage(t *testing.T) {
	if err := ValidateMessage(3, &Message{Role: RoleTool}); !errors.Is(err, ErrOrphanToolResult) {
		t.Fatalf("tool result without id: %v", err)
	}
	var ce *Error
	if err := ValidateMessage(7, &Message{Role: "x"}); !errors.As(err, &ce) || ce.Index != 7 {
		t.Fatalf("index not carried: %v", err)
	}
}

func TestHashAndClone(t *testing.T) {
	m := Message{Role: RoleAssistant, Content: []Part{{Type: PartText, Text: "a", Extra: map[string]json.RawMessage{"k": json.RawMessage(`1`)}}},
		ToolCalls: []ToolCall{{ID: "c", Name: "f", Arguments: "{}"}}, Meta: map[string]string{"x": "y"}}
	c := m.Clone()
	if m.Hash() != c.Hash() {
		t.Fatal("clone hashes differently")
	}
	c.Content[0].Text = "b"
	c.ToolCalls[0].ID = "d"
	c.Meta["x"] = "z"
	c.Content[0].Extra["k"] = json.RawMessage(`2`)
	if m.Content[0].Text != "a" || m.ToolCalls[0].ID != "c" || m.Meta["x"] != "y" || string(m.Content[0].Extra["k"]) != "1" {
		t.Fatal("Clone shares state with the original")
	}
	if m.Hash() == c.Hash() {
		t.Fatal("different messages hash the same")
	}
	two := Message{Content: []Part{{Type: PartText, Text: "a"}, {Type: PartImage}, {Type: PartText, Text: "b"}}}
	if two.Text() != "a\nb" {
		t.Fatalf("Text() = %q", two.Text())
	}
}

func TestRuneStart(t *testing.T) {
	s := "añb€c" // a, ñ (2 bytes), b, € (3 bytes), c
	for i, want := range []int{0, 1, 1, 3, 4, 4, 4, 7, 8} {
		if got := RuneStart(s, i); got != want {
			t.Errorf("RuneStart(%q, %d) = %d, want %d", s, i, got, want)
		}
	}
	if RuneStart(s, -5) != 0 || RuneStart(s, 100) != len(s) {
		t.Error("out-of-range indexes are not clamped")
	}
}
