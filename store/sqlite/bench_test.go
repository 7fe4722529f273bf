package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// BenchmarkAppend appends one message at a time to a 2,000-message session (each append a
// durable transaction).
func BenchmarkAppend(b *testing.B) {
	storetest.BenchAppend(b, open(b, filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{}))
}

// BenchmarkAppendRelaxed is BenchmarkAppend with synchronous=NORMAL (Options.Relaxed).
func BenchmarkAppendRelaxed(b *testing.B) {
	storetest.BenchAppend(b, open(b, filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{Relaxed: true}))
}

// BenchmarkAppendRelaxedTurn is BenchmarkAppendRelaxed two messages at a time, as the proxy
// appends an agent's turn.
func BenchmarkAppendRelaxedTurn(b *testing.B) {
	storetest.BenchAppendTurn(b, open(b, filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{Relaxed: true}))
}

// BenchmarkAppendWriteBehindTurn is BenchmarkAppendRelaxedTurn with the journal
// (Options.WriteBehind, as ctxmgr serve opens SQLite). ns/op includes applying every append
// to the database (the clock stops once a read has waited for them); append-us is what an
// Append call itself takes, what the proxy's answer waits for.
func BenchmarkAppendWriteBehindTurn(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{Relaxed: true, WriteBehind: 20 * time.Millisecond})
	ctx := context.Background()
	storetest.Seed(b, s, "bench", storetest.SessionLen)
	n := storetest.SessionLen
	var calls time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := s.Append(ctx, "bench", n, []chat.Message{storetest.TypicalMessage(n), storetest.TypicalMessage(n + 1)}); err != nil {
			b.Fatal(err)
		}
		calls += time.Since(t0)
		n += 2
	}
	if _, err := s.Sessions(ctx); err != nil { // waits until every append is applied
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(calls.Microseconds())/float64(b.N), "append-us")
}

// BenchmarkAppendWriteBehindQuiet is BenchmarkAppendWriteBehindTurn at an agent's pace: each
// append comes after its predecessors are applied (an agent's turn takes seconds, the
// journal applies in WriteBehind), so the journal no longer knows the session's length and
// reads it from the database. ns/op is the Append call alone, what the proxy's answer waits
// for; applying is outside the clock.
func BenchmarkAppendWriteBehindQuiet(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{Relaxed: true, WriteBehind: 20 * time.Millisecond})
	ctx := context.Background()
	storetest.Seed(b, s, "bench", storetest.SessionLen)
	n := storetest.SessionLen
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Append(ctx, "bench", n, []chat.Message{storetest.TypicalMessage(n), storetest.TypicalMessage(n + 1)}); err != nil {
			b.Fatal(err)
		}
		n += 2
		b.StopTimer()
		if _, err := s.Sessions(ctx); err != nil { // waits until the append is applied
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkAppendRelaxedState is BenchmarkAppendRelaxed on a session with a 0, 4 KiB or
// 64 KiB compaction state: the figures must not grow with it.
func BenchmarkAppendRelaxedState(b *testing.B) {
	for _, n := range []int{0, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("state-%dKiB", n>>10), func(b *testing.B) {
			storetest.BenchAppendWithState(b, open(b, filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{Relaxed: true}), n)
		})
	}
}

// BenchmarkLoad reads a whole 2,000-message session back (what loading a session costs).
func BenchmarkLoad(b *testing.B) {
	storetest.BenchLoad(b, open(b, filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{}))
}

// dirSize is the size of the database with its WAL and shared-memory files.
func dirSize(t testing.TB, dir string) int64 {
	var total int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && !fi.IsDir() {
			total += fi.Size()
		}
	}
	return total
}

// TestSizeOnDisk logs the database size per 1,000 typical messages (after a checkpoint: the
// store is closed), next to the size of their JSON encoding.
func TestSizeOnDisk(t *testing.T) {
	dir := t.TempDir()
	s, err := sqlite.Open(filepath.Join(dir, "ctxmgr.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Seed(t, s, "size", 1000)
	s.Close()
	empty := t.TempDir()
	e, err := sqlite.Open(filepath.Join(empty, "ctxmgr.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	var payload int
	for i := 0; i < 1000; i++ {
		m := storetest.TypicalMessage(i)
		b, _ := jsonMarshal(&m)
		payload += len(b)
	}
	size, base := dirSize(t, dir), dirSize(t, empty)
	t.Logf("size on disk per 1,000 typical messages: %d bytes (%.0f KiB; empty database %d bytes; JSON payload %d bytes, overhead %.2fx)",
		size-base, float64(size-base)/1024, base, payload, float64(size-base)/float64(payload))
}

func jsonMarshal(m *chat.Message) ([]byte, error) { return json.Marshal(m) }

// BenchmarkPruneDryRun lists, as `ctxmgr sessions prune --dry-run` does, the sessions idle since
// a cut-off among 10,000 (one in ten of them): prune is the one query that reads
// sessions.updated, which has no index since schema version 2.
func BenchmarkPruneDryRun(b *testing.B) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	s := open(b, filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{Relaxed: true, Now: func() time.Time { return now }})
	const sessions = 10000
	for i := range sessions {
		now = t0.Add(time.Duration(i) * time.Minute)
		if err := s.Append(ctx, fmt.Sprintf("s%05d", i), 0, []chat.Message{storetest.TypicalMessage(0)}); err != nil {
			b.Fatal(err)
		}
	}
	cut := t0.Add(sessions / 10 * time.Minute)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		infos, err := s.Prune(ctx, cut, true)
		if err != nil || len(infos) != sessions/10 {
			b.Fatalf("%d sessions, %v; want %d", len(infos), err, sessions/10)
		}
	}
}
