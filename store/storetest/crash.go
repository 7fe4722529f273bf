//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package storetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// CrashEnv tells a test binary that it runs as the writer of RunCrash; its value is the
// backend's target (a directory, a file, a schema).
const CrashEnv = "CTXMGR_STORETEST_CRASH"

// StartHelper starts this test binary again, running only the test named helper, with env
// added to the environment: a writer process a test kills or races. It returns the process,
// its standard output and what it writes to standard error.
func StartHelper(t testing.TB, helper string, env ...string) (*exec.Cmd, io.ReadCloser, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out, stderr
}

// CrashMessage is the i-th message the crash writer appends: deterministic, of varied size (up
// to 96 KiB, so that a write spans many pages and a kill can land inside it).
func CrashMessage(i int) chat.Message {
	sizes := []int{16, 300, 5000, 96 << 10, 40}
	m := chat.TextMessage(chat.RoleUser, fmt.Sprintf("crash message %d %s", i, strings.Repeat(string(rune('a'+i%26)), sizes[i%len(sizes)])))
	m.Meta = map[string]string{"i": strconv.Itoa(i)}
	if i%3 == 1 {
		m.Role = chat.RoleAssistant
		m.ToolCalls = []chat.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "bash", Arguments: `{"n":` + strconv.Itoa(i) + `}`}}
	}
	return m
}

func crashText(i int) string { return strings.Repeat(fmt.Sprintf("offloaded %d\n", i), 1+i%200) }

// CrashWriter is the writer side of RunCrash. Call it first thing in the backend's helper
// test (the one CrashOptions.HelperTest names): when CrashEnv is set it opens the store with
// open(target) and appends, archives, offloads and summarizes in a loop until it is killed
// (or 20 s pass), then exits the process; otherwise it returns at once.
func CrashWriter(open func(target string) (store.Store, error)) {
	target := os.Getenv(CrashEnv)
	if target == "" {
		return
	}
	ctx := context.Background()
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "crash writer: %s: %v\n", what, err)
		os.Exit(3)
	}
	s, err := open(target)
	if err != nil {
		fail("open", err)
	}
	have, err := s.Messages(ctx, "crash", 0, -1)
	if err != nil {
		fail("Messages", err)
	}
	sums, err := s.Summaries(ctx, "crash")
	if err != nil {
		fail("Summaries", err)
	}
	n, v := len(have), len(sums)
	// "ready" once the first batch is stored: the kill that follows must find the writer
	// has made progress (on a loaded machine, a kill 20 ms after opening could come before
	// the first commit, and the round would prove nothing).
	ready := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		batch := make([]chat.Message, 1+n%3)
		for j := range batch {
			batch[j] = CrashMessage(n + j)
		}
		if err := s.Append(ctx, "crash", n, batch); err != nil {
			fail("Append", err)
		}
		if _, err := s.Archive(ctx, "crash", n, batch); err != nil {
			fail("Archive", err)
		}
		if _, err := s.Offload(ctx, "crash", fmt.Sprintf("k%d", n), crashText(n), time.Time{}); err != nil {
			fail("Offload", err)
		}
		n += len(batch)
		if !ready {
			fmt.Println("ready")
			ready = true
		}
		if n/5 > v {
			v++
			if err := s.PutSummary(ctx, "crash", store.Summary{Version: v, Text: fmt.Sprintf("summary %d", v)}); err != nil {
				fail("PutSummary", err)
			}
		}
	}
	os.Exit(0)
}

// CrashOptions configure RunCrash.
type CrashOptions struct {
	// Target is passed to the writer's open function (through CrashEnv).
	Target string
	// HelperTest is the test function that calls CrashWriter (default "TestHelperProcess").
	HelperTest string
	// Reopen opens the store over Target in the test process.
	Reopen func(t *testing.T) store.Store
	// Rounds of kill and check (default 5).
	Rounds int
	// AfterKill, if set, runs after each kill before the store is reopened (backend-specific
	// checks of the raw storage).
	AfterKill func(t *testing.T, round int)
	// AfterClose, if set, runs after each round's store is closed.
	AfterClose func(t *testing.T, round int)
}

