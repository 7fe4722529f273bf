package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctxmgr/ctxmgr/wire"

	"github.com/ctxmgr/ctxmgr/chat"
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
	x := &exchange{s: srv, received: received{body: make([]byte, 40<<10)}} // bodyBuffer sizes for the client's body
	b := append(x.bodyBuffer(), `{"model":"m"}`...)
	x.keepBody(b)
	sb := x.bodyOf(b)
	if sb == nil || x.bodyOf([]byte(`{"model":"m"}`)) != nil {
		t.Fatal("bodyOf does not tell the exchange's body from an equal one")
	}
	r1, r2 := sb.reader(), sb.reader() // the request's body, and one GetBody made for a retry
	x.releaseBodies()
	if pooledFor(srv, len(x.body)) != nil {
		t.Fatal("the buffer was reused while the transport could still read it")
	}
	if got, _ := io.ReadAll(r1); string(got) != `{"model":"m"}` {
		t.Fatalf("read %q", got)
	}
	_ = r1.Close()
	_ = r1.Close() // a second Close releases nothing more
	if pooledFor(srv, len(x.body)) != nil {
		t.Fatal("the buffer was reused while a reader was still open")
	}
	_ = r2.Close()
	if soakRace {
		return // sync.Pool drops a random share of what it is given under the race detector
	}
	got := pooledFor(srv, len(x.body))
	if got == nil || cap(got) < len(b) || len(got) != 0 || &got[:1][0] != &b[0] {
		t.Fatal("the buffer was not reused once every reader was closed")
	}
}

