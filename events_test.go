package ctxmgr

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
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

// eventStore records the context and order of each event it is given.
type eventStore struct {
	store.Store
	mu    sync.Mutex
	kinds []string
	vals  []any
}

type traceKey struct{}

func (e *eventStore) AppendEvent(ctx context.Context, session, kind string, body []byte) error {
	e.mu.Lock()
	e.kinds = append(e.kinds, kind)
	e.vals = append(e.vals, ctx.Value(traceKey{}))
	e.mu.Unlock()
	return e.Store.AppendEvent(ctx, session, kind, body)
}

// TestOnEventOutsideLocks: OnEvent runs with no lock of the session held, so it may call the
// session (Stats, and Prepare itself); events are delivered in the order raised, the Store
// receives them in that order with the context of the call that raised them.
func TestOnEventOutsideLocks(t *testing.T) {
	es := &eventStore{Store: store.NewMemory()}
	var s *Session
	var got []Event
	var stats []Stats
	cfg := Config{Store: es, Counter: tokens.NewRatio(tokens.RatioOptions{PerToken: 4}), ToolResultCap: 1000, DisableMasking: true, Summarizer: &fakeSummarizer{}}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 4000, 500
	reentered := false
	cfg.OnEvent = func(ev Event) {
		got = append(got, ev)
		stats = append(stats, s.Stats()) // deadlocks when called under the session's lock
		if ev.Step == StepSummarize && !reentered {
			reentered = true
			if _, err := s.Prepare(context.Background()); err != nil {
				t.Errorf("Prepare from OnEvent: %v", err)
			}
		}
	}
	_, s = testManager(t, cfg)
	ctx := context.WithValue(context.Background(), traceKey{}, "trace-1")
	done := make(chan struct{})
	var steps []Event
	go func() {
		defer close(done)
		for i := 0; i < 30; i++ {
			id := fmt.Sprintf("c%d", i)
			if err := s.Append(ctx, chat.TextMessage(chat.RoleUser, "go"), call(id), chat.ToolResult(id, "bash", lines(300, "out"), false)); err != nil {
				t.Error(err)
				return
			}
			p, err := s.Prepare(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			steps = append(steps, p.Report.Steps...)
			if err := s.Append(ctx, chat.TextMessage(chat.RoleAssistant, "ok")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("deadlock: OnEvent called the session and never returned")
	}
	if len(got) == 0 || len(stats) != len(got) || !reentered {
		t.Fatalf("%d events, %d stats, reentered %v", len(got), len(stats), reentered)
	}
	// Delivered in order: the Store's order is OnEvent's, and the pipeline's steps appear in
	// OnEvent's order as the reports list them.
	es.mu.Lock()
	defer es.mu.Unlock()
	if len(es.kinds) != len(got) {
		t.Fatalf("store got %d events, OnEvent %d", len(es.kinds), len(got))
	}
	for i := range got {
		if es.kinds[i] != string(got[i].Step) {
			t.Fatalf("event %d: store %s, OnEvent %s", i, es.kinds[i], got[i].Step)
		}
	}
	j := 0
	for _, ev := range got {
		if j < len(steps) && ev == steps[j] {
			j++
		}
	}
	if j != len(steps) {
		t.Fatalf("the reports' %d steps are not in OnEvent's order (%d matched)", len(steps), j)
	}
	traced := 0
	for _, v := range es.vals {
		if v == "trace-1" {
			traced++
		}
	}
	if traced == 0 || traced < len(es.vals)-2 {
		t.Fatalf("%d of %d events stored with the caller's context", traced, len(es.vals))
	}
}
