package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
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
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	msg := `Get "http://127.0.0.1:1/v1/models?api-key=sk-abc": dial tcp 127.0.0.1:1: connect: connection refused`
	if got := Text(msg); strings.Contains(got, "sk-abc") || !strings.Contains(got, "connection refused") || !strings.Contains(got, "/v1/models?api-key=REDACTED") {
		t.Errorf("RedactText: %q", got)
	}
}

func FuzzURL(f *testing.F) {
	for _, s := range []string{"/v1/models?api-key=sk-1", "postgres://u:pw@h/db?password=x", "host=h password=p", "https://h/?a=1&&=&key", "%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := URL(s)
		if strings.Contains(s, "sk-secret-value") && strings.Contains(s, "?api-key=sk-secret-value") && strings.Contains(out, "sk-secret-value") {
			t.Fatalf("%q kept the key: %q", s, out)
		}
		_ = Text(s)
	})
}
