package serveconfig

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Limits are the HTTP server's timeouts and its cap on concurrent connections. Zero fields
// take the defaults below; a negative duration disables that timeout.
//
//	ReadHeaderTimeout  10s   to read a request's headers
//	ReadTimeout        60s   to read a whole request, body included
//	WriteTimeout       60s   for a write of the answer to make progress: a non-streamed answer
//	                         must be written within it once the upstream has answered; a stream
//	                         gets it anew for every event, so it can run as long as the upstream
//	                         streams (the wait for the upstream is bounded by UpstreamTimeout)
//	IdleTimeout        60s   a keep-alive connection waits for its next request
//	MaxConns           512   connections served at once; more wait in the listen backlog
type Limits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxConns          int
}

// The defaults of Limits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxConns          = 512
)

// WithDefaults returns l with zero fields set to the defaults and negative durations to 0
// (no timeout).
func (l Limits) WithDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0
		}
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultReadTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// Validate reports a negative MaxConns.
func (l Limits) Validate() error {
	if l.MaxConns < 0 {
		return fmt.Errorf("proxy: max connections must not be negative, got %d", l.MaxConns)
	}
	return nil
}

// NewHTTPServer returns an http.Server for h with l's timeouts (defaults filled in). Its
// write timeout is applied per write (see Limits), not by http.Server.WriteTimeout, which
// would cut streams and count the wait for the upstream. errorLog may be nil.
func NewHTTPServer(h http.Handler, l Limits, errorLog *log.Logger) *http.Server {
	l = l.WithDefaults()
	if l.WriteTimeout > 0 {
		h = writeDeadlines(h, l.WriteTimeout)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		ErrorLog:          errorLog,
	}
}

// LimitListener returns ln serving at most l.MaxConns connections at once (defaults filled
// in; the rest wait to be accepted).
func LimitListener(ln net.Listener, l Limits) net.Listener {
	l = l.WithDefaults()
	if l.MaxConns <= 0 {
		return ln
	}
	return netutil.LimitListener(ln, l.MaxConns)
}

// writeDeadlines gives every write of an answer d to complete: a client that stops reading
// is disconnected after d, whether the answer is one JSON body or a long stream.
func writeDeadlines(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}, r)
	})
}

type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *deadlineWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(b)
}

func (w *deadlineWriter) Flush() {
	w.extend()
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
