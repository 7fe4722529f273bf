package ctxmgr

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// Pipeline events are recorded in stores that keep them (SQLite, PostgreSQL).
func TestEventsStored(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "ctxmgr.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := Config{Store: st, Counter: tokens.NewRatio(tokens.RatioOptions{PerToken: 4}), ToolResultCap: 1000, DisableMasking: true, Summarizer: &fakeSummarizer{}}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 4000, 500
	_, s := testManager(t, cfg)
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("c%d", i)
		appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"), call(id), chat.ToolResult(id, "bash", lines(300, "out"), false))
		if _, err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		appendAll(t, s, chat.TextMessage(chat.RoleAssistant, "ok"))
	}
	evs, err := st.Events(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
	}
	if kinds[string(StepOffload)] == 0 || kinds[string(StepSummarize)] == 0 {
		t.Fatalf("events stored: %v", kinds)
	}
}
