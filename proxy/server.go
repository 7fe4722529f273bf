package proxy

import (
	"bytes"
	"cmp"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/provider"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// SessionHeader names the session of a request explicitly.
const SessionHeader = "X-Ctxmgr-Session"

// Server is the proxy. Serve its Handler with net/http; Close it after the http.Server has
// shut down.
type Server struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	gatherer prometheus.Gatherer
	cal      *tokens.Calibrator
	heur     tokens.Counter // for metrics on messages too large to count exactly in time
	mux      *http.ServeMux

	mgrMu       sync.Mutex
	managers    map[managerKey]*managed
	mgrLRU      *list.List // of *managed, most recently used first
	maxManagers int
	exact       map[string]tokens.Counter

	sessMu   sync.Mutex
	sessions map[string]*psession
	lru      *list.List

	decodes *decodeCache
	// bodies keeps the buffers bodies are read and encoded into (bodies.go).
	bodies   bufferPool
	flushers *flushers
	// native is what the proxy learned of its upstreams' own context management (native.go);
	// seal authenticates the compaction tokens it issues (native_token.go).
	native nativeState
	seal   sealer
	// insp is the session inspector (/ui/) and its record of requests (inspector*.go).
	insp *inspector

	closed atomic.Bool
}

// New returns a proxy for cfg.
func New(cfg Config) (*Server, error) { return newServer(cfg, false) }

// newServer returns a proxy for cfg; addressed says that every request names its upstream
// (Transport), so that no upstream need be configured.
func newServer(cfg Config, addressed bool) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(addressed); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:         cfg,
		log:         cfg.Logger,
		heur:        tokens.NewHeuristic(tokens.HeuristicOptions{}),
		cal:         tokens.NewCalibrator(tokens.NewCache(tokens.NewHeuristic(tokens.HeuristicOptions{}), 1<<16), tokens.CalibratorOptions{}),
		managers:    map[managerKey]*managed{},
		mgrLRU:      list.New(),
		maxManagers: maxManagers,
		exact:       map[string]tokens.Counter{},
		sessions:    map[string]*psession{},
		lru:         list.New(),
		decodes:     newDecodeCache(cfg.decodeCacheLimit()),
		flushers:    newFlushers(),
	}
	// Load the default vocabulary now rather than in the first request.
	if c, err := tokens.ForEncoding(tokens.O200kBase); err == nil {
		s.exact[tokens.O200kBase] = tokens.NewCache(c, 1<<16)
		c.Text("warm up")
	}
	reg := cfg.Registry
	if reg == nil {
		r := prometheus.NewRegistry()
		if err := registerRuntime(r); err != nil {
			return nil, fmt.Errorf("proxy: metrics: %w", err)
		}
		reg, s.gatherer = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		s.gatherer = g
	}
	m, err := newMetrics(reg, s.decodes)
	if err != nil {
		return nil, fmt.Errorf("proxy: metrics: %w", err)
	}
	s.metrics = m
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.handleChat(w, r, FormatOpenAI) })
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { s.handleChat(w, r, FormatAnthropic) })
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens(FormatAnthropic))
	mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) { s.handleChat(w, r, FormatResponses) })
	mux.HandleFunc("POST /v1/responses/compact", func(w http.ResponseWriter, r *http.Request) { s.handleChat(w, r, FormatResponses) })
	mux.HandleFunc("POST /v1/responses/input_tokens", s.handleCountTokens(FormatResponses))
	mux.HandleFunc("POST /v1beta/models/{action}", s.handleGemini)
	mux.HandleFunc("POST /v1/models/{action}", s.handleGemini)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	if s.gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	}
	s.mountInspector(mux) // inspector.go
	mux.HandleFunc("/", s.handlePassthrough)
	s.mux = mux
	return s, nil
}

// Handler returns the proxy's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Calibrator returns the token calibrator the proxy feeds with the providers' reported usage.
func (s *Server) Calibrator() *tokens.Calibrator { return s.cal }

// Close stops the Managers' background work. It does not close the Store (the caller owns
// it) and does not stop in-flight requests (shut the http.Server down first).
func (s *Server) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.insp.close()
	s.mgrMu.Lock()
	defer s.mgrMu.Unlock()
	for _, m := range s.managers {
		_ = m.m.Close()
	}
	return nil
}

// formatOf guesses the format of a request to a path the proxy does not manage.
func formatOf(r *http.Request) Format {
	if strings.HasPrefix(r.URL.Path, "/v1beta/") || r.Header.Get("X-Goog-Api-Key") != "" {
		return FormatGemini
	}
	if r.Header.Get("X-Api-Key") != "" || r.Header.Get("Anthropic-Version") != "" || strings.HasPrefix(r.URL.Path, "/v1/messages") {
		return FormatAnthropic
	}
	return FormatOpenAI
}

// targetURL joins an upstream base URL and the request's path and query. A base that ends in
// "/v1" is not doubled by a path that starts with "/v1/".
func targetURL(base string, r *http.Request) (string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("proxy: bad upstream URL %q", base)
	}
	p := r.URL.Path
	bp := strings.TrimRight(u.Path, "/")
	if strings.HasSuffix(bp, "/v1") && strings.HasPrefix(p, "/v1/") {
		p = p[len("/v1"):]
	}
	u.Path = bp + p
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	return u.String(), nil
}

// statusWriter records the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hopHeaders are not forwarded in either direction.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyRequestHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, f := range src.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			dst.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
	dst.Del("Host")
	dst.Del("Content-Length")
	// The proxy reads responses (usage, tool calls): let the transport negotiate and undo
	// compression itself.
	dst.Del("Accept-Encoding")
	dst.Del(SessionHeader)
}

func copyResponseHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, f := range src.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			dst.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
	dst.Del("Content-Length")
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// handlePassthrough forwards what the proxy does not manage (GET /v1/models and any other
// path) untouched.
func (s *Server) handlePassthrough(w http.ResponseWriter, r *http.Request) {
	f := formatOf(r)
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	w = sw
	defer func() {
		status := sw.status
		if status == 0 {
			status = 499
		}
		s.metrics.requests.WithLabelValues(string(f), strconv.Itoa(status)).Inc()
		s.metrics.unmanaged.WithLabelValues(ReasonPath).Inc()
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "proxy request", slog.String("format", string(f)),
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Bool("managed", false),
			slog.String("reason", ReasonPath), slog.Int("status", status), slog.Duration("duration", time.Since(start)))
	}()
	var target string
	var err error
	if addressed(r) != nil {
		// The Transport: the URL the client addressed.
		_, target, err = s.upstreamOf(r, f, "")
	} else {
		base := s.cfg.upstream(f, "")
		if base == "" {
			// No upstream of the format: another (a Gemini path, the OpenAI one first).
			switch f {
			case FormatOpenAI:
				base = s.cfg.UpstreamAnthropic
			default:
				base = cmp.Or(s.cfg.UpstreamOpenAI, s.cfg.UpstreamAnthropic)
			}
		}
		target, err = targetURL(base, r)
	}
	if err != nil {
		writeError(w, f, http.StatusBadGateway, "api_error", redact.Text(err.Error()))
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target, body)
	if err != nil {
		writeError(w, f, http.StatusBadRequest, "invalid_request_error", redact.Text(err.Error()))
		return
	}
	copyRequestHeaders(req.Header, r.Header)
	req.ContentLength = r.ContentLength
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, f, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body above %d bytes", s.cfg.MaxBodyBytes))
			return
		}
		msg := redact.Text(err.Error())
		s.log.Warn("proxy: upstream unreachable", slog.String("path", r.URL.Path), slog.String("error", msg))
		writeError(w, f, http.StatusBadGateway, "api_error", "upstream unreachable: "+msg)
		return
	}
	defer resp.Body.Close()
	copyResponseHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	relayRaw(w, resp.Body)
}

// relayRaw copies a body, flushing after every read so that streams arrive as they come.
func relayRaw(w http.ResponseWriter, body io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			flush(w)
		}
		if err != nil {
			return
		}
	}
}

// exchange is one client request in flight.
type exchange struct {
	s       *Server
	w       http.ResponseWriter
	r       *http.Request
	format  Format
	target  string
	dec     *chat.Request
	body    []byte // the client's body
	model   string
	stream  bool
	managed bool
	// nat is the providers' context management the proxy answers for this request (native.go).
	nat *nativeAction
	// base is the upstream's base URL; before the client's input tokens (managed only).
	base   string
	before int
	// restart is the body the request is served anew with (errRestart).
	restart []byte

	ps       *psession // in use (Server.acquire) until the exchange ends
	id       string
	mgr      *managed
	held     *managed // in use (Server.manager) until the exchange ends
	sess     *ctxmgr.Session
	readTool bool
	sent     chat.Request // the request last forwarded (managed only)
	sentN    int          // its input tokens when the pipeline reported them, else 0
	window   int
	maxOut   int
	// The client's max_tokens (0: absent) and the body field that holds it; its message
	// breakpoints and how many the API allows on messages beside its system and tools.
	asked    int
	maxField string
	bps      []breakpoint
	bpRoom   int
	di       decodeInfo // derived from dec.Messages (their hashes, first command, breakpoints)
	// subs are the messages of the prepared request that carry the client's breakpoints in
	// what is sent, by position (place; Anthropic, with a session): the request's messages,
	// x.sent's included, stay the prepared ones, and the encoder puts these in their place.
	subs map[int]chat.Message

	log        *slog.Logger
	upstreamNS int64
	reads      int
	recovered  int

	// flush carries the result of writing the request's new messages, when that runs
	// beside the upstream call (Config.SharedStore false); flushed says it was received, into
	// flushErr.
	flush    chan error
	flushed  bool
	flushErr error

	bodies []*sentBody // encoded into reused buffers (bodies.go)
	// cut is the upstream request started while the client's body was read (cutthrough.go),
	// until the first send commits or aborts it.
	cut *cutThrough
	// exp is the cached body the client's was expected to continue, compared while it was
	// read (decode.go), until it is decoded.
	exp *expected
	// usage is what the inspector records of the request: the upstream's reported usage,
	// summed over its calls, and what the pipeline reported (inspector_record.go).
	usage callUsage
}

// startFlush writes the messages the request added to its session (deferred by
// Session.AppendDeferred) while the request goes upstream. The write is not bound to the
// client's connection: messages taken in are stored even if the client goes away.
//
// For a request forwarded as the client's bytes, send starts it once the request is on its
// way: waking the writer costs a system call, which before the last byte is let go is
// latency the client sees, after it is time the upstream takes anyway. For a cut-through
// request that is once the transport has written the last byte (cutThrough.commit): a worker
// woken as the last byte is let go would run before the transport's goroutine (the scheduler
// runs the goroutine readied last first) and delay that byte
// (TestCutThroughCommitStartsThenAfterTheLastByte). A rewritten request starts it before it
// is encoded (manage), and awaitFlush on every other path.
func (x *exchange) startFlush() {
	if start := x.prepareFlush(); start != nil {
		start()
	}
}

// prepareFlush readies startFlush's write and returns what starts it, nil when there is
// nothing to write or the write was readied before. The function returned touches nothing
// of x (only the channel awaitFlush receives from), so that another goroutine may call it:
// a cut-through request's transport does (cutThrough.commit).
func (x *exchange) prepareFlush() func() {
	if x.sess == nil || x.flush != nil {
		return nil
	}
	done := make(chan error, 1)
	x.flush = done
	sess, ctx, workers := x.sess, context.WithoutCancel(x.r.Context()), x.s.flushers
	return func() { workers.run(func() { done <- sess.Flush(ctx) }) }
}

