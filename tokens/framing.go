package tokens

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// framer applies the message framing around a text counter. Both the exact and the heuristic
// counters use it, so they frame identically.
type framer struct {
	text func(string) int
	opts Options
}

// message is the cost of one message inside a request.
func (f framer) message(m *chat.Message) int {
	if m == nil {
		return 0
	}
	role := m.WireRole
	if role == "" {
		role = string(m.Role)
	}
	n := TokensPerMessage + f.text(role)
	if m.Name != "" {
		n = satAdd(n, TokensPerName+f.text(m.Name))
	}
	for i := range m.Content {
		n = satAdd(n, f.part(&m.Content[i]))
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		n = satAdd(n, ToolCallOverhead+f.text(tc.Name))
		n = satAdd(n, f.text(tc.Arguments))
	}
	if m.ToolCallID != "" {
		n = satAdd(n, f.text(m.ToolCallID))
	}
	return n
}

// part is the cost of one content part.
func (f framer) part(p *chat.Part) int {
	switch p.Type {
	case chat.PartText, chat.PartReasoning:
		// Reasoning counts its text; signatures and redacted data are opaque to the model's
		// window accounting and are not counted.
		return f.text(p.Text)
	case chat.PartImage:
		return imageTokens(p.Image, f.opts)
	case chat.PartFile:
		return f.file(p.File)
	default:
		// PartOther and unknown types: the verbatim JSON, counted as text, errs high.
		n := f.text(p.Text)
		if len(p.Raw) > 0 {
			n = satAdd(n, f.text(string(p.Raw)))
		}
		return n
	}
}

func (f framer) file(fr *chat.FileRef) int {
	if fr == nil {
		return f.opts.unknownFile()
	}
	if fr.Data != "" && isTextMedia(fr.MediaType, fr.Data) {
		return f.text(fr.Data)
	}
	return f.opts.unknownFile()
}

// isTextMedia reports whether a file's data is to be counted as text.
func isTextMedia(mediaType, data string) bool {
	mt := strings.ToLower(mediaType)
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.TrimSpace(mt)
	switch {
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", mt == "application/xml", mt == "application/x-yaml",
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	case mt == "":
		return !looksBase64(data)
	}
	return false
}

// looksBase64 reports whether s (its first 1024 bytes) could be base64 data.
func looksBase64(s string) bool {
	if len(s) > 1024 {
		s = s[:1024]
	}
	if len(s) < 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '+' || c == '/' || c == '=' || c == '-' || c == '_' || c == '\n' || c == '\r') {
			return false
		}
	}
	return true
}

// tools is the cost of the tool definitions of a request.
func (f framer) tools(tools []chat.Tool) int {
	if len(tools) == 0 {
		return 0
	}
	n := ToolsOverhead
	for i := range tools {
		t := &tools[i]
		n = satAdd(n, PerToolOverhead)
		if len(t.Raw) > 0 {
			// A server tool carried verbatim: its JSON holds its name and settings.
			n = satAdd(n, f.text(compactJSON(t.Raw)))
			continue
		}
		n = satAdd(n, f.text(t.Name))
		n = satAdd(n, f.text(t.Description))
		if len(t.Parameters) > 0 {
			n = satAdd(n, f.text(compactJSON(t.Parameters)))
		}
	}
	return n
}

// compactJSON returns raw without insignificant whitespace, or raw itself when it is not valid
// JSON (counted as it is: never an error).
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// request builds a Breakdown from a counter's Message and Tools, so that wrappers (the cache)
// reuse their own per-message counts.
func request(c Counter, r *chat.Request) Breakdown {
	var b Breakdown
	if r == nil {
		return b
	}
	for i := range r.System {
		b.System = satAdd(b.System, c.Message(&r.System[i]))
	}
	b.Tools = c.Tools(r.Tools)
	b.Messages = make([]int, len(r.Messages))
	for i := range r.Messages {
		b.Messages[i] = c.Message(&r.Messages[i])
	}
	b.Priming = ReplyPriming
	b.Total = b.sum()
	return b
}

func (b *Breakdown) sum() int {
	t := satAdd(b.System, b.Tools)
	for _, m := range b.Messages {
		t = satAdd(t, m)
	}
	return satAdd(t, b.Priming)
}
