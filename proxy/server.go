package proxy

import (
	"cmp"
	"container/list"
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
	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/tokens"
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

func boolField(extra map[string]json.RawMessage, key string) bool {
	var b bool
	_ = json.Unmarshal(extra[key], &b)
	return b
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

func (e *unmanagedError) Error() string {
	if e.err == nil {
		return e.reason
	}
	return e.err.Error()
}
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
