package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// Forwarding early.
//
// A proxy that may rewrite a body must read it whole before it knows what to send; a reverse
// proxy streams it, so the upstream reads the body while the client is still sending it. Most
// requests of a conversation go upstream as the client's own bytes (nothing to manage yet), and
// the request after one that did almost always does too. So when the conversation a body
// continues (found by the decode cache, from the body's first bytes) last went upstream as the
// client's bytes, the proxy starts the upstream request at once and streams the body to it as
// it arrives, holding back its last byte until the pipeline has decided:
//
//   - the request goes upstream as the client's bytes, to the same URL: the last byte is
//     released, and the upstream's answer to the early request is the request's;
//   - anything else (a rewritten body, another upstream, a command answered locally, an
//     error): the early request's body ends in an error. The transport then closes the
//     connection (HTTP/1.1) or resets the stream (HTTP/2) before the body is complete, so the
//     upstream never receives a request it could answer or bill, and the request is sent as it
//     would have been.
//
// Nothing the pipeline decides is skipped: the same bytes reach the upstream only once they are
// what would have been sent. What is saved is the upload's time after the client's: the
// upstream has all but one byte of the body when the decision is made. A wrong guess costs one
// aborted upstream request (counted in ctxmgr_early_forwards_total{outcome="dropped"}).

// defaultEarlyForwardBytes is Config.EarlyForwardBytes's default.
const defaultEarlyForwardBytes = 32 << 10

// errEarlyDropped ends the body of an early request that is not the one to send.
var errEarlyDropped = errors.New("ctxmgr: early request dropped: the pipeline chose another body")

// early is a request sent upstream while its body is still arriving from the client.
type early struct {
	target string // the URL it was sent to
	cancel context.CancelFunc

	mu    sync.Mutex
	cond  sync.Cond
	buf   []byte // the client's body, len(buf) its Content-Length
	avail int    // how much of buf has been read from the client
	state earlyState
	err   error          // why the body ends short, once dropped
	resp  *http.Response // the upstream's answer, once it came (nil when dropped)
	rerr  error
	at    time.Time // when the last byte was released
	done  chan struct{}
}

type earlyState int

const (
	earlyHolding  earlyState = iota // the last byte is held back
	earlyReleased                   // the body is the one to send: all of it is given
	earlyDropped                    // the body ends in an error
)

// startEarly sends an upstream request to target for a body of len(buf) bytes, of which the
// first avail are read; the rest is given as it is published (publish), and the last byte only
// once released.
func (x *exchange) startEarly(target string, buf []byte, avail int) *early {
	ctx, cancel := context.WithCancel(x.r.Context())
	e := &early{target: target, cancel: cancel, buf: buf, avail: avail, done: make(chan struct{})}
	e.cond.L = &e.mu
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, &earlyReader{e: e})
	if err != nil {
		cancel()
		return nil
	}
	// A retry on a fresh connection (a reused one the upstream had closed) reads the body again
	// from its start.
	req.GetBody = func() (io.ReadCloser, error) { return &earlyReader{e: e}, nil }
	copyRequestHeaders(req.Header, x.r.Header)
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.ContentLength = int64(len(buf))
	client := x.s.cfg.HTTPClient
	go func() {
		resp, err := client.Do(req)
		e.mu.Lock()
		dropped := e.state == earlyDropped
		if !dropped {
			e.resp, e.rerr = resp, err
		}
		e.mu.Unlock()
		if dropped && resp != nil {
			resp.Body.Close()
		}
		close(e.done)
	}()
	return e
}

// publish makes the first n bytes of the body available to the upstream request.
func (e *early) publish(n int) {
	e.mu.Lock()
	e.avail = n
	e.mu.Unlock()
	e.cond.Broadcast()
}

