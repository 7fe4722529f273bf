package summarize

import (
	"encoding/json"
	"io/fs"
	"path"
	"sort"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/sample"
)

// loadTrajectories returns the mini-swe-agent runs of the embedded sample (package
// internal/sample) as plain text messages, by run name.
func loadTrajectories(t testing.TB) map[string][]chat.Message {
	t.Helper()
	files, err := fs.Glob(sample.FS(), path.Join(sample.Dir, "mini-swe-agent", "*.traj.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no mini-swe-agent runs in the embedded sample: %v", err)
	}
	sort.Strings(files)
	out := map[string][]chat.Message{}
	for _, f := range files {
		b, err := fs.ReadFile(sample.FS(), f)
		if err != nil {
			t.Fatal(err)
		}
		var tr struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var msgs []chat.Message
		for _, m := range tr.Messages {
			msgs = append(msgs, chat.TextMessage(chat.Role(m.Role), m.Content))
		}
		out[strings.TrimSuffix(path.Base(f), ".traj.json")] = msgs
	}
	return out
}

// section returns the body of a "## " section of a summary (up to the next "## " heading).
func section(text, heading string) string {
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := text[i+len(heading)+2:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// subsection returns the body of a "### " subsection of Progress.
func subsection(text, heading string) string {
	p := section(text, "## Progress")
	i := strings.Index(p, heading+"\n")
	if i < 0 {
		return ""
	}
	rest := p[i+len(heading)+1:]
	if j := strings.Index(rest, "### "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func hasAllHeadings(text string) bool {
	for _, h := range Headings {
		if lineIndex(text, h) < 0 {
			return false
		}
	}
	return true
}

func tcall(id, name, args string) chat.ToolCall {
	return chat.ToolCall{ID: id, Name: name, Arguments: args}
}

func assistantCalls(text string, calls ...chat.ToolCall) chat.Message {
	m := chat.TextMessage(chat.RoleAssistant, text)
	if text == "" {
		m.Content = nil
	}
	m.ToolCalls = calls
	return m
}

// wordCounter is a second counter with a different notion of tokens, to check that targets
// are met by the counter given, not by the default one.
type wordCounter struct{}

func (wordCounter) Text(s string) int { return len(strings.Fields(s)) + strings.Count(s, "\n") }
