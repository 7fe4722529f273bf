package ctxmgr

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/provider"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// A session restored from the store after a "restart" (a new Manager over the same files)
// returns exactly the request the original would have returned, at every step.
func TestRestoreGivesSameRequest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() store.Store {
		st, err := files.Open(dir, files.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	mk := func(st store.Store) *Manager {
		cfg, _ := Preset(PresetDefault, 12000, 1500)
		cfg.Store, cfg.Logger = st, discardLogger()
		cfg.Counter = tokens.NewRatio(tokens.RatioOptions{PerToken: 3})
		cfg.ToolResultCap, cfg.MaskMinSaving = 3000, 500
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	system := []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}
	hist := genHistory(rand.New(rand.NewPCG(11, 3)), 14)
	st1 := open()
	m1 := mk(st1)
	s1, err := m1.NewSession("restore", system, nil)
	if err != nil {
		t.Fatal(err)
	}
	restarts, events := 0, 0
	for i, msg := range hist {
		if msg.Role == chat.RoleAssistant {
			p1, err := s1.Prepare(ctx)
			if err != nil {
				t.Fatal(err)
			}
			events += len(p1.Report.Steps)
			if i%5 == 0 {
				// Restart: a new store handle and manager over the same directory.
				st2 := open()
				m2 := mk(st2)
				s2, err := m2.LoadSession(ctx, "restore", system, nil)
				if err != nil {
					t.Fatal(err)
				}
				p2, err := s2.Prepare(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(p1.Request.Messages, p2.Request.Messages) {
					t.Fatalf("message %d: restored session prepares a different request (%d vs %d messages)", i, len(p1.Request.Messages), len(p2.Request.Messages))
				}
				if p1.Report.InputAfter != p2.Report.InputAfter {
					t.Fatalf("token counts differ after restore: %d vs %d", p1.Report.InputAfter, p2.Report.InputAfter)
				}
				// Continue with the restored one.
				m1.Close()
				st1.Close()
				m1, s1, st1 = m2, s2, st2
				restarts++
			}
		}
		if err := s1.Append(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	if restarts < 3 || events == 0 {
		t.Fatalf("restarts %d, events %d: the test did not exercise restore with compaction", restarts, events)
	}
	st1.Close()
}

// The smaller window Recover settles on survives a restart.
func TestRestoreKeepsRecoveredWindow(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	mk := func() *Manager {
		cfg := Config{Store: st, Logger: discardLogger(), Summarizer: &fakeSummarizer{}}
		cfg.Budget.MaxOutput = 1000
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m1 := mk()
	s1, _ := m1.NewSession("w", nil, nil)
	for i := 0; i < 40; i++ {
		appendAll(t, s1, chat.TextMessage(chat.RoleUser, "question "+string(rune('a'+i%26))), chat.TextMessage(chat.RoleAssistant, "answer"))
	}
	if _, err := s1.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	overflow := &provider.StatusError{Status: 400, Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 9000 tokens > 4096 maximum"}}`)}
	p1, err := s1.Recover(ctx, overflow)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Report.Window > 4096 {
		t.Fatalf("window after recovery: %d", p1.Report.Window)
	}
	m2 := mk()
	s2, err := m2.LoadSession(ctx, "w", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := s2.Stats().Window; w != p1.Report.Window {
		t.Fatalf("window after restart: %d, want %d", w, p1.Report.Window)
	}
}

// LoadSession takes a stored history in as Append took it: the same entries (views, counts,
// offloads at ingestion, requested reads kept whole, exempt results), the same indexes (tool
// results, open calls, the latest user message) and the same totals.
func TestLoadSessionRebuildsAppendState(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	mk := func() *Manager {
		cfg, err := Preset(PresetDefault, 60000, 4000)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store, cfg.Logger = st, discardLogger()
		cfg.ToolResultCap, cfg.RequestedReadCap = 3000, 30000
		cfg.ExemptTools = []string{"keep"}
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	big := func(tag string) string {
		var b strings.Builder
		for i := 0; b.Len() < 9000; i++ {
			fmt.Fprintf(&b, "%s line %d: value_%d\n", tag, i, i*7)
		}
		return b.String()
	}
	hist := genHistory(rand.New(rand.NewPCG(5, 8)), 6)
	// A requested read and an exempt tool's result, both above ToolResultCap, and a call
	// still waiting for its result at the end.
	hist = append(hist, chat.TextMessage(chat.RoleUser, "read it"),
		chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{
			{ID: "r1", Name: "Read", Arguments: `{"file_path":"src/a.go"}`},
			{ID: "k1", Name: "keep", Arguments: `{}`}}},
		chat.ToolResult("r1", "Read", big("a.go"), false),
		chat.ToolResult("k1", "keep", big("keep"), false),
		chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "b9", Name: "bash", Arguments: `{"cmd":"ls"}`}}})
	m1 := mk()
	defer m1.Close()
	s1, err := m1.NewSession("state", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Whole iterations at once: a result's call is then found among the messages appended
	// with it, where LoadSession finds it among the open calls.
	for i := 0; i < len(hist); {
		j := i + 1
		for j < len(hist) && hist[j].Role == chat.RoleTool {
			j++
		}
		if err := s1.Append(ctx, hist[i:j]...); err != nil {
			t.Fatal(err)
		}
		i = j
	}
	m2 := mk()
	defer m2.Close()
	s2, err := m2.LoadSession(ctx, "state", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[viewKind]int{}
	requested, exempt := false, false
	for i := range s1.entries {
		e := &s1.entries[i]
		kinds[e.kind]++
		requested = requested || e.orig.Name == "Read" && e.kind == viewOriginal && e.size > 3000
		exempt = exempt || e.exempt && e.size > 3000
	}
	if kinds[viewOffloaded] == 0 || !requested || !exempt || len(s1.open) == 0 {
		t.Fatalf("offloaded %d, requested read kept %v, exempt %v, open %d: the history does not exercise ingestion", kinds[viewOffloaded], requested, exempt, len(s1.open))
	}
	for _, f := range []struct {
		name string
		a, b any
	}{
		{"entries", s1.entries, s2.entries}, {"results", s1.results, s2.results}, {"unsettled", s1.unsettled, s2.unsettled},
		{"open", s1.open, s2.open}, {"lastUser", s1.lastUser, s2.lastUser}, {"assistants", s1.assistants, s2.assistants},
		{"ownTokens", s1.ownTokens, s2.ownTokens}, {"histTokens", s1.histTokens, s2.histTokens},
		{"start", s1.start, s2.start}, {"pinned", s1.pinned, s2.pinned}, {"stored", s1.stored, s2.stored},
	} {
		if !reflect.DeepEqual(f.a, f.b) {
			t.Errorf("%s differs after LoadSession: appended %v, loaded %v", f.name, f.a, f.b)
		}
	}
}
