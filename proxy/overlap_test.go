package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// gateStore holds every Append until release is closed, and says when one is waiting.
type gateStore struct {
	store.Store
	waiting atomic.Bool
	release chan struct{}
}

func (g *gateStore) Append(ctx context.Context, session string, at int, msgs []chat.Message) error {
	g.waiting.Store(true)
	<-g.release
	g.waiting.Store(false)
	return g.Store.Append(ctx, session, at, msgs)
}

const overlapBody = `{"model":"gpt-4o","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"list the files"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"a.go\nb.go"}],"tools":[{"type":"function","function":{"name":"ls","parameters":{"type":"object"}}}]}`

// TestStoreWriteOverlapsUpstream: with a store only this Server writes (SharedStore false,
// the default), a request's messages are written while the upstream works: the upstream
// receives the request while the write is still held, and the client gets the answer only
// once the write is done.
func TestStoreWriteOverlapsUpstream(t *testing.T) {
	gs := &gateStore{Store: store.NewMemory(), release: make(chan struct{})}
	var duringWrite atomic.Bool
	reached := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		duringWrite.Store(gs.waiting.Load())
		reached <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"a.go and b.go"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3}}`)
	}))
	defer up.Close()
	srv, err := New(Config{UpstreamOpenAI: up.URL, Store: gs, DisableReadTool: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(srv.Handler())
	defer px.Close()
	defer srv.Close()
	release := sync.OnceFunc(func() { close(gs.release) })
	defer release() // before the servers close, whatever failed

	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader(overlapBody))
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream while its store write was held")
	}
	if !duringWrite.Load() {
		t.Fatal("the upstream was called after the store write, not beside it")
	}
	select {
	case code := <-done:
		t.Fatalf("the client got %d before its messages were stored", code)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if code := <-done; code != 200 {
		t.Fatalf("status %d", code)
	}
	if n := countStored(t, gs, ""); n != 3 {
		t.Fatalf("the store holds %d messages, want 3", n)
	}
}

// countStored returns how many messages the store holds for its one session (id "" means:
// the only session there is).
func countStored(t *testing.T, st store.Store, id string) int {
	t.Helper()
	ctx := context.Background()
	if id == "" {
		infos, err := st.Sessions(ctx)
		if err != nil || len(infos) != 1 {
			t.Fatalf("want one session, have %d (%v)", len(infos), err)
		}
		id = infos[0].ID
	}
	msgs, err := st.Messages(ctx, id, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	return len(msgs)
}

// TestStoreWriteFailsAfterUpstream: when the write made beside the upstream call fails (here
// an injected conflict), the client gets 503 with Retry-After, never the answer and never an
// unmanaged request; its retry is managed and stores the messages once.
func TestStoreWriteFailsAfterUpstream(t *testing.T) {
	cs := &conflictStore{Store: store.NewMemory()}
	up := instantUpstream()
	defer up.Close()
	srv, err := New(Config{UpstreamOpenAI: up.URL, Store: cs, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(srv.Handler())
	defer px.Close()
	defer srv.Close()

	cs.fail.Store(1)
	resp, body := postJSON(t, px.URL+"/v1/chat/completions", overlapBody)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a failed store write: status %d, Retry-After %q, body %s; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if v := counterValue(srv.metrics.notStored); v != 1 {
		t.Fatalf("ctxmgr_not_stored_total %v, want 1", v)
	}
	if resp, body := postJSON(t, px.URL+"/v1/chat/completions", overlapBody); resp.StatusCode != 200 {
		t.Fatalf("the retry: status %d, %s", resp.StatusCode, body)
	}
	if n := counterSum(srv.metrics.unmanaged); n != 0 {
		t.Fatalf("%v requests forwarded unmanaged", n)
	}
	if n := countStored(t, cs, ""); n != 3 {
		t.Fatalf("the store holds %d messages, want 3 (once each)", n)
	}
}
