// Package sqlstore is the one SQL implementation of store.Store, on database/sql, for every
// SQL database ctxmgr supports. A backend package (store/sqlite, store/postgres) owns what is
// its own: Open (the driver, its settings, the connection pools), the schema (its migrations)
// and a Dialect (placeholders, how times and bodies are written, which errors are conflicts,
// migration locking, batching and tuning). This package owns the rest, once: the statements,
// the transactions, the compare-and-swap checks and the error rules.
//
// The contract, on top of store.Store's:
//
//   - The tables are sessions, messages, summaries, archive, offloads and events, as the
//     backends' schemas define them; Open applies the migrations a database has not recorded
//     in schema_migrations, all in one transaction (under Dialect.LockMigrations), and
//     refuses a database whose schema is newer than the program's.
//   - Every multi-row change is one transaction on the writer pool, so that after a crash a
//     history holds exactly the calls that returned, plus possibly the one in flight, whole
//     or not at all.
//   - Compare-and-swap: every write to a session first upserts the session's row, which makes
//     the transaction the session's only writer until it ends (a row lock in PostgreSQL, the
//     database's write lock in SQLite), and only then checks its precondition (history length
//     for Append, latest version for PutSummary); a precondition that held when checked still
//     holds at commit. Unique keys on (session, pos) and (session, version) back this up: a
//     violation (Dialect.IsConflict) is store.ErrConflict too, as are an Append at a negative
//     position and a summary version below 1.
//   - With Config.WriteBehind (SQLite only), an Append returns once it is written to a
//     journal, applied to the database in batches; every other call first waits for the
//     appends made before it, and Open applies what a dead process's journal holds, so that
//     the two rules above hold as seen through the store (journal.go states the rest).
//   - Errors: store errors (ErrConflict, ErrNotFound, ...) and context errors come back as
//     they are; a call whose context ended returns the context's error; any other database
//     error is wrapped as "<dialect name>: <operation>: %w".
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// Config is what a backend hands to Open.
type Config struct {
	// Dialect describes the database; see Dialect.
	Dialect Dialect
	// Writer runs every write; Reader every read that is not part of a write (nil: Writer).
	// Open takes both: Close closes them, and so does a failing Open.
	Writer, Reader *sql.DB
	// Where names the database in locations and in String, without credentials:
	// "sqlite:/abs/path/ctxmgr.db", "postgres://host:5432/db?search_path=x".
	Where string
	// Migrations is the schema, one entry per version (version i+1 is Migrations[i]).
	Migrations []string
	// Now is the store's clock: it stamps sessions, summaries stored without a Created time,
	// archive rows, events and migrations, and decides whether ReadOffload or Offload sees a
	// result as expired. Nil means time.Now.
	Now func() time.Time
	// Journal is the path prefix of the append journal (journal.go): Open applies what a
	// journal left there holds, and with WriteBehind > 0 appends go through it. Empty: none
	// (a database several processes write at once, such as PostgreSQL's, must have none).
	Journal string
	// WriteBehind, with Journal, makes an Append return once it is in the journal; the
	// journal is applied to the database at most this long after. Zero: appends write the
	// database.
	WriteBehind time.Duration
	// Logger receives what the journal reports (records applied at Open, failed applies,
	// dropped records). Nil means slog.Default().
	Logger *slog.Logger
}

// Store is the SQL store.Store. All methods are safe for concurrent use, and several
// processes may share one database.
type Store struct {
	d     Dialect
	q     queries
	w, r  *sql.DB
	where string
	now   func() time.Time

	gate   sync.RWMutex // shared by every call in progress, exclusive for Close
	closed bool

	// The statements of an Append, prepared on w when Dialect.Prepare is set (nil otherwise),
	// on the held connection when Dialect.HoldWriter is.
	stmtTouch, stmtCount, stmtInsert *sql.Stmt
	// A session's length read outside a transaction (an Append through the journal checks
	// its position with it), prepared on r when Dialect.Prepare is set. Through the
	// journal every Append after a quiet spell runs it (the journal forgets a session's
	// length once its records are applied, so as to see other writers): unprepared, SQLite
	// parsed it each time, about a third of such an Append's CPU.
	readCount *sql.Stmt

	held *heldWriter // Dialect.HoldWriter: every write runs on it

	j     *journal // Config.WriteBehind: the append journal, if this process holds it
	watch *watcher // Config.Journal without j: waits for another process's journal
}

