// Package postgres is the PostgreSQL store.Store, for several ctxmgr instances sharing
// sessions. It uses pgx with a connection pool, the same tables as the SQLite store (see
// schema.go), migrations versioned in the code and applied on Open, and one transaction for
// every multi-row change.
//
// Compare-and-swap across processes: every write to a session first upserts the session's
// row, which locks it until the transaction ends, and only then checks its precondition
// (history length for Append, latest version for PutSummary). Writers of one session therefore
// queue on that row lock, and a precondition that held when checked still holds at commit.
// Unique keys on (session, pos) and (session, version) back this up.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// Options configures a PostgreSQL store.
type Options struct {
	// Now is the store's clock: it stamps sessions, summaries stored without a Created time,
	// archive rows and events, and decides whether ReadOffload or Offload sees a result as
	// expired. Nil means time.Now. (Instances sharing a database should have synchronized
	// clocks.)
	Now func() time.Time
	// Schema, when set, is the schema the store's tables live in: Open creates it if needed
	// and sets search_path to it on every connection. Lowercase letters, digits and '_' only.
	// Empty: the connection's own search_path (normally "public").
	Schema string
	// MaxConns bounds the pool; 0 keeps pgxpool's default (or the URL's pool_max_conns).
	MaxConns int32
}

// Store is the PostgreSQL store. All methods are safe for concurrent use, and any number of
// processes may share one database (and schema).
type Store struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	schema string
	where  string // the location prefix, without credentials

	gate   sync.RWMutex // shared by every call in progress, exclusive for Close
	closed bool
}

var (
	_ store.Store = (*Store)(nil)
)

// Open connects to the database at url (a postgres:// URL or a libpq key=value string),
// creates the schema if Options.Schema asks for one, and migrates it to the current version.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if opts.Schema != "" {
		if !validSchema(opts.Schema) {
			return nil, fmt.Errorf("postgres: invalid schema name %q", opts.Schema)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = opts.Schema
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	s := &Store{now: opts.Now, schema: opts.Schema, where: location(cfg.ConnConfig.Config, opts.Schema)}
	if s.now == nil {
		s.now = time.Now
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

func validSchema(name string) bool {
	if name == "" || len(name) > 63 || (name[0] >= '0' && name[0] <= '9') {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// location is "postgres://host:port/db" (plus "?search_path=schema"): where the data is,
// never with credentials.
func location(c pgconn.Config, schema string) string {
	u := url.URL{Scheme: "postgres", Path: "/" + c.Database}
	if strings.HasPrefix(c.Host, "/") {
		u.Host = "localhost"
		q := url.Values{"host": {c.Host}}
		u.RawQuery = q.Encode()
	} else {
		u.Host = net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
	}
	if schema != "" {
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Schema returns the schema given in Options (empty for the connection's default).
func (s *Store) Schema() string { return s.schema }

// SchemaVersion is the schema version this package migrates databases to.
func SchemaVersion() int { return len(migrations) }

// migrate creates the schema if one was asked for and applies the migrations the database has
// not recorded, in one transaction holding an advisory lock, so that instances opening
// together migrate once.
func (s *Store) migrate(ctx context.Context) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// The lock is per schema; CREATE SCHEMA IF NOT EXISTS itself races without it.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('ctxmgr.migrate:' || $1))`, s.schema); err != nil {
			return err
		}
		if s.schema != "" {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY,
			applied TIMESTAMPTZ NOT NULL)`); err != nil {
			return err
		}
		var latest int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&latest); err != nil {
			return err
		}
		if latest > len(migrations) {
			return fmt.Errorf("database schema version %d is newer than this program's (%d)", latest, len(migrations))
		}
		for i := latest; i < len(migrations); i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("version %d: %w", i+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied) VALUES ($1, $2)`, i+1, s.now()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
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

// tx runs fn in one read-committed transaction and commits it; any error rolls it back.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		// Roll back even when ctx has ended, so that the connection goes back to the pool clean.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		tx.Rollback(rctx)
		cancel()
		return err
	}
	return tx.Commit(ctx)
}

// lockSession creates the session's row if needed, sets its updated time and holds the row's
// lock until the transaction ends: every write to a session starts with it.
func lockSession(ctx context.Context, tx pgx.Tx, session string, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO sessions (id, created, updated) VALUES ($1, $2, $2)
		ON CONFLICT (id) DO UPDATE SET updated = GREATEST(sessions.updated, EXCLUDED.updated)`, session, now)
	return err
}

func (s *Store) location(session, suffix string) store.Location {
	return store.Location(s.where + "#" + session + "/" + suffix)
}

// isUnique reports a unique-key violation: a concurrent writer won a race the row lock did
// not cover.
func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// wrap adds the package prefix to database errors; store errors and context errors pass as
// they are (still matching with errors.Is). A call whose context ended fails with the
// context's error.
func wrap(ctx context.Context, op string, err error) error {
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
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// encodeMessages returns each message's json.Marshal encoding: what is stored, verbatim.
func encodeMessages(msgs []chat.Message) ([][]byte, error) {
	out := make([][]byte, len(msgs))
	for i := range msgs {
		b, err := json.Marshal(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("postgres: encode message %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

func hashes(msgs []chat.Message) [][]byte {
	out := make([][]byte, len(msgs))
	for i := range msgs {
		h := msgs[i].Hash()
		out[i] = h[:]
	}
	return out
}

// count returns the session's history length.
func count(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, session string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT COALESCE(MAX(pos) + 1, 0) FROM messages WHERE session = $1`, session).Scan(&n)
	return n, err
}

func conflictAt(at int, session string, n int) error {
	return fmt.Errorf("%w: append at %d, session %q has %d messages", store.ErrConflict, at, session, n)
}

// Append implements store.Store: the session row is locked, the length checked and the
// messages inserted in one transaction.
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
		n, err := count(ctx, s.pool, session)
		if err != nil {
			return wrap(ctx, "append", err)
		}
		if n != at {
			return conflictAt(at, session, n)
		}
		return nil
	}
	if at < 0 {
		return conflictAt(at, session, -1)
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if err := lockSession(ctx, tx, session, s.now()); err != nil {
			return err
		}
		n, err := count(ctx, tx, session)
		if err != nil {
			return err
		}
		if n != at {
			return conflictAt(at, session, n)
		}
		_, err = tx.Exec(ctx, `INSERT INTO messages (session, pos, hash, body)
			SELECT $1, $2::bigint + t.o - 1, t.h, t.b FROM unnest($3::bytea[], $4::bytea[]) WITH ORDINALITY AS t (h, b, o)`,
			session, at, hashes(msgs), bodies)
		if isUnique(err) {
			return fmt.Errorf("%w: append at %d to session %q: %v", store.ErrConflict, at, session, err)
		}
		return err
	})
	return wrap(ctx, "append", err)
}

