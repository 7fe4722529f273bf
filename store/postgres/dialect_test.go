package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ctxmgr/ctxmgr/store/postgres"
)

// TestDialectConflict checks which PostgreSQL errors the dialect reports as conflicts: a
// duplicate key is one, a missing parent row (foreign key) is not.
func TestDialectConflict(t *testing.T) {
	ctx := context.Background()
	s := open(t, postgres.Options{})
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	d := postgres.Dialect(s.Schema())
	sessions := pgx.Identifier{s.Schema(), "sessions"}.Sanitize()
	if _, err := conn.Exec(ctx, `INSERT INTO `+sessions+` (id, created, updated) VALUES ('a', now(), now())`); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO `+sessions+` (id, created, updated) VALUES ('a', now(), now())`)
	if err == nil || !d.IsConflict(err) {
		t.Errorf("duplicate key: %v, IsConflict false", err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{s.Schema(), "messages"}.Sanitize()+` (session, pos, hash, body) VALUES ('none', 0, '\x00', '{}')`)
	if err == nil || d.IsConflict(err) {
		t.Errorf("foreign key violation: %v, IsConflict true", err)
	}
	if d.IsConflict(errors.New("other")) {
		t.Error("a plain error is a conflict")
	}
}
