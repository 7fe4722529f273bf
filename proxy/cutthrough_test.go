package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store"
)

// sendBody posts body (a bench conversation's, its format told by its first bytes) and
// returns the status.
func sendBody(t *testing.T, url string, body []byte) int {
	t.Helper()
	path := "/v1/chat/completions"
	switch {
	case bytes.HasPrefix(body, []byte(`{"max_tokens"`)):
		path = "/v1/messages"
	case bytes.HasPrefix(body, []byte(`{"model":"gpt-5","instructions"`)):
		path = "/v1/responses"
	}
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Logf("status %d: %s", resp.StatusCode, b)
	}
	return resp.StatusCode
}

func (e *env) cutThroughCount(result string) int {
	return int(counterValue(e.srv.metrics.cutThrough.WithLabelValues(result)))
}

// A conversation forwarded as the client sends it goes upstream as it is read, from its
// second request on: the upstream receives exactly the client's bytes, every request.
func TestCutThroughForwardsWhileReading(t *testing.T) {
	for _, f := range []Format{FormatOpenAI, FormatAnthropic, FormatResponses} {
		t.Run(string(f), func(t *testing.T) {
			e := newEnv(t, fakeupstream.Options{KeepBodies: true}, Config{Tune: noCostMask, DisableReadTool: true})
			next := bodyMaker(newBenchConversation(20000), f)
			var sent [][]byte
			for i := range 6 {
				body := next(i)
				if len(body) < 64<<10 {
					t.Fatalf("body of %d bytes: want a large one", len(body))
				}
				if st := sendBody(t, e.px.URL, body); st != 200 {
					t.Fatalf("request %d: status %d", i, st)
				}
				sent = append(sent, body)
			}
			recs := e.fake.Records()
			if len(recs) != len(sent) {
				t.Fatalf("upstream got %d requests, want %d", len(recs), len(sent))
			}
			for i, r := range recs {
				if r.Valid != "" {
					t.Errorf("request %d invalid upstream: %s", i, r.Valid)
				}
				if !bytes.Equal(r.Body, sent[i]) {
					t.Errorf("request %d: upstream got other bytes than the client's (%d vs %d)", i, len(r.Body), len(sent[i]))
				}
			}
			if c, a := e.cutThroughCount("committed"), e.cutThroughCount("aborted"); c != len(sent)-1 || a != 0 {
				t.Errorf("cut-through committed %d, aborted %d; want %d, 0", c, a, len(sent)-1)
			}
			if n := e.fake.CutShort(); n != 0 {
				t.Errorf("upstream saw %d requests cut short", n)
			}
		})
	}
}

// halfwayUpstream is the fake upstream, telling when it has read half of a request's body.
type halfwayUpstream struct {
	fake    *fakeupstream.Server
	halfway chan struct{}
}

func (u *halfwayUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Body = &halfwayBody{ReadCloser: r.Body, half: r.ContentLength / 2, c: u.halfway}
	u.fake.ServeHTTP(w, r)
}

type halfwayBody struct {
	io.ReadCloser
	n, half int64
	c       chan struct{}
}

func (b *halfwayBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.n < b.half && b.n+int64(n) >= b.half {
		select {
		case b.c <- struct{}{}:
		default:
		}
	}
	b.n += int64(n)
	return n, err
}