// awaitFlush waits for startFlush's write. It must succeed before anything of the answer is
// relayed: an answered request has its messages stored. On failure the session is dropped
// from memory (the next request reloads it from the Store, without what was not stored,
// and its client sends those messages again).
func (x *exchange) awaitFlush() error {
	x.startFlush()
	if x.flush == nil || x.flushed {
		return x.flushErr
	}
	x.flushErr, x.flushed = <-x.flush, true
	if x.flushErr != nil {
		x.ps.mu.Lock()
		if x.ps.sess == x.sess {
			x.ps.sess = nil
		}
		x.ps.mu.Unlock()
		x.s.metrics.notStored.Inc()
		x.log.Warn("proxy: storing the request's messages failed; the client is asked to retry", slog.String("error", x.flushErr.Error()))
	}
	return x.flushErr
}

// notStored answers a request whose messages could not be stored: 503 with Retry-After, so
// that the client sends the request again (never an answer whose history is not kept).
func (x *exchange) notStored() {
	x.w.Header().Set("Retry-After", "1")
	writeError(x.w, x.format, http.StatusServiceUnavailable, "overloaded_error", "ctxmgr: the conversation's new messages could not be stored; retry")
}

func boolField(extra map[string]json.RawMessage, key string) bool {
	var b bool
	_ = json.Unmarshal(extra[key], &b)
	return b
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request, format Format) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	attrs := []slog.Attr{slog.String("format", string(format)), slog.String("path", r.URL.Path)}
	x := &exchange{s: s, w: sw, r: r, format: format, log: s.log}
	defer func() {
		status := sw.status
		if status == 0 {
			status = 499
		}
		s.metrics.requests.WithLabelValues(string(format), strconv.Itoa(status)).Inc()
		attrs = append(attrs, slog.Int("status", status), slog.Duration("duration", time.Since(start)))
		s.record(x, status, start) // inspector_record.go
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "proxy request", attrs...)
	}()
	defer x.releaseBodies()
	body, err := x.readChatBody()
	if x.cut != nil {
		defer x.endCut(x.cut)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(sw, format, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body above %d bytes", s.cfg.MaxBodyBytes))
			return
		}
		writeError(sw, format, http.StatusBadRequest, "invalid_request_error", "reading the request body: "+err.Error())
		return
	}
	x.body = body // counted: its buffer is reused once no one reads it (bodies.go)
	if body, err = x.nativeRewrite(body); err != nil {
		var ie *nativeInputError
		if errors.As(err, &ie) {
			writeError(sw, format, http.StatusBadRequest, "invalid_request_error", err.Error())
		} else {
			writeError(sw, format, http.StatusInternalServerError, "api_error", "ctxmgr: "+redact.Text(err.Error()))
		}
		return
	}
	for {
		next := s.serveBody(x, body, start, &attrs)
		if next == nil {
			return
		}
		// Served anew: a new exchange for the same client request, its bodies and what the
		// proxy answers itself kept.
		*x = exchange{s: s, w: sw, r: r, format: format, log: s.log, nat: x.nat, bodies: x.bodies, body: next}
		body = next
	}
}