func (s *Store) readBodies(ctx context.Context, query string, args ...any) ([]chat.Message, error) {
	rows, err := s.pool.Query(ctx, query, args...)
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
		var m chat.Message
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, fmt.Errorf("decode stored message: %w", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
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
	msgs, err := s.readBodies(ctx, `SELECT body FROM messages WHERE session = $1 AND pos >= $2 AND pos < $3 ORDER BY pos`, session, from, to)
	return msgs, wrap(ctx, "messages", err)
}

const sessionInfoQuery = `SELECT s.id, s.created, s.updated,
	COALESCE((SELECT MAX(m.pos) + 1 FROM messages m WHERE m.session = s.id), 0),
	COALESCE((SELECT MAX(u.version) FROM summaries u WHERE u.session = s.id), 0)
	FROM sessions s`

func scanInfos(rows pgx.Rows) ([]store.SessionInfo, error) {
	defer rows.Close()
	out := []store.SessionInfo{}
	for rows.Next() {
		var info store.SessionInfo
		if err := rows.Scan(&info.ID, &info.Created, &info.Updated, &info.Messages, &info.Summary); err != nil {
			return nil, err
		}
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
	rows, err := s.pool.Query(ctx, sessionInfoQuery+` ORDER BY s.id`)
	if err != nil {
		return nil, wrap(ctx, "sessions", err)
	}
	infos, err := scanInfos(rows)
	return infos, wrap(ctx, "sessions", err)
}

// PutSummary implements store.Store: the session row is locked, the version checked and the
// summary inserted in one transaction.
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
	if sum.Version < 1 {
		return fmt.Errorf("%w: summary version %d", store.ErrConflict, sum.Version)
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if err := lockSession(ctx, tx, session, s.now()); err != nil {
			return err
		}
		var latest int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM summaries WHERE session = $1`, session).Scan(&latest); err != nil {
			return err
		}
		if sum.Version != latest+1 {
			return fmt.Errorf("%w: summary version %d, session %q is at version %d", store.ErrConflict, sum.Version, session, latest)
		}
		_, err := tx.Exec(ctx, `INSERT INTO summaries (session, version, text, from_pos, to_pos, created, summarizer)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			session, sum.Version, []byte(sum.Text), sum.From, sum.To, sum.Created.Format(time.RFC3339Nano), sum.Summarizer)
		if isUnique(err) {
			return fmt.Errorf("%w: summary version %d of session %q: %v", store.ErrConflict, sum.Version, session, err)
		}
		return err
	})
	return wrap(ctx, "put summary", err)
}

