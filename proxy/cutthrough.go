package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// Cut-through forwarding.
//
// A plain reverse proxy streams a body upstream while it reads it. This proxy must read a
// body whole before it can decide what to send (decode, count, compact), and that alone,
// store-and-forward, cost more than twice the reverse proxy's added latency at 100K tokens
// (the buffering anchor of BenchmarkProxyOverhead): the upstream received nothing before the
// client had sent everything. Over a network between client and proxy it costs a whole
// transfer of the history, every request.
//
// So when the previous body of a conversation was forwarded as the client's own bytes (no
// compaction needed: a session's steady state until its window fills), the proxy predicts
// that the next one will be too. As soon as the first kilobyte names the conversation
// (bodyHead), it starts the upstream request and streams the body into it as it arrives,
// all but its last byte; then it decides as usual. If the decision is to send the client's
// bytes to that same upstream, the last byte goes (commit). Otherwise the upstream request
// is aborted before it is complete, and the request decided on is sent as any other
// (abort). The upstream never receives a complete body the proxy did not decide on: it
// cannot act on a request before the last byte its Content-Length announces, and an
// aborted one ends before that byte (HTTP/1.1 closes the connection, HTTP/2 resets the
// stream). A misprediction costs the bytes sent and, on HTTP/1.1, the connection. Both
// outcomes are counted (ctxmgr_cut_through_total), and Config.DisableCutThrough turns it off.

// cutThrough is one upstream request started while the client's body is being read.
type cutThrough struct {
	body   *sentBody // the buffer the client's body is read into, len = its Content-Length
	target string

	mu    sync.Mutex
	cond  sync.Cond
	n     int // bytes of body.buf read from the client so far
	state cutState
	// last: a reader gave the transport the body's last byte (after commit); until the
	// transport reports the outcome of that write (httptrace WroteRequest), writing.
	last, writing bool
	writeErr      error
	// then is commit's function, until it is called (fire).
	then func()

	cancel context.CancelFunc
	done   chan struct{} // closed once resp and err are set
	resp   *http.Response
	err    error
}

type cutState int

const (
	cutStreaming cutState = iota
	cutCommitted
	cutAborted
)

// errCutAborted ends the body of an aborted cut-through request.
var errCutAborted = errors.New("proxy: cut-through request aborted: the request sent is another")

// startCutThrough starts the upstream request for the client's body in sb, of which n bytes
// have been read, to target.
func (x *exchange) startCutThrough(sb *sentBody, n int, target string) *cutThrough {
	ctx, cancel := context.WithCancel(x.r.Context())
	c := &cutThrough{body: sb, target: target, n: n, cancel: cancel, done: make(chan struct{})}
	c.cond.L = &c.mu
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		c.mu.Lock()
		if c.writing {
			c.writing, c.writeErr = false, info.Err
		}
		c.mu.Unlock()
		c.cond.Broadcast()
	}})
	rd := c.reader()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, rd)
	if err != nil {
		_ = rd.Close()
		c.err = err
		close(c.done)
		return c
	}
	req.GetBody = func() (io.ReadCloser, error) { return c.reader(), nil }
	copyRequestHeaders(req.Header, x.r.Header)
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.ContentLength = int64(len(sb.buf))
	client := x.s.cfg.HTTPClient
	go func() {
		resp, err := client.Do(req)
		c.mu.Lock()
		aborted := c.state == cutAborted
		c.resp, c.err = resp, err
		c.mu.Unlock()
		if aborted && resp != nil {
			resp.Body.Close()
		}
		close(c.done)
	}()
	return c
}

// progress records that n bytes of the body have been read.
func (c *cutThrough) progress(n int) {
	c.mu.Lock()
	c.n = n
	c.mu.Unlock()
	c.cond.Broadcast()
}

// commit lets the last byte go and returns the upstream's answer. whole is false when the
// request failed and the upstream cannot have received it whole: the transport never took
// the last byte, or writing it failed (the connection was lost while the proxy decided).
// The caller then sends the body again, as any other.
//
// then, if not nil, is the work that waits for the request to be on its way (the store
// write, exchange.prepareFlush). It is called once, on the transport's goroutine when the
// transport reads past the last byte or closes the body (the last byte is then written:
// net/http reads a body to its end and closes it before it reports the request written),
// or by commit when the request ends without either.
func (c *cutThrough) commit(then func()) (resp *http.Response, whole bool, err error) {
	c.mu.Lock()
	if c.state == cutStreaming {
		c.state, c.then = cutCommitted, then
	}
	c.mu.Unlock()
	c.cond.Broadcast()
	<-c.done
	c.fire(true)
	if c.err == nil {
		return c.resp, true, nil
	}
	// The transport reports the write it took the last byte for before its request ends,
	// but possibly after RoundTrip returned. A transport that reports no writes (a custom
	// RoundTripper without httptrace) is waited for a second, then taken as having written.
	limit := time.AfterFunc(time.Second, func() {
		c.mu.Lock()
		if c.writing {
			c.writing, c.writeErr = false, nil
		}
		c.mu.Unlock()
		c.cond.Broadcast()
	})
	defer limit.Stop()
	c.mu.Lock()
	for c.writing {
		c.cond.Wait()
	}
	whole = c.last && c.writeErr == nil
	c.mu.Unlock()
	return c.resp, whole, c.err
}

