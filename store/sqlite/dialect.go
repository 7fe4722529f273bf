package sqlite

import (
	"errors"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ctxmgr/ctxmgr/store/sqlstore"
)

// Dialect is SQLite's sqlstore.Dialect: ? placeholders, session, archive and event times as
// INTEGER Unix nanoseconds, message and event bodies as TEXT, the writer's connection held with
// its transaction statements and the Append statements prepared once on it, and writes that
// run to their end once begun. Migrations need no lock of their own: the writer's
// transactions are BEGIN IMMEDIATE.
func Dialect() sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:       "sqlite",
		Greatest:   "MAX",
		Time:       func(t time.Time) any { return t.UnixNano() },
		Body:       func(b []byte) any { return string(b) },
		IsConflict: isConflict,
		MigrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY NOT NULL,
		applied INTEGER NOT NULL)`,
		Prepare:    true,
		Detach:     true,
		HoldWriter: true,
		Begin:      "BEGIN IMMEDIATE",
	}
}

// isConflict reports a primary-key or unique violation: with BEGIN IMMEDIATE no concurrent
// writer can cause one, but a row that is already there is a conflict all the same.
func isConflict(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}