// serveBody serves the client's body (rewritten by nativeRewrite): decoded, managed and
// forwarded, or answered. It returns the body to serve again when the request is to be
// served anew (errRestart), else nil.
func (s *Server) serveBody(x *exchange, body []byte, start time.Time, attrs *[]slog.Attr) []byte {
	var err error
	dec, di, derr := s.decodes.decode(x.format, body, x.bodyOf(body), x.exp)
	x.exp.release()
	x.exp = nil
	defer di.done() // after every use of dec's messages: the deferred calls below run first
	if derr == nil {
		x.di = di
		x.dec = dec
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
	*attrs = append(*attrs, slog.String("model", x.model), slog.Bool("stream", x.stream))
	if x.base, x.target, err = s.upstreamOf(x.r, x.format, x.model); err != nil {
		writeError(x.w, x.format, http.StatusBadGateway, "api_error", redact.Text(err.Error()))
		return nil
	}
	if derr != nil {
		// Not a body the proxy understands: the upstream gives the real error.
		s.metrics.unmanaged.WithLabelValues(ReasonDecode).Inc()
		*attrs = append(*attrs, slog.Bool("managed", false), slog.String("reason", ReasonDecode), slog.String("unmanaged", derr.Error()))
		x.forward(x.r.Context(), body)
		return nil
	}
	if x.nat == nil && strings.HasSuffix(x.r.URL.Path, "/responses/compact") {
		// The upstream compacts (native.go): its answer replaces the client's history.
		s.metrics.unmanaged.WithLabelValues(ReasonPath).Inc()
		*attrs = append(*attrs, slog.Bool("managed", false), slog.String("reason", ReasonPath))
		x.forward(x.r.Context(), body)
		return nil
	}
	if reason := providerState(x.format, dec); reason != "" {
		// The history lives on the provider (responses.go): nothing to manage here.
		s.metrics.unmanaged.WithLabelValues(ReasonProviderState).Inc()
		*attrs = append(*attrs, slog.Bool("managed", false), slog.String("reason", ReasonProviderState), slog.String("unmanaged", reason))
		x.forward(x.r.Context(), body)
		return nil
	}

	defer func() {
		// After the write below: the session and its Manager are no longer in use.
		s.release(x.ps)
		s.releaseManager(x.held)
	}()
	defer func() { _ = x.awaitFlush() }() // whatever path returns, the write is complete
	out, info, err := s.manage(x.r.Context(), x)
	*attrs = append(*attrs, info...)
	if err != nil {
		if errors.Is(err, errAnswered) {
			return nil
		}
		if errors.Is(err, errRestart) {
			return x.restart
		}
		if isBusy(err) {
			// Never forwarded raw: a client retrying gets a managed request.
			s.metrics.busy.Inc()
			*attrs = append(*attrs, slog.String("error", err.Error()))
			x.w.Header().Set("Retry-After", "1")
			writeError(x.w, x.format, http.StatusServiceUnavailable, "overloaded_error", "ctxmgr: the session is being written by other requests; retry")
			return nil
		}
		reason := unmanagedReason(err)
		s.metrics.unmanaged.WithLabelValues(reason).Inc()
		*attrs = append(*attrs, slog.Bool("managed", false), slog.String("reason", reason), slog.String("unmanaged", err.Error()))
		x.managed = false
		x.forward(x.r.Context(), body)
		return nil
	}
	*attrs = append(*attrs, slog.Bool("managed", true))
	if an := x.nat.anthropicSide(); an != nil && len(an.edits) > 0 {
		out = s.applyEdits(x.r.Context(), an, x.id, out, x.mgr.m.Config().Counter, x.mgr.m.Config().OffloadRetention)
		*attrs = append(*attrs, slog.Int("applied_edits", len(an.applied)))
	}
	s.metrics.overhead.WithLabelValues(string(x.format)).Observe(time.Since(start).Seconds())
	x.forward(x.r.Context(), out)
	*attrs = append(*attrs, slog.Duration("upstream", time.Duration(x.upstreamNS)))
	if x.recovered > 0 {
		*attrs = append(*attrs, slog.Int("recoveries", x.recovered))
	}
	if x.reads > 0 {
		*attrs = append(*attrs, slog.Int("reads", x.reads))
	}
	return nil
}

// readBody reads a request body of at most limit bytes, into buf if it has room. A declared
// Content-Length sizes the buffer once (io.ReadAll would grow it by doubling: twice the bytes
// allocated and copied for the megabyte bodies of long conversations); the proxy passes a
// pooled buffer (bodies.go).
// progress, if not nil, is told how many bytes of such a body have been read, as they arrive
// (cutthrough.go).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, buf []byte, progress func(n int)) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 && n <= limit {
		if int64(cap(buf)) >= n {
			buf = buf[:n]
		} else {
			buf = make([]byte, n)
		}
		for got := 0; got < len(buf); {
			m, err := rd.Read(buf[got:])
			got += m
			if m > 0 && progress != nil {
				progress(got)
			}
			if err != nil {
				if got < len(buf) {
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return nil, err // a body cut short is an error, not a shorter body
				}
				break
			}
		}
		rest, err := io.ReadAll(rd) // nothing: the server holds a body to its Content-Length
		if len(rest) > 0 {
			buf = append(buf, rest...)
		}
		return buf, err
	}
	return io.ReadAll(rd)
}

// errAnswered: the request was answered locally (a command).
var errAnswered = errors.New("answered")

// The reasons a request is forwarded without context management: the label values of
// ctxmgr_unmanaged_requests_total{reason}, each listed in the package doc and docs/proxy.md.
const (
	// ReasonDecode: the body is not one the proxy can read (malformed JSON, an invalid
	// history); the upstream gives the client the real error.
	ReasonDecode = "decode"
	// ReasonSingleMessage: one user message and no tools. Nothing in it may be changed (the
	// system prompt and the latest user message are never altered), so it is forwarded as is
	// and not stored: side requests (titles, quota checks) make no sessions.
	ReasonSingleMessage = "single_message"
	// ReasonDoesNotFit: the system prompt, the tools and the latest user message alone exceed
	// the window (ctxmgr.NoFitError); the provider answers.
	ReasonDoesNotFit = "does_not_fit"
	// ReasonConfig: the proxy's configuration cannot manage the model.
	ReasonConfig = "config"
	// ReasonProviderState: the provider holds the history (Responses previous_response_id or
	// conversation, Gemini cachedContent).
	ReasonProviderState = "provider_state"
	// ReasonHistory: the session refuses the history as invalid (a *chat.Error: a tool
	// result without its call, ...); the provider answers.
	ReasonHistory = "history"
	// ReasonInternal: any other failure of the pipeline or the store. A store conflict is not
	// one: it is retried, then answered 503 (conflict.go).
	ReasonInternal = "internal"
	// ReasonPath: a path the proxy does not manage (GET /v1/models, token counting without a
	// known session, ...), forwarded as is.
	ReasonPath = "path"
)

// unmanagedReasons are every reason, pre-registered at 0 in the metric.
var unmanagedReasons = []string{ReasonDecode, ReasonSingleMessage, ReasonDoesNotFit, ReasonConfig,
	ReasonProviderState, ReasonHistory, ReasonInternal, ReasonPath}

// unmanagedError says why a request could not be managed.
type unmanagedError struct {
	reason string
	err    error
}

func (e *unmanagedError) Error() string { return e.err.Error() }
func (e *unmanagedError) Unwrap() error { return e.err }

// unmanagedReason classifies an error of manage.
func unmanagedReason(err error) string {
	var ue *unmanagedError
	var nf *ctxmgr.NoFitError
	var ce *chat.Error
	switch {
	case errors.As(err, &ue):
		return ue.reason
	case errors.As(err, &nf):
		return ReasonDoesNotFit
	case errors.Is(err, ctxmgr.ErrInvalidConfig):
		return ReasonConfig
	case errors.As(err, &ce):
		return ReasonHistory
	}
	return ReasonInternal
}

// peekModel reads the model and stream fields of a body the wire decoder refused, for logs.
func peekModel(body []byte) (string, bool) {
	var v struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &v)
	return v.Model, v.Stream
}

