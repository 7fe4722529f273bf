//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package postgres_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/postgres"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// The helper process's parameters.
const (
	helperSchema = "CTXMGR_PG_HELPER_SCHEMA"
	helperMode   = "CTXMGR_PG_HELPER_MODE" // "append" or "crash"
	helperWriter = "CTXMGR_PG_HELPER_WRITER"
)

const perProcess = 150

func writerMessage(w, i int) chat.Message {
	m := chat.TextMessage(chat.RoleUser, fmt.Sprintf("w%d i%d", w, i))
	m.Meta = map[string]string{"w": strconv.Itoa(w), "i": strconv.Itoa(i)}
	return m
}

// TestHelperProcess is run as a subprocess by TestTwoProcesses ("append": append
// perProcess messages to the shared session, retrying on conflicts) and by TestCrash (the
// suite's crash writer, storetest.CrashWriter, on the schema it names).
func TestHelperProcess(t *testing.T) {
	storetest.CrashWriter(func(schema string) (store.Store, error) {
		return postgres.Open(context.Background(), os.Getenv(envURL), postgres.Options{Schema: schema})
	})
	schema := os.Getenv(helperSchema)
	if schema == "" {
		return
	}
	ctx := context.Background()
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "helper: %s: %v\n", what, err)
		os.Exit(3)
	}
	s, err := postgres.Open(ctx, os.Getenv(envURL), postgres.Options{Schema: schema})
	if err != nil {
		fail("Open", err)
	}
	switch os.Getenv(helperMode) {
	case "append":
		w, _ := strconv.Atoi(os.Getenv(helperWriter))
		fmt.Println("ready")
		known, conflicts := 0, 0
		for i := 0; i < perProcess; {
			n := 1 + (i+w)%2
			if i+n > perProcess {
				n = perProcess - i
			}
			batch := make([]chat.Message, n)
			for j := range batch {
				batch[j] = writerMessage(w, i+j)
			}
			err := s.Append(ctx, "shared", known, batch)
			switch {
			case err == nil:
				known += n
				i += n
			case errors.Is(err, store.ErrConflict):
				conflicts++
				newer, err := s.Messages(ctx, "shared", known, -1)
				if err != nil {
					fail("Messages", err)
				}
				known += len(newer)
			default:
				fail("Append", err)
			}
		}
		s.Close()
		fmt.Printf("conflicts %d\n", conflicts)
		os.Exit(0)
	}
	os.Exit(2)
}

func startHelper(t *testing.T, env ...string) (*exec.Cmd, *bufio.Reader, *bytes.Buffer) {
	t.Helper()
	cmd, out, stderr := storetest.StartHelper(t, "TestHelperProcess", env...)
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper did not start: %q %v; stderr: %s", line, err, stderr.String())
	}
	return cmd, r, stderr
}

// TestTwoProcesses runs two processes appending to one session, each retrying on conflicts:
// at the end every message of both is there exactly once, each process's in its order.
func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	url := testURL(t)
	schema := newSchema(t, url)
	s := openSchema(t, url, schema, postgres.Options{}) // creates the schema before the helpers race
	defer s.Close()
	const procs = 2
	type proc struct {
		cmd    *exec.Cmd
		out    *bufio.Reader
		stderr *bytes.Buffer
	}
	var ps []proc
	for w := 0; w < procs; w++ {
		cmd, out, stderr := startHelper(t, helperSchema+"="+schema, helperMode+"=append", helperWriter+"="+strconv.Itoa(w))
		ps = append(ps, proc{cmd, out, stderr})
	}
	for w, p := range ps {
		rest, _ := p.out.ReadString('\n')
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("writer %d: %v; stderr: %s", w, err, p.stderr.String())
		}
		t.Logf("writer %d: %s", w, strings.TrimSpace(rest))
	}
	got, err := s.Messages(context.Background(), "shared", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != procs*perProcess {
		t.Fatalf("%d messages, want %d", len(got), procs*perProcess)
	}
	next := make([]int, procs)
	for k, m := range got {
		w, _ := strconv.Atoi(m.Meta["w"])
		i, _ := strconv.Atoi(m.Meta["i"])
		if w < 0 || w >= procs || i != next[w] || m.Text() != fmt.Sprintf("w%d i%d", w, i) {
			t.Fatalf("message %d is %q, want writer %s's message %d", k, m.Text(), m.Meta["w"], next[w])
		}
		next[w]++
	}
}

// TestCrash runs the suite's kill test on PostgreSQL.
func TestCrash(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	storetest.RunCrash(t, storetest.CrashOptions{
		Target: schema,
		Rounds: 3,
		Reopen: func(t *testing.T) store.Store { return openSchema(t, url, schema, postgres.Options{}) },
	})
}
