package ctxmgr

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/tokens"
)

func TestMergeRanges(t *testing.T) {
	in := []archiveRange{{0, 10, "a"}, {11, 20, "a"}, {10, 11, "a"}, {20, 30, "b"}, {30, 31, "a"}, {31, 40, "a"}}
	got := mergeRanges(in)
	want := []archiveRange{{0, 20, "a"}, {20, 30, "b"}, {30, 40, "a"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merged %v, want %v", got, want)
	}
	if in[1].From != 11 {
		t.Fatal("input modified")
	}
}

func TestArchiveGuideOneLinePerLocation(t *testing.T) {
	var rs []archiveRange
	// 500 compactions into one location, with a pinned message archived later.
	for i := 0; i < 500; i++ {
		from := i * 10
		if i == 7 {
			rs = append(rs, archiveRange{from, from + 4, "dialog/2026-11-22.jsonl"}, archiveRange{from + 5, from + 10, "dialog/2026-11-22.jsonl"})
			continue
		}
		rs = append(rs, archiveRange{from, from + 10, "dialog/2026-11-22.jsonl"})
	}
	rs = append(rs, archiveRange{74, 75, "dialog/2026-11-23.jsonl"})
	g := archiveGuide(rs, 0, nil)
	want := guideHeader + "- messages 0-4999: dialog/2026-11-22.jsonl\n" // 74 is in both: merged per location
	if strings.Count(g, "\n") != 3 || !strings.HasPrefix(g, guideHeader+"- messages 0-73, 75-4999: dialog/2026-11-22.jsonl\n") ||
		!strings.Contains(g, "- messages 74-74: dialog/2026-11-23.jsonl\n") {
		t.Fatalf("guide:\n%s(not like %q)", g, want)
	}
}

func TestArchiveGuideFoldsLocations(t *testing.T) {
	c, err := tokens.ForEncoding(tokens.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	var rs []archiveRange
	for d := 0; d < 400; d++ { // a file store, one archive file per day, for 400 days
		rs = append(rs, archiveRange{d * 5, d*5 + 5, store.Location(fmt.Sprintf("dialog/day-%03d.jsonl", d))})
	}
	g := archiveGuide(rs, 100, c)
	if n := c.Text(g); n > 100 {
		t.Fatalf("guide costs %d tokens > 100:\n%s", n, g)
	}
	if !strings.Contains(g, "- messages 0-") || !strings.Contains(g, "dialog/day-000.jsonl") || !strings.Contains(g, "dialog/day-399.jsonl\n") {
		t.Fatalf("guide lost the first or last location:\n%s", g)
	}
}

// TestLongSessionSmallWindowSummaryBounded drives a long session (a user message, a tool call,
// a 0.3-6 KB result and a reply per turn, 300 turns) on a 4096-token window over a file store:
// the summary, archive guide included, stays within its target and every request fits. A guide
// that grew by a line per compaction, outside the target, would outgrow the window.
func TestLongSessionSmallWindowSummaryBounded(t *testing.T) {
	ctx := context.Background()
	st, err := files.Open(t.TempDir(), files.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 4096, 512
	_, s := testManager(t, cfg)
	turns := 300
	if testing.Short() {
		turns = 120
	}
	maxSummary, maxGuideLines, versions := 0, 0, 0
	for i := 0; i < turns; i++ {
		id := fmt.Sprintf("c%d", i)
		size := 300 + (i*977)%5700
		appendAll(t, s, chat.TextMessage(chat.RoleUser, fmt.Sprintf("turn %d: look at file%d.go", i, i)),
			chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "read", Arguments: fmt.Sprintf(`{"path":"file%d.go"}`, i)}}},
			chat.ToolResult(id, "read", strings.Repeat(fmt.Sprintf("line of file%d\n", i), size/14), false))
		p, err := s.Prepare(ctx)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if p.Report.InputAfter+512 > 4096 {
			t.Fatalf("turn %d: %d input tokens + 512 > 4096", i, p.Report.InputAfter)
		}
		appendAll(t, s, chat.TextMessage(chat.RoleAssistant, fmt.Sprintf("file%d.go looks fine", i)))
		s.mu.Lock()
		if s.summary != nil {
			versions = s.summary.Version
			maxSummary = max(maxSummary, s.summaryTokens)
			maxGuideLines = max(maxGuideLines, strings.Count(s.summary.Text[:strings.Index(s.summary.Text, "\n\n")+1], "\n"))
			if s.summaryTokens > s.summaryTarget()+32 { // + the "[ctxmgr: summary vN ...]" header
				t.Fatalf("turn %d: summary v%d costs %d tokens, target %d:\n%s", i, s.summary.Version, s.summaryTokens, s.summaryTarget(), s.summary.Text)
			}
		}
		s.mu.Unlock()
	}
	if versions < 20 {
		t.Fatalf("only %d summary versions in %d turns: the test does not exercise compaction", versions, turns)
	}
	if maxGuideLines > 3 {
		t.Fatalf("guide grew to %d lines", maxGuideLines)
	}
	t.Logf("%d turns, %d summary versions, largest summary %d tokens, guide at most %d lines", turns, versions, maxSummary, maxGuideLines)
}