// manage syncs the session, answers commands, runs the pipeline and returns the body to
// forward.
func (s *Server) manage(ctx context.Context, x *exchange) ([]byte, []slog.Attr, error) {
	dec := x.dec
	var info []slog.Attr
	window, defOut := s.cfg.limits(x.model)
	x.maxField, x.asked = askedMaxTokens(dec.Extra)
	mgr, key, err := s.manager(x.format, x.model, window, replyReserve(window, x.asked, defOut))
	if err != nil {
		return nil, info, err
	}
	x.held = mgr // released when the exchange ends (serveBody)
	x.window, x.maxOut = window, mgr.m.Config().Budget.MaxOutput
	dec.Tools = stripReadTool(dec.Tools)
	msgs, cmd := splitCommandsFrom(dec.Messages, x.di.firstCmd)
	if x.nat != nil && x.nat.compact {
		cmd = &command{name: "compact", arg: x.nat.instruction, native: true}
	}
	if cmd == nil && len(dec.Tools) == 0 && len(msgs) == 1 && msgs[0].Role == chat.RoleUser {
		return nil, info, &unmanagedError{ReasonSingleMessage, errors.New("one user message and no tools: nothing to manage, not stored")}
	}
	if x.format == FormatAnthropic {
		if len(msgs) == len(dec.Messages) {
			x.bps = x.di.bps // no command taken out: the decoded messages' own
		} else {
			x.bps = messageBreakpoints(msgs, 0, nil)
		}
		x.bpRoom = maxBreakpoints - setupBreakpoints(dec.System, dec.Tools)
	}
	base, src := sessionKey(x.r.Header.Get(SessionHeader), dec, msgs)
	hashes := x.di.hashes[:len(msgs)]
	if len(msgs) > 0 && &msgs[0] != &dec.Messages[0] {
		hashes = hashAll(msgs) // earlier commands and their answers were taken out
	}
	ps, branched, err := s.openSession(ctx, base, mgr, key, dec, msgs, hashes)
	if err != nil {
		return nil, info, err
	}
	x.ps, x.id, x.mgr, x.sess = ps, ps.id, ps.mgr, ps.sess
	info = append(info, slog.String("session", ps.id), slog.String("session_source", src))
	x.log = s.log.With(slog.String("session", ps.id))
	if branched {
		info = append(info, slog.Bool("branched", true))
	}
	if len(x.nat.readFrom()) > 0 {
		// A summary the request's compaction token stands for names its archive.
		if err := s.offerReadTool(ps, dec.System, dec.Tools, true); err != nil {
			ps.mu.Unlock()
			return nil, info, err
		}
	}
	if an := x.nat.anthropicSide(); an != nil {
		// The edits' and compaction's triggers count the input the client sent.
		an.clientTokens = ps.orig + mgr.m.Config().Counter.Request(&chat.Request{System: dec.System, Tools: dec.Tools}).Total
		an.clientToolUses = countToolUses(x.body)
		if an.compact != nil && an.clientTokens >= an.compact.trigger {
			x.nat.compact, x.nat.instruction = true, an.compact.instructions
			if !an.compact.pause {
				// The model's answer follows the compaction, in the same response.
				err := s.compactThenContinue(ctx, x, ps)
				return nil, append(info, slog.String("command", "native_compaction")), err
			}
			cmd = &command{name: "compact", arg: an.compact.instructions, native: true}
		}
	}
	if cmd != nil && cmd.native {
		err := s.answerCompaction(ctx, x, ps)
		return nil, append(info, slog.String("command", "native_compaction")), err
	}
	if cmd != nil {
		text := s.runCommand(ctx, ps, cmd, dec.System, dec.Tools)
		ps.mu.Unlock()
		x.startFlush()
		if x.awaitFlush() != nil {
			x.notStored()
			return nil, info, errAnswered
		}
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		_ = json.Unmarshal(dec.Extra["stream_options"], &so)
		if x.format == FormatGemini {
			writeGeminiLocal(x.w, x.model, x.stream, geminiSSE(x.r), text)
		} else {
			writeLocal(x.w, x.format, x.model, x.stream, so.IncludeUsage, text)
		}
		info = append(info, slog.String("command", cmd.name))
		return nil, info, errAnswered
	}
	p, err := ps.sess.Prepare(ctx)
	if err == nil && x.nat != nil && x.nat.threshold > 0 && p.Report.InputAfter >= x.nat.threshold {
		// The client's compaction threshold, reached by what would be forwarded.
		if _, err = ps.sess.Compact(ctx, ""); err == nil {
			p, err = ps.sess.Prepare(ctx)
		}
	}
	if err == nil && !ps.readTool && (len(p.Report.Steps) > 0 || p.Report.Evicted > 0) {
		// Only a step of the pipeline stores content to read back (an ingestion offload is
		// seen when it is appended, in sync).
		if err = s.syncReadTool(ps, dec.System, dec.Tools); err == nil && ps.readTool {
			p, err = ps.sess.Prepare(ctx)
		}
	}
	x.readTool = ps.readTool
	s.prepared(x, &p) // inspector_record.go
	// The client's request as the session counts it: its system and tools as Prepare found
	// them (priming included), and the original history. Counted region by region, as
	// InputAfter is: the calibrated counter of a model without an exact tokenizer scales
	// each count and rounds it up, so a total counted otherwise differs by a few tokens and
	// an unchanged request would never be seen as one.
	before := p.Report.Before.System + p.Report.Before.Tools + ps.orig
	x.before = before
	ps.mu.Unlock()
	if err != nil {
		return nil, info, err
	}
	x.window = p.Report.Window // smaller than configured once Recover learned the real window
	s.metrics.tokensBefore.WithLabelValues(string(x.format)).Observe(float64(before))
	s.metrics.tokensAfter.WithLabelValues(string(x.format)).Observe(float64(p.Report.InputAfter))
	if p.Report.PrefixChanged {
		s.metrics.prefixChanged.Inc()
	} else {
		s.metrics.prefixKept.Inc()
	}
	info = append(info, slog.Int("tokens_before", before), slog.Int("tokens_after", p.Report.InputAfter),
		slog.Int("compactions", p.Report.Compactions), slog.Bool("prefix_changed", p.Report.PrefixChanged))
	x.managed = true
	if !x.readTool && p.Report.Evicted == 0 && p.Report.SummaryVersion == 0 && len(msgs) == len(dec.Messages) &&
		len(p.Request.Messages) == len(msgs) && p.Report.InputAfter == before && x.replyFits(p.Report.InputAfter) {
		// Nothing was changed: forward the client's own bytes.
		x.sent, x.sentN = *dec, p.Report.InputAfter
		x.sent.System, x.sent.Tools, x.sent.Messages = p.Request.System, p.Request.Tools, p.Request.Messages
		info = append(info, slog.Bool("verbatim", true))
		s.metrics.verbatim.WithLabelValues(string(x.format)).Inc()
		logDecision(ctx, x.log, &p.Report, true)
		return x.body, info, nil
	}
	logDecision(ctx, x.log, &p.Report, false)
	// A rewritten request is placed and encoded before it goes: the write overlaps that.
	x.startFlush()
	// Breakpoints are placed on a rewritten request only: the client's own bytes carry its own.
	x.place(&p)
	out, err := x.encode(p.Request, p.Report.InputAfter)
	if err != nil {
		return nil, info, err
	}
	return out, info, nil
}

