package sqlstore

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"
)

// Dialect is what differs between the SQL databases the store runs on. Everything else (the
// tables, the statements, the transactions and the checks) is the same, in this package.
//
// A backend package (store/sqlite, store/postgres) fills one in next to its schema; the
// fields are read only, and a Dialect must not be changed once a Store uses it.
type Dialect struct {
	// Name is the backend's name: it prefixes the store's errors ("sqlite: append: ...").
	Name string
	// Numbered: statements take $1, $2, ... placeholders (PostgreSQL) instead of ? (SQLite).
	Numbered bool
	// Greatest is the SQL function returning the larger of two values: "MAX" in SQLite,
	// "GREATEST" in PostgreSQL. Session times only ever move forward with it.
	Greatest string
	// Time is how a time is written to the time columns of sessions, archive, events and
	// schema_migrations (INTEGER Unix nanoseconds in SQLite, TIMESTAMPTZ in PostgreSQL). Reading
	// needs no rule: the store accepts both an integer (Unix nanoseconds) and a time.
	Time func(time.Time) any
	// Body is how a message, archive or event body (a JSON document, or an event's bytes) is
	// written: SQLite keeps them in TEXT columns, PostgreSQL in BYTEA.
	Body func([]byte) any
	// IsConflict reports a database error that a concurrent writer caused and that a retry
	// after a reload resolves (a unique-key violation, a serialization failure). Append and
	// PutSummary report such errors as store.ErrConflict. Nil: none is.
	IsConflict func(error) bool

	// MigrationsTable is the CREATE TABLE IF NOT EXISTS statement of schema_migrations
	// (version INTEGER, applied: a time as Time writes it).
	MigrationsTable string
	// LockMigrations, if set, runs first in the migration transaction, so that stores
	// opening together migrate once (PostgreSQL: pg_advisory_xact_lock, then CREATE SCHEMA).
	// SQLite needs none: its write transactions (BEGIN IMMEDIATE) already exclude each other.
	LockMigrations func(ctx context.Context, tx *sql.Tx) error

	// AppendBatch, if set, is one statement that inserts all the messages of an Append, with
	// the arguments (session, at, the time appended as Time writes it, hashes [][]byte,
	// bodies [][]byte) and ? placeholders; the message at index i goes to position at+i, with
	// the time in its at column. Empty: one INSERT per message.
	AppendBatch string
	// ArchiveBatch, if set, is one statement that archives messages, with the arguments
	// (session, first, the time archived as Time writes it, bodies [][]byte); positions already
	// archived keep their row. Empty: one INSERT ... ON CONFLICT DO NOTHING per message.
	ArchiveBatch string
	// LockRows, if set, is appended to a SELECT to lock the rows it returns until the
	// transaction ends (" FOR UPDATE"); Prune locks the sessions it deletes with it. Empty:
	// the write transaction already excludes every other writer (SQLite).
	LockRows string

	// Prepare: the statements of an Append are prepared once on the writer, on its held
	// connection with HoldWriter (SQLite: parsing them again for every append cost about as
	// much as running them). PostgreSQL's driver caches prepared statements per connection
	// by itself.
	Prepare bool
	// Detach: a write, once begun, runs to its end; its context is checked before it starts
	// and its cancellation does not interrupt it. The SQLite driver watches every statement
	// run under a cancellable context with a goroutine and a progress handler of its own,
	// which was about a third of an append's time through the proxy; a SQLite write takes
	// well under a millisecond unless another process holds the write lock (the busy timeout
	// bounds that wait). PostgreSQL writes stay cancellable: a network round trip can hang.
	Detach bool
	// HoldWriter: the writer's one connection is held from Open to Close, and every write
	// runs on it, one at a time, in a transaction begun with Begin and ended with COMMIT or
	// ROLLBACK, each prepared once on it. Through database/sql each transaction parses its
	// BEGIN and COMMIT again (SQLite: about a sixth of an append of two messages). The Writer
	// must allow exactly one open connection.
	HoldWriter bool
	// Begin is the statement that begins a write transaction on the held writer ("BEGIN
	// IMMEDIATE" in SQLite: the write lock is taken at once, so that two processes never
	// both read and then fail to write). Empty: BEGIN.
	Begin string
}

// rebind rewrites the ? placeholders of q for the dialect. The store's statements have no ?
// anywhere else.
func (d *Dialect) rebind(q string) string {
	if !d.Numbered {
		return q
	}
	var b strings.Builder
	n := 0
	for {
		i := strings.IndexByte(q, '?')
		if i < 0 {
			b.WriteString(q)
			return b.String()
		}
		n++
		b.WriteString(q[:i])
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
		q = q[i+1:]
	}
}

// greatest writes the dialect's larger-of-two function around a and b.
func (d *Dialect) greatest(a, b string) string {
	return d.Greatest + "(" + a + ", " + b + ")"
}
