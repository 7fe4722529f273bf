package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
)

// seedSessions writes two sessions into a SQLite database: "alpha" with 6 messages, 4 of them
// archived and summarized, and "beta" with one message, last updated 40 days ago.
func seedSessions(t *testing.T, path string) []chat.Message {
	t.Helper()
	ctx := context.Background()
	old := time.Now().Add(-40 * 24 * time.Hour)
	clock := func() time.Time { return old }
	s, err := sqlite.Open(path, sqlite.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "beta", 0, []chat.Message{chat.TextMessage(chat.RoleUser, "old")}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msgs := []chat.Message{
		chat.TextMessage(chat.RoleUser, "héllo 🌍"),
		{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: "running"}}, ToolCalls: []chat.ToolCall{{ID: "c1", Name: "bash", Arguments: `{"cmd":"ls"}`}}},
		chat.ToolResult("c1", "bash", "a\nb\n", false),
		chat.TextMessage(chat.RoleAssistant, "done"),
		chat.TextMessage(chat.RoleUser, "next"),
		chat.TextMessage(chat.RoleAssistant, "ok"),
	}
	if err := s.Append(ctx, "alpha", 0, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Archive(ctx, "alpha", 0, msgs[:4]); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSummary(ctx, "alpha", store.Summary{Version: 1, Text: "summary", To: 4}); err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestSessionsCommands(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ctxmgr.db")
	msgs := seedSessions(t, path)
	st := "--store=sqlite:" + path

	r := runCmd(t, "", "sessions", "list", st)
	if r.code != 0 || !strings.Contains(r.stdout, "ID") || !strings.Contains(r.stdout, "alpha") || !strings.Contains(r.stdout, "beta") {
		t.Fatalf("list: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "alpha") || !strings.Contains(lines[1], " 6 ") || !strings.Contains(lines[1], "v1") {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	r = runCmd(t, "", "sessions", "list", "--json", st)
	var infos []store.SessionInfo
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &infos) != nil || len(infos) != 2 || infos[0].Messages != 6 || infos[0].Summary != 1 {
		t.Fatalf("list --json: %+v", r)
	}

	r = runCmd(t, "", "sessions", "show", "alpha", st)
	var stats struct {
		Session        string `json:"session"`
		Total          int    `json:"total"`
		Evicted        int    `json:"evicted"`
		SummaryVersion int    `json:"summary_version"`
		Window         int    `json:"window"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &stats) != nil {
		t.Fatalf("show: %+v", r)
	}
	if stats.Session != "alpha" || stats.Total != 6 || stats.Evicted != 4 || stats.SummaryVersion != 1 || stats.Window != 200000 {
		t.Fatalf("show: %+v\n%s", stats, r.stdout)
	}
	if r := runCmd(t, "", "sessions", "show", "nobody", st); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("show of an unknown session: %+v", r)
	}
	if r := runCmd(t, "", "sessions", "show", st); r.code != 2 {
		t.Fatalf("show without an id: %+v", r)
	}

	sq, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = sq.AppendEvent(context.Background(), "alpha", "summarize", []byte(`{"step":"summarize","before":900,"after":300}`))
	_ = sq.AppendEvent(context.Background(), "alpha", "note", []byte(`not json`))
	sq.Close()
	r = runCmd(t, "", "sessions", "events", "alpha", st)
	evLines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(evLines) != 2 {
		t.Fatalf("events: %+v", r)
	}
	var ev struct {
		ID   int64          `json:"id"`
		Kind string         `json:"kind"`
		Body map[string]any `json:"body"`
	}
	if err := json.Unmarshal([]byte(evLines[0]), &ev); err != nil || ev.Kind != "summarize" || ev.Body["after"] != 300.0 {
		t.Fatalf("events line 1: %s (%v)", evLines[0], err)
	}
	if !strings.Contains(evLines[1], `"body":"not json"`) {
		t.Fatalf("events line 2 (a body that is not JSON, as a string): %s", evLines[1])
	}
	if r := runCmd(t, "", "sessions", "events", "nobody", st); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("events of an unknown session: %+v", r)
	}
	// Every store keeps events now (a files store too): one without the session says so.
	if r := runCmd(t, "", "sessions", "events", "alpha", "--store", "files:"+dir); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("events on a files store without the session: %+v", r)
	}

	r = runCmd(t, "", "sessions", "export", "alpha", st)
	if r.code != 0 {
		t.Fatalf("export: %+v", r)
	}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 1<<20)
	n := 0
	for ; sc.Scan(); n++ {
		var line struct {
			Pos      int          `json:"pos"`
			Archived bool         `json:"archived"`
			Message  chat.Message `json:"message"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("export line %d: %v: %s", n, err, sc.Text())
		}
		want, _ := json.Marshal(&msgs[n])
		got, _ := json.Marshal(&line.Message)
		if line.Pos != n || line.Archived != (n < 4) || string(got) != string(want) {
			t.Fatalf("export line %d: %s", n, sc.Text())
		}
	}
	if n != len(msgs) {
		t.Fatalf("export: %d lines, want %d", n, len(msgs))
	}
	out := filepath.Join(dir, "alpha.jsonl")
	if r := runCmd(t, "", "sessions", "export", "alpha", "-o", out, st); r.code != 0 || r.stdout != "" {
		t.Fatalf("export -o: %+v", r)
	}
	if b, err := os.ReadFile(out); err != nil || strings.Count(string(b), "\n") != len(msgs) {
		t.Fatalf("export -o wrote %d lines, %v", strings.Count(string(b), "\n"), err)
	}

	r = runCmd(t, "", "sessions", "prune", "--older-than", "30d", "--dry-run", st)
	if r.code != 0 || !strings.Contains(r.stdout, "would delete beta: 1 messages") || strings.Contains(r.stdout, "alpha") {
		t.Fatalf("prune --dry-run: %+v", r)
	}
	r = runCmd(t, "", "sessions", "prune", "--older-than", "30d", st)
	if r.code != 0 || !strings.Contains(r.stdout, "deleted beta") || !strings.Contains(r.stdout, "1 session not updated since") {
		t.Fatalf("prune: %+v", r)
	}
	r = runCmd(t, "", "sessions", "list", st)
	if strings.Contains(r.stdout, "beta") || !strings.Contains(r.stdout, "alpha") {
		t.Fatalf("list after prune:\n%s", r.stdout)
	}
	for _, bad := range [][]string{
		{"sessions", "prune", st},
		{"sessions", "prune", "--older-than", "-3d", st},
		{"sessions", "prune", "--older-than", "soon", st},
		{"sessions", "list", "--store", "mysql://x"},
	} {
		if r := runCmd(t, "", bad...); r.code != 2 {
			t.Fatalf("%v: %+v, want exit 2", bad, r)
		}
	}
	if r := runCmd(t, "", "sessions", "list", "--store", "sqlite:"+filepath.Join(dir, "missing.db")); r.code != 1 || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("list of a missing database: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); err == nil {
		t.Fatal("list created a missing database")
	}
}

func TestSessionsFilesStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// The session is created 40 days ago by the store's clock; its files are aged below.
	old := time.Now().Add(-40 * 24 * time.Hour)
	fs, err := files.Open(dir, files.Options{Now: func() time.Time { return old }})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []chat.Message{chat.TextMessage(chat.RoleUser, "a"), chat.TextMessage(chat.RoleAssistant, "b"), chat.TextMessage(chat.RoleUser, "c")}
	if err := fs.Append(ctx, "f", 0, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Archive(ctx, "f", 1, msgs[1:2]); err != nil {
		t.Fatal(err)
	}
	fs.Close()
	r := runCmd(t, "", "sessions", "export", "f", "--store", "files:"+dir)
	want := `{"pos":0,"archived":false,"message":{"role":"user","content":[{"type":"text","text":"a"}]}}
{"pos":1,"archived":true,"message":{"role":"assistant","content":[{"type":"text","text":"b"}]}}
{"pos":2,"archived":false,"message":{"role":"user","content":[{"type":"text","text":"c"}]}}
`
	if r.code != 0 || r.stdout != want {
		t.Fatalf("export from files: %+v", r)
	}
	// A files store's sessions age by the modification times of their files.
	if r := runCmd(t, "", "sessions", "prune", "--older-than", "1d", "--store", "files:"+dir); r.code != 0 || strings.Contains(r.stdout, "deleted f") {
		t.Fatalf("prune of a recent files session: %+v", r)
	}
	err = filepath.WalkDir(filepath.Join(dir, "sessions", "f"), func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := runCmd(t, "", "sessions", "prune", "--older-than", "30d", "--store", "files:"+dir); r.code != 0 || !strings.Contains(r.stdout, "deleted f") {
		t.Fatalf("prune of an old files session: %+v", r)
	}
	if r := runCmd(t, "", "sessions", "list", "--store", "files:"+dir); r.code != 0 || strings.Contains(r.stdout, " f ") || strings.Contains(r.stdout, "\nf ") {
		t.Fatalf("list after prune: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "sessions", "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pruned session directory: %v", err)
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "1d12h": 36 * time.Hour, "2w": 14 * 24 * time.Hour,
		"90m": 90 * time.Minute, "1.5d": 36 * time.Hour,
	} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "30", "-1d", "0d", "3x", "1d-2h"} {
		if got, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) = %v, want an error", in, got)
		}
	}
}

func TestRunCleanup(t *testing.T) {
	st := store.NewMemory()
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := st.Offload(ctx, "s", "old", "x\n", time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Offload(ctx, "s", "new", "y\n", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { runCleanup(ctx, st, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil))); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, _, err := st.ReadOffload(context.Background(), "s", "old", 1, 0)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired offload not cleaned up: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, err := st.ReadOffload(context.Background(), "s", "new", 1, 0); err != nil {
		t.Fatalf("unexpired offload removed: %v", err)
	}
	cancel()
	<-done
}
