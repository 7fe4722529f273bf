package summarize

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

// dataDir is the shared test data, relative to the package directory.
const dataDir = "../../shared/data"

// loadTrajectories returns the mini-swe-agent trajectories as plain text messages, skipping
// the test when the data is missing.
func loadTrajectories(t testing.TB) map[string][]chat.Message {
	t.Helper()
	dir := filepath.Join(dataDir, "trajectories", "mini-swe-agent")
	files, _ := filepath.Glob(filepath.Join(dir, "*.traj.json"))
	if len(files) == 0 {
		t.Skipf("test data missing: no %s/*.traj.json (the shared data set is expected at %s relative to the package)", dir, dataDir)
	}
	sort.Strings(files)
	out := map[string][]chat.Message{}
	for _, f := range files {
		b, err := os.ReadFile(f)
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
		out[strings.TrimSuffix(filepath.Base(f), ".traj.json")] = msgs
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