// encode renders req with every other body field of the client's request kept verbatim, and
// records it as the request sent, with its input tokens n when the pipeline counted them (0:
// unknown).
func (x *exchange) encode(req chat.Request, n int) ([]byte, error) {
	out := *x.dec
	out.System, out.Tools, out.Messages = req.System, req.Tools, req.Messages
	if x.format == FormatAnthropic {
		// The client's own system blocks and tool definitions, with their breakpoints (see
		// breakpoints.go); the session's copies carry what an earlier request had.
		out.System, out.Tools = x.dec.System, x.dec.Tools
		if x.readTool {
			out.Tools = withReadTool(out.Tools)
		}
	}
	counted := n
	if counted == 0 {
		counted = x.mgr.m.Config().Counter.Request(&out).Total
	}
	out.Extra = x.fitReply(out.Extra, counted)
	b, err := x.encodeBody(&out)
	if err != nil {
		return nil, err
	}
	x.sent, x.sentN = out, n
	return b, nil
}

func (x *exchange) encodeBody(out *chat.Request) ([]byte, error) {
	if x.ps == nil {
		return wire.Encode(x.format, out)
	}
	b, err := x.encodeSession(out, x.bodyBuffer())
	if err == nil {
		x.keepBody(b)
	}
	return b, err
}

// encodeSession encodes out into dst with the session's caches.
func (x *exchange) encodeSession(out *chat.Request, dst []byte) ([]byte, error) {
	switch x.format {
	case FormatAnthropic:
		return encodecache.AppendAnthropic(dst, out, x.ps.blocks, x.subs)
	case FormatResponses:
		return encodecache.AppendResponses(dst, out, x.ps.blocks)
	case FormatGemini:
		return encodecache.AppendGemini(dst, out, x.ps.blocks)
	case FormatOpenAI:
		return encodecache.AppendOpenAI(dst, out, x.ps.blocks)
	}
	return wire.Encode(x.format, out)
}

