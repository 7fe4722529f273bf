package sqlite_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/ctxmgr/ctxmgr/store/sqlite"
)

// TestDialectConflict checks which SQLite errors the dialect reports as conflicts: a
// duplicate key is one, a missing parent row (foreign key) is not.
func TestDialectConflict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	open(t, path, sqlite.Options{}).Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_foreign_keys=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := sqlite.Dialect()
	if _, err := db.Exec(`INSERT INTO sessions (id, created, updated) VALUES ('a', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`INSERT INTO sessions (id, created, updated) VALUES ('a', 0, 0)`)
	if err == nil || !d.IsConflict(err) {
		t.Errorf("duplicate key: %v, IsConflict false", err)
	}
	_, err = db.Exec(`INSERT INTO messages (session, pos, hash, body) VALUES ('none', 0, x'00', '{}')`)
	if err == nil || d.IsConflict(err) {
		t.Errorf("foreign key violation: %v, IsConflict true", err)
	}
	if d.IsConflict(errors.New("other")) {
		t.Error("a plain error is a conflict")
	}
}