// TestReceivedBodyHeldByDecodeCache: a client's body read into a pooled buffer goes back to
// the pool only once the exchange has finished and the decode cache no longer keeps it (the
// next body of the conversation replaced it), and readBuffer takes only a buffer that fits.
func TestReceivedBodyHeldByDecodeCache(t *testing.T) {
	srv, body1, body2 := twoBodyServer(t)
	exchangeOf := func(body []byte) (*exchange, []byte) {
		x, b, _ := decodeReceived(t, srv, body, nil)
		return x, b
	}
	x1, b1 := exchangeOf(body1)
	x1.releaseBodies()
	if pooledFor(srv, len(body1)) != nil {
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
	got := pooledFor(srv, len(body1))
	if got == nil || &got[:1][0] != &b1[0] {
		t.Fatal("the first body's buffer was not reused once the cache and the exchange let go")
	}
	x2.releaseBodies()
	if pooledFor(srv, len(body2)) != nil {
		t.Fatal("the second body was reused while the decode cache kept it")
	}
	_ = b2
}

// TestExpectedBodyHeld: the body a body being read is compared with (predict) stays out of
// the pool until the comparison is released, even once the cache has let it go; the
// comparison made chunk by chunk finds what a comparison of the whole finds.
func TestExpectedBodyHeld(t *testing.T) {
	srv, body1, body2 := twoBodyServer(t)
	x1, b1, _ := decodeReceived(t, srv, body1, nil)
	x1.releaseBodies()
	exp, _ := srv.decodes.predict(bodyHead(body2), len(body2))
	if exp == nil || &exp.d.lay.Body()[0] != &b1[0] {
		t.Fatal("the body read is not expected to continue the cached one")
	}
	for got := 0; got < len(body2); {
		got = min(got+7001, len(body2))
		exp.compare(body2[:got])
	}
	if want := wire.SharedPrefix(body2, body1); exp.shared != want || !exp.differs {
		t.Fatalf("compared chunk by chunk: %d bytes shared (differs %v), want %d", exp.shared, exp.differs, want)
	}
	x2, _, req := decodeReceived(t, srv, body2, exp)
	if want, _ := wire.Decode(wire.OpenAI, body2); !reflect.DeepEqual(req.Messages, want.Messages) {
		t.Fatal("decoded from the shared bytes compared while reading, the messages differ from a whole decode")
	}
	if srv.decodes.continued.Load() != 1 {
		t.Fatal("the second body did not continue the first: the test proves nothing")
	}
	if pooledFor(srv, len(body1)) != nil {
		t.Fatal("the expected body was reused while a comparison held it")
	}
	exp.release()
	defer x2.releaseBodies()
	if soakRace {
		return // sync.Pool drops a random share of what it is given under the race detector
	}
	if got := pooledFor(srv, len(body1)); got == nil || &got[:1][0] != &b1[0] {
		t.Fatal("the expected body's buffer was not reused once the comparison let go")
	}
}

// twoBodyServer returns a server (no upstream) and the first two bodies of a 20,000-token
// conversation, each large enough to be read into a pooled buffer.
func twoBodyServer(t *testing.T) (*Server, []byte, []byte) {
	srv, err := New(Config{UpstreamOpenAI: "http://127.0.0.1:1", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	conv := newBenchConversation(20000)
	body1, body2 := conv.body(0), conv.body(1)
	if len(body1) < minPooledRead {
		t.Fatalf("a body of %d bytes is not read into a pooled buffer: the test proves nothing", len(body1))
	}
	return srv, body1, body2
}

// decodeReceived decodes body as srv does a client's, read into a pooled buffer that the
// exchange returned keeps, with what was expected while it was read (exp, may be nil).
func decodeReceived(t *testing.T, srv *Server, body []byte, exp *expected) (*exchange, []byte, *chat.Request) {
	t.Helper()
	x := &exchange{s: srv}
	b := append(srv.bodies.get(len(body)), body...)
	x.keepBody(b)
	req, _, err := srv.decodes.decode(FormatOpenAI, b, x.bodyOf(b), exp)
	if err != nil {
		t.Fatal(err)
	}
	return x, b, req
}

// pooledFor takes from srv's pool the buffer a body of n bytes would be given, nil if none
// is kept.
func pooledFor(srv *Server, n int) []byte {
	k := 0
	for classCap(k) < n {
		k++
	}
	if p, _ := srv.bodies.classes[k].Get().(*[]byte); p != nil {
		return *p
	}
	return nil
}

// TestBufferPoolClasses: a body gets a buffer that holds it and is at most a quarter larger;
// a buffer given back is given again for a body of its class and never for a larger one.
func TestBufferPoolClasses(t *testing.T) {
	if classCap(numClasses-1) != maxPooledBody || classCap(0) != minPooledRead {
		t.Fatalf("classes span %d-%d, want %d-%d", classCap(0), classCap(numClasses-1), minPooledRead, maxPooledBody)
	}
	var p bufferPool
	for _, n := range []int{0, 1 << 10, minPooledRead - 1, minPooledRead, minPooledRead + 1, 100 << 10, 400<<10 + 7, 5 << 20, maxPooledBody, maxPooledBody + 1} {
		b := p.get(n)
		pooled := n >= minPooledRead && n <= maxPooledBody
		if len(b) != 0 || cap(b) < n || pooled && cap(b) > n+n/4 || !pooled && cap(b) != n {
			t.Errorf("get(%d): len %d cap %d", n, len(b), cap(b))
			continue
		}
		if !pooled || soakRace { // sync.Pool drops a random share under the race detector
			continue
		}
		p.put(b[:1])
		if c := p.get(cap(b) + 1); cap(c) > 0 && &c[:1][0] == &b[:1][0] {
			t.Errorf("a buffer of %d bytes was given for a body of %d", cap(b), cap(b)+1)
		}
		if !getsBack(&p, b, n) {
			t.Errorf("get(%d): the buffer given back was not reused", n)
		}
	}
	if soakRace {
		return
	}
	// A buffer between two classes (one append grew) is kept in the smaller.
	odd := make([]byte, 1, 45<<10)
	p.put(odd)
	if c := p.get(46 << 10); &c[:1][0] == &odd[0] {
		t.Error("a buffer of 45 KiB was given for a body of 46 KiB")
	}
	if !getsBack(&p, odd, 40<<10) {
		t.Error("a buffer of 45 KiB was not given for a body of 40 KiB")
	}
}

// getsBack reports whether p.get(n) gives b, which was put into p. sync.Pool keeps what is
// put on the P that put it, and a goroutine moved to another P in between gets another
// buffer (one run in six failed so): b is put again and asked for again, a few times.
func getsBack(p *bufferPool, b []byte, n int) bool {
	for try := 0; try < 10; try++ {
		if try > 0 {
			p.put(b[:1])
		}
		if c := p.get(n); &c[:1][0] == &b[:1][0] {
			return true
		}
	}
	return false
}

// TestBufferPoolGrowingConversation: the bodies of a conversation grow by a turn each; the
// proxy holds two at a time (the decode cache keeps the last one while the next is read).
// A new buffer is made only when the bodies outgrow a class, not for most bodies (79% of
// them were read into a new buffer when one pool mixed all sizes).
func TestBufferPoolGrowingConversation(t *testing.T) {
	if soakRace {
		t.Skip("sync.Pool drops a random share of what it is given under the race detector")
	}
	var p bufferPool
	seen := map[*byte]bool{}
	var prev []byte
	const steps = 200
	classes := map[int]bool{}
	for i := 0; i < steps; i++ {
		n := 400<<10 + i*9<<10
		b := p.get(n)[:n]
		seen[&b[0]] = true
		classes[cap(b)] = true
		if prev != nil {
			p.put(prev)
		}
		prev = b
	}
	if made := len(seen); made > 2*len(classes) {
		t.Fatalf("%d buffers made for %d bodies in %d classes", made, steps, len(classes))
	}
}

// TestReusedBodiesArriveIntact: sessions that share their first kilobyte, sent concurrently,
// each body large enough to be read into a reused buffer and forwarded as the client's own
// bytes. The upstream receives every body exactly as its client sent it, and the decode cache
// continued each session's previous body (under the race detector, a buffer reused while a
// decode or the transport still read it is a reported race). With the decode cache off, the
// exchange alone holds each body until the transport is done with it.
func TestReusedBodiesArriveIntact(t *testing.T) {
	t.Run("cache", func(t *testing.T) { testReusedBodies(t, false) })
	t.Run("no-cache", func(t *testing.T) { testReusedBodies(t, true) })
}

func testReusedBodies(t *testing.T, noCache bool) {
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
	srv, err := New(Config{UpstreamOpenAI: up.URL, Store: store.NewMemory(), Window: 200000, DisableDecodeCache: noCache, Tune: noCostMask, DisableReadTool: true, Logger: quietLogger()})
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
	if noCache {
		want = int64(sessions * turns)
	}
	if w, c := srv.decodes.whole.Load(), srv.decodes.continued.Load(); w != want || c != int64(sessions*turns)-want {
		t.Fatalf("decoded whole %d, continued %d; want %d and %d", w, c, want, int64(sessions*turns)-want)
	}
}