// heldWriter is the writer's one connection, held from Open to Close (Dialect.HoldWriter),
// with the statements that open and end a transaction prepared on it once. Writes take mu
// and run one at a time, as the connection can run only one transaction.
type heldWriter struct {
	mu                      sync.Mutex
	conn                    *sql.Conn
	begin, commit, rollback *sql.Stmt
}

var _ store.Store = (*Store)(nil)

// Open migrates the database cfg describes to the schema's current version and returns the
// store on it. On error it closes cfg.Writer and cfg.Reader.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s := &Store{d: cfg.Dialect, w: cfg.Writer, r: cfg.Reader, where: cfg.Where, now: cfg.Now}
	if s.r == nil {
		s.r = s.w
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.q = newQueries(&s.d)
	if err := s.migrate(ctx, cfg.Migrations); err != nil {
		s.closeDBs()
		return nil, err
	}
	if s.d.HoldWriter {
		if err := s.holdWriter(ctx); err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("%s: hold the writer: %w", s.d.Name, err)
		}
	}
	if s.d.Prepare {
		if err := s.prepare(ctx); err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("%s: prepare: %w", s.d.Name, err)
		}
	}
	if cfg.Journal != "" {
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		j, err := openJournal(ctx, s, cfg.Journal, cfg.WriteBehind, log)
		if err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("%s: %w", s.d.Name, err)
		}
		s.j = j
		if j == nil {
			s.watch = &watcher{s: s, prefix: cfg.Journal, log: log}
			if cfg.WriteBehind > 0 {
				log.Warn("sqlstore: another process journals this database; this one appends directly (slower) and reads what that process appends once it is applied",
					slog.String("journal", cfg.Journal))
			}
		}
	}
	return s, nil
}

// holdWriter takes the writer's connection for the store's life and prepares the statements
// that begin, commit and roll back a transaction on it.
func (s *Store) holdWriter(ctx context.Context) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	h := &heldWriter{conn: conn}
	s.held = h
	begin := s.d.Begin
	if begin == "" {
		begin = "BEGIN"
	}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{{&h.begin, begin}, {&h.commit, "COMMIT"}, {&h.rollback, "ROLLBACK"}} {
		if *p.dst, err = conn.PrepareContext(ctx, p.sql); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) prepare(ctx context.Context) error {
	var err error
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{{&s.stmtTouch, s.q.touch}, {&s.stmtCount, s.q.count}, {&s.stmtInsert, s.q.insertMessage}} {
		if s.held != nil {
			*p.dst, err = s.held.conn.PrepareContext(ctx, p.sql)
		} else {
			*p.dst, err = s.w.PrepareContext(ctx, p.sql)
		}
		if err != nil {
			return err
		}
	}
	s.readCount, err = s.r.PrepareContext(ctx, s.q.count)
	return err
}

// count is the number of messages session holds, read outside a transaction.
func (s *Store) count(ctx context.Context, session string) (n int, err error) {
	if s.readCount != nil {
		err = s.readCount.QueryRowContext(ctx, session).Scan(&n)
	} else {
		err = s.r.QueryRowContext(ctx, s.q.count, session).Scan(&n)
	}
	return n, err
}

