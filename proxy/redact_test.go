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

func TestRedactURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"/v1/models?api-key=sk-abc123", "/v1/models?api-key=REDACTED"},
		{"https://api.example.com/v1/x?key=AIza123&alt=sse", "https://api.example.com/v1/x?key=REDACTED&alt=sse"},
		{"https://h/p?access_token=t1&b=2&X-Amz-Signature=abc&sig=zz&client_secret=s", "https://h/p?access_token=REDACTED&b=2&X-Amz-Signature=REDACTED&sig=REDACTED&client_secret=REDACTED"},
		{"postgres://u:pw@db:5432/ctx?sslmode=disable", "postgres://u:REDACTED@db:5432/ctx?sslmode=disable"},
		{"postgres://u@db/ctx?password=pw&sslmode=require", "postgres://u@db/ctx?password=REDACTED&sslmode=require"},
		{"https://sk-proj-0123456789@api.example.com/v1", "https://REDACTED@api.example.com/v1"},
		{"host=db user=u password='p w' sslmode=disable", "host=db user=u password=REDACTED sslmode=disable"},
		{"sqlite:ctxmgr.db", "sqlite:ctxmgr.db"},
		{"files:/var/lib/ctxmgr", "files:/var/lib/ctxmgr"},
		{"https://api.openai.com", "https://api.openai.com"},
		{"/v1/models?limit=10&order=asc", "/v1/models?limit=10&order=asc"},
		{"%zz://u:pw@h/?token=x", "%zz://u:REDACTED@h/?token=REDACTED"},
		{"", ""},
	}
	for _, c := range cases {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	msg := `Get "http://127.0.0.1:1/v1/models?api-key=sk-abc": dial tcp 127.0.0.1:1: connect: connection refused`
	if got := RedactText(msg); strings.Contains(got, "sk-abc") || !strings.Contains(got, "connection refused") || !strings.Contains(got, "/v1/models?api-key=REDACTED") {
		t.Errorf("RedactText: %q", got)
	}
}

func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{"/v1/models?api-key=sk-1", "postgres://u:pw@h/db?password=x", "host=h password=p", "https://h/?a=1&&=&key", "%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := RedactURL(s)
		if strings.Contains(s, "sk-secret-value") && strings.Contains(s, "?api-key=sk-secret-value") && strings.Contains(out, "sk-secret-value") {
			t.Fatalf("%q kept the key: %q", s, out)
		}
		_ = RedactText(s)
	})
}

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
