package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

func open(t testing.TB, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) { conformance(t, sqlite.Options{}) }

// TestConformanceAsServed: the contract holds as ctxmgr serve opens SQLite too (relaxed
// syncs, checkpoints on a goroutine of their own, here every 5 ms so that they run among the
// suite's writes).
func TestConformanceAsServed(t *testing.T) {
	conformance(t, sqlite.Options{Relaxed: true, CheckpointEvery: 5 * time.Millisecond})
}

// TestConformanceWriteBehind: the contract holds with appends journaled and applied 5 ms
// later (Options.WriteBehind): every call but Append sees the appends made before it.
func TestConformanceWriteBehind(t *testing.T) {
	conformance(t, sqlite.Options{Relaxed: true, CheckpointEvery: 5 * time.Millisecond, WriteBehind: 5 * time.Millisecond})
}

func conformance(t *testing.T, opts sqlite.Options) {
	storetest.RunReopen(t,
		func(t *testing.T) store.Store {
			s, err := sqlite.Open(filepath.Join(t.TempDir(), "ctxmgr.db"), opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return s
		},
		func(t *testing.T, old store.Store) store.Store {
			s, err := sqlite.Open(old.(*sqlite.Store).Path(), opts)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		})
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func TestSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db", "ctxmgr.db")
	s := open(t, path, sqlite.Options{})
	s.Close()
	s = open(t, path, sqlite.Options{}) // migrations are not applied twice
	s.Close()

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("database file mode %v, want 0600", fi.Mode().Perm())
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var versions, latest int
	if err := db.QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&versions, &latest); err != nil {
		t.Fatal(err)
	}
	if versions != sqlite.SchemaVersion() || latest != sqlite.SchemaVersion() {
		t.Fatalf("schema_migrations: %d rows, latest %d; want %d", versions, latest, sqlite.SchemaVersion())
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v; want wal", mode, err)
	}
	for _, table := range []string{"sessions", "messages", "summaries", "archive", "offloads", "events"} {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil || n != 1 {
			t.Fatalf("table %s: %d, %v", table, n, err)
		}
	}
	// A database from a newer program is refused rather than misread.
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied) VALUES (?, 0)`, sqlite.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if s, err := sqlite.Open(path, sqlite.Options{}); err == nil {
		s.Close()
		t.Fatal("Open of a database with a newer schema succeeded")
	}
}

func TestRowsAndHash(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	s := open(t, path, sqlite.Options{})
	msgs := storetest.Kinds()[:4]
	if err := s.Append(ctx, "h", 0, msgs); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT pos, hash FROM messages WHERE session = 'h' ORDER BY pos`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var pos int
		var hash []byte
		if err := rows.Scan(&pos, &hash); err != nil {
			t.Fatal(err)
		}
		want := msgs[i].Hash()
		if pos != i || string(hash) != string(want[:]) {
			t.Fatalf("row %d: pos %d, hash %x; want %d, %x", i, pos, hash, i, want)
		}
		i++
	}
	if i != len(msgs) {
		t.Fatalf("%d rows, want %d", i, len(msgs))
	}
	loc, err := s.Archive(ctx, "h", 0, msgs[:1])
	if err != nil || string(loc) != "sqlite:"+s.Path()+"#h/dialog" {
		t.Fatalf("Archive location %q, %v", loc, err)
	}
	o, err := s.Offload(ctx, "h", "call_1", "x", time.Time{})
	if err != nil || string(o.Location) != "sqlite:"+s.Path()+"#h/tool_result/call_1" {
		t.Fatalf("Offload location %q, %v", o.Location, err)
	}
}

// TestExpiryClock checks that ReadOffload and Offload judge expiry by the store's clock.
func TestExpiryClock(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: start}
	s := open(t, filepath.Join(t.TempDir(), "ctxmgr.db"), sqlite.Options{Now: clock.Now})
	exp := start.Add(5 * 24 * time.Hour)
	if _, err := s.Offload(ctx, "e", "k", "first\n", exp); err != nil {
		t.Fatal(err)
	}
	if text, _, err := s.ReadOffload(ctx, "e", "k", 1, 0); err != nil || text != "first\n" {
		t.Fatalf("ReadOffload: %q, %v", text, err)
	}
	clock.Set(exp.Add(time.Nanosecond))
	if _, _, err := s.ReadOffload(ctx, "e", "k", 1, 0); !errors.Is(err, store.ErrExpired) {
		t.Fatalf("ReadOffload after expiry: %v, want ErrExpired", err)
	}
	if o, err := s.Offload(ctx, "e", "k", "second\n", time.Time{}); err != nil || o.Bytes != 7 || !o.Expires.IsZero() {
		t.Fatalf("Offload over an expired result: %+v, %v", o, err)
	}
	if n, err := s.Cleanup(ctx, clock.Now()); err != nil || n != 0 {
		t.Fatalf("Cleanup: %d, %v", n, err)
	}
}

// TestTwoStores runs two Store values on one file, as two processes would.
func TestTwoStores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	storetest.RunTwoHandles(t, open(t, path, sqlite.Options{}), open(t, path, sqlite.Options{}))
}

// TestOpensV1 opens a database that the SQLite store wrote before package sqlstore
// (testdata/v1.db, see storetest.WriteFixture) and checks that it reads back the same and
// takes new writes, migrated from version 1 once (version 1 keeps its record).
func TestOpensV1(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := open(t, path, sqlite.Options{Now: func() time.Time { return storetest.FixtureNow }})
	storetest.CheckFixture(t, s)
	s.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var versions int
	var applied int64
	if err := db.QueryRow(`SELECT COUNT(*), MIN(applied) FROM schema_migrations`).Scan(&versions, &applied); err != nil || versions != sqlite.SchemaVersion() || applied != storetest.FixtureTime.UnixNano() {
		t.Fatalf("schema_migrations: %d rows, first applied %d, %v; want the fixture's version 1 and the later ones, %d in all", versions, applied, err, sqlite.SchemaVersion())
	}
}