func (s *Store) closeDBs() error {
	stmts := []*sql.Stmt{s.stmtTouch, s.stmtCount, s.stmtInsert, s.readCount}
	if h := s.held; h != nil {
		stmts = append(stmts, h.begin, h.commit, h.rollback)
	}
	for _, st := range stmts {
		if st != nil {
			st.Close()
		}
	}
	if s.held != nil {
		s.held.conn.Close()
	}
	var errR error
	if s.r != s.w {
		errR = s.r.Close()
	}
	return errors.Join(s.w.Close(), errR)
}

// migrate applies the migrations the database has not recorded yet, in one transaction.
func (s *Store) migrate(ctx context.Context, migrations []string) error {
	err := s.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if s.d.LockMigrations != nil {
			if err := s.d.LockMigrations(ctx, tx); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, s.d.MigrationsTable); err != nil {
			return err
		}
		var latest int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&latest); err != nil {
			return err
		}
		if latest > len(migrations) {
			return fmt.Errorf("database schema version %d is newer than this program's (%d)", latest, len(migrations))
		}
		for i := latest; i < len(migrations); i++ {
			if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
				return fmt.Errorf("version %d: %w", i+1, err)
			}
			if _, err := tx.ExecContext(ctx, s.q.recordMigration, i+1, s.d.Time(s.now())); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: migrate %s: %w", s.d.Name, s.where, err)
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

// beginSettled is begin for every call but Append: it also waits until the appends made
// before it are in the database (see journal.go), so that the call sees them.
func (s *Store) beginSettled(ctx context.Context, ids ...string) error {
	if err := s.begin(ctx, ids...); err != nil {
		return err
	}
	var err error
	switch {
	case s.j != nil:
		err = s.j.settle()
	case s.watch != nil:
		err = s.watch.settle(ctx)
	}
	if err != nil {
		s.end()
		return fmt.Errorf("%s: %w", s.d.Name, err)
	}
	return nil
}

