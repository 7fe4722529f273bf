package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/redact"
)

// The request path.
//
// A chat request (the Handler's POST /v1/chat/completions, /v1/messages, /v1/responses and
// Gemini's generateContent; a Transport's requests are served by the same Handler) goes
// through six stages, each in one place:
//
//  1. read (exchange.read): the client's body, into a counted buffer; a large one compared
//     with the body it continues and sent upstream as it arrives (cutthrough.go), then
//     rewritten for the providers' context management the proxy answers itself (native.go).
//  2. decode (exchange.decode): the body decoded from where it differs from the one it
//     continues (decode.go), its model, whether it streams and its upstream. A body the proxy
//     cannot or must not manage is forwarded as it is.
//  3. manage (Server.manage, manage.go): the conversation found and synced with the request's
//     history (sessions.go), a command or a compaction answered, the pipeline run (Prepare)
//     and the request encoded, or the client's own bytes kept when nothing changed.
//  4. forward (exchange.forward, forward.go): the body sent upstream, sent again when the
//     upstream refuses what the proxy should have answered, or recovered from an overflow.
//  5. relay (exchange.relay, relay.go and stream.go): the answer relayed, the model's
//     ctxmgr_read calls answered in-process first.
//  6. store (flush.go): the request's new messages written while the request is upstream,
//     before anything of the answer is relayed; the inspector's record of the request once
//     it ends (inspector_record.go).
//
// handleChat runs read and then serveBody, which runs the others; an exchange carries what
// each stage hands the next. A compaction whose answer the model continues (errRestart)
// serves the client's request anew from a new body.

// exchange is one client request in flight. Each stage owns the part of it it sets (the
// embedded structs); the later stages read it.
type exchange struct {
	// Set by handleChat, for the whole client request.
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	format Format
	// log is the Server's logger; manage adds the session's id.
	log *slog.Logger
	// start is when the request arrived; attrs are the attributes of its log line, which
	// every stage appends to.
	start time.Time
	attrs []slog.Attr

	received      // set by read
	decodedReq    // set by decode
	conversation  // set by manage: the conversation, as its sync left it (sessions.go)
	preparation   // set by manage
	upstreamCalls // set by manage, forward and relay
	flushState    // the store stage's
}

// received is what the read stage makes of the client's request. It is kept when the
// request is served anew (anew).
type received struct {
	// body is the client's body as read, then as nativeRewrite rewrote it: what a request
	// forwarded verbatim sends. A request served anew replaces it.
	body []byte
	// nat is the providers' context management the proxy answers for this request
	// (native.go): set by read (nativeRewrite) or by forward (learnNative), nil if none.
	nat *nativeAction
	// bodies are the exchange's counted buffers (bodies.go), the client's body's and those
	// encoded into: each is reused once the exchange ends and no one reads it.
	bodies []*sentBody
	// cut is the upstream request started while the body was read (cutthrough.go), until
	// the first send commits it or something aborts it; cutStarted is the same request,
	// ended (endCut) when the exchange ends.
	cut, cutStarted *cutThrough
	// exp is the cached body the client's was expected to continue, compared while it was
	// read (decode.go); set by read, released by decode.
	exp *expected
}

// decodedReq is what the decode stage makes of the body.
type decodedReq struct {
	// dec is the decoded request, nil when the body did not decode. It shares memory with
	// the decode cache: its fields are replaced, never modified in place.
	dec *chat.Request
	// di is derived from dec's messages (their hashes, first command, breakpoints); it is
	// released (done) once the body has been served.
	di     decodeInfo
	model  string
	stream bool
	// base is the upstream's base URL and target the URL the request is sent to.
	base, target string
}

// preparation is what the manage stage decided of the request to send, beside its
// conversation (the embedded conversation, set by manage from what the sync handed it).
type preparation struct {
	// held is the Manager of the request's window, in use (Server.manager) until the
	// exchange ends.
	held *managed
	// window is the window the request is prepared for: the configured one, then the one
	// Prepare and recover report; maxOut the reply reserve budgeted in it.
	window, maxOut int
	// asked is the client's max_tokens (0: absent) and maxField the body field that holds it
	// (reply.go).
	asked    int
	maxField string
	// bps are the client's message breakpoints and bpRoom how many the API allows on
	// messages beside its system and tools (Anthropic only; breakpoints.go). subs are the
	// messages of the prepared request that carry them in what is sent, by position (place):
	// the request's messages, x.sent's included, stay the prepared ones, and the encoder puts
	// these in their place.
	bps    []breakpoint
	bpRoom int
	subs   map[int]chat.Message
	// before is the input tokens of the request as the client sent it.
	before int
	// restart is the body the client's request is served anew with (errRestart).
	restart []byte
}

