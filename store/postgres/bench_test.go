package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ctxmgr/ctxmgr/store/postgres"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// BenchmarkAppend appends one message at a time to a 2,000-message session (each append a
// durable transaction).
func BenchmarkAppend(b *testing.B) { storetest.BenchAppend(b, open(b, postgres.Options{})) }

// BenchmarkAppendState is BenchmarkAppend on a session with a 0, 4 or 64 KiB compaction
// state, as the SQLite store's BenchmarkAppendRelaxedState: the figures must not grow with it.
func BenchmarkAppendState(b *testing.B) {
	for _, n := range []int{0, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("state-%dKiB", n>>10), func(b *testing.B) {
			storetest.BenchAppendWithState(b, open(b, postgres.Options{}), n)
		})
	}
}

// BenchmarkLoad reads a whole 2,000-message session back (what loading a session costs).
func BenchmarkLoad(b *testing.B) { storetest.BenchLoad(b, open(b, postgres.Options{})) }

// TestSizeOnDisk logs the table and index size of 1,000 typical messages.
func TestSizeOnDisk(t *testing.T) {
	ctx := context.Background()
	s := open(t, postgres.Options{})
	storetest.Seed(t, s, "size", 1000)
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var size int64
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass) + pg_total_relation_size($2::regclass)`,
		pgx.Identifier{s.Schema(), "messages"}.Sanitize(), pgx.Identifier{s.Schema(), "sessions"}.Sanitize()).Scan(&size); err != nil {
		t.Fatal(err)
	}
	t.Logf("size on disk per 1,000 typical messages: %d bytes (%.0f KiB, messages and sessions tables with indexes and TOAST)", size, float64(size)/1024)
}
