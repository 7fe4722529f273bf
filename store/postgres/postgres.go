// Package postgres is the PostgreSQL store.Store, for several ctxmgr instances sharing
// sessions. The store itself is package sqlstore's, shared with SQLite, on database/sql
// through pgx (github.com/jackc/pgx/v5/stdlib); this package owns what is PostgreSQL's: Open
// (the URL, the connection pool and the schema to live in), the schema (schema.go) and the
// dialect (dialect.go). Migrations are versioned in the code and applied on Open under an
// advisory lock; every multi-row change is one transaction.
//
// Compare-and-swap across processes: every write to a session first upserts the session's
// row, which locks it until the transaction ends, and only then checks its precondition
// (history length for Append, latest version for PutSummary). Writers of one session therefore
// queue on that row lock, and a precondition that held when checked still holds at commit.
// Unique keys on (session, pos) and (session, version) back this up.
package postgres

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/sqlstore"
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
	// MaxConns bounds the pool; 0 keeps the default, the URL's pool_max_conns or else the
	// larger of 4 and the number of CPUs (as pgxpool).
	MaxConns int32
}

// Store is the PostgreSQL store: a sqlstore.Store on a database/sql pool of pgx connections.
// All methods are safe for concurrent use, and any number of processes may share one database
// (and schema).
type Store struct {
	*sqlstore.Store
	schema string
}

var _ store.Store = (*Store)(nil)

// Event is one recorded event.
type Event = store.Event

// Open connects to the database at url (a postgres:// URL or a libpq key=value string),
// creates the schema if Options.Schema asks for one, and migrates it to the current version.
// The URL's pool settings (pool_max_conns, pool_max_conn_lifetime, pool_max_conn_idle_time)
// apply to the pool.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	// pgxpool's parser takes the pool_* settings out of the URL (pgx would send them to the
	// server as run-time parameters) and gives the same defaults as before.
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
	db := stdlib.OpenDB(*cfg.ConnConfig)
	db.SetMaxOpenConns(int(cfg.MaxConns))
	db.SetMaxIdleConns(int(cfg.MaxConns))
	db.SetConnMaxLifetime(cfg.MaxConnLifetime)
	db.SetConnMaxIdleTime(cfg.MaxConnIdleTime)
	s, err := sqlstore.Open(ctx, sqlstore.Config{
		Dialect:    Dialect(opts.Schema),
		Writer:     db,
		Where:      location(cfg.ConnConfig.Config, opts.Schema),
		Migrations: migrations,
		Now:        opts.Now,
	})
	if err != nil {
		return nil, err
	}
	return &Store{Store: s, schema: opts.Schema}, nil
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
