package ctxmgr

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/store/postgres"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/store/storetest"
	"github.com/jackc/pgx/v5"
)

// BenchmarkLoadPrepare measures what a restarted service pays for the first request of a
// 2,000-message session, on each store: LoadSession and then Prepare. PostgreSQL runs when
// CTXMGR_TEST_POSTGRES names a server (on a schema of its own, dropped afterwards).
func BenchmarkLoadPrepare(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlite.Open(filepath.Join(b.TempDir(), "ctxmgr.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchLoadPrepare(b, st)
	})
	b.Run("files", func(b *testing.B) {
		st, err := files.Open(b.TempDir(), files.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchLoadPrepare(b, st)
	})
	b.Run("postgres", func(b *testing.B) {
		url := os.Getenv("CTXMGR_TEST_POSTGRES")
		if url == "" {
			b.Skip("CTXMGR_TEST_POSTGRES is not set")
		}
		schema := fmt.Sprintf("bench_load_prepare_%d", time.Now().UnixNano())
		st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema})
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			st.Close()
			if conn, err := pgx.Connect(context.Background(), url); err == nil {
				_, _ = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
				conn.Close(context.Background())
			}
		}()
		benchLoadPrepare(b, st)
	})
}

// benchLoadPrepare measures what a restarted service pays for the first request of a
// storetest.SessionLen-message session: LoadSession (history, summaries and compaction state read back,
// tokens recounted) and then Prepare. The session is compacted once before the timer starts
// (with the default preset its old tool results are masked), so every iteration restores a
// compacted session, as after a restart.
func benchLoadPrepare(b *testing.B, st store.Store) {
	ctx := context.Background()
	msgs := make([]chat.Message, storetest.SessionLen)
	for i := range msgs {
		msgs[i] = storetest.TypicalMessage(i)
	}
	// End on a user turn: a trailing tool call without its result cannot be prepared.
	msgs[storetest.SessionLen-1] = chat.TextMessage(chat.RoleUser, "and now the last step, please")
	for at := 0; at < storetest.SessionLen; at += 200 {
		if err := st.Append(ctx, "bench", at, msgs[at:min(at+200, storetest.SessionLen)]); err != nil {
			b.Fatal(err)
		}
	}
	system := []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a coding agent.")}
	cfg, err := Preset(PresetDefault, 200000, 32000)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Store = st
	cfg.Logger = slog.New(slog.DiscardHandler)
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prepare := func() Prepared {
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
