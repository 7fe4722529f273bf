package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	ooption "github.com/openai/openai-go/v3/option"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store"
)

// conflictStore fails the next `fail` Appends with store.ErrConflict, as a PostgreSQL store
// does when another instance wrote first or a serialization check failed.
type conflictStore struct {
	store.Store
	fail atomic.Int64
}

func (c *conflictStore) Append(ctx context.Context, session string, at int, msgs []chat.Message) error {
	if c.fail.Add(-1) >= 0 {
		return fmt.Errorf("%w: injected conflict at %d", store.ErrConflict, at)
	}
	return c.Store.Append(ctx, session, at, msgs)
}

// TestStoreConflictNeverUnmanaged: store conflicts are retried (the session re-read and the
// request applied again) however many come in a row, up to the bound; past it the client
// gets a clear 503 with Retry-After, and never is a request forwarded unmanaged.
func TestStoreConflictNeverUnmanaged(t *testing.T) {
	cs := &conflictStore{Store: store.NewMemory()}
	e := newEnv(t, fakeupstream.Options{}, Config{Store: cs, SharedStore: true, Tune: smallTune})
	ctx := ctxT(t)
	a := newOpenAIAgent(e.px.URL, bigOutput(500), ooption.WithHeader(SessionHeader, "conflicts"))
	for i := 0; i < 6; i++ {
		cs.fail.Store(int64(i % (conflictAttempts - 1))) // up to 8 conflicts in a row
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d: build", i), i%2 == 1); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	if n := counterSum(e.srv.metrics.unmanaged); n != 0 {
		t.Fatalf("%v requests forwarded unmanaged after store conflicts", n)
	}
	if counterValue(e.srv.metrics.reloads) == 0 {
		t.Fatal("no conflict was retried")
	}

	// A session that stays contended: 503, not a raw forward.
	cs.fail.Store(1 << 30)
	before := len(e.fake.Records())
	_, err := a.turn(ctx, "turn 7: build", false)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("contended session: want a 503, got %v", err)
	}
	if n := len(e.fake.Records()) - before; n != 0 {
		t.Fatalf("%d requests reached the upstream from a contended session", n)
	}
	if n := counterSum(e.srv.metrics.unmanaged); n != 0 {
		t.Fatalf("%v requests forwarded unmanaged", n)
	}
	if v := counterValue(e.srv.metrics.busy); v != 1 {
		t.Fatalf("busy counter %v, want 1", v)
	}
}
