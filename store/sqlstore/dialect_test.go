package sqlstore

import "testing"

func TestRebind(t *testing.T) {
	q := `INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT (a) DO UPDATE SET b = GREATEST(t.b, ?)`
	if got := (&Dialect{}).rebind(q); got != q {
		t.Errorf("? dialect: %q", got)
	}
	want := `INSERT INTO t (a, b) VALUES ($1, $2) ON CONFLICT (a) DO UPDATE SET b = GREATEST(t.b, $3)`
	if got := (&Dialect{Numbered: true}).rebind(q); got != want {
		t.Errorf("numbered: %q, want %q", got, want)
	}
	// Every statement of the store is rewritten, none keeps a ?.
	d := &Dialect{Numbered: true, Greatest: "GREATEST", AppendBatch: "SELECT ?", ArchiveBatch: "SELECT ?", LockRows: " FOR UPDATE"}
	q2 := newQueries(d)
	for _, s := range append([]string{q2.touch, q2.offload, q2.appendBatch, q2.archiveBatch, q2.lockOld, q2.old, q2.touchUpdated}, q2.deleteSession...) {
		for i := 0; i < len(s); i++ {
			if s[i] == '?' {
				t.Fatalf("statement keeps a ?: %s", s)
			}
		}
	}
	if q2.touchUpdated != `UPDATE sessions SET updated = GREATEST(updated, $1) WHERE id = $2` {
		t.Errorf("touchUpdated: %q", q2.touchUpdated)
	}
}
