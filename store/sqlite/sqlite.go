// Package sqlite is the SQLite store.Store: the embedded default of the service, one database
// file, pure Go (modernc.org/sqlite, no cgo).
//
// The database runs in WAL mode with foreign keys on and synchronous=FULL, so a write is on
// disk when the call returns (Options.Relaxed: NORMAL, safe against a process crash but not a
// power cut). Its schema (see schema.go) is versioned in the code and migrated
// on Open. Writes go through one connection and BEGIN IMMEDIATE transactions, so that within a
// process they queue instead of spinning on SQLITE_BUSY; other processes on the same file wait
// up to the busy timeout. Reads use a small pool of their own and never block writers.
//
// Every multi-row change is one transaction: after a crash (even SIGKILL in the middle of an
// Append) the history holds exactly the calls that returned, plus possibly the one in flight,
// whole or not at all.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"

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
}

// Store is the SQLite store. All methods are safe for concurrent use, and several processes
// may share one database file.
type Store struct {
	path string // absolute
	w    *sql.DB
	r    *sql.DB
	now  func() time.Time

	gate   sync.RWMutex // shared by every call in progress, exclusive for Close
	closed bool

	stmtCount, stmtTouch, stmtInsert *sql.Stmt // on w, for Append
}

var (
	_ store.Store = (*Store)(nil)
)

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
	if opts.Relaxed {
		q.Set("_synchronous", "NORMAL")
	} else {
		q.Set("_synchronous", "FULL")
	}
	dsn := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + q.Encode()

	s := &Store{path: abs, now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if s.w, err = sql.Open("sqlite", dsn); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if s.r, err = sql.Open("sqlite", dsn); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	s.r.SetMaxOpenConns(readConns)
	s.r.SetMaxIdleConns(readConns)
	if err := s.migrate(context.Background()); err != nil {
		s.w.Close()
		s.r.Close()
		return nil, err
	}
	if err := s.prepare(context.Background()); err != nil {
		s.w.Close()
		s.r.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return s, nil
}

// The statements of an Append, prepared once on the writer connection: parsing them again
// for every append cost about as much as running them.
const (
	sqlCount  = `SELECT COALESCE(MAX(pos) + 1, 0) FROM messages WHERE session = ?`
	sqlTouch  = `INSERT INTO sessions (id, created, updated) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET updated = MAX(sessions.updated, excluded.updated)`
	sqlInsert = `INSERT INTO messages (session, pos, hash, body) VALUES (?, ?, ?, ?)`
)

func (s *Store) prepare(ctx context.Context) error {
	var err error
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{{&s.stmtCount, sqlCount}, {&s.stmtTouch, sqlTouch}, {&s.stmtInsert, sqlInsert}} {
		if *p.dst, err = s.w.PrepareContext(ctx, p.sql); err != nil {
			return err
		}
	}
	return nil
}

// Path returns the database file's absolute path.
func (s *Store) Path() string { return s.path }

// SchemaVersion is the schema version this package migrates databases to.
func SchemaVersion() int { return len(migrations) }

// migrate applies the migrations the database has not recorded yet, each in one transaction.
func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY NOT NULL,
		applied INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	for i, m := range migrations {
		version := i + 1
		err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			var latest int
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&latest); err != nil {
				return err
			}
			if latest > len(migrations) {
				return fmt.Errorf("database schema version %d is newer than this program's (%d)", latest, len(migrations))
			}
			if latest >= version {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m); err != nil {
				return fmt.Errorf("version %d: %w", version, err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`, version, s.now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: migrate %s: %w", s.path, err)
		}
	}
	return nil
}

// begin validates the context and ids and enters the gate; on success the caller must call
// s.end.
func (s *Store) begin(ctx context.Context, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		if err := store.CheckID(id); err != nil {
			return err
		}
	}
	s.gate.RLock()
	if s.closed {
		s.gate.RUnlock()
		return store.ErrClosed
	}
	return nil
}

func (s *Store) end() { s.gate.RUnlock() }

// tx runs fn in one write transaction (BEGIN IMMEDIATE) and commits it; any error rolls it
// back. fn runs its statements under the context it is given.
//
// A write, once begun, runs to its end: ctx is checked before (begin), and its cancellation
// does not interrupt the transaction. The driver watches every statement run under a
// cancellable context with a goroutine and a progress handler of its own, which was about a
// third of an append's time through the proxy (whose contexts are the requests'); a write
// takes well under a millisecond, unless another process holds the write lock (BusyTimeout
// bounds that wait).
func (s *Store) tx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	ctx = context.WithoutCancel(ctx)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// touch creates the session row if needed and sets its updated time.
func touch(ctx context.Context, tx *sql.Tx, session string, now time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, created, updated) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET updated = MAX(sessions.updated, excluded.updated)`,
		session, now.UnixNano(), now.UnixNano())
	return err
}

func (s *Store) location(session, suffix string) store.Location {
	return store.Location("sqlite:" + s.path + "#" + session + "/" + suffix)
}

// wrap adds the package prefix to database errors; store errors and context errors pass as
// they are (still matching with errors.Is).
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	for _, e := range []error{store.ErrConflict, store.ErrNotFound, store.ErrExpired, store.ErrInvalidID, store.ErrClosed} {
		if errors.Is(err, e) {
			return err
		}
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// ctxErr prefers the context's error: a call whose context ended fails with it, whatever the
// driver made of the interruption.
func ctxErr(ctx context.Context, op string, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return wrap(op, err)
}

// encodeMessages returns each message's json.Marshal encoding: what is stored, verbatim.
func encodeMessages(msgs []chat.Message) ([][]byte, error) {
	out := make([][]byte, len(msgs))
	for i := range msgs {
		b, err := json.Marshal(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("sqlite: encode message %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

func decodeMessage(body []byte) (chat.Message, error) {
	var m chat.Message
	if err := json.Unmarshal(body, &m); err != nil {
		return chat.Message{}, fmt.Errorf("sqlite: decode stored message: %w", err)
	}
	return m, nil
}

// count returns the session's history length.
func count(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, session string) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(pos) + 1, 0) FROM messages WHERE session = ?`, session).Scan(&n)
	return n, err
}

// Append implements store.Store: the check of `at` and the insert are one transaction.
func (s *Store) Append(ctx context.Context, session string, at int, msgs []chat.Message) error {
	bodies, err := encodeMessages(msgs)
	if err != nil {
		return err
	}
	if err := s.begin(ctx, session); err != nil {
		return err
	}
	defer s.end()
	if len(bodies) == 0 {
		n, err := count(ctx, s.r, session)
		if err != nil {
			return ctxErr(ctx, "append", err)
		}
		if n != at {
			return fmt.Errorf("%w: append at %d, session %q has %d messages", store.ErrConflict, at, session, n)
		}
		return nil
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var n int
		if err := tx.StmtContext(ctx, s.stmtCount).QueryRowContext(ctx, session).Scan(&n); err != nil {
			return err
		}
		if n != at {
			return fmt.Errorf("%w: append at %d, session %q has %d messages", store.ErrConflict, at, session, n)
		}
		now := s.now().UnixNano()
		if _, err := tx.StmtContext(ctx, s.stmtTouch).ExecContext(ctx, session, now, now); err != nil {
			return err
		}
		stmt := tx.StmtContext(ctx, s.stmtInsert)
		for i, b := range bodies {
			h := msgs[i].Hash()
			if _, err := stmt.ExecContext(ctx, session, at+i, h[:], string(b)); err != nil {
				return err
			}
		}
		return nil
	})
	return ctxErr(ctx, "append", err)
}

// Messages implements store.Store.
func (s *Store) Messages(ctx context.Context, session string, from, to int) ([]chat.Message, error) {
	if err := s.begin(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	if from < 0 {
		from = 0
	}
	if to < 0 {
		to = math.MaxInt64
	}
	if from >= to {
		return []chat.Message{}, nil
	}
	msgs, err := s.readBodies(ctx, `SELECT body FROM messages WHERE session = ? AND pos >= ? AND pos < ? ORDER BY pos`, session, from, to)
	return msgs, ctxErr(ctx, "messages", err)
}

func (s *Store) readBodies(ctx context.Context, query string, args ...any) ([]chat.Message, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []chat.Message{}
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		m, err := decodeMessage(body)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

const sessionInfoQuery = `SELECT s.id, s.created, s.updated,
	COALESCE((SELECT MAX(m.pos) + 1 FROM messages m WHERE m.session = s.id), 0),
	COALESCE((SELECT MAX(u.version) FROM summaries u WHERE u.session = s.id), 0)
	FROM sessions s`

func scanInfos(rows *sql.Rows) ([]store.SessionInfo, error) {
	defer rows.Close()
	out := []store.SessionInfo{}
	for rows.Next() {
		var info store.SessionInfo
		var created, updated int64
		if err := rows.Scan(&info.ID, &created, &updated, &info.Messages, &info.Summary); err != nil {
			return nil, err
		}
		info.Created, info.Updated = time.Unix(0, created), time.Unix(0, updated)
		out = append(out, info)
	}
	return out, rows.Err()
}

// Sessions implements store.Store.
func (s *Store) Sessions(ctx context.Context) ([]store.SessionInfo, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	rows, err := s.r.QueryContext(ctx, sessionInfoQuery+` ORDER BY s.id`)
	if err != nil {
		return nil, ctxErr(ctx, "sessions", err)
	}
	infos, err := scanInfos(rows)
	return infos, ctxErr(ctx, "sessions", err)
}

// PutSummary implements store.Store: the version check and the insert are one transaction.
func (s *Store) PutSummary(ctx context.Context, session string, sum store.Summary) error {
	if sum.Created.IsZero() {
		sum.Created = s.now()
	}
	sum, err := sum.Normalized()
	if err != nil {
		return err
	}
	if err := s.begin(ctx, session); err != nil {
		return err
	}
	defer s.end()
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var latest int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM summaries WHERE session = ?`, session).Scan(&latest); err != nil {
			return err
		}
		if sum.Version != latest+1 {
			return fmt.Errorf("%w: summary version %d, session %q is at version %d", store.ErrConflict, sum.Version, session, latest)
		}
		if err := touch(ctx, tx, session, s.now()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO summaries (session, version, text, from_pos, to_pos, created, summarizer)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			session, sum.Version, []byte(sum.Text), sum.From, sum.To, sum.Created.Format(time.RFC3339Nano), sum.Summarizer)
		return err
	})
	return ctxErr(ctx, "put summary", err)
}

// Summaries implements store.Store.
func (s *Store) Summaries(ctx context.Context, session string) ([]store.Summary, error) {
	if err := s.begin(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	rows, err := s.r.QueryContext(ctx, `SELECT version, text, from_pos, to_pos, created, summarizer
		FROM summaries WHERE session = ? ORDER BY version`, session)
	if err != nil {
		return nil, ctxErr(ctx, "summaries", err)
	}
	defer rows.Close()
	out := []store.Summary{}
	for rows.Next() {
		var sum store.Summary
		var text []byte
		var created string
		if err := rows.Scan(&sum.Version, &text, &sum.From, &sum.To, &created, &sum.Summarizer); err != nil {
			return nil, ctxErr(ctx, "summaries", err)
		}
		sum.Text = string(text)
		if sum.Created, err = time.Parse(time.RFC3339Nano, created); err != nil {
			return nil, wrap("summaries", err)
		}
		out = append(out, sum)
	}
	return out, ctxErr(ctx, "summaries", rows.Err())
}

// Archive implements store.Store. Positions already archived keep their first message.
func (s *Store) Archive(ctx context.Context, session string, first int, msgs []chat.Message) (store.Location, error) {
	if first < 0 {
		return "", fmt.Errorf("sqlite: archive at negative position %d", first)
	}
	bodies, err := encodeMessages(msgs)
	if err != nil {
		return "", err
	}
	if err := s.begin(ctx, session); err != nil {
		return "", err
	}
	defer s.end()
	loc := s.location(session, "dialog")
	if len(bodies) == 0 {
		return loc, nil
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		if err := touch(ctx, tx, session, now); err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO archive (session, pos, body, archived_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (session, pos) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i, b := range bodies {
			if _, err := stmt.ExecContext(ctx, session, first+i, string(b), now.UnixNano()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", ctxErr(ctx, "archive", err)
	}
	return loc, nil
}

// ReadArchive implements store.Store.
func (s *Store) ReadArchive(ctx context.Context, session string, from, to int) ([]store.Archived, error) {
	if err := s.begin(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	if to < 0 {
		to = math.MaxInt64
	}
	if from >= to {
		return []store.Archived{}, nil
	}
	out, err := s.readArchived(ctx, session, from, to)
	return out, ctxErr(ctx, "read archive", err)
}

// readArchived reads the archive rows of session with positions in [from, to).
func (s *Store) readArchived(ctx context.Context, session string, from, to int) ([]store.Archived, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT pos, body FROM archive WHERE session = ? AND pos >= ? AND pos < ? ORDER BY pos`, session, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Archived{}
	for rows.Next() {
		var a store.Archived
		var body []byte
		if err := rows.Scan(&a.Pos, &body); err != nil {
			return nil, err
		}
		if a.Message, err = decodeMessage(body); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// expiresLayout formats expiry times so that they compare as text.
const expiresLayout = "2006-01-02T15:04:05.000000000Z"

var (
	minExpires = time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)
	maxExpires = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// formatExpires returns the stored form of an expiry: NULL for never, else fixed-width UTC
// (clamped to years 1-9999).
func formatExpires(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	if t.Before(minExpires) {
		t = minExpires
	}
	if t.After(maxExpires) {
		t = maxExpires
	}
	return t.Format(expiresLayout)
}

func parseExpires(v sql.NullString) (time.Time, error) {
	if !v.Valid {
		return time.Time{}, nil
	}
	return time.Parse(expiresLayout, v.String)
}

// Offload implements store.Store. A stored, unexpired key keeps its first text; an expired one
// is replaced.
func (s *Store) Offload(ctx context.Context, session, key, text string, expires time.Time) (store.Offloaded, error) {
	if err := s.begin(ctx, session, key); err != nil {
		return store.Offloaded{}, err
	}
	defer s.end()
	info := store.Offloaded{
		Key:      key,
		Location: s.location(session, "tool_result/"+key),
		Bytes:    len(text),
		Lines:    store.CountLines(text),
		Expires:  expires.Round(0),
	}
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		var bytes, lines int
		var exp sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT bytes, lines, expires FROM offloads WHERE session = ? AND key = ?`, session, key).Scan(&bytes, &lines, &exp)
		switch {
		case err == nil:
			e, err := parseExpires(exp)
			if err != nil {
				return err
			}
			if !store.Expired(e, now) {
				info.Bytes, info.Lines, info.Expires = bytes, lines, e
				// Like the memory store, a kept result still makes its session exist.
				_, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, created, updated) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`,
					session, now.UnixNano(), now.UnixNano())
				return err
			}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if err := touch(ctx, tx, session, now); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO offloads (session, key, text, bytes, lines, expires, created)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (session, key) DO UPDATE SET text = excluded.text, bytes = excluded.bytes,
				lines = excluded.lines, expires = excluded.expires, created = excluded.created`,
			session, key, []byte(text), info.Bytes, info.Lines, formatExpires(expires), now.UnixNano())
		return err
	})
	if err != nil {
		return store.Offloaded{}, ctxErr(ctx, "offload", err)
	}
	return info, nil
}

// ReadOffload implements store.Store.
func (s *Store) ReadOffload(ctx context.Context, session, key string, fromLine, maxLines int) (string, int, error) {
	if err := s.begin(ctx, session, key); err != nil {
		return "", 0, err
	}
	defer s.end()
	var text []byte
	var exp sql.NullString
	err := s.r.QueryRowContext(ctx, `SELECT text, expires FROM offloads WHERE session = ? AND key = ?`, session, key).Scan(&text, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q", store.ErrNotFound, key, session)
	}
	if err != nil {
		return "", 0, ctxErr(ctx, "read offload", err)
	}
	e, err := parseExpires(exp)
	if err != nil {
		return "", 0, wrap("read offload", err)
	}
	if store.Expired(e, s.now()) {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q expired at %s", store.ErrExpired, key, session, e.Format(time.RFC3339))
	}
	out, total := store.SplitLines(string(text), fromLine, maxLines)
	return out, total, nil
}

// PutState implements store.Store.
func (s *Store) PutState(ctx context.Context, session string, state []byte) error {
	if err := s.begin(ctx, session); err != nil {
		return err
	}
	defer s.end()
	now := s.now().UnixNano()
	if state == nil {
		state = []byte{}
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO sessions (id, created, updated, state) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET updated = MAX(sessions.updated, excluded.updated), state = excluded.state`,
		session, now, now, state)
	return ctxErr(ctx, "put state", err)
}

// State implements store.Store.
func (s *Store) State(ctx context.Context, session string) ([]byte, error) {
	if err := s.begin(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	var state []byte
	err := s.r.QueryRowContext(ctx, `SELECT state FROM sessions WHERE id = ?`, session).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, ctxErr(ctx, "state", err)
	}
	if len(state) == 0 {
		return nil, nil
	}
	return state, nil
}

// Cleanup implements store.Store.
func (s *Store) Cleanup(ctx context.Context, now time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.end()
	if now.IsZero() {
		return 0, nil
	}
	res, err := s.w.ExecContext(ctx, `DELETE FROM offloads WHERE expires IS NOT NULL AND expires < ?`, formatExpires(now))
	if err != nil {
		return 0, ctxErr(ctx, "cleanup", err)
	}
	n, err := res.RowsAffected()
	return int(n), wrap("cleanup", err)
}

// Close implements store.Store. Calls after Close, Close included, return store.ErrClosed.
func (s *Store) Close() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	for _, st := range []*sql.Stmt{s.stmtCount, s.stmtTouch, s.stmtInsert} {
		if st != nil {
			st.Close()
		}
	}
	errR := s.r.Close()
	errW := s.w.Close()
	return wrap("close", errors.Join(errW, errR))
}

// AppendEvent records one of the Manager's events for the session (creating the session if
// needed). body is stored as given (normally JSON).
func (s *Store) AppendEvent(ctx context.Context, session, kind string, body []byte) error {
	if err := s.begin(ctx, session); err != nil {
		return err
	}
	defer s.end()
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, created, updated) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			session, now.UnixNano(), now.UnixNano()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO events (session, at, kind, body) VALUES (?, ?, ?, ?)`,
			session, now.UnixNano(), kind, string(body))
		return err
	})
	return ctxErr(ctx, "append event", err)
}

// Event is one recorded event.
type Event = store.Event

// Events returns the session's events in the order they were recorded; none for an unknown
// session.
func (s *Store) Events(ctx context.Context, session string) ([]Event, error) {
	if err := s.begin(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	rows, err := s.r.QueryContext(ctx, `SELECT id, at, kind, body FROM events WHERE session = ? ORDER BY id`, session)
	if err != nil {
		return nil, ctxErr(ctx, "events", err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var e Event
		var at int64
		var body string
		if err := rows.Scan(&e.ID, &at, &e.Kind, &body); err != nil {
			return nil, ctxErr(ctx, "events", err)
		}
		e.At, e.Body = time.Unix(0, at), []byte(body)
		out = append(out, e)
	}
	return out, ctxErr(ctx, "events", rows.Err())
}

// PutConfig records the session's model and a snapshot of its configuration (JSON), creating
// the session if needed.
func (s *Store) PutConfig(ctx context.Context, session, model string, config []byte) error {
	if err := s.begin(ctx, session); err != nil {
		return err
	}
	defer s.end()
	now := s.now().UnixNano()
	var cfg any
	if config != nil {
		cfg = string(config)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO sessions (id, created, updated, model, config) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET updated = MAX(sessions.updated, excluded.updated), model = excluded.model, config = excluded.config`,
		session, now, now, model, cfg)
	return ctxErr(ctx, "put config", err)
}

// Config returns the session's model and configuration snapshot as PutConfig stored them
// (empty and nil if none).
func (s *Store) Config(ctx context.Context, session string) (model string, config []byte, err error) {
	if err := s.begin(ctx, session); err != nil {
		return "", nil, err
	}
	defer s.end()
	var cfg sql.NullString
	err = s.r.QueryRowContext(ctx, `SELECT model, config FROM sessions WHERE id = ?`, session).Scan(&model, &cfg)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, ctxErr(ctx, "config", err)
	}
	if cfg.Valid {
		config = []byte(cfg.String)
	}
	return model, config, nil
}

// Prune deletes every session last updated before olderThan, with all its rows (history,
// summaries, archive, offloaded results, state and events), in one transaction, and returns
// what it deleted, sorted by id. With dryRun it deletes nothing and returns what it would
// delete.
func (s *Store) Prune(ctx context.Context, olderThan time.Time, dryRun bool) ([]store.SessionInfo, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	var infos []store.SessionInfo
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, sessionInfoQuery+` WHERE s.updated < ? ORDER BY s.id`, olderThan.UnixNano())
		if err != nil {
			return err
		}
		if infos, err = scanInfos(rows); err != nil {
			return err
		}
		if dryRun {
			return nil
		}
		for _, info := range infos {
			// Child tables are named explicitly (rather than left to ON DELETE CASCADE) so that
			// a database opened without foreign keys is pruned whole all the same.
			for _, table := range []string{"messages", "summaries", "archive", "offloads", "events"} {
				if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE session = ?`, info.ID); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, info.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, ctxErr(ctx, "prune", err)
	}
	return infos, nil
}

// String describes the store for logs.
func (s *Store) String() string { return "sqlite:" + s.path }
