package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// The benchmarks every persistent backend runs, so that their figures are comparable. (This
// file drives the Manager over a store to measure restore cost; storetest is test support and
// is never imported by package ctxmgr, so there is no cycle.)

// SessionLen is the size of the session the benchmarks work on.
const SessionLen = 2000

// TypicalMessage returns the i-th message of a typical agent session: a user turn, then an
// assistant message with a tool call and its result (a few KB), in rotation.
func TypicalMessage(i int) chat.Message {
	switch i % 3 {
	case 0:
		return chat.TextMessage(chat.RoleUser, fmt.Sprintf("step %d: please look at the failing test in pkg/%d and fix it; keep the public API unchanged.", i, i%17))
	case 1:
		m := chat.TextMessage(chat.RoleAssistant, fmt.Sprintf("Reading the test output for step %d first.", i))
		m.ToolCalls = []chat.ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: "bash", Arguments: fmt.Sprintf(`{"cmd":"go test ./pkg/%d/... 2>&1 | tail -50"}`, i%17)}}
		return m
	default:
		var b strings.Builder
		for l := 0; l < 40; l++ {
			fmt.Fprintf(&b, "--- FAIL: TestCase%d_%d (0.%02ds)\n    file_%d.go:%d: got %d, want %d\n", i, l, l, l, 10+l, l*i, l*i+1)
		}
		return chat.ToolResult(fmt.Sprintf("call_%d", i-1), "bash", b.String(), false)
	}
}

// Seed appends the first n typical messages to session, in batches of 100.
func Seed(tb testing.TB, s store.Store, session string, n int) {
	tb.Helper()
	ctx := context.Background()
	for at := 0; at < n; at += 100 {
		batch := make([]chat.Message, min(100, n-at))
		for j := range batch {
			batch[j] = TypicalMessage(at + j)
		}
		if err := s.Append(ctx, session, at, batch); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchAppend appends one message at a time to a SessionLen-message session (each append
// durable when it returns) and reports msgs/s.
func BenchAppend(b *testing.B, s store.Store) {
	ctx := context.Background()
	Seed(b, s, "bench", SessionLen)
	n := SessionLen
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := s.Append(ctx, "bench", n, []chat.Message{TypicalMessage(n)}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchLoad reads a whole SessionLen-message session back (what loading a session costs).
func BenchLoad(b *testing.B, s store.Store) {
	ctx := context.Background()
	Seed(b, s, "bench", SessionLen)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		msgs, err := s.Messages(ctx, "bench", 0, -1)
		if err != nil || len(msgs) != SessionLen {
			b.Fatalf("%d messages, %v", len(msgs), err)
		}
	}
}

// BenchLoadPrepare measures what a restarted service pays for the first request of a
// SessionLen-message session: LoadSession (history, summaries and compaction state read back,
// tokens recounted) and then Prepare. The session is compacted once before the timer starts
// (with the default preset its old tool results are masked), so every iteration restores a
// compacted session, as after a restart.
func BenchLoadPrepare(b *testing.B, st store.Store) {
	ctx := context.Background()
	msgs := make([]chat.Message, SessionLen)
	for i := range msgs {
		msgs[i] = TypicalMessage(i)
	}
	// End on a user turn: a trailing tool call without its result cannot be prepared.
	msgs[SessionLen-1] = chat.TextMessage(chat.RoleUser, "and now the last step, please")
	for at := 0; at < SessionLen; at += 200 {
		if err := st.Append(ctx, "bench", at, msgs[at:min(at+200, SessionLen)]); err != nil {
			b.Fatal(err)
		}
	}
	system := []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a coding agent.")}
	cfg, err := ctxmgr.Preset(ctxmgr.PresetDefault, 200000, 32000)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Store = st
	cfg.Logger = slog.New(slog.DiscardHandler)
	m, err := ctxmgr.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prepare := func() ctxmgr.Prepared {
		s, err := m.LoadSession(ctx, "bench", system, nil)
		if err != nil {
			b.Fatal(err)
		}
		p, err := s.Prepare(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	first := prepare() // compacts and stores the summary and state
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := prepare()
		if len(p.Request.Messages) != len(first.Request.Messages) {
			b.Fatalf("restored request has %d messages, the first had %d", len(p.Request.Messages), len(first.Request.Messages))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(first.Request.Messages)), "sent-msgs")
}