// Summaries implements store.Store.
func (s *Store) Summaries(ctx context.Context, session string) ([]store.Summary, error) {
	if err := s.begin(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	rows, err := s.pool.Query(ctx, `SELECT version, text, from_pos, to_pos, created, summarizer
		FROM summaries WHERE session = $1 ORDER BY version`, session)
	if err != nil {
		return nil, wrap(ctx, "summaries", err)
	}
	defer rows.Close()
	out := []store.Summary{}
	for rows.Next() {
		var sum store.Summary
		var text []byte
		var created string
		if err := rows.Scan(&sum.Version, &text, &sum.From, &sum.To, &created, &sum.Summarizer); err != nil {
			return nil, wrap(ctx, "summaries", err)
		}
		sum.Text = string(text)
		if sum.Created, err = time.Parse(time.RFC3339Nano, created); err != nil {
			return nil, wrap(ctx, "summaries", err)
		}
		out = append(out, sum)
	}
	return out, wrap(ctx, "summaries", rows.Err())
}

// Archive implements store.Store. Positions already archived keep their first message.
func (s *Store) Archive(ctx context.Context, session string, first int, msgs []chat.Message) (store.Location, error) {
	if first < 0 {
		return "", fmt.Errorf("postgres: archive at negative position %d", first)
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
	err = s.tx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if err := lockSession(ctx, tx, session, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO archive (session, pos, body, archived_at)
			SELECT $1, $2::bigint + t.o - 1, t.b, $4 FROM unnest($3::bytea[]) WITH ORDINALITY AS t (b, o)
			ON CONFLICT (session, pos) DO NOTHING`, session, first, bodies, now)
		return err
	})
	if err != nil {
		return "", wrap(ctx, "archive", err)
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
	return out, wrap(ctx, "read archive", err)
}

// readArchived reads the archive rows of session with positions in [from, to).
func (s *Store) readArchived(ctx context.Context, session string, from, to int) ([]store.Archived, error) {
	rows, err := s.pool.Query(ctx, `SELECT pos, body FROM archive WHERE session = $1 AND pos >= $2 AND pos < $3 ORDER BY pos`, session, from, to)
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
		if err := json.Unmarshal(body, &a.Message); err != nil {
			return nil, fmt.Errorf("decode stored message: %w", err)
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
func formatExpires(t time.Time) *string {
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
	v := t.Format(expiresLayout)
	return &v
}

// nowText is now in the stored form of expiry times, for comparisons.
func nowText(now time.Time) string {
	if p := formatExpires(now); p != nil {
		return *p
	}
	return minExpires.Format(expiresLayout)
}

func parseExpires(v *string) (time.Time, error) {
	if v == nil {
		return time.Time{}, nil
	}
	return time.Parse(expiresLayout, *v)
}

// Offload implements store.Store. A stored, unexpired key keeps its first text; an expired one
// is replaced. Both are one statement, so concurrent offloads of a key agree on one text.
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
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if _, err := tx.Exec(ctx, `INSERT INTO sessions (id, created, updated) VALUES ($1, $2, $2) ON CONFLICT (id) DO NOTHING`, session, now); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO offloads (session, key, text, bytes, lines, expires, created)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (session, key) DO UPDATE SET text = EXCLUDED.text, bytes = EXCLUDED.bytes,
				lines = EXCLUDED.lines, expires = EXCLUDED.expires, created = EXCLUDED.created
			WHERE offloads.expires IS NOT NULL AND offloads.expires < $8`,
			session, key, []byte(text), info.Bytes, info.Lines, formatExpires(expires), now, nowText(now))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			_, err := tx.Exec(ctx, `UPDATE sessions SET updated = GREATEST(updated, $2) WHERE id = $1`, session, now)
			return err
		}
		// Kept: describe the stored result.
		var exp *string
		if err := tx.QueryRow(ctx, `SELECT bytes, lines, expires FROM offloads WHERE session = $1 AND key = $2`, session, key).Scan(&info.Bytes, &info.Lines, &exp); err != nil {
			return err
		}
		info.Expires, err = parseExpires(exp)
		return err
	})
	if err != nil {
		return store.Offloaded{}, wrap(ctx, "offload", err)
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
	var exp *string
	err := s.pool.QueryRow(ctx, `SELECT text, expires FROM offloads WHERE session = $1 AND key = $2`, session, key).Scan(&text, &exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q", store.ErrNotFound, key, session)
	}
	if err != nil {
		return "", 0, wrap(ctx, "read offload", err)
	}
	e, err := parseExpires(exp)
	if err != nil {
		return "", 0, wrap(ctx, "read offload", err)
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
	if state == nil {
		state = []byte{}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO sessions (id, created, updated, state) VALUES ($1, $2, $2, $3)
		ON CONFLICT (id) DO UPDATE SET updated = GREATEST(sessions.updated, EXCLUDED.updated), state = EXCLUDED.state`,
		session, s.now(), state)
	return wrap(ctx, "put state", err)
}

// State implements store.Store.
func (s *Store) State(ctx context.Context, session string) ([]byte, error) {
	if err := s.begin(ctx, session); err != nil {
		return nil, err
	}
	defer s.end()
	var state []byte
	err := s.pool.QueryRow(ctx, `SELECT state FROM sessions WHERE id = $1`, session).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(ctx, "state", err)
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
	tag, err := s.pool.Exec(ctx, `DELETE FROM offloads WHERE expires IS NOT NULL AND expires < $1`, nowText(now))
	if err != nil {
		return 0, wrap(ctx, "cleanup", err)
	}
	return int(tag.RowsAffected()), nil
}

// Close implements store.Store. Calls after Close, Close included, return store.ErrClosed.
func (s *Store) Close() error {
	s.gate.Lock()
	defer s.gate.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	s.pool.Close()
	return nil
}

// AppendEvent records one of the Manager's events for the session (creating the session if
// needed). body is stored as given (normally JSON).
func (s *Store) AppendEvent(ctx context.Context, session, kind string, body []byte) error {
	if err := s.begin(ctx, session); err != nil {
		return err
	}
	defer s.end()
	if body == nil {
		body = []byte{}
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if _, err := tx.Exec(ctx, `INSERT INTO sessions (id, created, updated) VALUES ($1, $2, $2) ON CONFLICT (id) DO NOTHING`, session, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO events (session, at, kind, body) VALUES ($1, $2, $3, $4)`, session, now, kind, body)
		return err
	})
	return wrap(ctx, "append event", err)
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
	rows, err := s.pool.Query(ctx, `SELECT id, at, kind, body FROM events WHERE session = $1 ORDER BY id`, session)
	if err != nil {
		return nil, wrap(ctx, "events", err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.ID, &e.At, &e.Kind, &e.Body); err != nil {
			return nil, wrap(ctx, "events", err)
		}
		out = append(out, e)
	}
	return out, wrap(ctx, "events", rows.Err())
}

