package summarize

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
)

// fuzzMessages builds a conversation from text: chunks separated by \x1e, roles and tool
// calls chosen by flags.
func fuzzMessages(text string, flags uint8) []chat.Message {
	var msgs []chat.Message
	for i, chunk := range strings.Split(text, "\x1e") {
		bits := (flags >> (uint(i) % 4 * 2)) & 3
		id := strconv.Itoa(i)
		switch bits {
		case 0:
			msgs = append(msgs, chat.TextMessage(chat.RoleUser, chunk))
		case 1:
			m := chat.TextMessage(chat.RoleAssistant, chunk)
			if flags&0x80 != 0 {
				m.ToolCalls = []chat.ToolCall{{ID: id, Name: chunk[:min(len(chunk), 8)], Arguments: chunk}}
			}
			msgs = append(msgs, m)
		case 2:
			msgs = append(msgs, chat.ToolResult(strconv.Itoa(i-1), chunk[:min(len(chunk), 5)], chunk, flags&0x40 != 0))
		default:
			msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: []chat.Part{{Type: chat.PartText, Text: chunk}, {Type: chat.PartReasoning, Text: chunk}, {Type: chat.PartText, Text: chunk}}})
		}
	}
	return msgs
}

func FuzzExtractive(f *testing.F) {
	f.Add("", "", "", 0, uint8(0))
	f.Add(prevSummary, "Fix a/b/c.py, you must not break the API\x1e```bash\npython a/b/c.py\n```\x1e<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\nValueError: bad\n</output>", "", 300, uint8(0b00100100))
	f.Add(goodAnswer, "I decided to use os.MkdirAll because the dir may not exist\x1e{\"command\":\"go test ./...\"}\x1eexit status 2\npanic: boom", "keep only decisions", 150, uint8(0b11011001))
	f.Add("## Goal\n- \xff\n## Critical Context\n- Files: `x", "\xff\xfe\x1e{\"path\":\"\xff\"}\x1e\xc3", "no next steps, brief", 40, uint8(0xff))
	f.Add("free text", strings.Repeat("error: x https://a.b/c ZFA04Y snake_case CamelCase\n", 200), "focus on snake_case", 5, uint8(0x41))
	f.Add("", "None.\x1eNothing", "", 100, uint8(0))
	s := NewExtractive(ExtractiveOptions{})
	f.Fuzz(func(t *testing.T, prev, text, instr string, target int, flags uint8) {
		req := Request{Previous: prev, Messages: fuzzMessages(text, flags), Instruction: instr, TargetTokens: target, First: int(flags >> 5)}
		if flags&1 != 0 {
			req.ArchiveGuide = guide
		}
		r1, err := s.Summarize(context.Background(), req)
		if err != nil {
			t.Fatalf("Summarize: %v", err)
		}
		r2, err := s.Summarize(context.Background(), req)
		if err != nil || r2 != r1 {
			t.Fatalf("not deterministic:\n%q\n%q", r1.Text, r2.Text)
		}
		if !hasAllHeadings(r1.Text) {
			t.Fatalf("headings missing:\n%s", r1.Text)
		}
		if !utf8.ValidString(r1.Text) {
			t.Fatalf("invalid UTF-8: %q", r1.Text)
		}
		if req.ArchiveGuide != "" && !strings.HasPrefix(r1.Text, guide+"\n\n"+Title+"\n") {
			t.Fatalf("guide not at the top:\n%s", r1.Text)
		}
		if target > 0 {
			if n := (ByteCounter{}).Text(r1.Text); n > target {
				body := r1.Text[strings.Index(r1.Text, "\n"+Headings[0]+"\n"):]
				if strings.Contains(body, "\n- ") {
					t.Fatalf("%d tokens over target %d with items left:\n%s", n, target, r1.Text)
				}
			}
		}
		if instr == "" && target > 0 {
			// Idempotent: an update without messages keeps the summary.
			again, _ := s.Summarize(context.Background(), Request{Previous: r1.Text, First: req.First, TargetTokens: target, ArchiveGuide: req.ArchiveGuide})
			if again.Text != r1.Text {
				t.Fatalf("empty update changed the summary:\n%s\n---\n%s", again.Text, r1.Text)
			}
		}
		if r1.OutputTokens != (ByteCounter{}).Text(r1.Text) || r1.InputTokens <= 0 {
			t.Fatalf("tokens %d/%d", r1.InputTokens, r1.OutputTokens)
		}
	})
}
