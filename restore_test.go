package ctxmgr

import (
	"context"
	"math/rand/v2"
	"reflect"
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
