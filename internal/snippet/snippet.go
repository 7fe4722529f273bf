// Package snippet renders the texts that replace a tool result in context once its full text
// is offloaded: a snippet (head, tail, notable lines of the middle) or a one-line stub. Each
// keeps the reference an agent needs to read the full result back: where it is, how many
// lines it has, from which line to go on.
package snippet

import (
	"fmt"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/summarize"
)

// Text is the text of a message's parts as offloaded: the one text part itself, or the parts
// joined by newlines (images and files as placeholders).
func Text(m *chat.Message) string {
	if len(m.Content) == 1 && m.Content[0].Type == chat.PartText {
		return m.Content[0].Text
	}
	var b strings.Builder
	for i, p := range m.Content {
		if i > 0 {
			b.WriteByte('\n')
		}
		switch p.Type {
		case chat.PartText, chat.PartReasoning:
			b.WriteString(p.Text)
		case chat.PartOther:
			b.Write(p.Raw)
		case chat.PartImage:
			b.WriteString("[image]")
		case chat.PartFile:
			b.WriteString("[file]")
		}
	}
	return b.String()
}

// Cut replaces a tool result by its head and tail within capBytes, the notable lines of the
// omitted middle (errors, failures, tracebacks: what an agent most often needs from a long
// output, and, when inPlay is set, the lines for which it is true: lines holding identifiers
// the conversation uses), and a reference to the full text, off. The notable share of the
// budget is 15%, 25% when inPlay is set. The text is cut at line ends where one is near, else
// at rune boundaries; at least 64 bytes of text are kept, whatever capBytes.
func Cut(orig *chat.Message, off store.Offloaded, capBytes int, inPlay func(string) bool) chat.Message {
	text := Text(orig)
	ref := func(shownHead, shownTailFrom int) string {
		return fmt.Sprintf("\n[ctxmgr: tool result offloaded: %d bytes, %d lines in all; lines %d-%d omitted here but for the notable ones below. Full text: %s (read it from line %d to continue)]\n",
			off.Bytes, off.Lines, shownHead+1, shownTailFrom-1, off.Ref(), shownHead+1)
	}
	budget := capBytes - len(ref(999999, 999999)) // room for the snippet itself
	if budget < 64 {
		budget = 64
	}
	// Notable lines come from the middle that a full-budget head and tail would omit; the
	// head and tail then share what they leave. The smaller head and tail only widen the
	// omitted middle, so the notable lines stay inside it.
	head0, tail0 := headTail(text, budget*2/3, budget/3)
	mid := ""
	if tail0 != "" {
		firstLine := strings.Count(head0, "\n") + 1
		share := 15
		if inPlay != nil {
			share = 25
		}
		mid = notableLines(text[len(head0):len(text)-len(tail0)], firstLine, budget*share/100, inPlay)
	}
	rest := budget - len(mid)
	head, tail := headTail(text, rest*2/3, rest/3)
	headLines := store.CountLines(head)
	if head != "" && !strings.HasSuffix(head, "\n") {
		headLines-- // a partial line is shown but not counted as read
	}
	tailFrom := off.Lines - store.CountLines(tail) + 1
	if tail != "" && tailFrom <= headLines {
		tailFrom = headLines + 1
	}
	return WithText(orig, head+ref(max(headLines, 0), tailFrom)+mid+tail)
}

// maxNotableScan bounds the bytes of an omitted middle searched for notable lines, so that a
// 50 MB result costs a bounded scan.
const maxNotableScan = 4 << 20

// notableLines returns up to budget bytes of the lines of mid that carry a notable marker (or
// for which inPlay, when set, is true),
// each prefixed with its line number (firstLine is the number of mid's first line) and cut
// to 240 bytes. Only the first maxNotableScan bytes of mid are searched.
func notableLines(mid string, firstLine, budget int, inPlay func(string) bool) string {
	if len(mid) > maxNotableScan {
		mid = mid[:maxNotableScan]
	}
	var b strings.Builder
	line := firstLine
	for len(mid) > 0 && b.Len() < budget {
		end := strings.IndexByte(mid, '\n')
		var l string
		if end < 0 {
			l, mid = mid, ""
		} else {
			l, mid = mid[:end], mid[end+1:]
		}
		if len(l) > 0 && (summarize.ErrorSeverity(l) > 0 || inPlay != nil && inPlay(l)) {
			if len(l) > 240 {
				l = l[:chat.RuneStart(l, 240)] + "..."
			}
			entry := fmt.Sprintf("L%d: %s\n", line, l)
			if b.Len()+len(entry) > budget {
				break
			}
			b.WriteString(entry)
		}
		line++
	}
	if b.Len() == 0 {
		return ""
	}
	return "[ctxmgr: notable omitted lines]\n" + b.String() + "[ctxmgr: end of notable lines]\n"
}

// Stub replaces a tool result by a one-line stub: its tool, whether it reported an error, its
// tokens and lines, and the reference to its full text, off.
func Stub(orig *chat.Message, off store.Offloaded, tokens int) chat.Message {
	name := orig.Name
	if name == "" {
		name = "tool"
	}
	errNote := ""
	if orig.IsError {
		errNote = " (it reported an error)"
	}
	return WithText(orig, fmt.Sprintf("[ctxmgr: old %s result masked%s: %d tokens, %d lines. Full text: %s (read lines 1-%d)]",
		name, errNote, tokens, off.Lines, off.Ref(), off.Lines))
}

// WithText returns a copy of m whose content is one text part; everything else (ids, name,
// error flag, wire details) is kept.
func WithText(m *chat.Message, text string) chat.Message {
	v := *m
	part := chat.Part{Type: chat.PartText, Text: text}
	if len(m.Content) > 0 && m.Content[0].Type == chat.PartText {
		part.Extra = m.Content[0].Extra // keep cache_control and friends
	}
	v.Content = []chat.Part{part}
	if v.Shape == chat.ShapeNull || v.Shape == chat.ShapeAbsent {
		v.Shape = chat.ShapeAuto
	}
	return v
}

// headTail returns a head of at most h bytes and a tail of at most t bytes of s, cut at line
// ends when one is near (within a quarter of the budget), else at a rune boundary. When s fits
// in h+t it is returned whole as head.
func headTail(s string, h, t int) (string, string) {
	if len(s) <= h+t {
		return s, ""
	}
	head := s[:chat.RuneStart(s, h)]
	if i := strings.LastIndexByte(head, '\n'); i >= 0 && i >= len(head)-h/4 {
		head = head[:i+1]
	}
	tail := s[chat.RuneStart(s, len(s)-t):]
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < t/4 && i+1 < len(tail) {
		tail = tail[i+1:]
	}
	return head, tail
}