// PutConfig records the session's model and a snapshot of its configuration (JSON), creating
// the session if needed.
func (s *Store) PutConfig(ctx context.Context, session, model string, config []byte) error {
	if err := s.begin(ctx, session); err != nil {
		return err
	}
	defer s.end()
	var cfg *string
	if config != nil {
		c := string(config)
		cfg = &c
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO sessions (id, created, updated, model, config) VALUES ($1, $2, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET updated = GREATEST(sessions.updated, EXCLUDED.updated), model = EXCLUDED.model, config = EXCLUDED.config`,
		session, s.now(), model, cfg)
	return wrap(ctx, "put config", err)
}

// Config returns the session's model and configuration snapshot as PutConfig stored them
// (empty and nil if none).
func (s *Store) Config(ctx context.Context, session string) (model string, config []byte, err error) {
	if err := s.begin(ctx, session); err != nil {
		return "", nil, err
	}
	defer s.end()
	var cfg *string
	err = s.pool.QueryRow(ctx, `SELECT model, config FROM sessions WHERE id = $1`, session).Scan(&model, &cfg)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, wrap(ctx, "config", err)
	}
	if cfg != nil {
		config = []byte(*cfg)
	}
	return model, config, nil
}

// Prune deletes every session last updated before olderThan, with all its rows (history,
// summaries, archive, offloaded results, state and events), in one transaction, and returns
// what it deleted, sorted by id. The sessions are locked first, so a session written to
// meanwhile is either kept (its new updated time no longer qualifies) or deleted whole before
// the write, which then starts the session afresh. With dryRun it deletes nothing and returns
// what it would delete.
func (s *Store) Prune(ctx context.Context, olderThan time.Time, dryRun bool) ([]store.SessionInfo, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	var infos []store.SessionInfo
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if !dryRun {
			rows, err := tx.Query(ctx, `SELECT id FROM sessions WHERE updated < $1 ORDER BY id FOR UPDATE`, olderThan)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			rows, err = tx.Query(ctx, sessionInfoQuery+` WHERE s.id = ANY($1) ORDER BY s.id`, ids)
			if err != nil {
				return err
			}
			if infos, err = scanInfos(rows); err != nil {
				return err
			}
			for _, table := range []string{"messages", "summaries", "archive", "offloads", "events"} {
				if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE session = ANY($1)`, ids); err != nil {
					return err
				}
			}
			_, err = tx.Exec(ctx, `DELETE FROM sessions WHERE id = ANY($1)`, ids)
			return err
		}
		rows, err := tx.Query(ctx, sessionInfoQuery+` WHERE s.updated < $1 ORDER BY s.id`, olderThan)
		if err != nil {
			return err
		}
		infos, err = scanInfos(rows)
		return err
	})
	if err != nil {
		return nil, wrap(ctx, "prune", err)
	}
	return infos, nil
}

// String describes the store for logs (without credentials).
func (s *Store) String() string { return s.where }