// writeCtx is the context a write runs under (see Dialect.Detach).
func (s *Store) writeCtx(ctx context.Context) context.Context {
	if s.d.Detach {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// writer is what a write transaction's statements run on: a *sql.Tx, or the held writer's
// connection inside the transaction the store began on it.
type writer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// tx runs fn in one write transaction and commits it; any error rolls it back. With a held
// writer the transaction is begun, committed and rolled back by the statements prepared on
// it; otherwise it is a database/sql transaction on the writer.
func (s *Store) tx(ctx context.Context, fn func(ctx context.Context, tx writer) error) error {
	h := s.held
	if h == nil {
		return s.sqlTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
	}
	ctx = s.writeCtx(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.begin.ExecContext(ctx); err != nil {
		return err
	}
	err := fn(ctx, h.conn)
	if err == nil {
		if _, err = h.commit.ExecContext(ctx); err == nil {
			return nil
		}
	}
	// A failed statement or COMMIT leaves the transaction open (SQLite ends it by itself
	// only after some I/O errors, when ROLLBACK then reports that none is active).
	_, _ = h.rollback.ExecContext(ctx)
	return err
}

// sqlTx runs fn in one database/sql write transaction on the writer and commits it; any
// error rolls it back.
func (s *Store) sqlTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	ctx = s.writeCtx(ctx)
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

// execOne runs one write statement on its own (committed when it returns): on the held
// writer when there is one (its only connection), else on the writer pool.
func (s *Store) execOne(ctx context.Context, q string, args ...any) (sql.Result, error) {
	ctx = s.writeCtx(ctx)
	if h := s.held; h != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.conn.ExecContext(ctx, q, args...)
	}
	return s.w.ExecContext(ctx, q, args...)
}

// stmt returns st (prepared on the writer, or on the held connection) for use in tx.
func stmt(ctx context.Context, tx writer, st *sql.Stmt) *sql.Stmt {
	if t, ok := tx.(*sql.Tx); ok {
		return t.StmtContext(ctx, st)
	}
	return st
}

// exec runs a statement in tx: st (prepared) if set, else q.
func exec(ctx context.Context, tx writer, st *sql.Stmt, q string, args ...any) (sql.Result, error) {
	if st != nil {
		return stmt(ctx, tx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

// lockSession creates the session's row if needed and sets its updated time; the row (SQLite:
// the database) stays locked until the transaction ends. Every write that makes a session
// newer starts with it, but an append to a session that has messages: the messages carry
// their time (see sessionInfo), and their primary key orders concurrent appends.
func (s *Store) lockSession(ctx context.Context, tx writer, session string, now time.Time) error {
	t := s.d.Time(now)
	_, err := exec(ctx, tx, s.stmtTouch, s.q.touch, session, t, t)
	return err
}

// ensureSession creates the session's row if needed, without making the session newer.
func (s *Store) ensureSession(ctx context.Context, tx writer, session string, now time.Time) error {
	t := s.d.Time(now)
	_, err := tx.ExecContext(ctx, s.q.ensure, session, t, t)
	return err
}

func (s *Store) location(session, suffix string) store.Location {
	return store.Location(s.where + "#" + session + "/" + suffix)
}

// wrap adds the dialect's name and the operation to database errors; store errors and context
// errors pass as they are (still matching with errors.Is), and a call whose context ended
// fails with the context's error, whatever the driver made of the interruption.
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	for _, e := range []error{store.ErrConflict, store.ErrNotFound, store.ErrExpired, store.ErrInvalidID, store.ErrClosed} {
		if errors.Is(err, e) {
			return err
		}
	}
	return fmt.Errorf("%s: %s: %w", s.d.Name, op, err)
}

// conflict reports err as store.ErrConflict when the dialect classifies it as one.
func (s *Store) conflict(err error, format string, args ...any) error {
	if err != nil && s.d.IsConflict != nil && s.d.IsConflict(err) {
		return fmt.Errorf("%w: "+format+": %w", append([]any{store.ErrConflict}, append(args, err)...)...)
	}
	return err
}

// encodeMessages returns each message's json.Marshal encoding (what is stored, verbatim) and
// its hash.
func (s *Store) encodeMessages(msgs []chat.Message) (bodies, hashes [][]byte, err error) {
	bodies, hashes = make([][]byte, len(msgs)), make([][]byte, len(msgs))
	for i := range msgs {
		b, err := json.Marshal(&msgs[i])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: encode message %d: %w", s.d.Name, i, err)
		}
		h := msgs[i].Hash()
		bodies[i], hashes[i] = b, h[:]
	}
	return bodies, hashes, nil
}

func (s *Store) decodeMessage(body []byte) (chat.Message, error) {
	var m chat.Message
	if err := json.Unmarshal(body, &m); err != nil {
		return chat.Message{}, fmt.Errorf("%s: decode stored message: %w", s.d.Name, err)
	}
	return m, nil
}

func conflictAt(at int, session string, n int) error {
	return fmt.Errorf("%w: append at %d, session %q has %d messages", store.ErrConflict, at, session, n)
}

// Append implements store.Store: the session is locked, the length checked and the messages
// inserted in one transaction.
func (s *Store) Append(ctx context.Context, session string, at int, msgs []chat.Message) error {
	bodies, hashes, err := s.encodeMessages(msgs)
	if err != nil {
		return err
	}
	if err := s.begin(ctx, session); err != nil {
		return err
	}
	defer s.end()
	if at < 0 {
		return conflictAt(at, session, -1)
	}
	if s.j != nil {
		return s.wrap(ctx, "append", s.j.append(ctx, session, at, s.now(), hashes, bodies))
	}
	if len(bodies) == 0 {
		n, err := s.count(ctx, session)
		if err != nil {
			return s.wrap(ctx, "append", err)
		}
		if n != at {
			return conflictAt(at, session, n)
		}
		return nil
	}
	t := s.now()
	err = s.tx(ctx, func(ctx context.Context, tx writer) error {
		return s.appendRows(ctx, tx, session, at, t, hashes, bodies)
	})
	return s.wrap(ctx, "append", err)
}

// appendRows is Append's transaction: it checks that the session holds exactly at messages
// (store.ErrConflict otherwise) and inserts the messages at at, at+1, ... stamped with t.
func (s *Store) appendRows(ctx context.Context, tx writer, session string, at int, t time.Time, hashes, bodies [][]byte) error {
	// The messages carry their time (sessionInfo reads the newest as the session's
	// updated), so the session's row is written only to create it: a session holding
	// at messages, at > 0, has one (messages reference it).
	if at == 0 {
		if err := s.lockSession(ctx, tx, session, t); err != nil {
			return err
		}
	}
	var n int
	var row *sql.Row
	if s.stmtCount != nil {
		row = stmt(ctx, tx, s.stmtCount).QueryRowContext(ctx, session)
	} else {
		row = tx.QueryRowContext(ctx, s.q.count, session)
	}
	if err := row.Scan(&n); err != nil {
		return err
	}
	if n != at {
		return conflictAt(at, session, n)
	}
	now := s.d.Time(t)
	if s.q.appendBatch != "" {
		_, err := tx.ExecContext(ctx, s.q.appendBatch, session, at, now, hashes, bodies)
		return s.conflict(err, "append at %d to session %q", at, session)
	}
	var ins *sql.Stmt
	if s.stmtInsert != nil {
		ins = stmt(ctx, tx, s.stmtInsert)
	} else {
		var err error
		if ins, err = tx.PrepareContext(ctx, s.q.insertMessage); err != nil {
			return err
		}
		defer ins.Close()
	}
	for i, b := range bodies {
		if _, err := ins.ExecContext(ctx, session, at+i, hashes[i], s.d.Body(b), now); err != nil {
			return s.conflict(err, "append at %d to session %q", at, session)
		}
	}
	return nil
}

// Messages implements store.Store.
func (s *Store) Messages(ctx context.Context, session string, from, to int) ([]chat.Message, error) {
	if err := s.beginSettled(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	if from < 0 {
		from = 0
	}
	if to < 0 {
		to = math.MaxInt
	}
	if from >= to {
		return []chat.Message{}, nil
	}
	msgs, err := s.readBodies(ctx, session, from, to)
	return msgs, s.wrap(ctx, "messages", err)
}

func (s *Store) readBodies(ctx context.Context, session string, from, to int) ([]chat.Message, error) {
	rows, err := s.r.QueryContext(ctx, s.q.messages, session, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []chat.Message{}
	var body sql.RawBytes // decoded before the next row: no copy of every body
	for rows.Next() {
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		m, err := s.decodeMessage(body)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// scanInfos reads the rows of a sessionInfo query.
func scanInfos(rows *sql.Rows) ([]store.SessionInfo, error) {
	defer rows.Close()
	out := []store.SessionInfo{}
	for rows.Next() {
		var info store.SessionInfo
		if err := rows.Scan(&info.ID, (*timeScan)(&info.Created), (*timeScan)(&info.Updated), &info.Messages, &info.Summary); err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, rows.Err()
}

// Sessions implements store.Store.
func (s *Store) Sessions(ctx context.Context) ([]store.SessionInfo, error) {
	if err := s.beginSettled(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	rows, err := s.r.QueryContext(ctx, s.q.sessions)
	if err != nil {
		return nil, s.wrap(ctx, "sessions", err)
	}
	infos, err := scanInfos(rows)
	return infos, s.wrap(ctx, "sessions", err)
}

// PutSummary implements store.Store: the session is locked, the version checked and the
// summary inserted in one transaction.
func (s *Store) PutSummary(ctx context.Context, session string, sum store.Summary) error {
	if sum.Created.IsZero() {
		sum.Created = s.now()
	}
	sum, err := sum.Normalized()
	if err != nil {
		return err
	}
	if err := s.beginSettled(ctx, session); err != nil {
		return err
	}
	defer s.end()
	if sum.Version < 1 {
		return fmt.Errorf("%w: summary version %d", store.ErrConflict, sum.Version)
	}
	err = s.tx(ctx, func(ctx context.Context, tx writer) error {
		if err := s.lockSession(ctx, tx, session, s.now()); err != nil {
			return err
		}
		var latest int
		if err := tx.QueryRowContext(ctx, s.q.latestSummary, session).Scan(&latest); err != nil {
			return err
		}
		if sum.Version != latest+1 {
			return fmt.Errorf("%w: summary version %d, session %q is at version %d", store.ErrConflict, sum.Version, session, latest)
		}
		_, err := tx.ExecContext(ctx, s.q.insertSummary,
			session, sum.Version, []byte(sum.Text), sum.From, sum.To, sum.Created.Format(time.RFC3339Nano), sum.Summarizer)
		return s.conflict(err, "summary version %d of session %q", sum.Version, session)
	})
	return s.wrap(ctx, "put summary", err)
}

// Summaries implements store.Store.
func (s *Store) Summaries(ctx context.Context, session string) ([]store.Summary, error) {
	if err := s.beginSettled(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	rows, err := s.r.QueryContext(ctx, s.q.summaries, session)
	if err != nil {
		return nil, s.wrap(ctx, "summaries", err)
	}
	defer rows.Close()
	out := []store.Summary{}
	for rows.Next() {
		var sum store.Summary
		var text []byte
		var created string
		if err := rows.Scan(&sum.Version, &text, &sum.From, &sum.To, &created, &sum.Summarizer); err != nil {
			return nil, s.wrap(ctx, "summaries", err)
		}
		sum.Text = string(text)
		if sum.Created, err = time.Parse(time.RFC3339Nano, created); err != nil {
			return nil, s.wrap(ctx, "summaries", err)
		}
		out = append(out, sum)
	}
	return out, s.wrap(ctx, "summaries", rows.Err())
}

// Archive implements store.Store. Positions already archived keep their first message.
func (s *Store) Archive(ctx context.Context, session string, first int, msgs []chat.Message) (store.Location, error) {
	if first < 0 {
		return "", fmt.Errorf("%s: archive at negative position %d", s.d.Name, first)
	}
	bodies, _, err := s.encodeMessages(msgs)
	if err != nil {
		return "", err
	}
	if err := s.beginSettled(ctx, session); err != nil {
		return "", err
	}
	defer s.end()
	loc := s.location(session, "dialog")
	if len(bodies) == 0 {
		return loc, nil
	}
	err = s.tx(ctx, func(ctx context.Context, tx writer) error {
		now := s.now()
		if err := s.lockSession(ctx, tx, session, now); err != nil {
			return err
		}
		if s.q.archiveBatch != "" {
			_, err := tx.ExecContext(ctx, s.q.archiveBatch, session, first, s.d.Time(now), bodies)
			return err
		}
		stmt, err := tx.PrepareContext(ctx, s.q.archive)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i, b := range bodies {
			if _, err := stmt.ExecContext(ctx, session, first+i, s.d.Body(b), s.d.Time(now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", s.wrap(ctx, "archive", err)
	}
	return loc, nil
}

// ReadArchive implements store.Store.
func (s *Store) ReadArchive(ctx context.Context, session string, from, to int) ([]store.Archived, error) {
	if err := s.beginSettled(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	if to < 0 {
		to = math.MaxInt
	}
	if from >= to {
		return []store.Archived{}, nil
	}
	out, err := s.readArchived(ctx, session, from, to)
	return out, s.wrap(ctx, "read archive", err)
}

// readArchived reads the archive rows of session with positions in [from, to).
func (s *Store) readArchived(ctx context.Context, session string, from, to int) ([]store.Archived, error) {
	rows, err := s.r.QueryContext(ctx, s.q.readArchive, session, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Archived{}
	var body sql.RawBytes // decoded before the next row
	for rows.Next() {
		var a store.Archived
		if err := rows.Scan(&a.Pos, &body); err != nil {
			return nil, err
		}
		if a.Message, err = s.decodeMessage(body); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Offload implements store.Store. A stored, unexpired key keeps its first text; an expired one
// is replaced. Both are one statement, so concurrent offloads of a key agree on one text.
func (s *Store) Offload(ctx context.Context, session, key, text string, expires time.Time) (store.Offloaded, error) {
	if err := s.beginSettled(ctx, session, key); err != nil {
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
	err := s.tx(ctx, func(ctx context.Context, tx writer) error {
		now := s.now()
		// Like the memory store, a kept result still makes its session exist.
		if err := s.ensureSession(ctx, tx, session, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q.offload,
			session, key, []byte(text), info.Bytes, info.Lines, formatExpires(expires), s.d.Time(now), nowText(now))
		if err != nil {
			return err
		}
		stored, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if stored == 1 {
			_, err := tx.ExecContext(ctx, s.q.touchUpdated, s.d.Time(now), session)
			return err
		}
		// Kept: describe the stored result.
		var exp sql.NullString
		if err := tx.QueryRowContext(ctx, s.q.offloadInfo, session, key).Scan(&info.Bytes, &info.Lines, &exp); err != nil {
			return err
		}
		info.Expires, err = parseExpires(exp)
		return err
	})
	if err != nil {
		return store.Offloaded{}, s.wrap(ctx, "offload", err)
	}
	return info, nil
}

// ReadOffload implements store.Store.
func (s *Store) ReadOffload(ctx context.Context, session, key string, fromLine, maxLines int) (string, int, error) {
	if err := s.beginSettled(ctx, session, key); err != nil {
		return "", 0, err
	}
	defer s.end()
	var text []byte
	var exp sql.NullString
	err := s.r.QueryRowContext(ctx, s.q.readOffload, session, key).Scan(&text, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q", store.ErrNotFound, key, session)
	}
	if err != nil {
		return "", 0, s.wrap(ctx, "read offload", err)
	}
	e, err := parseExpires(exp)
	if err != nil {
		return "", 0, s.wrap(ctx, "read offload", err)
	}
	if store.Expired(e, s.now()) {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q expired at %s", store.ErrExpired, key, session, e.Format(time.RFC3339))
	}
	out, total := store.SplitLines(string(text), fromLine, maxLines)
	return out, total, nil
}

// PutState implements store.Store.
func (s *Store) PutState(ctx context.Context, session string, state []byte) error {
	if err := s.beginSettled(ctx, session); err != nil {
		return err
	}
	defer s.end()
	if state == nil {
		state = []byte{}
	}
	err := s.tx(ctx, func(ctx context.Context, tx writer) error {
		if err := s.lockSession(ctx, tx, session, s.now()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q.putState, session, state)
		return err
	})
	return s.wrap(ctx, "put state", err)
}

// State implements store.Store.
func (s *Store) State(ctx context.Context, session string) ([]byte, error) {
	if err := s.beginSettled(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	var state []byte
	err := s.r.QueryRowContext(ctx, s.q.state, session).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap(ctx, "state", err)
	}
	if len(state) == 0 {
		return nil, nil
	}
	return state, nil
}

// Cleanup implements store.Store.
func (s *Store) Cleanup(ctx context.Context, now time.Time) (int, error) {
	if err := s.beginSettled(ctx); err != nil {
		return 0, err
	}
	defer s.end()
	if now.IsZero() {
		return 0, nil
	}
	res, err := s.execOne(ctx, s.q.cleanup, nowText(now))
	if err != nil {
		return 0, s.wrap(ctx, "cleanup", err)
	}
	n, err := res.RowsAffected()
	return int(n), s.wrap(ctx, "cleanup", err)
}

// Close implements store.Store. Calls after Close, Close included, return store.ErrClosed.
func (s *Store) Close() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	if s.j != nil {
		s.j.close()
	}
	if err := s.closeDBs(); err != nil {
		return fmt.Errorf("%s: close: %w", s.d.Name, err)
	}
	return nil
}

// AppendEvent implements store.Store: the event is stored with the store's time, the session
// created if needed (without making it newer). body is stored as given (normally JSON).
func (s *Store) AppendEvent(ctx context.Context, session, kind string, body []byte) error {
	if err := s.beginSettled(ctx, session); err != nil {
		return err
	}
	defer s.end()
	if body == nil {
		body = []byte{}
	}
	err := s.tx(ctx, func(ctx context.Context, tx writer) error {
		now := s.now()
		if err := s.ensureSession(ctx, tx, session, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q.appendEvent, session, s.d.Time(now), kind, s.d.Body(body))
		return err
	})
	return s.wrap(ctx, "append event", err)
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, session string) ([]store.Event, error) {
	if err := s.beginSettled(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	rows, err := s.r.QueryContext(ctx, s.q.events, session)
	if err != nil {
		return nil, s.wrap(ctx, "events", err)
	}
	defer rows.Close()
	out := []store.Event{}
	for rows.Next() {
		var e store.Event
		if err := rows.Scan(&e.ID, (*timeScan)(&e.At), &e.Kind, &e.Body); err != nil {
			return nil, s.wrap(ctx, "events", err)
		}
		if e.Body == nil {
			e.Body = []byte{}
		}
		out = append(out, e)
	}
	return out, s.wrap(ctx, "events", rows.Err())
}

// PutConfig implements store.Store.
func (s *Store) PutConfig(ctx context.Context, session, model string, config []byte) error {
	if err := s.beginSettled(ctx, session); err != nil {
		return err
	}
	defer s.end()
	var cfg any
	if config != nil {
		cfg = string(config)
	}
	now := s.d.Time(s.now())
	_, err := s.execOne(ctx, s.q.putConfig, session, now, now, model, cfg)
	return s.wrap(ctx, "put config", err)
}

// Config implements store.Store.
func (s *Store) Config(ctx context.Context, session string) (model string, config []byte, err error) {
	if err := s.beginSettled(ctx, session); err != nil {
		return "", nil, err
	}
	defer s.end()
	var cfg sql.NullString
	err = s.r.QueryRowContext(ctx, s.q.config, session).Scan(&model, &cfg)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, s.wrap(ctx, "config", err)
	}
	if cfg.Valid {
		config = []byte(cfg.String)
	}
	return model, config, nil
}

// Prune implements store.Store: it deletes every session last updated before olderThan, with
// all its rows (history, summaries, archive, offloaded results, state and events), in one
// transaction. The sessions are locked first (Dialect.LockRows; in SQLite the transaction
// excludes every other writer), so a session written to meanwhile is either kept (its new
// updated time no longer qualifies) or deleted whole before the write, which then starts the
// session afresh.
func (s *Store) Prune(ctx context.Context, olderThan time.Time, dryRun bool) ([]store.SessionInfo, error) {
	if err := s.beginSettled(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	var infos []store.SessionInfo
	cut := s.d.Time(olderThan)
	err := s.tx(ctx, func(ctx context.Context, tx writer) error {
		if !dryRun && s.q.lockOld != "" {
			rows, err := tx.QueryContext(ctx, s.q.lockOld, cut)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			if err := rows.Err(); err != nil {
				return err
			}
			rows.Close()
		}
		rows, err := tx.QueryContext(ctx, s.q.old, cut, cut)
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
			for _, del := range s.q.deleteSession {
				if _, err := tx.ExecContext(ctx, del, info.ID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.wrap(ctx, "prune", err)
	}
	return infos, nil
}

// String describes the store for logs (without credentials).
func (s *Store) String() string { return s.where }