// send posts body upstream with the client's headers. The first send of the client's own
// bytes to the upstream a cut-through request was started to commits that request; any
// other aborts it first (cutthrough.go).
func (x *exchange) send(ctx context.Context, body []byte) (*http.Response, error) {
	if c := x.cut; c != nil {
		x.cut = nil
		if c.target == x.target && x.isClientBody(body) {
			t0 := time.Now()
			resp, whole, err := c.commit(x.prepareFlush())
			if whole {
				x.s.metrics.cutThrough.WithLabelValues("committed").Inc()
				d := time.Since(t0)
				x.upstreamNS += int64(d)
				x.s.metrics.upstream.WithLabelValues(string(x.format)).Observe(d.Seconds())
				return resp, err
			}
			// It failed before its last byte: the upstream has not acted on it.
			x.log.Debug("proxy: cut-through request failed before its end; sending again", slog.String("error", redact.Text(err.Error())))
			x.s.metrics.cutThrough.WithLabelValues("failed").Inc()
		} else if c.abort() {
			x.s.metrics.cutThrough.WithLabelValues("aborted").Inc()
		}
	}
	var rd io.Reader = bytes.NewReader(body)
	sb := x.bodyOf(body)
	if sb != nil {
		rd = sb.reader() // its buffer is reused once the transport has closed it (bodies.go)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.target, rd)
	if err != nil {
		if sb != nil {
			_ = rd.(io.Closer).Close()
		}
		return nil, err
	}
	if sb != nil {
		req.GetBody = func() (io.ReadCloser, error) { return sb.reader(), nil }
	}
	copyRequestHeaders(req.Header, x.r.Header)
	if an := x.nat.anthropicSide(); an != nil {
		dropBetas(req.Header, an.dropBetas)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.ContentLength = int64(len(body))
	x.startFlush()
	t0 := time.Now()
	resp, err := x.s.cfg.HTTPClient.Do(req)
	d := time.Since(t0)
	x.upstreamNS += int64(d)
	x.s.metrics.upstream.WithLabelValues(string(x.format)).Observe(d.Seconds())
	return resp, err
}

// isClientBody reports whether body is the client's own.
func (x *exchange) isClientBody(body []byte) bool {
	return len(body) == len(x.body) && len(body) > 0 && &body[0] == &x.body[0]
}

// maxErrorBody bounds how much of an upstream error body is read.
const maxErrorBody = 4 << 20

// forward sends body upstream and relays the answer, recovering from context overflows when
// the request is managed.
func (x *exchange) forward(ctx context.Context, body []byte) {
	if e := x.di.entry; e != nil {
		// What the next request of the conversation will likely be forwarded as.
		if x.isClientBody(body) {
			e.forwardedTo.Store(&x.target)
		} else {
			e.forwardedTo.Store(nil)
		}
	}
	learned := false
	for {
		resp, err := x.send(ctx, body)
		if ferr := x.awaitFlush(); ferr != nil {
			if err == nil {
				resp.Body.Close()
			}
			x.notStored()
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			msg := redact.Text(err.Error())
			x.log.Warn("proxy: upstream unreachable", slog.String("error", msg))
			writeError(x.w, x.format, http.StatusBadGateway, "api_error", "upstream unreachable: "+msg)
			return
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			errBody, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			if resp.StatusCode == http.StatusBadRequest && !learned {
				learned = true
				next, answered := x.learnNative(ctx, body, errBody)
				if answered {
					return
				}
				if next != nil {
					body = next
					continue
				}
			}
			if x.managed && provider.IsOverflow(resp.StatusCode, errBody) {
				if next, ok := x.recover(ctx, resp.StatusCode, errBody); ok {
					body = next
					continue
				}
			}
			copyResponseHeaders(x.w.Header(), resp.Header)
			x.w.WriteHeader(resp.StatusCode)
			_, _ = x.w.Write(errBody)
			return
		}
		if x.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			x.relayStream(ctx, resp)
		} else {
			x.relayJSON(ctx, resp)
		}
		return
	}
}

// recover answers an upstream overflow: a tighter request, if the Manager has recoveries left.
func (x *exchange) recover(ctx context.Context, status int, body []byte) ([]byte, bool) {
	x.ps.mu.Lock()
	p, err := x.sess.Recover(ctx, &provider.StatusError{Status: status, Body: body})
	x.ps.mu.Unlock()
	if err != nil {
		x.log.Warn("proxy: overflow recovery failed", slog.String("error", err.Error()))
		return nil, false
	}
	x.window = p.Report.Window
	x.place(&p)
	out, err := x.encode(p.Request, p.Report.InputAfter)
	if err != nil {
		return nil, false
	}
	x.recovered++
	x.log.Info("proxy: upstream overflow, retrying with a tighter request",
		slog.Int("status", status), slog.Int("tokens_after", p.Report.InputAfter))
	return out, true
}

// observeUsage feeds the provider's reported input tokens to the calibrator, and keeps the
// usage for the inspector's record of the request (inspector_record.go).
func (x *exchange) observeUsage(u wire.Usage) {
	x.noteUsage(u)
	reported := u.Input
	if !x.managed || reported <= 0 || len(x.sent.Messages) == 0 {
		return
	}
	if x.mgr.exact {
		// Prepare's report already holds the exact count of what it returned.
		est := x.sentN
		if est == 0 {
			est = x.mgr.m.Config().Counter.Request(&x.sent).Total
		}
		if est > 0 {
			x.s.metrics.usageRatio.WithLabelValues("exact").Observe(float64(reported) / float64(est))
		}
		return
	}
	var est int
	if x.ps != nil {
		est = x.ps.counted.total(x.s.cal.Base(), &x.sent)
		x.s.cal.Observe(x.model, est, reported)
	} else {
		est = x.s.cal.ObserveRequest(x.model, &x.sent, reported)
	}
	if est > 0 {
		x.s.metrics.usageRatio.WithLabelValues("heuristic").Observe(float64(reported) / float64(est))
	}
}

// sentCount counts the requests sent for one session with the calibrator's base counter
// (what the calibrator compares with the provider's reported usage, on every answer): the
// count of each message the previous request held at the same position, the same value
// (chat.Message.Shares), is taken from that request, so that counting costs what the new
// messages cost rather than a hash of the whole history. The total is the base counter's
// Request total.
type sentCount struct {
	mu     sync.Mutex
	msgs   []chat.Message // the previous request's (kept alive: see chat.Message.Shares)
	n      []int          // the count of each of msgs
	sum    int            // of n
	sys    []chat.Message
	sysN   int
	tools  []chat.Tool
	toolsN int
}

func (c *sentCount) total(base tokens.Counter, r *chat.Request) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !sharesAll(r.System, c.sys) {
		c.sys, c.sysN = r.System, 0
		for i := range r.System {
			c.sysN += base.Message(&r.System[i])
		}
	}
	if len(r.Tools) != len(c.tools) || len(r.Tools) > 0 && &r.Tools[0] != &c.tools[0] {
		c.tools, c.toolsN = r.Tools, base.Tools(r.Tools)
	}
	msgs := r.Messages
	if len(c.msgs) > 0 && len(msgs) >= len(c.msgs) && &msgs[0] == &c.msgs[0] {
		// The same slice, extended (Prepare extends its slice while nothing already sent
		// changes, and never modifies what it returned): only the new messages are counted.
		for i := len(c.msgs); i < len(msgs); i++ {
			k := base.Message(&msgs[i])
			c.n, c.sum = append(c.n, k), c.sum+k
		}
	} else {
		n, sum := make([]int, len(msgs)), 0
		for i := range msgs {
			if i < len(c.msgs) && msgs[i].Shares(&c.msgs[i]) {
				n[i] = c.n[i]
			} else {
				n[i] = base.Message(&msgs[i])
			}
			sum += n[i]
		}
		c.n, c.sum = n, sum
	}
	c.msgs = msgs
	return c.sysN + c.toolsN + tokens.ReplyPriming + c.sum
}

// sharesAll reports whether a and b hold the same messages (chat.Message.Shares).
func sharesAll(a, b []chat.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Shares(&b[i]) {
			return false
		}
	}
	return true
}

