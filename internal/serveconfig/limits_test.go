package serveconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/proxy"
	"github.com/ctxmgr/ctxmgr/store"
)

// proxyHandler returns the handler of a proxy in front of a fake upstream.
func proxyHandler(t *testing.T) http.Handler {
	t.Helper()
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{}))
	t.Cleanup(up.Close)
	srv, err := proxy.New(proxy.Config{UpstreamOpenAI: up.URL, UpstreamAnthropic: up.URL, Store: store.NewMemory(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Handler()
}

// serveLimits serves h with l on a loopback listener, as ctxmgr serve does.
func serveLimits(t *testing.T, h http.Handler, l Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := NewHTTPServer(h, l, nil)
	go func() { _ = hs.Serve(LimitListener(ln, l)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes c within d (reading and discarding
// whatever it answers first, such as a 408).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestLimitsStalledBody: a connection that sends its headers and stalls the body is closed
// after the read timeout; a keep-alive connection left idle is closed after the idle timeout.
func TestLimitsStalledBody(t *testing.T) {
	addr := serveLimits(t, proxyHandler(t), Limits{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})

	var conns []net.Conn
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
		conns = append(conns, c)
	}
	for i, c := range conns {
		if !closedWithin(c, 3*time.Second) {
			t.Fatalf("connection %d with a stalled body still open 3 s after a 300 ms read timeout", i)
		}
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !closedWithin(c, 3*time.Second) {
		t.Fatal("idle keep-alive connection still open 3 s after a 300 ms idle timeout")
	}
}

// TestLimitsMaxConns: no more than MaxConns connections are served at once.
func TestLimitsMaxConns(t *testing.T) {
	addr := serveLimits(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
		Limits{MaxConns: 2, IdleTimeout: time.Minute})
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatal(err)
		}
		held = append(held, c) // kept alive, idle
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	fmt.Fprintf(third, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	br := bufio.NewReader(third)
	if _, err := br.Peek(1); err == nil {
		t.Fatal("a third connection was served while two were open with MaxConns 2")
	}
	held[0].Close()
	_ = third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("third connection after one closed: %v %v", resp, err)
	}
}

// TestLimitsWriteTimeoutPerWrite: the write timeout bounds each write, not the answer: a
// stream that runs longer than it completes.
func TestLimitsWriteTimeoutPerWrite(t *testing.T) {
	addr := serveLimits(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 8; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
		}
	}), Limits{WriteTimeout: 150 * time.Millisecond})
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(b), "data: 7") {
		t.Fatalf("stream of 400 ms under a 150 ms write timeout: %q %v", b, err)
	}
}

func TestLimitsDefaults(t *testing.T) {
	l := Limits{IdleTimeout: -1}.WithDefaults()
	if l.ReadTimeout != DefaultReadTimeout || l.ReadHeaderTimeout != DefaultReadHeaderTimeout || l.WriteTimeout != DefaultWriteTimeout ||
		l.IdleTimeout != 0 || l.MaxConns != DefaultMaxConns {
		t.Fatalf("defaults: %+v", l)
	}
	if (Limits{MaxConns: -1}).Validate() == nil {
		t.Fatal("negative MaxConns accepted")
	}
}
