package postgres

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ctxmgr/ctxmgr/store/sqlstore"
)

// Dialect is PostgreSQL's sqlstore.Dialect for the tables of schema (empty: the connection's
// search_path): $n placeholders, TIMESTAMPTZ times, BYTEA bodies, an Append's and an
// Archive's rows inserted by one statement (unnest of arrays), unique violations and
// serialization failures as conflicts, row locks for Prune, and migrations under an advisory
// lock per schema.
func Dialect(schema string) sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:     "postgres",
		Numbered: true,
		Greatest: "GREATEST",
		Time:     func(t time.Time) any { return t },
		Body: func(b []byte) any {
			if b == nil {
				return []byte{}
			}
			return b
		},
		IsConflict: isConflict,
		MigrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY,
			applied TIMESTAMPTZ NOT NULL)`,
		LockMigrations: func(ctx context.Context, tx *sql.Tx) error {
			// The lock is per schema; CREATE SCHEMA IF NOT EXISTS itself races without it.
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('ctxmgr.migrate:' || $1))`, schema); err != nil {
				return err
			}
			if schema != "" {
				if _, err := tx.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
					return err
				}
			}
			return nil
		},
		AppendBatch: `INSERT INTO messages (session, pos, hash, body, at)
			SELECT ?, ?::bigint + t.o - 1, t.h, t.b, ?::timestamptz FROM unnest(?::bytea[], ?::bytea[]) WITH ORDINALITY AS t (h, b, o)`,
		ArchiveBatch: `INSERT INTO archive (session, pos, body, archived_at)
			SELECT ?, ?::bigint + t.o - 1, t.b, ? FROM unnest(?::bytea[]) WITH ORDINALITY AS t (b, o)
			ON CONFLICT (session, pos) DO NOTHING`,
		LockRows: ` FOR UPDATE`,
	}
}

// isConflict reports what a concurrent writer causes: a unique violation (a race the row lock
// did not cover), a serialization failure or a deadlock (the transaction was rolled back).
func isConflict(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "23505", "40001", "40P01":
		return true
	}
	return false
}
