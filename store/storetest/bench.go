package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	Seed(b, s, "bench", SessionLen)
	appendEach(b, s)
}

// BenchAppendTurn appends two messages at a time (an agent's turn: its call's answer and the
// tool's result, as the proxy writes them) to a SessionLen-message session, and reports
// msgs/s.
func BenchAppendTurn(b *testing.B, s store.Store) {
	ctx := context.Background()
	Seed(b, s, "bench", SessionLen)
	n := SessionLen
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := s.Append(ctx, "bench", n, []chat.Message{TypicalMessage(n), TypicalMessage(n + 1)}); err != nil {
			b.Fatal(err)
		}
		n += 2
	}
	b.ReportMetric(float64(2*b.N)/time.Since(start).Seconds(), "msgs/s")
	b.StopTimer()
}

// appendEach appends b.N messages one at a time to the seeded session "bench", timed, and
// reports msgs/s.
func appendEach(b *testing.B, s store.Store) {
	ctx := context.Background()
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
	b.StopTimer()
}

// BenchAppendWithState is BenchAppend on a session whose compaction state (PutState) is
// stateBytes long, as a long session's is (the proxy's 100K-token benchmark session carries
// about 50 KB of views). An append must not cost more for a larger state: the state is
// written when compaction changes it, not with every message.
func BenchAppendWithState(b *testing.B, s store.Store, stateBytes int) {
	ctx := context.Background()
	Seed(b, s, "bench", SessionLen)
	state := []byte(`{"views":"` + strings.Repeat("x", max(0, stateBytes-13)) + `"}`)
	if err := s.PutState(ctx, "bench", state); err != nil {
		b.Fatal(err)
	}
	appendEach(b, s)
	if got, err := s.State(ctx, "bench"); err != nil || len(got) != len(state) {
		b.Fatalf("state after the appends: %d bytes, %v; want %d", len(got), err, len(state))
	}
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
