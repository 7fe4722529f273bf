package proxy

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSecretsInURLsNotLoggedOrEchoed: a key in the query of a request to a path the proxy
// passes through, with the upstream down, reaches neither the logs nor the error body.
func TestSecretsInURLsNotLoggedOrEchoed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs bytes.Buffer
	srv, err := New(Config{UpstreamOpenAI: down, UpstreamAnthropic: down, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		HTTPClient: &http.Client{Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	px := hs.URL
	for _, path := range []string{"/v1/models?api-key=sk-secret-1", "/v1/chat/completions?key=sk-secret-1"} {
		method := http.MethodGet
		body := strings.NewReader("")
		if strings.Contains(path, "chat") {
			method = http.MethodPost
			body = strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
		}
		req, _ := http.NewRequest(method, px+path, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, b.String())
		}
		if strings.Contains(b.String(), "sk-secret-1") || !strings.Contains(b.String(), "REDACTED") {
			t.Errorf("%s: body returned: %s", path, b.String())
		}
	}
	if strings.Contains(logs.String(), "sk-secret-1") {
		t.Errorf("the key reached the logs:\n%s", logs.String())
	}
}
