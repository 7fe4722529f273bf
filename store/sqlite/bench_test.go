package sqlite_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

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
