package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctxmgr/ctxmgr/store"
)

// TestSentBodyReusedAfterLastReader: a forwarded body's buffer goes back to the pool only when
// the exchange and every reader the transport was given are done with it, once.
func TestSentBodyReusedAfterLastReader(t *testing.T) {
	srv, err := New(Config{UpstreamOpenAI: "http://127.0.0.1:1", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	x := &exchange{s: srv}
	b := append(x.bodyBuffer(), `{"model":"m"}`...)
	x.keepBody(b)
	sb := x.bodyOf(b)
	if sb == nil || x.bodyOf([]byte(`{"model":"m"}`)) != nil {
		t.Fatal("bodyOf does not tell the exchange's body from an equal one")
	}
	r1, r2 := sb.reader(), sb.reader() // the request's body, and one GetBody made for a retry
	x.releaseBodies()
	if got, _ := srv.bodyPool.Get().(*[]byte); got != nil {
		t.Fatal("the buffer was reused while the transport could still read it")
	}
	if got, _ := io.ReadAll(r1); string(got) != `{"model":"m"}` {
		t.Fatalf("read %q", got)
	}
	_ = r1.Close()
	_ = r1.Close() // a second Close releases nothing more
	if got, _ := srv.bodyPool.Get().(*[]byte); got != nil {
		t.Fatal("the buffer was reused while a reader was still open")
	}
	_ = r2.Close()
	if soakRace {
		return // sync.Pool drops a random share of what it is given under the race detector
	}
	got, _ := srv.bodyPool.Get().(*[]byte)
	if got == nil || cap(*got) < len(b) || len(*got) != 0 || &(*got)[:1][0] != &b[0] {
		t.Fatal("the buffer was not reused once every reader was closed")
	}
}

// TestReceivedBodyHeldByDecodeCache: a client's body read into a pooled buffer goes back to
// the pool only once the exchange has finished and the decode cache no longer keeps it (the
// next body of the conversation replaced it), and readBuffer takes only a buffer that fits.
func TestReceivedBodyHeldByDecodeCache(t *testing.T) {
	srv, err := New(Config{UpstreamOpenAI: "http://127.0.0.1:1", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conv := newBenchConversation(20000)
	body1, body2 := conv.body(0), conv.body(1)
	if len(body1) < minPooledRead {
		t.Fatalf("a body of %d bytes is not read into a pooled buffer: the test proves nothing", len(body1))
	}
	exchangeOf := func(body []byte) (*exchange, []byte) {
		x := &exchange{s: srv}
		b := append(make([]byte, 0, len(body)+len(body)/8), body...)
		x.keepBody(b)
		if _, _, err := srv.decodes.decode(FormatOpenAI, b, x.bodyOf(b)); err != nil {
			t.Fatal(err)
		}
		return x, b
	}
	x1, b1 := exchangeOf(body1)
	x1.releaseBodies()
	if got, _ := srv.bodyPool.Get().(*[]byte); got != nil {
		t.Fatal("the body was reused while the decode cache kept it")
	}
	x2, b2 := exchangeOf(body2) // continues body1: the cache lets it go
	if srv.decodes.continued.Load() != 1 {
		t.Fatal("the second body did not continue the first: the test proves nothing")
	}
	if soakRace {
		x2.releaseBodies()
		return // sync.Pool drops a random share of what it is given under the race detector
	}
	got, _ := srv.bodyPool.Get().(*[]byte)
	if got == nil || &(*got)[:1][0] != &b1[0] {
		t.Fatal("the first body's buffer was not reused once the cache and the exchange let go")
	}
	x2.releaseBodies()
	if got, _ := srv.bodyPool.Get().(*[]byte); got != nil {
		t.Fatal("the second body was reused while the decode cache kept it")
	}
	_ = b2
	// readBuffer: a pooled buffer of at least n and at most 2n bytes, else none.
	for _, c := range []struct {
		pooled, n int
		fits      bool
	}{{64 << 10, 40 << 10, true}, {64 << 10, 64 << 10, true}, {64 << 10, 80 << 10, false}, {256 << 10, 100 << 10, false}, {64 << 10, 1 << 10, false}} {
		buf := make([]byte, 0, c.pooled)
		srv.bodyPool.Put(&buf)
		got := srv.readBuffer(int64(c.n))
		if (got != nil) != c.fits {
			t.Errorf("a pooled buffer of %d bytes for a body of %d: taken %v, want %v", c.pooled, c.n, got != nil, c.fits)
		}
		_, _ = srv.bodyPool.Get().(*[]byte) // empty it
	}
}

// TestReusedBodiesArriveIntact: sessions that share their first kilobyte, sent concurrently,
// each body large enough to be read into a reused buffer and forwarded as the client's own
// bytes. The upstream receives every body exactly as its client sent it, and the decode cache
// continued each session's previous body (under the race detector, a buffer reused while a
// decode or the transport still read it is a reported race). With the decode cache off, the
// exchange alone holds each body until the transport is done with it.
func TestReusedBodiesArriveIntact(t *testing.T) {
	t.Run("cache", func(t *testing.T) { testReusedBodies(t, 0) })
	t.Run("no-cache", func(t *testing.T) { testReusedBodies(t, -1) })
}

func testReusedBodies(t *testing.T, cacheBytes int) {
	var bad, seen atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen.Add(1)
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != r.Header.Get("X-Test-Sum") {
			bad.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`)
	}))
	defer up.Close()
	srv, err := New(Config{UpstreamOpenAI: up.URL, Store: store.NewMemory(), Window: 200000, DecodeCacheBytes: cacheBytes, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	px := httptest.NewServer(srv.Handler())
	defer px.Close()
	const sessions = 6
	turns := 25
	if soakRace {
		turns = 12
	}
	base := newBenchConversation(12000)
	var wg sync.WaitGroup
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			conv := &benchConversation{msgs: slices.Clone(base.msgs)}
			// The same first kilobyte: the system prompt is long and alike, the agent's
			// own name comes after it.
			conv.msgs[0] = map[string]any{"role": "system", "content": strings.Repeat("You are a coding agent. ", 60) + fmt.Sprintf("You are agent %d.", i)}
			for j := 0; j < turns; j++ {
				body := conv.body(j)
				sum := sha256.Sum256(body)
				req, _ := http.NewRequest("POST", px.URL+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Test-Sum", hex.EncodeToString(sum[:]))
				req.Header.Set(SessionHeader, fmt.Sprintf("s%d", i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("session %d turn %d: status %d", i, j, resp.StatusCode)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	if n := seen.Load(); n != int64(sessions*turns) {
		t.Fatalf("the upstream saw %d requests, want %d", n, sessions*turns)
	}
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d bodies arrived altered", n, sessions*turns)
	}
	want := int64(sessions)
	if cacheBytes < 0 {
		want = int64(sessions * turns)
	}
	if w, c := srv.decodes.whole.Load(), srv.decodes.continued.Load(); w != want || c != int64(sessions*turns)-want {
		t.Fatalf("decoded whole %d, continued %d; want %d and %d", w, c, want, int64(sessions*turns)-want)
	}
}
