package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
)

// TestCheckpointEvery: with CheckpointEvery, commits checkpoint only past the fallback WAL
// size, a goroutine checkpoints meanwhile, and Close stops it; the data is all there.
func TestCheckpointEvery(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	st, err := Open(path, Options{Relaxed: true, CheckpointEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var pages int
	// Every connection, the writer's too, is opened from the same DSN; the writer's is held
	// by the store, so a reader shows the setting.
	if err := st.r.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&pages); err != nil || pages != fallbackCheckpointPages {
		t.Fatalf("wal_autocheckpoint: %d (%v), want %d", pages, err, fallbackCheckpointPages)
	}
	for i := 0; i < 200; i++ {
		if err := st.Append(ctx, "s", i, []chat.Message{chat.TextMessage(chat.RoleUser, fmt.Sprintf("message %d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for st.checkpoints.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st.checkpoints.Load() == 0 {
		t.Fatal("no background checkpoint ran")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	n := st.checkpoints.Load()
	time.Sleep(60 * time.Millisecond)
	if st.checkpoints.Load() != n {
		t.Fatal("checkpoints go on after Close")
	}
	st2, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	msgs, err := st2.Messages(ctx, "s", 0, -1)
	if err != nil || len(msgs) != 200 {
		t.Fatalf("reopened: %d messages (%v), want 200", len(msgs), err)
	}
}
