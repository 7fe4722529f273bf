package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeOperations runs `ctxmgr serve` with the operator flags: the secrets of URLs are
// redacted in the "listening" line, --pprof serves profiles, /metrics has the Go runtime,
// --log-level debug says what the pipeline decided, and --read-timeout closes a connection
// whose body stalls.
func TestServeOperations(t *testing.T) {
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{}))
	defer up.Close()
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addr")
	pprofAddr := freePort(t)
	upURL := strings.Replace(up.URL, "http://", "http://user:upstream-pw@", 1) + "/?api_key=sk-in-url"
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"serve", "--listen", "127.0.0.1:0", "--addr-file", addrFile, "--store", "files:" + filepath.Join(dir, "data"),
			"--upstream-openai", upURL, "--pprof", pprofAddr, "--log-level", "debug", "--read-timeout", "300ms", "--idle-timeout", "300ms"},
			strings.NewReader(""), io.Discard, &stderr)
	}()
	var addr string
	for i := 0; i < 200 && addr == ""; i++ {
		if b, err := os.ReadFile(addrFile); err == nil && strings.HasSuffix(string(b), "\n") {
			addr = strings.TrimSpace(string(b))
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d:\n%s", code, stderr.String())
		case <-time.After(25 * time.Millisecond):
		}
	}
	if addr == "" {
		t.Fatalf("serve did not start:\n%s", stderr.String())
	}
	defer func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop on SIGINT")
		}
	}()

	// A chat request, logged at debug level with the pipeline's decision.
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"hello, no tools"}]}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d", resp.StatusCode)
	}
	for _, u := range []string{"http://" + addr + "/metrics", "http://" + pprofAddr + "/debug/pprof/goroutine?debug=1"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.HasSuffix(u, "/metrics") && !strings.Contains(string(b), "\ngo_goroutines ") {
			t.Errorf("%s: %d %.200s", u, resp.StatusCode, b)
		}
	}

	// A stalled body is cut at the read timeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("stalled body: connection still open 3 s after a 300 ms read timeout (%v)", err)
	}

	logs := stderr.String()
	for _, secret := range []string{"upstream-pw", "sk-in-url"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs hold %q:\n%s", secret, logs)
		}
	}
	for _, want := range []string{"ctxmgr serve: listening", "upstream_openai=", "REDACTED", "read_timeout=300ms", "pprof listening", `msg="proxy: pipeline decided"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %q:\n%s", want, logs)
		}
	}
}
