package store_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewMemory() })
}

func TestFilesConformance(t *testing.T) {
	storetest.RunReopen(t,
		func(t *testing.T) store.Store {
			s, err := files.Open(filepath.Join(t.TempDir(), "data"), files.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		func(t *testing.T, old store.Store) store.Store {
			s, err := files.Open(old.(*files.Store).Dir(), files.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
}

func TestSplitLines(t *testing.T) {
	for _, c := range []struct {
		text       string
		from, max  int
		want       string
		wantTotal  int
		wantCounts int
	}{
		{"", 1, 0, "", 0, 0},
		{"a", 1, 0, "a", 1, 1},
		{"a\n", 1, 0, "a\n", 1, 1},
		{"a\nb", 2, 0, "b", 2, 2},
		{"a\nb\n", 3, 0, "", 2, 2},
		{"a\n\nc\n", 2, 1, "\n", 3, 3},
		{"a\nb\nc", 0, 2, "a\nb\n", 3, 3},
		{"a\nb\nc", 2, 5, "b\nc", 3, 3},
	} {
		got, total := store.SplitLines(c.text, c.from, c.max)
		if got != c.want || total != c.wantTotal || store.CountLines(c.text) != c.wantCounts {
			t.Errorf("SplitLines(%q, %d, %d) = %q, %d; want %q, %d", c.text, c.from, c.max, got, total, c.want, c.wantTotal)
		}
	}
}

// FuzzCheckID: whatever CheckID accepts names exactly one path element inside the data
// directory, as a session directory and as a tool_result file.
func FuzzCheckID(f *testing.F) {
	for _, id := range storetest.BadIDs {
		f.Add(id)
	}
	for _, id := range []string{"ok", "a.b", "a..b", "C:", "x:y@z=+-_", "..a", "a/../..", "call_01HZX", "a\\..\\b", strings.Repeat("z", 200)} {
		f.Add(id)
	}
	dir := filepath.Join(os.TempDir(), "ctxmgr-fuzz", "data")
	f.Fuzz(func(t *testing.T, id string) {
		if store.CheckID(id) != nil {
			return
		}
		if id == "" || len(id) > store.MaxIDLen || strings.ContainsAny(id, "/\\\x00") || strings.HasPrefix(id, ".") {
			t.Fatalf("CheckID accepted %q", id)
		}
		sessions := filepath.Join(dir, "sessions")
		for _, c := range []struct{ parent, name string }{
			{sessions, id},
			{filepath.Join(sessions, "s", "tool_result"), id + ".txt"},
			{filepath.Join(sessions, "s", "tool_result"), id + ".meta.json"},
		} {
			p := filepath.Join(c.parent, c.name)
			if p != c.parent+string(filepath.Separator)+c.name || filepath.Dir(p) != c.parent || filepath.Base(p) != c.name {
				t.Fatalf("id %q: %s is not the single element %q under %s", id, p, c.name, c.parent)
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				t.Fatalf("id %q: %s leaves %s (rel %q, %v)", id, p, dir, rel, err)
			}
		}
	})
}