// RunCrash is the kill test of the conformance suite: a subprocess writes to the store and is
// killed with SIGKILL at random moments. After every kill the store must open, hold exactly a
// prefix of what was written (no gaps, duplicates or damaged messages), archive only positions
// of that prefix with the right messages, keep offloaded texts whole or absent, keep summary
// versions contiguous, and accept writes again.
func RunCrash(t *testing.T, opts CrashOptions) {
	t.Helper()
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	if opts.HelperTest == "" {
		opts.HelperTest = "TestHelperProcess"
	}
	if opts.Rounds == 0 {
		opts.Rounds = 5
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	prev := 0
	for round := 0; round < opts.Rounds; round++ {
		cmd, out, stderr := StartHelper(t, opts.HelperTest, CrashEnv+"="+opts.Target)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: writer did not start: %q %v; stderr: %s", round, line, err, stderr.String())
		}
		time.Sleep(time.Duration(20+rng.IntN(230)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: writer ended by itself (%v); stderr: %s", round, err, stderr.String())
		}
		if opts.AfterKill != nil {
			opts.AfterKill(t, round)
		}
		s := opts.Reopen(t)
		got, err := s.Messages(ctx, "crash", 0, -1)
		if err != nil {
			t.Fatalf("round %d: Messages: %v", round, err)
		}
		if len(got) <= prev {
			t.Fatalf("round %d: %d messages after the writer ran, had %d", round, len(got), prev)
		}
		for i, m := range got {
			EqualMessages(t, fmt.Sprintf("round %d message %d", round, i), []chat.Message{m}, RoundTrip(t, []chat.Message{CrashMessage(i)}))
		}
		n := len(got)
		arch, err := s.ReadArchive(ctx, "crash", 0, -1)
		if err != nil {
			t.Fatalf("round %d: ReadArchive: %v", round, err)
		}
		last := -1
		for _, a := range arch {
			i, _ := strconv.Atoi(a.Message.Meta["i"])
			if i <= last || i >= n || a.Pos != i {
				t.Fatalf("round %d: archived position %d (message %d) after %d (history %d)", round, a.Pos, i, last, n)
			}
			EqualMessages(t, "archived", []chat.Message{a.Message}, RoundTrip(t, []chat.Message{CrashMessage(i)}))
			last = i
		}
		for i := 0; i < n; i++ {
			text, _, err := s.ReadOffload(ctx, "crash", fmt.Sprintf("k%d", i), 1, 0)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("round %d: ReadOffload k%d: %v", round, i, err)
			}
			if err == nil && text != crashText(i) {
				t.Fatalf("round %d: offloaded k%d is damaged: %d bytes, want %d", round, i, len(text), len(crashText(i)))
			}
		}
		sums, err := s.Summaries(ctx, "crash")
		if err != nil {
			t.Fatalf("round %d: Summaries: %v", round, err)
		}
		for i, sum := range sums {
			if sum.Version != i+1 || sum.Text != fmt.Sprintf("summary %d", i+1) {
				t.Fatalf("round %d: summary %d: %+v", round, i, sum)
			}
		}
		// The test process continues the same sequence.
		if err := s.Append(ctx, "crash", n, []chat.Message{CrashMessage(n)}); err != nil {
			t.Fatalf("round %d: Append after the crash: %v", round, err)
		}
		if _, err := s.Archive(ctx, "crash", n, []chat.Message{CrashMessage(n)}); err != nil {
			t.Fatalf("round %d: Archive after the crash: %v", round, err)
		}
		if err := s.PutSummary(ctx, "crash", store.Summary{Version: len(sums) + 1, Text: fmt.Sprintf("summary %d", len(sums)+1)}); err != nil {
			t.Fatalf("round %d: PutSummary after the crash: %v", round, err)
		}
		prev = n + 1
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		if opts.AfterClose != nil {
			opts.AfterClose(t, round)
		}
		t.Logf("round %d: the writer left %d messages, %d archived, %d summaries", round, n, len(arch), len(sums))
	}
}
