package ctxmgr

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
)

func TestMergeRanges(t *testing.T) {
	in := []archiveRange{{0, 10, "a"}, {11, 20, "a"}, {10, 11, "a"}, {20, 30, "b"}, {31, 35, "a"}, {35, 40, "a"}}
	got := mergeRanges(in)
	want := []archiveRange{{0, 30, "a"}, {31, 40, "a"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merged %v, want %v", got, want)
	}
	if in[1].From != 11 {
		t.Fatal("input modified")
	}
}

// The guide names archived messages by position, never by where the store keeps them, and
// stays one line however many compactions and archive files there are.
func TestArchiveGuideByPosition(t *testing.T) {
	var rs []archiveRange
	// 500 compactions into files of 400 days, with a pinned message archived later.
	for i := 0; i < 500; i++ {
		from := i * 10
		where := store.Location(fmt.Sprintf("/data/dialog/day-%03d.jsonl", i%400))
		if i == 7 {
			rs = append(rs, archiveRange{from, from + 4, where}, archiveRange{from + 5, from + 10, where})
			continue
		}
		rs = append(rs, archiveRange{from, from + 10, where})
	}
	if g, want := archiveGuide(rs), guideHeader+"- messages 0-73, 75-4999\n"; g != want {
		t.Fatalf("guide:\n%s\nwant\n%s", g, want)
	}
	rs = append(rs, archiveRange{74, 75, "/data/dialog/day-401.jsonl"})
	if g, want := archiveGuide(rs), guideHeader+"- messages 0-4999\n"; g != want {
		t.Fatalf("guide:\n%s\nwant\n%s", g, want)
	}
	gaps := []archiveRange{{0, 5, "x"}, {6, 8, "x"}, {9, 12, "x"}, {13, 20, "x"}}
	if g, want := archiveGuide(gaps), guideHeader+"- messages 0-19 (in part)\n"; g != want {
		t.Fatalf("guide:\n%s\nwant\n%s", g, want)
	}
	if archiveGuide(nil) != "" {
		t.Fatal("a guide with nothing archived")
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
