package ctxmgr

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// benchHistory is a 2,000-message session of about 200,000 tokens (o200k_base): 500 turns of
// a user request, a tool call, its result and a reply.
func benchHistory() []chat.Message {
	var h []chat.Message
	for t := 0; t < 500; t++ {
		id := fmt.Sprintf("call_%d", t)
		h = append(h,
			chat.TextMessage(chat.RoleUser, fmt.Sprintf("Step %d: check internal/pkg%d/handler_%d.go and explain the failure in TestHandler%d.", t, t%17, t, t)),
			chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"cmd":"go test ./internal/pkg%d -run TestHandler%d"}`, t%17, t)}}},
			chat.ToolResult(id, "bash", strings.Repeat(fmt.Sprintf("--- FAIL: TestHandler%d (0.%02ds) handler_%d.go:%d: expected status 200, got 500\n", t, t%100, t, t%400), 12), false),
			chat.TextMessage(chat.RoleAssistant, fmt.Sprintf("The handler %d returns 500 because the context is canceled before the write; fix by checking ctx.Err().", t)),
		)
	}
	return h
}

func benchSession(b testing.TB, window int, counter tokens.Counter, hist []chat.Message) (*Manager, *Session) {
	cfg, _ := Preset(PresetDefault, window, 8000)
	cfg.Store, cfg.Logger, cfg.Counter = store.NewMemory(), discardLogger(), counter
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s, _ := m.NewSession("bench", []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a coding agent.")}, nil)
	if err := s.Append(context.Background(), hist...); err != nil {
		b.Fatal(err)
	}
	return m, s
}

func exactCached() tokens.Counter {
	c, _ := tokens.ForEncoding("o200k_base")
	return tokens.NewCache(c, 1<<16)
}

// BenchmarkPrepare: one new message on a 2,000-message, ~200,000-token session, then Prepare.
// "no-compaction" fits the window; "compaction" crosses the threshold on every call (a
// fresh session per iteration, set up outside the timer); "count-history" counts the whole
// history once with an exact counter and no cache, for scale.
func BenchmarkPrepare(b *testing.B) {
	ctx := context.Background()
	hist := benchHistory()
	total := exactCached().Request(&chat.Request{Messages: hist}).Total
	b.Logf("history: %d messages, %d tokens (o200k_base)", len(hist), total)
	b.Run("no-compaction", func(b *testing.B) {
		counter := exactCached()
		_, s := benchSession(b, 400000, counter, hist)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := s.Append(ctx, chat.TextMessage(chat.RoleUser, fmt.Sprintf("next %d", i))); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Prepare(ctx); err != nil {
				b.Fatal(err)
			}
			if err := s.Append(ctx, chat.TextMessage(chat.RoleAssistant, "ok")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("compaction", func(b *testing.B) {
		counter := exactCached()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			_, s := benchSession(b, total+total/10, counter, hist)
			if err := s.Append(ctx, chat.TextMessage(chat.RoleUser, "next")); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			p, err := s.Prepare(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if len(p.Report.Steps) == 0 {
				b.Fatal("no compaction happened")
			}
		}
	})
	b.Run("count-history", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, _ := tokens.ForEncoding("o200k_base")
			for j := range hist {
				c.Message(&hist[j])
			}
		}
	})
}

// BenchmarkSessionMemory reports the heap a 2,000-message session holds.
func BenchmarkSessionMemory(b *testing.B) {
	hist := benchHistory()
	counter := exactCached()
	var per float64
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, s := benchSession(b, 400000, counter, hist)
		runtime.GC()
		runtime.ReadMemStats(&after)
		per = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		runtime.KeepAlive(s)
		runtime.KeepAlive(m)
	}
	b.ReportMetric(per, "heap-B/session")
}

// scaledHistory is n messages in the shape of benchHistory (turns of four messages).
func scaledHistory(n int) []chat.Message {
	var h []chat.Message
	for t := 0; len(h) < n; t++ {
		id := fmt.Sprintf("call_%d", t)
		h = append(h,
			chat.TextMessage(chat.RoleUser, fmt.Sprintf("Step %d: check internal/pkg%d/handler_%d.go.", t, t%17, t)),
			chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"cmd":"go test ./internal/pkg%d"}`, t%17)}}},
			chat.ToolResult(id, "bash", fmt.Sprintf("--- FAIL: TestHandler%d handler_%d.go:%d: expected status 200, got 500\n", t, t, t%400), false),
			chat.TextMessage(chat.RoleAssistant, fmt.Sprintf("Handler %d: fixed.", t)),
		)
	}
	return h[:n]
}

// BenchmarkPrepareScaling: Prepare after appended messages, with nothing to compact, at
// 1,000, 10,000 and 50,000 messages of history. Its time and its allocations per call should
// not depend on the history's length (TestPrepareAllocsFlat asserts the allocations).
func BenchmarkPrepareScaling(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("msgs-%d", n), func(b *testing.B) {
			_, s := benchSession(b, 100_000_000, exactCached(), scaledHistory(n))
			if _, err := s.Prepare(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Appending is measured apart (its slices grow by doubling: amortized, but a
				// short run would show whichever doubling falls into it).
				b.StopTimer()
				if err := s.Append(ctx, chat.TextMessage(chat.RoleAssistant, "ok"), chat.TextMessage(chat.RoleUser, "next")); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := s.Prepare(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPrepareAllocsFlat: what Prepare allocates after appended messages does not grow with
// the history (1,000 against 20,000 messages; BenchmarkPrepareScaling shows the time).
func TestPrepareAllocsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 20,000-message session")
	}
	ctx := context.Background()
	allocs := func(n int) float64 {
		_, s := benchSession(t, 100_000_000, exactCached(), scaledHistory(n))
		if _, err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		var total float64
		for i := 0; i < 50; i++ {
			if err := s.Append(ctx, chat.TextMessage(chat.RoleAssistant, "ok"), chat.TextMessage(chat.RoleUser, "next")); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := s.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			total += float64(after.Mallocs - before.Mallocs)
		}
		return total / 50
	}
	small, large := allocs(1000), allocs(20000)
	if large > small+1 {
		t.Fatalf("Prepare allocates %.1f times a call at 20,000 messages against %.1f at 1,000", large, small)
	}
}
