//go:build linux || darwin

package ctxmgr

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/turns"
)

// crashHistory is the deterministic history the child appends: message i is always the same.
func crashHistory() []chat.Message { return genHistory(rand.New(rand.NewPCG(5, 5)), 60) }

// crashManager opens the crash test's store in dir: files, or with kind "sqlite-write-behind"
// SQLite as ctxmgr serve opens it, appends journaled (sqlite.Options.WriteBehind).
func crashManager(t testing.TB, dir, kind string) (*Manager, store.Store) {
	var st store.Store
	var err error
	if kind == "sqlite-write-behind" {
		st, err = sqlite.Open(filepath.Join(dir, "ctxmgr.db"), sqlite.Options{Relaxed: true, WriteBehind: 20 * time.Millisecond, Logger: discardLogger()})
	} else {
		st, err = files.Open(dir, files.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := Preset(PresetDefault, 6000, 800)
	cfg.Store, cfg.Logger = st, discardLogger()
	cfg.Counter = tokens.NewRatio(tokens.RatioOptions{PerToken: 3})
	cfg.ToolResultCap, cfg.MaskMinSaving = 2000, 300
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, st
}

// TestCrashHelperProcess is the child of TestCrashDuringCompaction: it resumes the session
// from the store and appends and prepares (compacting often, in a small window) until killed.
// Not started so (CTXMGR_CRASH_DIR unset), it returns at once, as the stores' crash helpers do.
func TestCrashHelperProcess(t *testing.T) {
	dir := os.Getenv("CTXMGR_CRASH_DIR")
	if dir == "" {
		return
	}
	ctx := context.Background()
	m, _ := crashManager(t, dir, os.Getenv("CTXMGR_CRASH_STORE"))
	sys := []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}
	s, err := m.LoadSession(ctx, "crash", sys, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	hist := crashHistory()
	for i := s.Len(); i < len(hist); i++ {
		if hist[i].Role == chat.RoleAssistant {
			if _, err := s.Prepare(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "prepare:", err)
				os.Exit(2)
			}
		}
		if err := s.Append(ctx, hist[i]); err != nil {
			fmt.Fprintln(os.Stderr, "append:", err)
			os.Exit(2)
		}
	}
	os.Exit(0)
}

// A process killed with SIGKILL at random points while it appends and compacts leaves a file
// store from which every message is recoverable: the stored history is an exact prefix of what
// was appended, every archived position holds the message that was there, summary versions are
// contiguous, and a restarted process resumes and prepares valid requests.
func TestCrashDuringCompaction(t *testing.T) { crashDuringCompaction(t, "files") }

// TestCrashDuringCompactionWriteBehind is TestCrashDuringCompaction on SQLite with appends
// journaled (as ctxmgr serve runs): the journal a kill leaves is applied by the next Open,
// in order with the archive, summaries and state written meanwhile.
func TestCrashDuringCompactionWriteBehind(t *testing.T) {
	crashDuringCompaction(t, "sqlite-write-behind")
}

func crashDuringCompaction(t *testing.T, kind string) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	hist := crashHistory()
	r := rand.New(rand.NewPCG(1, 2))
	kills := 0
	for round := 0; round < 8; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CTXMGR_CRASH_DIR="+dir, "CTXMGR_CRASH_STORE="+kind)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: child failed: %v\n%s", round, err, stderr.String())
			}
		case <-time.After(time.Duration(20+r.IntN(300)) * time.Millisecond):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			kills++
		}
		checkCrashStore(t, dir, kind, hist)
	}
	// A last run to the end: the session resumes and completes.
	m, st := crashManager(t, dir, kind)
	defer st.Close()
	s, err := m.LoadSession(context.Background(), "crash", []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := s.Len(); i < len(hist); i++ {
		if err := s.Append(context.Background(), hist[i]); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != len(hist) {
		t.Fatalf("history %d of %d", s.Len(), len(hist))
	}
	t.Logf("%d kills; %d messages; summary v%d", kills, len(hist), s.Stats().SummaryVersion)
}

func checkCrashStore(t *testing.T, dir, kind string, hist []chat.Message) {
	t.Helper()
	ctx := context.Background()
	m, st := crashManager(t, dir, kind)
	defer st.Close()
	got, err := st.Messages(ctx, "crash", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > len(hist) || !reflect.DeepEqual(normalize(got), normalize(hist[:len(got)])) {
		t.Fatalf("stored history (%d) is not a prefix of what was appended", len(got))
	}
	for i := range got {
		arch, err := st.ReadArchive(ctx, "crash", i, i+1)
		if err != nil {
			t.Fatal(err)
		}
		if len(arch) == 1 && (arch[0].Pos != i || !reflect.DeepEqual(normalize(archivedMessages(arch)), normalize(hist[i:i+1]))) {
			t.Fatalf("archive position %d holds another message", i)
		}
	}
	sums, err := st.Summaries(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sums {
		if s.Version != i+1 || s.To > len(got) {
			t.Fatalf("summary %d: version %d covering to %d of %d", i, s.Version, s.To, len(got))
		}
	}
	s, err := m.LoadSession(ctx, "crash", []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
	if err != nil {
		t.Fatalf("restart after a kill: %v", err)
	}
	if s.Len() != len(got) {
		t.Fatalf("restored %d of %d messages", s.Len(), len(got))
	}
	if s.pending() == nil {
		p, err := s.Prepare(ctx)
		if err != nil {
			t.Fatalf("prepare after restart: %v", err)
		}
		if err := turns.Validate(p.Request.Messages, turns.ValidateOptions{}); err != nil {
			t.Fatalf("invalid request after restart: %v", err)
		}
	}
}