// fire calls commit's then, if it has not been called: at once, or once the transport has
// taken the last byte.
func (c *cutThrough) fire(now bool) {
	c.mu.Lock()
	then := c.then
	if !now && !c.last {
		then = nil
	}
	if then != nil {
		c.then = nil
	}
	c.mu.Unlock()
	if then != nil {
		then()
	}
}

// abort ends the request before its last byte, and waits for it to be over: the upstream
// has then seen it fail before the request decided on reaches it. It reports whether it
// aborted the request: it does nothing to a committed or aborted one.
func (c *cutThrough) abort() bool {
	c.mu.Lock()
	if c.state != cutStreaming {
		c.mu.Unlock()
		return false
	}
	c.state = cutAborted
	c.mu.Unlock()
	c.cond.Broadcast()
	c.cancel()
	<-c.done
	if c.resp != nil {
		c.resp.Body.Close()
	}
	return true
}

// endCut releases what x's cut-through request holds once the exchange is over: one not
// committed (a local answer, an error) is aborted, a committed one's context cancelled (its
// answer has been relayed).
func (x *exchange) endCut(c *cutThrough) {
	if c.abort() {
		x.s.metrics.cutThrough.WithLabelValues("aborted").Inc()
	}
	c.cancel()
}

// reader returns a reader of the body for the transport. It blocks for bytes not read yet
// from the client, and for the last byte until commit; after abort it fails.
func (c *cutThrough) reader() io.ReadCloser {
	c.body.refs.Add(1)
	return &cutReader{c: c}
}

type cutReader struct {
	c    *cutThrough
	off  int
	once sync.Once
}

func (r *cutReader) Read(p []byte) (int, error) {
	c := r.c
	buf := c.body.buf
	end := 0
	c.mu.Lock()
	for {
		if c.state == cutAborted {
			c.mu.Unlock()
			return 0, errCutAborted
		}
		if r.off == len(buf) {
			c.mu.Unlock()
			c.fire(false) // the transport wrote the last byte and reads past it (commit)
			return 0, io.EOF
		}
		lim := c.n
		if c.state != cutCommitted && lim == len(buf) {
			lim-- // the last byte waits for the decision
		}
		if r.off < lim {
			end = min(lim, r.off+len(p))
			if end == len(buf) {
				c.last, c.writing = true, true
			}
			break
		}
		c.cond.Wait()
	}
	c.mu.Unlock()
	// buf[:c.n] was read from the client before c.n was set under the lock: final.
	n := copy(p, buf[r.off:end])
	r.off += n
	return n, nil
}

func (r *cutReader) Close() error {
	r.once.Do(r.c.body.release)
	r.c.fire(false) // after the last byte, the transport is done with it (commit)
	return nil
}

// cutsThrough reports whether a body of n bytes may go upstream while it is read: the first
// kilobyte must name the conversation, and the rest be worth streaming.
func (s *Server) cutsThrough(n int64) bool {
	return !s.cfg.DisableCutThrough && n <= s.cfg.MaxBodyBytes && n >= int64(max(s.cfg.CutThroughBytes, headLen+1))
}

// comparedBytes is the size from which a body is compared with the one it is expected to
// continue while it is read (decode.go, expected): below it, comparing after the last byte
// costs a few microseconds.
const comparedBytes = 32 << 10

// readChatBody reads the client's body into a counted buffer (bodies.go). A large one is
// compared, as it arrives, with the cached body it is expected to continue (x.exp), and goes
// upstream as it arrives (a cut-through request, x.cut) when that conversation was forwarded
// as it was.
func (x *exchange) readChatBody() ([]byte, error) {
	s, r := x.s, x.r
	n := r.ContentLength
	if n <= headLen || n > s.cfg.MaxBodyBytes || n < comparedBytes && !s.cutsThrough(n) {
		var buf []byte
		if n > 0 && n <= s.cfg.MaxBodyBytes {
			buf = s.bodies.get(int(n))
		}
		body, err := readBody(x.w, r, s.cfg.MaxBodyBytes, buf, nil)
		if err == nil {
			x.keepBody(body)
		}
		return body, err
	}
	sb := &sentBody{buf: s.bodies.get(int(n))[:n], pool: &s.bodies}
	sb.refs.Store(1)
	tried := false
	body, err := readBody(x.w, r, s.cfg.MaxBodyBytes, sb.buf[:0], func(got int) {
		switch {
		case tried:
			if x.cut != nil {
				x.cut.progress(got)
			}
		case got < headLen:
			return
		default:
			tried = true
			var target string
			x.exp, target = s.decodes.predict(bodyHead(sb.buf[:headLen]), int(n))
			if target != "" && s.cutsThrough(n) {
				x.cut = x.startCutThrough(sb, got, target)
			}
		}
		x.exp.compare(sb.buf[:got])
	})
	if err != nil {
		if x.cut != nil {
			x.endCut(x.cut)
			x.cut = nil
		}
		x.exp.release()
		x.exp = nil
		sb.release()
		return nil, err
	}
	// body is sb.buf: readBody reads a body of n bytes into a buffer of that capacity, and
	// the server holds the body to its Content-Length.
	x.bodies = append(x.bodies, sb)
	return body, nil
}
