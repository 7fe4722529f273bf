package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// never is a WriteBehind that does not apply the journal within a test: only a call that
// settles, Close, or the next Open does.
const never = time.Hour

func writeBehind(logs io.Writer) sqlite.Options {
	return sqlite.Options{Relaxed: true, WriteBehind: never, Logger: slog.New(slog.NewTextHandler(logs, nil))}
}

func msgs(from, n int) []chat.Message {
	out := make([]chat.Message, n)
	for i := range out {
		out[i] = storetest.CrashMessage(from + i)
	}
	return out
}

// snapshot copies the database and its journal, as a process killed now leaves them (the
// journal's records are in the files as soon as Append returns), to a new directory.
func snapshot(t *testing.T, path string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ctxmgr.db")
	for _, suffix := range []string{"", "-wal", "-appends-0", "-appends-1"} {
		b, err := os.ReadFile(path + suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func journalSize(t *testing.T, path string) int64 {
	t.Helper()
	var n int64
	for _, suffix := range []string{"-appends-0", "-appends-1"} {
		fi, err := os.Stat(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

func wantHistory(t *testing.T, s store.Store, session string, n int) {
	t.Helper()
	got, err := s.Messages(context.Background(), session, 0, -1)
	if err != nil {
		t.Fatalf("Messages(%s): %v", session, err)
	}
	storetest.EqualMessages(t, session, got, storetest.RoundTrip(t, msgs(0, n)))
}

// TestWriteBehindRecovers: appends that returned are in the journal, not yet in the
// database; the next Open applies them, in order, and empties the journal.
func TestWriteBehindRecovers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	var logs bytes.Buffer
	s := open(t, path, writeBehind(&logs))
	if !s.Journaling() {
		t.Fatal("the only store on a new database does not journal")
	}
	for at := 0; at < 7; at += 2 {
		if err := s.Append(ctx, "a", at, msgs(at, 2)); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, "b", at/2, msgs(at/2, 1)); err != nil {
			t.Fatal(err)
		}
	}
	// A position check counts what is not in the database yet.
	if err := s.Append(ctx, "a", 7, msgs(7, 1)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Append at 7 of 8: %v, want a conflict", err)
	}
	if journalSize(t, path) == 0 {
		t.Fatal("the journal is empty after appends that were not applied")
	}
	killed := snapshot(t, path)

	r := open(t, killed, sqlite.Options{}) // recovery needs no write-behind of its own
	if r.Journaling() {
		t.Fatal("a store opened without WriteBehind journals")
	}
	wantHistory(t, r, "a", 8)
	wantHistory(t, r, "b", 4)
	if n := journalSize(t, killed); n != 0 {
		t.Fatalf("the journal holds %d bytes after recovery", n)
	}
	if err := r.Append(ctx, "a", 8, msgs(8, 1)); err != nil {
		t.Fatalf("Append after recovery: %v", err)
	}
	r.Close()

	// The original settles on its next read, and Close empties the journal.
	wantHistory(t, s, "a", 8)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := journalSize(t, path); n != 0 {
		t.Fatalf("the journal holds %d bytes after Close", n)
	}
}

// TestWriteBehindRecoversOnce: a process that dies after committing a batch and before
// emptying the journal leaves records the database holds already; they are not applied again.
func TestWriteBehindRecoversOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	var logs bytes.Buffer
	s := open(t, path, writeBehind(&logs))
	if err := s.Append(ctx, "a", 0, msgs(0, 3)); err != nil {
		t.Fatal(err)
	}
	journal := map[string][]byte{}
	for _, suffix := range []string{"-appends-0", "-appends-1"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		journal[suffix] = b
	}
	if err := s.Close(); err != nil { // applied and emptied
		t.Fatal(err)
	}
	for suffix, b := range journal {
		if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := open(t, path, writeBehind(&logs))
	wantHistory(t, r, "a", 3)
	if r.Dropped() != 0 {
		t.Fatalf("%d records dropped; logs:\n%s", r.Dropped(), logs.String())
	}
	if err := r.Append(ctx, "a", 3, msgs(3, 1)); err != nil {
		t.Fatal(err)
	}
	wantHistory(t, r, "a", 4)
}

// TestWriteBehindTornRecord: a record cut short (the process died inside its write, so that
// Append never returned) or damaged ends the journal's reading; what precedes it is applied.
func TestWriteBehindTornRecord(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	s := open(t, path, writeBehind(io.Discard))
	if err := s.Append(ctx, "a", 0, msgs(0, 2)); err != nil {
		t.Fatal(err)
	}
	first := journalSize(t, path)
	if err := s.Append(ctx, "a", 2, msgs(2, 3)); err != nil {
		t.Fatal(err)
	}
	whole := journalSize(t, path)
	for _, cut := range []int64{first + 1, first + 8, first + 9, (first + whole) / 2, whole - 1} {
		killed := snapshot(t, path)
		if err := os.Truncate(killed+"-appends-0", cut); err != nil {
			t.Fatal(err)
		}
		r := open(t, killed, sqlite.Options{})
		wantHistory(t, r, "a", 2)
		r.Close()
	}
	killed := snapshot(t, path)
	b, err := os.ReadFile(killed + "-appends-0")
	if err != nil {
		t.Fatal(err)
	}
	b[first+20] ^= 0x40 // inside the second record's payload: its checksum fails
	if err := os.WriteFile(killed+"-appends-0", b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := open(t, killed, sqlite.Options{})
	wantHistory(t, r, "a", 2)
}

// TestWriteBehindConflictDropped: another process (here a second store on the file, which
// appends directly: the first holds the journal) appends to a session the first journals.
// The journaled record then fails its position check when applied: it is dropped, counted
// and logged, and what the other process stored stays.
func TestWriteBehindConflictDropped(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	var logs bytes.Buffer
	a := open(t, path, writeBehind(&logs))
	b := open(t, path, writeBehind(io.Discard))
	if !a.Journaling() || b.Journaling() {
		t.Fatalf("journaling: first store %v, second %v; want only the first", a.Journaling(), b.Journaling())
	}
	if err := a.Append(ctx, "s", 0, msgs(0, 2)); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, "t", 0, msgs(0, 1)); err != nil {
		t.Fatal(err)
	}
	other := []chat.Message{chat.TextMessage(chat.RoleUser, "the other process's")}
	if err := b.Append(ctx, "s", 0, other); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if a.Dropped() != 1 || !strings.Contains(logs.String(), "dropped") || !strings.Contains(logs.String(), "session=s") {
		t.Fatalf("dropped %d; logs:\n%s", a.Dropped(), logs.String())
	}
	got, err := b.Messages(ctx, "s", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	storetest.EqualMessages(t, "s", got, storetest.RoundTrip(t, other))
	wantHistory(t, b, "t", 1) // the batch's other record is applied
}

// TestWriteBehindSettles: every call but Append sees the appends made before it, at once
// (not WriteBehind later).
func TestWriteBehindSettles(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	s := open(t, path, writeBehind(io.Discard))
	if err := s.Append(ctx, "a", 0, msgs(0, 2)); err != nil {
		t.Fatal(err)
	}
	infos, err := s.Sessions(ctx)
	if err != nil || len(infos) != 1 || infos[0].Messages != 2 {
		t.Fatalf("Sessions: %+v, %v", infos, err)
	}
	if err := s.Append(ctx, "a", 2, msgs(2, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Archive(ctx, "a", 0, msgs(0, 1)); err != nil {
		t.Fatal(err)
	}
	if n := journalSize(t, path); n != 0 {
		t.Fatalf("the journal holds %d bytes after a call settled it", n)
	}
	wantHistory(t, s, "a", 3)
}

// TestWriteBehindSettleWakesApplier: a call that settles has the journal applied at once,
// whatever the applier was doing. On one P an Append's wake-up of the applier and the
// settling call's are both pending when the applier first runs; it took either at random,
// and when it took the settling call's it went on to wait WriteBehind (here an hour: the
// store/sqlite package once hung for its 10-minute timeout so) for a wake-up already
// consumed.
func TestWriteBehindSettleWakesApplier(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	for round := range 24 { // the old applier passed a round with probability 1/2
		s := open(t, filepath.Join(t.TempDir(), "ctxmgr.db"), writeBehind(io.Discard))
		if err := s.Append(ctx, "a", 0, msgs(0, 2)); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := s.Sessions(ctx); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			// A second settling call wakes the applier again, so that the store can close.
			go func() { _, _ = s.Sessions(ctx) }()
			<-done
			t.Fatalf("round %d: Sessions still waited for the journal to be applied after 5 s", round)
		}
	}
}

// TestWriteBehindNeedsRelaxed: the journal's durability is Relaxed's, so it is refused
// without it.
func TestWriteBehindNeedsRelaxed(t *testing.T) {
	_, err := sqlite.Open(filepath.Join(t.TempDir(), "ctxmgr.db"), sqlite.Options{WriteBehind: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "Relaxed") {
		t.Fatalf("Open: %v", err)
	}
}

// TestWriteBehindFailedApplyKept: an apply that fails (here a trigger another connection
// adds makes every insert of session f fail) drops nothing: the calls that must see the
// appends return the error meanwhile, the records stay in the journal, and once the cause
// is gone the retry applies them.
func TestWriteBehindFailedApplyKept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	s := open(t, path, writeBehind(io.Discard))
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TRIGGER fail BEFORE INSERT ON messages WHEN NEW.session = 'f'
		BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "f", 0, msgs(0, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Messages(ctx, "f", 0, -1); err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Messages while the apply fails: %v, want its error", err)
	}
	if journalSize(t, path) == 0 {
		t.Fatal("the journal was emptied by a failed apply")
	}
	if _, err := db.Exec(`DROP TRIGGER fail`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.Messages(ctx, "f", 0, -1)
		if err == nil {
			storetest.EqualMessages(t, "f", got, storetest.RoundTrip(t, msgs(0, 2)))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the apply was not retried: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := journalSize(t, path); n != 0 {
		t.Fatalf("the journal holds %d bytes after the retry succeeded", n)
	}
}

// TestWriteBehindSeenByAnotherStore: a store that does not journal (the CLI beside ctxmgr
// serve) sees the appends the journaling store made before its call, though they are not
// applied yet: it waits until they are (WriteBehind at most), and no longer than its
// context allows.
func TestWriteBehindSeenByAnotherStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	a := open(t, path, sqlite.Options{Relaxed: true, WriteBehind: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err := a.Append(ctx, "s", 0, msgs(0, 2)); err != nil {
		t.Fatal(err)
	}
	b := open(t, path, sqlite.Options{})
	if b.Journaling() {
		t.Fatal("a second store journals")
	}
	wantHistory(t, b, "s", 2)
	if journalSize(t, path) != 0 {
		t.Fatal("the other store read the history before the journal was applied")
	}

	path = filepath.Join(t.TempDir(), "ctxmgr.db")
	a = open(t, path, writeBehind(io.Discard))
	if err := a.Append(ctx, "s", 0, msgs(0, 2)); err != nil {
		t.Fatal(err)
	}
	b = open(t, path, sqlite.Options{})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.Messages(short, "s", 0, -1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Messages while the journal is never applied: %v, want the context's deadline", err)
	}
	wantHistory(t, a, "s", 2)
	wantHistory(t, b, "s", 2) // a settled: applied
}
