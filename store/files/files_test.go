package files_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

func openFiles(t *testing.T, dir string, opts files.Options) *files.Store {
	t.Helper()
	s, err := files.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func msgs(prefix string, n int) []chat.Message {
	out := make([]chat.Message, n)
	for i := range out {
		out[i] = chat.TextMessage(chat.RoleUser, fmt.Sprintf("%s %d", prefix, i))
	}
	return out
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// jsonLines reads a JSONL file, failing unless every line is complete valid JSON.
func jsonLines(t *testing.T, path string) []map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	var out []map[string]json.RawMessage
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(b) == 0 {
			break
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s line %d is not JSON: %v: %q", path, i+1, err, line)
		}
		out = append(out, m)
	}
	return out
}

func TestFilesLayout(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	clock := &fakeClock{now: time.Date(2024, 2, 29, 23, 59, 59, 0, time.FixedZone("X", -3600))} // 2024-03-01 in UTC
	s := openFiles(t, dir, files.Options{Now: clock.Now})
	sdir := filepath.Join(dir, "sessions", "sess-1")
	history := msgs("m", 6)
	if err := s.Append(ctx, "sess-1", 0, history); err != nil {
		t.Fatal(err)
	}
	if lines := jsonLines(t, filepath.Join(sdir, "messages.jsonl")); len(lines) != 6 || string(lines[2]["role"]) != `"user"` {
		t.Fatalf("messages.jsonl: %v", lines)
	}
	if err := s.PutSummary(ctx, "sess-1", store.Summary{Version: 1, Text: "s1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSummary(ctx, "sess-1", store.Summary{Version: 2, Text: "s2"}); err != nil {
		t.Fatal(err)
	}
	if lines := jsonLines(t, filepath.Join(sdir, "summaries.jsonl")); len(lines) != 2 || string(lines[1]["version"]) != "2" {
		t.Fatalf("summaries.jsonl: %v", lines)
	}
	sums, err := s.Summaries(ctx, "sess-1")
	if err != nil || len(sums) != 2 || !sums[0].Created.Equal(clock.Now()) {
		t.Fatalf("Summaries: %+v, %v; want Created from the clock", sums, err)
	}

	loc, err := s.Archive(ctx, "sess-1", 0, history[:3])
	day1 := filepath.Join(sdir, "dialog", "2024-03-01.jsonl")
	if err != nil || string(loc) != day1 {
		t.Fatalf("Archive: %q, %v; want %s", loc, err, day1)
	}
	clock.Set(clock.Now().Add(24 * time.Hour))
	loc, err = s.Archive(ctx, "sess-1", 2, history[2:5]) // position 2 is already in day 1
	day2 := filepath.Join(sdir, "dialog", "2024-03-02.jsonl")
	if err != nil || string(loc) != day1 {
		t.Fatalf("Archive overlapping: %q, %v; want %s (where position 2 is)", loc, err, day1)
	}
	loc, err = s.Archive(ctx, "sess-1", 5, history[5:])
	if err != nil || string(loc) != day2 {
		t.Fatalf("Archive: %q, %v; want %s", loc, err, day2)
	}
	lines := jsonLines(t, day1)
	if len(lines) != 3 {
		t.Fatalf("%s: %d lines, want 3", day1, len(lines))
	}
	for i, l := range lines {
		var tm time.Time
		if string(l["index"]) != strconv.Itoa(i) || string(l["session"]) != `"sess-1"` || json.Unmarshal(l["time"], &tm) != nil || !tm.Equal(time.Date(2024, 3, 1, 0, 59, 59, 0, time.UTC)) {
			t.Fatalf("%s line %d: %v", day1, i, l)
		}
		var m chat.Message
		if err := json.Unmarshal(l["message"], &m); err != nil || m.Text() != fmt.Sprintf("m %d", i) {
			t.Fatalf("%s line %d message: %v %v", day1, i, m, err)
		}
	}
	if lines := jsonLines(t, day2); len(lines) != 3 || string(lines[0]["index"]) != "3" || string(lines[2]["index"]) != "5" {
		t.Fatalf("%s: %v", day2, lines)
	}
	arch, err := s.ReadArchive(ctx, "sess-1", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	storetest.EqualMessages(t, "ReadArchive across days", storetest.ArchivedMessages(arch), storetest.RoundTrip(t, history))

	exp := clock.Now().Add(time.Hour)
	o, err := s.Offload(ctx, "sess-1", "call_1", "a\nb\n", exp)
	txt := filepath.Join(sdir, "tool_result", "call_1.txt")
	if err != nil || string(o.Location) != txt {
		t.Fatalf("Offload: %+v, %v; want location %s", o, err, txt)
	}
	if b, err := os.ReadFile(txt); err != nil || string(b) != "a\nb\n" {
		t.Fatalf("%s: %q, %v", txt, b, err)
	}
	var meta struct {
		Key     string    `json:"key"`
		Lines   int       `json:"lines"`
		Expires time.Time `json:"expires"`
	}
	if b, err := os.ReadFile(filepath.Join(sdir, "tool_result", "call_1.meta.json")); err != nil || json.Unmarshal(b, &meta) != nil || meta.Key != "call_1" || meta.Lines != 2 || !meta.Expires.Equal(exp) {
		t.Fatalf("meta: %+v, %v", meta, err)
	}
	// ReadOffload judges expiry by the store's clock.
	clock.Set(exp.Add(time.Second))
	if _, _, err := s.ReadOffload(ctx, "sess-1", "call_1", 1, 0); !errors.Is(err, store.ErrExpired) {
		t.Fatalf("ReadOffload after the clock passed expiry: %v, want ErrExpired", err)
	}
	if n, err := s.Cleanup(ctx, clock.Now()); err != nil || n != 1 {
		t.Fatalf("Cleanup: %d, %v", n, err)
	}
	for _, p := range []string{txt, filepath.Join(sdir, "tool_result", "call_1.meta.json")} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s still exists after Cleanup: %v", p, err)
		}
	}
	infos, err := s.Sessions(ctx)
	if err != nil || len(infos) != 1 || infos[0].ID != "sess-1" || infos[0].Messages != 6 || infos[0].Summary != 2 ||
		!infos[0].Created.Equal(time.Date(2024, 3, 1, 0, 59, 59, 0, time.UTC)) {
		t.Fatalf("Sessions: %+v, %v", infos, err)
	}
}

func TestFilesPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no POSIX permissions")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a", "data")
	s := openFiles(t, dir, files.Options{})
	if err := s.Append(ctx, "p", 0, msgs("p", 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSummary(ctx, "p", store.Summary{Version: 1, Text: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Archive(ctx, "p", 0, msgs("p", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Offload(ctx, "p", "k1", "text", time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Offload(ctx, "p", "k2", "text", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cleanup(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Messages(ctx, "p", 0, -1); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(filepath.Dir(dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 12 {
		t.Fatalf("walked only %d entries", n)
	}
}

func TestFilesPathTraversal(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	dir := filepath.Join(base, "inner", "data")
	s := openFiles(t, dir, files.Options{})
	bad := append([]string{"../../escape", "../escape", "..", "sessions/../../x", "a/../../../b", "/tmp/abs", "x/..", "\x00", "a\x00/../.."}, storetest.BadIDs...)
	m := msgs("x", 1)
	for _, id := range bad {
		s.Append(ctx, id, 0, m)
		s.Messages(ctx, id, 0, -1)
		s.PutSummary(ctx, id, store.Summary{Version: 1})
		s.Summaries(ctx, id)
		s.Archive(ctx, id, 0, m)
		s.ReadArchive(ctx, id, 0, -1)
		for _, pair := range [][2]string{{id, "key"}, {"ok", id}} {
			sess, key := pair[0], pair[1]
			if _, err := s.Offload(ctx, sess, key, "escaped", time.Time{}); !errors.Is(err, store.ErrInvalidID) {
				t.Fatalf("Offload(%q, %q): %v, want ErrInvalidID", sess, key, err)
			}
			s.ReadOffload(ctx, sess, key, 1, 0)
		}
	}
	s.Cleanup(ctx, time.Now())
	// Nothing exists outside dir, and inside it only the empty sessions directory.
	var found []string
	filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		found = append(found, p)
		return err
	})
	want := []string{base, filepath.Join(base, "inner"), dir, filepath.Join(dir, "sessions")}
	if strings.Join(found, "\n") != strings.Join(want, "\n") {
		t.Fatalf("entries after traversal attempts:\n%s\nwant:\n%s", strings.Join(found, "\n"), strings.Join(want, "\n"))
	}
}

// appendRaw appends bytes to a file as a crashed writer would have left them.
func appendRaw(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestFilesTornLine(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	sdir := filepath.Join(dir, "sessions", "t")
	history := msgs("t", 8)
	want := storetest.RoundTrip(t, history)
	s := openFiles(t, dir, files.Options{})
	if err := s.Append(ctx, "t", 0, history[:3]); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSummary(ctx, "t", store.Summary{Version: 1, Text: "one"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Archive(ctx, "t", 0, history[:2]); err != nil {
		t.Fatal(err)
	}
	dialog, _ := filepath.Glob(filepath.Join(sdir, "dialog", "*.jsonl"))
	if len(dialog) != 1 {
		t.Fatalf("dialog files: %v", dialog)
	}

	// A writer in another process dies mid-line while this store is open.
	appendRaw(t, filepath.Join(sdir, "messages.jsonl"), `{"role":"user","content":[{"type":"te`)
	appendRaw(t, filepath.Join(sdir, "summaries.jsonl"), `{"version":2,"te`)
	appendRaw(t, dialog[0], `{"index":2,"time":"2024-`)
	storetest.EqualMessages(t, "Messages with a torn line (open store)", mustMsgs(t, s, "t"), want[:3])
	if err := s.Append(ctx, "t", 3, history[3:5]); err != nil {
		t.Fatalf("Append after a torn line: %v", err)
	}
	storetest.EqualMessages(t, "after repair", mustMsgs(t, s, "t"), want[:5])
	if err := s.PutSummary(ctx, "t", store.Summary{Version: 2, Text: "two"}); err != nil {
		t.Fatalf("PutSummary after a torn line: %v", err)
	}
	if _, err := s.Archive(ctx, "t", 2, history[2:4]); err != nil {
		t.Fatalf("Archive after a torn line: %v", err)
	}
	s.Close()

	// And again, found on open: a torn line after a close.
	appendRaw(t, filepath.Join(sdir, "messages.jsonl"), `{"role":"assistant","content":[{"type":"text","text":"half`)
	appendRaw(t, filepath.Join(sdir, "summaries.jsonl"), `{"version":3`)
	appendRaw(t, dialog[0], `{"ind`)
	s = openFiles(t, dir, files.Options{})
	storetest.EqualMessages(t, "Messages with a torn line (reopened)", mustMsgs(t, s, "t"), want[:5])
	if infos, err := s.Sessions(ctx); err != nil || len(infos) != 1 || infos[0].Messages != 5 || infos[0].Summary != 2 {
		t.Fatalf("Sessions: %+v, %v", infos, err)
	}
	if err := s.Append(ctx, "t", 5, history[5:]); err != nil {
		t.Fatalf("Append after reopen: %v", err)
	}
	if err := s.PutSummary(ctx, "t", store.Summary{Version: 3, Text: "three"}); err != nil {
		t.Fatalf("PutSummary after reopen: %v", err)
	}
	if _, err := s.Archive(ctx, "t", 4, history[4:6]); err != nil {
		t.Fatalf("Archive after reopen: %v", err)
	}
	storetest.EqualMessages(t, "final history", mustMsgs(t, s, "t"), want)
	arch, err := s.ReadArchive(ctx, "t", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	storetest.EqualMessages(t, "final archive", storetest.ArchivedMessages(arch), want[:6])
	sums, err := s.Summaries(ctx, "t")
	if err != nil || len(sums) != 3 || sums[2].Text != "three" {
		t.Fatalf("Summaries: %+v, %v", sums, err)
	}
	// Every file is valid JSONL again.
	if n := len(jsonLines(t, filepath.Join(sdir, "messages.jsonl"))); n != 8 {
		t.Fatalf("messages.jsonl has %d lines, want 8", n)
	}
	if n := len(jsonLines(t, filepath.Join(sdir, "summaries.jsonl"))); n != 3 {
		t.Fatalf("summaries.jsonl has %d lines, want 3", n)
	}
	if n := len(jsonLines(t, dialog[0])); n != 6 {
		t.Fatalf("%s has %d lines, want 6", dialog[0], n)
	}
}

func mustMsgs(t *testing.T, s store.Store, session string) []chat.Message {
	t.Helper()
	got, err := s.Messages(context.Background(), session, 0, -1)
	if err != nil {
		t.Fatalf("Messages: %v", err)
	}
	return got
}

// TestFilesPruneAcrossHandles: one Files value prunes a session another has cached; the
// other sees the session gone (not its stale cache), and a session recreated by the first
// with other content is read as it is now.
func TestFilesPruneAcrossHandles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := openFiles(t, dir, files.Options{})
	b := openFiles(t, dir, files.Options{})
	if err := a.Append(ctx, "x", 0, msgs("a", 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Archive(ctx, "x", 0, msgs("a", 2)); err != nil {
		t.Fatal(err)
	}
	if err := a.PutSummary(ctx, "x", store.Summary{Version: 1, Text: "s"}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Messages(ctx, "x", 0, -1); err != nil || len(got) != 3 {
		t.Fatalf("Messages: %d, %v", len(got), err)
	}
	if got, err := b.Prune(ctx, time.Now().Add(time.Hour), false); err != nil || len(got) != 1 {
		t.Fatalf("Prune: %+v, %v", got, err)
	}
	if got, err := a.Messages(ctx, "x", 0, -1); err != nil || len(got) != 0 {
		t.Fatalf("Messages through the other handle after Prune: %d, %v", len(got), err)
	}
	if err := a.Append(ctx, "x", 3, msgs("late", 1)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Append after the pruned history: %v, want ErrConflict", err)
	}
	// b recreates the session with two other messages; a must read those, not its cache.
	if err := b.Append(ctx, "x", 0, msgs("b", 2)); err != nil {
		t.Fatal(err)
	}
	got, err := a.Messages(ctx, "x", 0, -1)
	if err != nil || len(got) != 2 || got[0].Text() != msgs("b", 1)[0].Text() {
		t.Fatalf("Messages of the recreated session: %+v, %v", got, err)
	}
	if sums, err := a.Summaries(ctx, "x"); err != nil || len(sums) != 0 {
		t.Fatalf("Summaries of the recreated session: %+v, %v", sums, err)
	}
	if err := a.PutSummary(ctx, "x", store.Summary{Version: 1, Text: "new"}); err != nil {
		t.Fatalf("PutSummary v1 on the recreated session: %v", err)
	}
	if err := a.Append(ctx, "x", 2, msgs("a2", 1)); err != nil {
		t.Fatalf("Append through the other handle: %v", err)
	}
	if got, err := b.Messages(ctx, "x", 0, -1); err != nil || len(got) != 3 {
		t.Fatalf("b after a's append: %d, %v", len(got), err)
	}
	// Pruned and recreated with a longer history while a is not looking: a's cached
	// positions describe files that no longer exist.
	if got, err := b.Prune(ctx, time.Now().Add(time.Hour), false); err != nil || len(got) != 1 {
		t.Fatalf("Prune: %+v, %v", got, err)
	}
	if err := b.Append(ctx, "x", 0, msgs("c", 5)); err != nil {
		t.Fatal(err)
	}
	got, err = a.Messages(ctx, "x", 0, -1)
	if err != nil || len(got) != 5 || got[4].Text() != msgs("c", 5)[4].Text() {
		t.Fatalf("Messages of the session recreated behind a's back: %d, %v", len(got), err)
	}
	if sums, err := a.Summaries(ctx, "x"); err != nil || len(sums) != 0 {
		t.Fatalf("Summaries of the session recreated behind a's back: %+v, %v", sums, err)
	}
}

// TestFilesPruneLeftovers: what a crash between the rename and the delete leaves is hidden
// from Sessions and removed by the next Prune.
func TestFilesPruneLeftovers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openFiles(t, dir, files.Options{})
	left := filepath.Join(dir, "sessions", ".pruned-x-123")
	if err := os.MkdirAll(filepath.Join(left, "dialog"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "messages.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if infos, err := s.Sessions(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("Sessions lists a pruned directory: %+v, %v", infos, err)
	}
	if _, err := s.Prune(ctx, time.Time{}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("a dry run removed the leftover: %v", err)
	}
	if _, err := s.Prune(ctx, time.Time{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover not removed: %v", err)
	}
}