// upstreamCalls is what forward and relay sent upstream and were answered.
type upstreamCalls struct {
	// managed: what is forwarded is the managed request. Set by manage once it prepared it;
	// cleared when the client's request is forwarded unmanaged.
	managed bool
	// sent is the request last forwarded (managed only), set by manage and by every later
	// encode (a recovery, a ctxmgr_read follow-up); sentN is its input tokens when the
	// pipeline reported them, else 0.
	sent  chat.Request
	sentN int
	// upstreamNS is the time spent waiting for the upstream, over every call; reads the
	// ctxmgr_read calls answered; recovered the overflows recovered from.
	upstreamNS int64
	reads      int
	recovered  int
	// usage is what the inspector records of the request: the upstream's reported usage,
	// summed over its calls, and what the pipeline reported (inspector_record.go).
	usage callUsage
}

// flushState is the store stage's (flush.go).
type flushState struct {
	// flush carries the result of writing the request's new messages, when that runs beside
	// the upstream call (Config.SharedStore false); flushed says it was received, into
	// flushErr.
	flush    chan error
	flushed  bool
	flushErr error
}

// handleChat serves a chat request in format: read, then served (serveBody) until it is not
// to be served anew.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request, format Format) {
	sw := &statusWriter{ResponseWriter: w}
	x := &exchange{s: s, w: sw, r: r, format: format, log: s.log, start: time.Now(),
		attrs: []slog.Attr{slog.String("format", string(format)), slog.String("path", r.URL.Path)}}
	defer func() {
		status := sw.status
		if status == 0 {
			status = 499
		}
		s.metrics.requests.WithLabelValues(string(format), strconv.Itoa(status)).Inc()
		x.attrs = append(x.attrs, slog.Int("status", status), slog.Duration("duration", time.Since(x.start)))
		s.record(x, status, x.start) // inspector_record.go
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "proxy request", x.attrs...)
	}()
	defer x.end()
	body, ok := x.read()
	for ok {
		next := s.serveBody(x, body)
		if next == nil {
			return
		}
		*x = x.anew(next)
		body = next
	}
}

// anew is the exchange that serves the client's request anew from body: what belongs to the
// client's request (its buffers, what the proxy answers itself, its log line) is kept, every
// stage's state is reset.
func (x *exchange) anew(body []byte) exchange {
	return exchange{s: x.s, w: x.w, r: x.r, format: x.format, log: x.s.log, start: x.start, attrs: x.attrs,
		received: received{body: body, nat: x.nat, bodies: x.bodies, cutStarted: x.cutStarted}}
}

// end releases what the exchange holds once the client's request is over: the cut-through
// request started while its body was read, then its buffers.
func (x *exchange) end() {
	if x.cutStarted != nil {
		x.endCut(x.cutStarted)
	}
	x.releaseBodies()
}

// serveBody serves the client's body (rewritten by nativeRewrite) through the stages after
// read: decoded, managed and forwarded, or forwarded unmanaged, or answered. It returns the
// body to serve again when the request is to be served anew (errRestart), else nil.
func (s *Server) serveBody(x *exchange, body []byte) []byte {
	ctx := x.r.Context()
	unmanaged, err := x.decode(body)
	defer x.di.done() // after every use of dec's messages: the deferred calls below run first
	if err != nil {
		writeError(x.w, x.format, http.StatusBadGateway, "api_error", redact.Text(err.Error()))
		return nil
	}
	if unmanaged != nil {
		x.forwardUnmanaged(ctx, body, unmanaged)
		return nil
	}
	defer x.release()                     // after the write below: the session and its Manager are no longer in use
	defer func() { _ = x.awaitFlush() }() // whatever path returns, the write is complete
	out, err := s.manage(ctx, x)
	switch {
	case errors.Is(err, errAnswered):
		return nil
	case errors.Is(err, errRestart):
		return x.restart
	case isBusy(err):
		x.busy(err)
		return nil
	case err != nil:
		x.forwardUnmanaged(ctx, body, &unmanagedError{unmanagedReason(err), err})
		return nil
	}
	x.attrs = append(x.attrs, slog.Bool("managed", true))
	if an := x.nat.anthropicSide(); an != nil && len(an.edits) > 0 {
		out = s.applyEdits(ctx, an, x.id, out, x.mgr.m.Config().Counter, x.mgr.m.Config().OffloadRetention)
		x.attrs = append(x.attrs, slog.Int("applied_edits", len(an.applied)))
	}
	s.metrics.overhead.WithLabelValues(string(x.format)).Observe(time.Since(x.start).Seconds())
	x.forward(ctx, out)
	x.attrs = append(x.attrs, slog.Duration("upstream", time.Duration(x.upstreamNS)))
	if x.recovered > 0 {
		x.attrs = append(x.attrs, slog.Int("recoveries", x.recovered))
	}
	if x.reads > 0 {
		x.attrs = append(x.attrs, slog.Int("reads", x.reads))
	}
	return nil
}