// A conversation forwarded as the client sends it goes upstream while the proxy reads it:
// the upstream has half of each body before the client has sent its end. Once the history
// outgrows the window and the request is compacted, the request started is aborted before
// its end: the upstream acts only on the compacted one.
func TestCutThroughStreamsAndAborts(t *testing.T) {
	const window = 30000
	u := &halfwayUpstream{fake: fakeupstream.New(fakeupstream.Options{KeepBodies: true, Window: window}), halfway: make(chan struct{}, 1)}
	up := httptest.NewServer(u)
	defer up.Close()
	// The first step of the pipeline (the rewrite decided) takes its time, as a summary by a
	// model does: whatever the proxy let go upstream before deciding has arrived by then.
	var steps atomic.Int32
	tune := func(c *ctxmgr.Config) {
		next := c.OnEvent
		c.OnEvent = func(ev ctxmgr.Event) {
			if steps.Add(1) == 1 {
				time.Sleep(200 * time.Millisecond)
			}
			if next != nil {
				next(ev)
			}
		}
		noCostMask(c)
	}
	srv, err := New(Config{UpstreamOpenAI: up.URL, Store: store.NewMemory(), Window: window, Tune: tune, DisableReadTool: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	px := httptest.NewServer(srv.Handler())
	defer px.Close()

	conv := newBenchConversation(16000)
	var sent [][]byte
	predicted, verbatim := 0, 0
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatal("the history never outgrew the window")
		}
		// A model the table does not know: the window is Config.Window.
		body := bytes.Replace(conv.body(i), []byte(`"model":"gpt-4o"`), []byte(`"model":"test-model"`), 1)
		conv.msgs = append(conv.msgs, benchTurn(1000+i)...)
		select {
		case <-u.halfway:
		default:
		}
		// The previous body went as the client sent it: this one is predicted to, and starts
		// upstream at once. The client holds its last bytes until the upstream has half.
		predict := i > 0 && bytes.Equal(u.fake.Records()[i-1].Body, sent[i-1])
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(body[:len(body)-100])
			if predict {
				select {
				case <-u.halfway:
				case <-time.After(10 * time.Second):
				}
			}
			_, _ = pw.Write(body[len(body)-100:])
			_ = pw.Close()
		}()
		req, _ := http.NewRequest("POST", px.URL+"/v1/chat/completions", pr)
		req.ContentLength = int64(len(body))
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if predict && time.Since(t0) > 5*time.Second {
			t.Fatalf("request %d: the upstream received half of it only once the client had sent it all", i)
		}
		sent = append(sent, body)
		recs := u.fake.Records()
		if len(recs) != i+1 {
			t.Fatalf("request %d: the upstream acted on %d requests, want %d: one per client request", i, len(recs), i+1)
		}
		rec := recs[i]
		if rec.Valid != "" {
			t.Fatalf("request %d invalid upstream: %s", i, rec.Valid)
		}
		if predict {
			predicted++
		}
		if !bytes.Equal(rec.Body, body) {
			if !predict {
				t.Fatalf("request %d: rewritten without a verbatim request before it", i)
			}
			break
		}
		verbatim++
	}
	if steps.Load() == 0 {
		t.Fatal("the pipeline took no step")
	}
	if verbatim < 2 {
		t.Fatalf("%d requests forwarded as sent before the window was outgrown: want more", verbatim)
	}
	if c, a := int(counterValue(srv.metrics.cutThrough.WithLabelValues("committed"))), int(counterValue(srv.metrics.cutThrough.WithLabelValues("aborted"))); c != predicted-1 || a != 1 {
		t.Errorf("cut-through committed %d, aborted %d; want %d, 1", c, a, predicted-1)
	}
	// The aborted request had half its body upstream before the client sent its end: the
	// upstream saw it end short, one byte before its end at most, and never acted on it.
	for deadline := time.Now().Add(5 * time.Second); u.fake.CutShort() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := u.fake.CutShort(); n != 1 {
		t.Errorf("upstream saw %d requests end short, want 1 (the aborted one)", n)
	}
	if n := len(u.fake.Records()); n != len(sent) {
		t.Errorf("upstream acted on %d requests, want %d: one per client request", n, len(sent))
	}
}

// startCutEnv starts a proxy over h (an upstream) and returns its URL and server.
func startCutEnv(t *testing.T, h http.Handler) (string, *Server) {
	t.Helper()
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	srv, err := New(Config{UpstreamOpenAI: up.URL, Store: store.NewMemory(), Window: 200000, Tune: noCostMask, DisableReadTool: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { px.Close(); _ = srv.Close() })
	return px.URL, srv
}

// A client that goes away before the end of its body: the request started upstream is
// aborted, and the upstream never acts on it.
func TestCutThroughClientGone(t *testing.T) {
	u := &halfwayUpstream{fake: fakeupstream.New(fakeupstream.Options{}), halfway: make(chan struct{}, 1)}
	url, srv := startCutEnv(t, u)
	conv := newBenchConversation(20000)
	if st := sendBody(t, url, conv.body(0)); st != 200 {
		t.Fatalf("status %d", st)
	}
	select {
	case <-u.halfway:
	default:
	}
	body := conv.body(1)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(body[:len(body)-100])
		select {
		case <-u.halfway:
		case <-time.After(10 * time.Second):
		}
		pw.CloseWithError(io.ErrClosedPipe) // the client gives up
	}()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", pr)
	req.ContentLength = int64(len(body))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("status %d for a body the client did not finish", resp.StatusCode)
	}
	for deadline := time.Now().Add(5 * time.Second); u.fake.CutShort() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := u.fake.CutShort(); n != 1 {
		t.Errorf("upstream saw %d requests end short, want 1", n)
	}
	if n := len(u.fake.Records()); n != 1 {
		t.Errorf("upstream acted on %d requests, want 1 (the first)", n)
	}
	if a := int(counterValue(srv.metrics.cutThrough.WithLabelValues("aborted"))); a != 1 {
		t.Errorf("aborted %d, want 1", a)
	}
}