// release gives the upstream the rest of the body and waits for its answer. It reports false
// when the request was already dropped.
func (e *early) release() (resp *http.Response, d time.Duration, ok bool, err error) {
	e.mu.Lock()
	if e.state != earlyHolding {
		e.mu.Unlock()
		return nil, 0, false, nil
	}
	e.state, e.at = earlyReleased, time.Now()
	e.mu.Unlock()
	e.cond.Broadcast()
	<-e.done
	return e.resp, time.Since(e.at), true, e.rerr
}

// drop ends the early request's body in an error (see the overview); it does nothing once the
// request was released. It does not wait for the transport: the request's goroutine closes an
// answer that comes all the same.
func (e *early) drop(err error) bool {
	e.mu.Lock()
	if e.state != earlyHolding {
		e.mu.Unlock()
		return false
	}
	e.state, e.err = earlyDropped, err
	resp := e.resp
	e.resp = nil
	e.mu.Unlock()
	e.cond.Broadcast()
	e.cancel()
	if resp != nil {
		resp.Body.Close()
	}
	return true
}

// earlyReader reads an early request's body for the transport.
type earlyReader struct {
	e   *early
	off int
}

func (r *earlyReader) Read(p []byte) (int, error) {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		if e.state == earlyDropped {
			return 0, e.err
		}
		limit := e.avail
		if e.state == earlyHolding && limit == len(e.buf) {
			limit-- // the last byte waits for the decision
		}
		if r.off < limit {
			n := copy(p, e.buf[r.off:limit])
			r.off += n
			return n, nil
		}
		if r.off == len(e.buf) {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		e.cond.Wait()
	}
}

func (r *earlyReader) Close() error { return nil }

// readBodyEarly reads the client's body of n bytes (its Content-Length) into a new buffer,
// starting an early upstream request once its first bytes show the conversation it continues
// went upstream as the client's bytes (decodeCache.wentVerbatim).
func (x *exchange) readBodyEarly(rd io.Reader, n int) ([]byte, error) {
	buf := make([]byte, n)
	off, asked := 0, false
	var e *early
	for off < n {
		m, err := rd.Read(buf[off:])
		off += m
		if e != nil && m > 0 && (off-e.published() >= earlyChunk || off == n) {
			e.publish(off)
		} else if !asked && off >= min(n, earlyPeek) {
			asked = true
			if target := x.s.decodes.wentVerbatim(buf[:off]); target != "" {
				e = x.startEarly(target, buf, off)
				x.early = e
			}
		}
		if err == io.EOF && off < n {
			err = io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			x.dropEarly()
			return nil, err
		}
		if err == io.EOF {
			break
		}
	}
	return buf, nil
}

// earlyChunk is how much more of the body is read before the upstream request is woken to
// send it.
const earlyChunk = 64 << 10

func (e *early) published() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.avail
}

// earlyPeek is how much of a body is read before the decode cache is asked about it: enough to
// tell apart conversations that share their first bytes (an agent's system prompt).
const earlyPeek = 16 << 10

// dropEarly drops the early request, if any and not released (see early.drop).
func (x *exchange) dropEarly() {
	if x.early != nil && x.early.drop(errEarlyDropped) {
		x.s.metrics.early.WithLabelValues("dropped").Inc()
	}
}

// sendEarly answers send for the client's own bytes to the early request's URL: the early
// request, released. ok is false when there is no such request to use.
func (x *exchange) sendEarly(body []byte) (resp *http.Response, ok bool, err error) {
	e := x.early
	if e == nil || !x.isClientBody(body) || e.target != x.target {
		return nil, false, nil
	}
	resp, d, ok, err := e.release()
	if !ok {
		return nil, false, nil
	}
	x.s.metrics.early.WithLabelValues("sent").Inc()
	x.upstreamNS += int64(d)
	x.s.metrics.upstream.WithLabelValues(string(x.format)).Observe(d.Seconds())
	return resp, true, err
}

// isClientBody reports whether body is the client's own bytes (not a copy: the same array).
func (x *exchange) isClientBody(body []byte) bool {
	return len(body) == len(x.body) && (len(body) == 0 || &body[0] == &x.body[0])
}
