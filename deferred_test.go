package ctxmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

func storedLen(t *testing.T, st store.Store, id string) int {
	t.Helper()
	msgs, err := st.Messages(context.Background(), id, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	return len(msgs)
}

// TestAppendDeferred: deferred messages are in the next request at once, reach the store at
// Flush, and a session loaded afterwards prepares the same request.
func TestAppendDeferred(t *testing.T) {
	ctx := context.Background()
	m, s := testManager(t, Config{})
	st := m.Config().Store
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "first"), chat.TextMessage(chat.RoleAssistant, "ok"))
	if err := s.AppendDeferred(ctx, chat.TextMessage(chat.RoleUser, "second"), call("c1")); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendDeferred(ctx, chat.ToolResult("c1", "bash", "file.go", false)); err != nil {
		t.Fatal(err)
	}
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Request.Messages); n != 5 {
		t.Fatalf("request has %d messages, want 5 (deferred ones included)", n)
	}
	if n := storedLen(t, st, "s1"); n != 2 {
		t.Fatalf("before Flush the store holds %d messages, want 2", n)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := storedLen(t, st, "s1"); n != 5 {
		t.Fatalf("after Flush the store holds %d messages, want 5", n)
	}
	if err := s.Flush(ctx); err != nil { // nothing left: a no-op
		t.Fatal(err)
	}
	l, err := m.LoadSession(ctx, "s1", []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := l.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Request, q.Request) {
		t.Fatal("a session loaded after Flush prepares another request")
	}
	// A synchronous Append after deferred ones writes both, in order.
	if err := s.AppendDeferred(ctx, chat.TextMessage(chat.RoleAssistant, "done")); err != nil {
		t.Fatal(err)
	}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "third"))
	got, _ := st.Messages(ctx, "s1", 0, -1)
	if len(got) != 7 || got[5].Text() != "done" || got[6].Text() != "third" {
		t.Fatalf("store after Append: %d messages", len(got))
	}
}

// TestAppendDeferredBeforeEveryWrite: a session's other writes (an offload, an archive and a
// summary, the compaction state, a clear) write the deferred messages first, so the store
// never holds an archive or state for messages it does not have.
func TestAppendDeferredBeforeEveryWrite(t *testing.T) {
	ctx := context.Background()
	m, s := testManager(t, Config{Store: &orderStore{Store: store.NewMemory()}})
	st := m.Config().Store
	for i := 0; i < 10; i++ {
		if err := s.AppendDeferred(ctx, chat.TextMessage(chat.RoleUser, fmt.Sprintf("question %d", i)), chat.TextMessage(chat.RoleAssistant, "answer")); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// A new system prompt changes what was sent: Prepare writes the state.
			if err := s.SetSystem([]chat.Message{chat.TextMessage(chat.RoleSystem, "new sys")}, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.CompactAll(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if n := storedLen(t, st, "s1"); n != 20 {
		t.Fatalf("after a compaction the store holds %d of 20 messages", n)
	}
	// An offload at ingestion.
	if err := s.AppendDeferred(ctx, chat.TextMessage(chat.RoleUser, "run it"), call("c1")); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendDeferred(ctx, chat.ToolResult("c1", "bash", lines(20000, "output line"), false)); err != nil {
		t.Fatal(err)
	}
	if n := storedLen(t, st, "s1"); n != 22 {
		t.Fatalf("after an offload the store holds %d messages, want the 22 before it", n)
	}
	if err := s.AppendDeferred(ctx, chat.TextMessage(chat.RoleAssistant, "ran")); err != nil {
		t.Fatal(err)
	}
	if err := s.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if n := storedLen(t, st, "s1"); n != 24 {
		t.Fatalf("after a clear the store holds %d of 24 messages", n)
	}
	arch, err := st.ReadArchive(ctx, "s1", 0, -1)
	if err != nil || len(arch) != 24 {
		t.Fatalf("archive holds %d of 24 messages (%v)", len(arch), err)
	}
}

// orderStore refuses an archive of positions it does not hold, and compaction state that
// covers more messages than it holds.
type orderStore struct{ store.Store }

func (o *orderStore) Archive(ctx context.Context, session string, from int, msgs []chat.Message) (store.Location, error) {
	have, err := o.Store.Messages(ctx, session, 0, -1)
	if err != nil {
		return "", err
	}
	if from+len(msgs) > len(have) {
		return "", fmt.Errorf("archive of positions %d-%d before they are stored (%d are)", from, from+len(msgs)-1, len(have))
	}
	return o.Store.Archive(ctx, session, from, msgs)
}

func (o *orderStore) PutState(ctx context.Context, session string, state []byte) error {
	var st struct{ Len int }
	have, err := o.Store.Messages(ctx, session, 0, -1)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(state, &st); err != nil || st.Len > len(have) {
		return fmt.Errorf("state of %d messages before they are stored (%d are): %v", st.Len, len(have), err)
	}
	return o.Store.PutState(ctx, session, state)
}

// raceStore stands for another process: before the session's next Append it appends msgs
// itself at the same position.
type raceStore struct {
	store.Store
	before []chat.Message
}

func (r *raceStore) Append(ctx context.Context, session string, at int, msgs []chat.Message) error {
	if b := r.before; b != nil {
		r.before = nil
		if err := r.Store.Append(ctx, session, at, b); err != nil {
			return err
		}
	}
	return r.Store.Append(ctx, session, at, msgs)
}

// TestAppendDeferredConflict: a deferred write that finds the same messages already stored
// succeeds; one that finds others leaves the session refusing work (ErrNotStored, with the
// store's conflict), and a session loaded again continues from what the store holds.
func TestAppendDeferredConflict(t *testing.T) {
	ctx := context.Background()
	rs := &raceStore{Store: store.NewMemory()}
	m, s := testManager(t, Config{Store: rs})
	same := []chat.Message{chat.TextMessage(chat.RoleUser, "hello"), chat.TextMessage(chat.RoleAssistant, "hi")}
	if err := s.AppendDeferred(ctx, same...); err != nil {
		t.Fatal(err)
	}
	rs.before = same
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("the same messages already stored: %v", err)
	}
	if _, err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}

	if err := s.AppendDeferred(ctx, chat.TextMessage(chat.RoleUser, "mine")); err != nil {
		t.Fatal(err)
	}
	rs.before = []chat.Message{chat.TextMessage(chat.RoleUser, "theirs")}
	err := s.Flush(ctx)
	if !errors.Is(err, ErrNotStored) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Flush over other messages: %v, want ErrNotStored and store.ErrConflict", err)
	}
	if _, err := s.Prepare(ctx); !errors.Is(err, ErrNotStored) {
		t.Fatalf("Prepare after a failed deferred write: %v, want ErrNotStored", err)
	}
	if err := s.Append(ctx, chat.TextMessage(chat.RoleAssistant, "x")); !errors.Is(err, ErrNotStored) {
		t.Fatalf("Append after a failed deferred write: %v, want ErrNotStored", err)
	}
	if _, err := s.CompactAll(ctx, ""); !errors.Is(err, ErrNotStored) {
		t.Fatalf("CompactAll after a failed deferred write: %v, want ErrNotStored", err)
	}
	l, err := m.LoadSession(ctx, "s1", []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := l.History()
	if len(h) != 3 || h[2].Text() != "theirs" {
		t.Fatalf("reloaded history: %d messages", len(h))
	}
}