// relayJSON relays a non-streamed answer, answering ctxmgr_read calls first.
func (x *exchange) relayJSON(ctx context.Context, resp *http.Response) {
	if !x.managed && !x.nat.rewritesAnswer() {
		defer resp.Body.Close()
		copyResponseHeaders(x.w.Header(), resp.Header)
		x.w.WriteHeader(resp.StatusCode)
		relayRaw(x.w, resp.Body)
		return
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		writeError(x.w, x.format, http.StatusBadGateway, "api_error", "reading the upstream answer: "+err.Error())
		return
	}
	answer := data // the upstream's last answer, as it sent it
	for round := 0; x.readTool; round++ {
		asst, calls, mixed, ok := findReads(x.format, data)
		if !ok || len(calls) == 0 {
			break
		}
		if mixed || round >= x.s.cfg.MaxReads {
			data = stripReads(x.format, data)
			break
		}
		x.observeUsage(usageOf(x.format, answer)) // before the follow-up is counted
		answer = nil
		next, err := x.followUp(ctx, asst, calls)
		if err != nil {
			data = stripReads(x.format, data)
			break
		}
		r2, err := x.send(ctx, next)
		if err != nil {
			data = stripReads(x.format, data)
			break
		}
		d2, err := io.ReadAll(r2.Body)
		r2.Body.Close()
		if err != nil || r2.StatusCode < 200 || r2.StatusCode > 299 {
			// The follow-up failed (an error, or an answer cut short): the answer before it.
			if err != nil {
				x.log.Warn("proxy: reading the ctxmgr_read follow-up's answer failed", slog.String("error", redact.Text(err.Error())))
			}
			data = stripReads(x.format, data)
			break
		}
		resp, data, answer = r2, d2, d2
	}
	// The answer's length, and a flush, end the response on the wire: the client has it
	// before the proxy's own work after it (reading the usage, the handler's log line and
	// releases), which otherwise delayed it (net/http ends a response when its handler
	// returns).
	if an := x.nat.anthropicSide(); an != nil && an.applied != nil {
		data = withContextManagement(data, an.applied)
	}
	if an := x.nat.anthropicSide(); an != nil && an.prepend != nil {
		data = withPrepended(data, an)
	}
	copyResponseHeaders(x.w.Header(), resp.Header)
	if resp.StatusCode != http.StatusNoContent {
		x.w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	}
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write(data)
	flush(x.w)
	if answer != nil {
		x.observeUsage(usageOf(x.format, answer))
	}
}

// followUp builds the request that answers ctxmgr_read calls: the request sent, the
// assistant message that made the calls, and the results, within the window. The results may
// take up to half of the reply's reserve besides the window's free room (the follow-up's
// max_tokens is lowered to what is left, fitReply): a request near the compaction threshold
// leaves little else, and a read the model asked for is worth more than reply room it rarely
// fills.
func (x *exchange) followUp(ctx context.Context, asst chat.Message, calls []readCall) ([]byte, error) {
	counter := x.mgr.m.Config().Counter
	req := x.sent
	msgs := make([]chat.Message, 0, len(req.Messages)+1+len(calls))
	msgs = append(msgs, req.Messages...)
	msgs = append(msgs, asst)
	used := counter.Request(&chat.Request{System: req.System, Tools: req.Tools, Messages: msgs}).Total
	per, limit := readRoom(x.window, x.maxOut, used, len(calls))
	if per < 128 { // the result's header and "more" line alone take up to about 70
		return x.withoutRead()
	}
	for _, c := range calls {
		text, isErr := x.s.answerRead(ctx, x.id, x.nat.readFrom(), x.mgr, x.sess, c.Args, per, counter)
		x.reads++
		res := chat.ToolResult(c.ID, readToolName, text, isErr)
		if x.format == FormatResponses {
			res.Name = "" // outputs carry no name there: count what is sent
		}
		msgs = append(msgs, res)
	}
	next := chat.Request{System: req.System, Tools: req.Tools, Messages: msgs}
	if x.window > 0 && counter.Request(&next).Total > limit {
		return x.withoutRead()
	}
	return x.encode(next, 0)
}

// readRoom returns the tokens each of n ctxmgr_read results may take in a follow-up whose
// request, with the assistant message that made the calls, counts used tokens, and the limit
// on the follow-up's input: the window less half the reply's reserve (maxOut; fitReply lowers
// the follow-up's max_tokens to what is left) and the margin of estimated counters (2%), with
// 64 tokens for each result's framing.
func readRoom(window, maxOut, used, n int) (per, limit int) {
	limit = window - (maxOut - maxOut/2) - window/50
	return (limit - used - 64*n) / max(1, n), limit
}

// withoutRead is the follow-up when a ctxmgr_read result has no room in the window: the
// request sent before, which fit, without the read tool, so that the model answers with what
// it has. Adding the call and a "no room" result instead could exceed the window (invariant
// 2), and a placeholder must never become the assistant's reply.
func (x *exchange) withoutRead() ([]byte, error) {
	x.readTool = false
	req := x.sent
	x.log.Debug("proxy: no room for a ctxmgr_read result; asking again without the read tool")
	return x.encode(chat.Request{System: req.System, Tools: stripReadTool(req.Tools), Messages: req.Messages}, 0)
}

// usageOf returns the usage a provider reports in a non-streamed answer (wire.DecodeResponse;
// zero if it reports none).
func usageOf(f Format, data []byte) wire.Usage {
	r, err := wire.DecodeResponse(f, data)
	if err != nil || !r.HasUsage {
		return wire.Usage{}
	}
	return r.Usage
}

// usageInput is the usage object of a streamed event (zero if none).
func usageInput(f Format, raw json.RawMessage) wire.Usage {
	u, _ := wire.DecodeUsage(f, raw)
	return u
}