// dropOnce is the fake upstream, but for one request (the nth) whose connection it closes
// after reading a part of its body.
type dropOnce struct {
	fake      *fakeupstream.Server
	n, seen   atomic.Int32
	dropAfter int
	dropped   chan struct{}
}

func (d *dropOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.seen.Add(1) == d.n.Load() {
		_, _ = io.CopyN(io.Discard, r.Body, int64(d.dropAfter))
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			close(d.dropped)
			return
		}
	}
	d.fake.ServeHTTP(w, r)
}

// An upstream connection lost while the body's last byte waits for the decision: the
// upstream cannot have acted on the request, which is sent again, once; the client never
// sees the failure.
func TestCutThroughSendsAgainWhenLostBeforeTheEnd(t *testing.T) {
	d := &dropOnce{fake: fakeupstream.New(fakeupstream.Options{KeepBodies: true}), dropAfter: 8 << 10, dropped: make(chan struct{})}
	d.n.Store(2) // the second request: the first cut-through one
	url, srv := startCutEnv(t, d)
	conv := newBenchConversation(20000)
	var sent [][]byte
	for i := range 4 {
		body := conv.body(i)
		if i != 1 {
			if st := sendBody(t, url, body); st != 200 {
				t.Fatalf("request %d: status %d", i, st)
			}
			sent = append(sent, body)
			continue
		}
		// The client holds its last bytes until the upstream has dropped the connection,
		// and a while more, for the proxy's transport to see it.
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(body[:len(body)-100])
			select {
			case <-d.dropped:
				time.Sleep(100 * time.Millisecond)
			case <-time.After(10 * time.Second):
			}
			_, _ = pw.Write(body[len(body)-100:])
			_ = pw.Close()
		}()
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", pr)
		req.ContentLength = int64(len(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, b)
		}
		sent = append(sent, body)
	}
	select {
	case <-d.dropped:
	default:
		t.Fatal("no connection was dropped")
	}
	recs := d.fake.Records()
	if len(recs) != len(sent) {
		t.Fatalf("upstream acted on %d requests, want %d", len(recs), len(sent))
	}
	for i := range recs {
		if !bytes.Equal(recs[i].Body, sent[i]) {
			t.Errorf("request %d: the upstream got other bytes than the client's", i)
		}
	}
	c, f := counterValue(srv.metrics.cutThrough.WithLabelValues("committed")), counterValue(srv.metrics.cutThrough.WithLabelValues("failed"))
	if c != 2 || f != 1 {
		t.Errorf("committed %v, failed %v; want 2, 1", c, f)
	}
}

// transportFunc is an http.RoundTripper of a function.
type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The work commit is given (the store write) starts once the transport has taken the
// body's last byte, never before: started when the last byte is let go, it would run ahead
// of the transport's goroutine. It starts exactly once, also when the transport fails without
// the last byte.
func TestCutThroughCommitStartsThenAfterTheLastByte(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 4096)
	for _, c := range []struct {
		name  string
		read  bool // the transport reads the body to its end
		whole bool
	}{{"written", true, true}, {"failed before the body", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			var got atomic.Int64 // bytes the transport has read
			var then atomic.Int32
			var readWhenThen atomic.Int64
			tr := transportFunc(func(r *http.Request) (*http.Response, error) {
				defer r.Body.Close()
				if !c.read {
					return nil, io.ErrUnexpectedEOF
				}
				buf := make([]byte, 1000)
				for {
					n, err := r.Body.Read(buf)
					got.Add(int64(n))
					if err == io.EOF {
						break
					}
					if err != nil {
						return nil, err
					}
				}
				return &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(nil)), Header: http.Header{}}, nil
			})
			x := &exchange{s: &Server{cfg: Config{HTTPClient: &http.Client{Transport: tr}}},
				r: httptest.NewRequest("POST", "/v1/chat/completions", nil)}
			sb := &sentBody{buf: append([]byte(nil), body...), pool: &bufferPool{}}
			sb.refs.Store(1)
			cut := x.startCutThrough(sb, len(body), "http://upstream.invalid/v1/chat/completions")
			resp, whole, err := cut.commit(func() {
				then.Add(1)
				readWhenThen.Store(got.Load())
			})
			if whole != c.whole {
				t.Fatalf("whole = %v (err %v), want %v", whole, err, c.whole)
			}
			if resp != nil {
				resp.Body.Close()
			}
			cut.cancel()
			if n := then.Load(); n != 1 {
				t.Fatalf("then called %d times, want once", n)
			}
			if c.read && readWhenThen.Load() != int64(len(body)) {
				t.Fatalf("then called when the transport had read %d of %d bytes", readWhenThen.Load(), len(body))
			}
		})
	}
}
