package turns

import (
	"fmt"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// hist builds a history from a compact notation, one message per space-separated token:
//
//	u        user            s     system
//	a        assistant       a(x,y) assistant calling x and y ("_" is an empty id)
//	t(x)     tool result for x
//	u(x)     user message carrying a tool call x (invalid)
//
// Every message gets the text "#i" (its index) so that it can be traced through Repair.
func hist(spec string) []chat.Message {
	var msgs []chat.Message
	for i, tok := range strings.Fields(spec) {
		role, args, _ := strings.Cut(tok, "(")
		args = strings.TrimSuffix(args, ")")
		var ids []string
		if args != "" {
			for _, id := range strings.Split(args, ",") {
				if id == "_" {
					id = ""
				}
				ids = append(ids, id)
			}
		}
		m := chat.TextMessage(map[string]chat.Role{"u": chat.RoleUser, "s": chat.RoleSystem, "a": chat.RoleAssistant, "t": chat.RoleTool}[role],
			fmt.Sprintf("#%d", i))
		if m.Role == "" {
			panic("bad token " + tok)
		}
		if m.Role == chat.RoleTool {
			m.ToolCallID = ids[0]
			m.Name = "fn"
		} else {
			for _, id := range ids {
				m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: id, Name: "fn", Arguments: "{}"})
			}
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// notation renders a history back in hist's notation; synthetic results are "t!(x)".
func notation(msgs []chat.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch m.Role {
		case chat.RoleUser:
			b.WriteString("u")
		case chat.RoleSystem:
			b.WriteString("s")
		case chat.RoleAssistant:
			b.WriteString("a")
		case chat.RoleTool:
			b.WriteString("t")
			if m.Meta[MetaSynthetic] != "" {
				b.WriteString("!")
			}
			fmt.Fprintf(&b, "(%s)", orUnderscore(m.ToolCallID))
			continue
		default:
			fmt.Fprintf(&b, "?%s", m.Role)
		}
		if len(m.ToolCalls) > 0 {
			ids := make([]string, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				ids[j] = orUnderscore(tc.ID)
			}
			fmt.Fprintf(&b, "(%s)", strings.Join(ids, ","))
		}
	}
	return b.String()
}

func orUnderscore(s string) string {
	if s == "" {
		return "_"
	}
	return s
}

func cloneAll(msgs []chat.Message) []chat.Message {
	if msgs == nil {
		return nil
	}
	out := make([]chat.Message, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].Clone()
	}
	return out
}