// read is the read stage: the client's body, read into a counted buffer (readChatBody), then
// rewritten for the providers' context management the proxy answers itself (nativeRewrite).
// When it cannot be read or rewritten the client is answered and ok is false.
func (x *exchange) read() (body []byte, ok bool) {
	body, err := x.readChatBody()
	x.cutStarted = x.cut
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(x.w, x.format, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body above %d bytes", x.s.cfg.MaxBodyBytes))
			return nil, false
		}
		writeError(x.w, x.format, http.StatusBadRequest, "invalid_request_error", "reading the request body: "+err.Error())
		return nil, false
	}
	x.body = body // counted: its buffer is reused once no one reads it (bodies.go)
	if body, err = x.nativeRewrite(body); err != nil {
		var ie *nativeInputError
		if errors.As(err, &ie) {
			writeError(x.w, x.format, http.StatusBadRequest, "invalid_request_error", err.Error())
		} else {
			writeError(x.w, x.format, http.StatusInternalServerError, "api_error", "ctxmgr: "+redact.Text(err.Error()))
		}
		return nil, false
	}
	return body, true
}

// decode is the decode stage: body decoded against the cached body it continues (decode.go),
// its model, whether it streams, and the upstream it goes to. It returns why the request is
// not to be managed (nil: it may be): a body the proxy cannot read, a compaction the upstream
// answers, a history the provider holds. err: the request has no upstream.
func (x *exchange) decode(body []byte) (*unmanagedError, error) {
	s := x.s
	dec, di, derr := s.decodes.decode(x.format, body, x.bodyOf(body), x.exp)
	x.exp.release()
	x.exp = nil
	if derr == nil {
		x.di, x.dec = di, dec
		_ = json.Unmarshal(dec.Extra["model"], &x.model)
		x.stream = boolField(dec.Extra, "stream")
	} else {
		x.model, x.stream = peekModel(body)
	}
	if x.format == FormatGemini {
		var method string
		x.model, method = geminiCall(x.r)
		x.stream = method == "streamGenerateContent"
	}
	x.attrs = append(x.attrs, slog.String("model", x.model), slog.Bool("stream", x.stream))
	var err error
	if x.base, x.target, err = s.upstreamOf(x.r, x.format, x.model); err != nil {
		return nil, err
	}
	switch {
	case derr != nil:
		// Not a body the proxy understands: the upstream gives the real error.
		return &unmanagedError{ReasonDecode, derr}, nil
	case x.nat == nil && strings.HasSuffix(x.r.URL.Path, "/responses/compact"):
		// The upstream compacts (native.go): its answer replaces the client's history.
		return &unmanagedError{reason: ReasonPath}, nil
	}
	if reason := providerState(x.format, dec); reason != "" {
		// The history lives on the provider (responses.go): nothing to manage here.
		return &unmanagedError{ReasonProviderState, errors.New(reason)}, nil
	}
	return nil, nil
}

// forwardUnmanaged forwards body, the client's, without context management, for the reason
// why gives.
func (x *exchange) forwardUnmanaged(ctx context.Context, body []byte, why *unmanagedError) {
	x.s.metrics.unmanaged.WithLabelValues(why.reason).Inc()
	x.attrs = append(x.attrs, slog.Bool("managed", false), slog.String("reason", why.reason))
	if why.err != nil {
		x.attrs = append(x.attrs, slog.String("unmanaged", why.err.Error()))
	}
	x.managed = false
	x.forward(ctx, body)
}

// busy answers a request whose session stayed contended by other writers: 503 with
// Retry-After, never forwarded raw (a client retrying gets a managed request).
func (x *exchange) busy(err error) {
	x.s.metrics.busy.Inc()
	x.attrs = append(x.attrs, slog.String("error", err.Error()))
	x.w.Header().Set("Retry-After", "1")
	writeError(x.w, x.format, http.StatusServiceUnavailable, "overloaded_error", "ctxmgr: the session is being written by other requests; retry")
}

// release ends the exchange's use of its conversation and its Manager.
func (x *exchange) release() {
	x.s.unref(x.ps)
	x.s.releaseManager(x.held)
}
