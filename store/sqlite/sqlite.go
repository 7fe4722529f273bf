// Package sqlite is the SQLite store.Store: the embedded default of the service, one database
// file, pure Go (modernc.org/sqlite, no cgo). The store itself is package sqlstore's, shared
// with PostgreSQL; this package owns what is SQLite's: Open (the file, the driver and its
// settings, the connection pools), the schema (schema.go) and the dialect (dialect.go).
//
// The database runs in WAL mode with foreign keys on and synchronous=FULL, so a write is on
// disk when the call returns (Options.Relaxed: NORMAL, safe against a process crash but not a
// power cut). Its schema is versioned in the code and migrated on Open. Writes go through one
// connection and BEGIN IMMEDIATE transactions, so that within a process they queue instead of
// spinning on SQLITE_BUSY; other processes on the same file wait up to the busy timeout. Reads
// use a small pool of their own and never block writers.
//
// Every multi-row change is one transaction: after a crash (even SIGKILL in the middle of an
// Append) the history holds exactly the calls that returned, plus possibly the one in flight,
// whole or not at all. With Options.WriteBehind (what ctxmgr serve uses) an Append is written
// to a journal beside the database and applied in batches; Open applies what a killed
// process's journal holds, so the same holds once the database is opened again.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/sqlstore"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Options configures a SQLite store.
type Options struct {
	// Now is the store's clock: it stamps sessions, summaries stored without a Created time and
	// archive rows, and decides whether a ReadOffload or an Offload sees a result as expired.
	// Nil means time.Now.
	Now func() time.Time
	// BusyTimeout is how long a write waits for another process's write to finish before it
	// fails. Default 10s.
	BusyTimeout time.Duration
	// ReadConns bounds the read connections. Default 4.
	ReadConns int
	// Relaxed trades durability against power loss for write latency: synchronous=NORMAL
	// instead of FULL. In WAL mode a commit is then safe when the process dies (SIGKILL
	// included) but the last commits may be lost when the machine does; the database stays
	// consistent either way. The proxy uses it: its clients resend their whole history on every
	// call, so an append lost to a power cut is appended again by the next request.
	Relaxed bool
	// CheckpointEvery, when > 0, moves SQLite's checkpoints (copying the WAL into the database
	// file, with an fsync: milliseconds) out of the writes. By default a commit that finds the
	// WAL past 1,000 pages runs one, and that write waits for it; with CheckpointEvery a
	// goroutine runs a passive checkpoint that often instead (one that never blocks a write),
	// and a commit checkpoints itself only past 10,000 pages, should the goroutine fall
	// behind. No write then waits for a checkpoint's fsync, which keeps it out of the tail
	// latency of the proxy's answers. ctxmgr serve uses 200ms.
	CheckpointEvery time.Duration
	// WriteBehind, when > 0, makes an Append return once it is written to the append journal
	// beside the database (path+"-appends-0" and "-1", one write(2)), and applies the journal
	// to the database at most this long after, many appends in one transaction: an Append
	// costs a write instead of a commit. It requires Relaxed, whose durability it has: an
	// append survives the process's death (Open applies what a dead process's journal
	// holds), not a power cut. Every other call of this store first waits until the appends
	// made before it are in the database, so the store behaves as without it. One process
	// at a time journals a database; the others append directly, and their other calls
	// wait for what the journal holds to be applied (up to the journaling process's
	// WriteBehind), so that they see it too. See package sqlstore's journal.go for what an
	// append another process makes to the same session does. ctxmgr serve uses 20ms.
	WriteBehind time.Duration
	// Logger receives the journal's reports (appends recovered at Open, failed applies).
	// Nil means slog.Default().
	Logger *slog.Logger
}

// fallbackCheckpointPages is the WAL size at which a commit checkpoints even with
// CheckpointEvery set.
const fallbackCheckpointPages = 10000

// Store is the SQLite store: a sqlstore.Store on one database file. All methods are safe for
// concurrent use, and several processes may share one database file.
type Store struct {
	*sqlstore.Store
	path string  // absolute
	r    *sql.DB // the readers (the sqlstore.Store's; its writer's one connection is held)
	// stop ends the checkpoint goroutine (CheckpointEvery); done is closed when it has.
	stop, done  chan struct{}
	stopOnce    sync.Once
	checkpoints atomic.Int64 // passive checkpoints it ran
}

var _ store.Store = (*Store)(nil)

// Event is one recorded event.
type Event = store.Event

// Open opens (creating it 0600, and its directory 0700, if needed) the SQLite database at
// path and migrates its schema to the current version.
func Open(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	// Create the file ourselves so that it (and the -wal and -shm files SQLite derives from
	// it) are private.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	f.Close()

	if opts.WriteBehind > 0 && !opts.Relaxed {
		return nil, errors.New("sqlite: WriteBehind requires Relaxed: a journaled append is durable against the process's death, not a power cut")
	}
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = 10 * time.Second
	}
	readConns := opts.ReadConns
	if readConns <= 0 {
		readConns = 4
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	q.Set("_foreign_keys", "1")
	q.Set("_journal_mode", "WAL")
	if opts.CheckpointEvery > 0 {
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", fallbackCheckpointPages))
	}
	if opts.Relaxed {
		q.Set("_synchronous", "NORMAL")
	} else {
		q.Set("_synchronous", "FULL")
	}
	dsn := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + q.Encode()

	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s, err := sqlstore.Open(context.Background(), sqlstore.Config{
		Dialect:    Dialect(),
		Writer:     w,
		Reader:     r,
		Where:      "sqlite:" + abs,
		Migrations: migrations,
		Now:        opts.Now,
		// Always named: Open applies what a journal left holds even when this store does
		// not journal (a process that did died).
		Journal:     abs + "-appends",
		WriteBehind: opts.WriteBehind,
		Logger:      opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	st := &Store{Store: s, path: abs, r: r}
	if opts.CheckpointEvery > 0 {
		st.stop, st.done = make(chan struct{}), make(chan struct{})
		go st.checkpointLoop(r, opts.CheckpointEvery)
	}
	return st, nil
}

// checkpointLoop runs a passive checkpoint every interval on a read connection until Close.
// A passive checkpoint copies what no reader still needs and never waits for a lock, so
// writes go on meanwhile; a failure is retried at the next tick.
func (s *Store) checkpointLoop(db *sql.DB, interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if _, err := db.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`); err == nil {
				s.checkpoints.Add(1)
			}
		}
	}
}

// Close stops the checkpoint goroutine, if any, and closes the store.
func (s *Store) Close() error {
	if s.stop != nil {
		s.stopOnce.Do(func() { close(s.stop); <-s.done })
	}
	return s.Store.Close()
}

// Path returns the database file's absolute path.
func (s *Store) Path() string { return s.path }

// SchemaVersion is the schema version this package migrates databases to.
func SchemaVersion() int { return len(migrations) }
