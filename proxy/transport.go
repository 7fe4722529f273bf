package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
)

// Transport is an http.RoundTripper that manages the context of the conversations sent
// through it, in process, as the proxy's Handler does behind a socket: put it under any HTTP
// client, an official SDK's included:
//
//	t, err := proxy.NewTransport(proxy.Config{})
//	client := openai.NewClient(option.WithHTTPClient(&http.Client{Transport: t}))
//
// A request whose path ends in one of the endpoints the proxy manages (POST .../chat/completions,
// .../messages, .../messages/count_tokens, .../responses, .../responses/compact,
// .../responses/input_tokens; not OpenAI's .../threads/{id}/messages) is served by the same
// code as the Handler's: decoded, its
// session synced, the pipeline run, ctxmgr_read calls answered in-process, /compact and
// /context answered, an upstream overflow recovered from; then it is sent to the URL the
// client addressed (scheme, host, path and query as the request has them: Config's upstreams
// and Routes are not used). Every other request goes to the base transport untouched.
//
// Safe for concurrent use. Close it once no request is in flight.
type Transport struct {
	s    *Server
	base http.RoundTripper
}

// NewTransport returns a Transport for cfg. The Config is the Server's, with these differences:
// UpstreamOpenAI, UpstreamAnthropic and Routes are optional and unused (each request names its
// upstream); the base transport is cfg.HTTPClient's Transport, default http.DefaultTransport
// (the managed requests go out through cfg.HTTPClient, default a client over that transport,
// without timeout: the caller's context bounds them); cut-through forwarding is off unless
// CutThroughBytes is set (a body held in memory gains nothing from going upstream while it is
// read).
func NewTransport(cfg Config) (*Transport, error) {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: http.DefaultTransport}
	}
	if cfg.CutThroughBytes == 0 {
		cfg.DisableCutThrough = true
	}
	s, err := newServer(cfg, true)
	if err != nil {
		return nil, err
	}
	base := s.cfg.HTTPClient.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{s: s, base: base}, nil
}

// Server returns the Server that serves the Transport's requests: its Calibrator, and its
// Handler for /metrics and /healthz.
func (t *Transport) Server() *Server { return t.s }

// Close stops the Managers' background work (Server.Close). It does not close the Store.
func (t *Transport) Close() error { return t.s.Close() }

// CloseIdleConnections closes the idle connections of the base transport, if it can.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// managedEndpoints are the endpoints the Transport serves through the Handler, by the end of
// the request's path, longest first so that ".../messages/count_tokens" is not taken for
// ".../messages".
var managedEndpoints = []string{
	"/messages/count_tokens",
	"/responses/input_tokens",
	"/responses/compact",
	"/chat/completions",
	"/responses",
	"/messages",
}

// managedPath returns the Handler's path for a request the Transport manages. OpenAI's
// Assistants API (POST .../threads/{id}/messages) is not Anthropic's Messages.
func managedPath(r *http.Request) (string, bool) {
	if r.Method != http.MethodPost || r.URL == nil || strings.Contains(r.URL.Path, "/threads/") {
		return "", false
	}
	p := strings.TrimRight(r.URL.Path, "/")
	for _, e := range managedEndpoints {
		if strings.HasSuffix(p, e) {
			return "/v1" + e, true
		}
	}
	return "", false
}

// addressedKey is the context key under which a request served by a Transport carries the
// URL its client addressed.
type addressedKey struct{}

// addressed returns the URL a Transport's client addressed, nil for a request that came to the
// Handler over the network.
func addressed(r *http.Request) *url.URL {
	u, _ := r.Context().Value(addressedKey{}).(*url.URL)
	return u
}

// upstreamOf returns the base URL and the target URL of a request of format f for model: the
// URL the client addressed when the request came through a Transport (base: its scheme and
// host), else the configured upstream with the request's path and query (targetURL).
func (s *Server) upstreamOf(r *http.Request, f Format, model string) (base, target string, err error) {
	if u := addressed(r); u != nil {
		return u.Scheme + "://" + u.Host, u.String(), nil
	}
	base = s.cfg.upstream(f, model)
	if base == "" {
		return "", "", fmt.Errorf("no upstream configured for %s requests", f)
	}
	target, err = targetURL(base, r)
	return base, target, err
}

// RoundTrip implements http.RoundTripper. A managed request is served by the Handler's code on
// a goroutine of its own, into a response whose body is read as the Handler writes it (a
// stream arrives event by event); closing that body early cancels what is left of the
// request. Failures of the upstream or of the pipeline are answered as the Handler answers
// them (the provider's error shape, status 4xx/5xx), never as a RoundTrip error; RoundTrip
// returns an error only when the request ends before an answer has begun (its context done).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	path, ok := managedPath(req)
	if !ok {
		return t.base.RoundTrip(req)
	}
	if err := req.Context().Err(); err != nil {
		return nil, err // done before it began: nothing is sent
	}
	ctx, cancel := context.WithCancel(req.Context())
	in := req.Clone(context.WithValue(ctx, addressedKey{}, req.URL))
	in.URL.Path, in.URL.RawPath = path, ""
	if in.Body == nil {
		in.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{}), req: req}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				t.s.log.Error("proxy: panic serving a transport request", slog.String("path", path),
					slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
				w.fail(fmt.Errorf("proxy: panic serving %s: %v", path, p))
			}
			if req.Body != nil {
				_ = req.Body.Close()
			}
			w.end()
		}()
		t.s.mux.ServeHTTP(w, in)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		// The handler returns soon (its context is done) and closes the pipe.
		cancel()
		_ = pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	if w.err != nil {
		cancel()
		return nil, w.err
	}
	resp := w.resp
	resp.Body = &pipeBody{PipeReader: pr, cancel: cancel}
	return resp, nil
}

// pipeWriter is the http.ResponseWriter a Transport's request is served into: WriteHeader
// builds the response (closing ready), Write goes to the pipe the response body reads.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter
	req    *http.Request

	once  sync.Once
	ready chan struct{}
	resp  *http.Response // set before ready is closed
	err   error          // set before ready is closed: no response
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 100 && code <= 199 {
		return // informational: not a response
	}
	w.once.Do(func() {
		h := w.header.Clone()
		n := int64(-1)
		if v, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil && v >= 0 {
			n = v
		}
		w.resp = &http.Response{
			Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), StatusCode: code,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: h, ContentLength: n, Request: w.req,
		}
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush implements http.Flusher: every Write is already handed to the reader.
func (w *pipeWriter) Flush() {}

// fail ends a request that has no response yet with err.
func (w *pipeWriter) fail(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.ready)
	})
	_ = w.pw.CloseWithError(err)
}

// end closes the body once the handler has returned; a handler that wrote nothing answered
// 200 with an empty body, as net/http's server does.
func (w *pipeWriter) end() {
	w.WriteHeader(http.StatusOK)
	_ = w.pw.Close()
}

// pipeBody is a Transport response's body: closing it stops the handler's request.
type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Close() error {
	err := b.PipeReader.Close()
	b.cancel()
	return err
}
