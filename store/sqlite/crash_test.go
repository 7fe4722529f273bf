//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// TestHelperProcess is the crash writer of TestCrash (storetest.RunCrash).
func TestHelperProcess(t *testing.T) {
	storetest.CrashWriter(func(path string) (store.Store, error) { return sqlite.Open(path, sqlite.Options{}) })
}

// TestCrash runs the suite's kill test on SQLite.
func TestCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	storetest.RunCrash(t, storetest.CrashOptions{
		Target: path,
		Reopen: func(t *testing.T) store.Store {
			s, err := sqlite.Open(path, sqlite.Options{})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		},
	})
}

// TestHelperProcessRelaxed is the crash writer of TestCrashRelaxed.
func TestHelperProcessRelaxed(t *testing.T) {
	storetest.CrashWriter(func(path string) (store.Store, error) {
		return sqlite.Open(path, sqlite.Options{Relaxed: true})
	})
}

// TestCrashRelaxed: synchronous=NORMAL (the proxy's mode) is as safe as FULL when the process
// is killed; only a power cut can take the last commits.
func TestCrashRelaxed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	storetest.RunCrash(t, storetest.CrashOptions{
		Target:     path,
		HelperTest: "TestHelperProcessRelaxed",
		Reopen: func(t *testing.T) store.Store {
			s, err := sqlite.Open(path, sqlite.Options{Relaxed: true})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		},
	})
}

// TestHelperProcessWriteBehind is the writer of TestCrashWriteBehind: it appends through the
// journal (Options.WriteBehind) and prints each history length an Append returned with.
func TestHelperProcessWriteBehind(t *testing.T) {
	target := os.Getenv(storetest.CrashEnv)
	if target == "" {
		return
	}
	ctx := context.Background()
	s, err := sqlite.Open(target, sqlite.Options{Relaxed: true, WriteBehind: 50 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	infos, err := s.Sessions(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Sessions:", err)
		os.Exit(3)
	}
	n := 0
	if len(infos) == 1 {
		n = infos[0].Messages
	}
	for {
		batch := msgs(n, 1+n%3)
		if err := s.Append(ctx, "crash", n, batch); err != nil {
			fmt.Fprintln(os.Stderr, "Append:", err)
			os.Exit(3)
		}
		n += len(batch)
		fmt.Println(n)
	}
}

// TestCrashWriteBehind kills a process appending through the journal at random moments: every
// Append that returned must be in the history after the next Open, in order and intact,
// followed by at most the one in flight. In every other round the history is read by a store
// opened before the kill, while the writer held the journal: it applies what the dead
// writer's journal holds when it finds the journal's lock free.
func TestCrashWriteBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	path := filepath.Join(t.TempDir(), "ctxmgr.db")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	fromJournal, watched, prev := 0, 0, 0
	for round := range 6 {
		cmd, out, stderr := storetest.StartHelper(t, "TestHelperProcessWriteBehind", storetest.CrashEnv+"="+path)
		acked, started := make(chan int), make(chan struct{})
		go func() {
			last := -1
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if n, err := strconv.Atoi(sc.Text()); err == nil {
					if last < 0 {
						close(started)
					}
					last = n
				}
			}
			if last < 0 {
				close(started)
			}
			acked <- last
		}()
		select { // the kill must find the writer appending
		case <-started:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			_ = cmd.Wait() // stderr is complete
			t.Fatalf("round %d: the writer appended nothing in a minute; stderr: %s", round, stderr.String())
		}
		var s *sqlite.Store
		if round%2 == 1 {
			s = open(t, path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
		}
		time.Sleep(time.Duration(20+rng.IntN(250)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		last := <-acked // the pipe's end: what the writer printed before it died
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: writer ended by itself; stderr: %s", round, stderr.String())
		}
		if last < 0 {
			t.Fatalf("round %d: no Append returned before the kill; stderr: %s", round, stderr.String())
		}
		if journalSize(t, path) > 0 {
			fromJournal++
			if s != nil {
				watched++
			}
		}
		if s == nil {
			s = open(t, path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
		}
		// The messages before prev were checked by the rounds before.
		got, err := s.Messages(context.Background(), "crash", prev, -1)
		if err != nil {
			t.Fatal(err)
		}
		n := prev + len(got)
		if n < last || n > last+3 {
			t.Fatalf("round %d: %d messages after the kill; the last Append that returned left %d", round, n, last)
		}
		storetest.EqualMessages(t, fmt.Sprintf("round %d", round), got, storetest.RoundTrip(t, msgs(prev, len(got))))
		s.Close()
		prev = n
		t.Logf("round %d: %d messages, %d acknowledged", round, n, last)
	}
	if fromJournal == 0 || watched == 0 {
		t.Fatalf("kills that left records in the journal: %d, read by a store opened before: %d; want both > 0", fromJournal, watched)
	}
}
