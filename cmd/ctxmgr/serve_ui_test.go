package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeInspectorSafety: `serve` on an address beyond loopback refuses /ui/ unless
// --ui-token is given, and then requires the token; on loopback it serves it without one.
func TestServeInspectorSafety(t *testing.T) {
	get := func(url, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	local := func(addr string) string {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		return "http://127.0.0.1:" + port
	}
	db := func() string { return "sqlite:" + filepath.Join(t.TempDir(), "x.db") }

	addr, log := startServe(t, "--upstream-openai", "http://127.0.0.1:1", "--store", db(), "--listen", "0.0.0.0:0")
	if code := get(local(addr)+"/ui/", ""); code != http.StatusForbidden {
		t.Errorf("all interfaces, no token: /ui/ answered %d, want 403", code)
	}
	if code := get(local(addr)+"/ui/api/sessions", ""); code != http.StatusForbidden {
		t.Errorf("all interfaces, no token: /ui/api/sessions answered %d, want 403", code)
	}
	if !strings.Contains(log.String(), "session inspector off") {
		t.Errorf("the log does not say the inspector is off: %s", log.String())
	}

	addr, _ = startServe(t, "--upstream-openai", "http://127.0.0.1:1", "--store", db(), "--listen", "0.0.0.0:0", "--ui-token", "s3cret")
	if code := get(local(addr)+"/ui/", ""); code != http.StatusUnauthorized {
		t.Errorf("with a token, none given: %d, want 401", code)
	}
	if code := get(local(addr)+"/ui/api/sessions", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("with a token, a wrong one given: %d, want 401", code)
	}
	if code := get(local(addr)+"/ui/api/sessions", "s3cret"); code != http.StatusOK {
		t.Errorf("with the token: %d, want 200", code)
	}

	// The configuration file's "ui_token" is the flag's.
	conf := filepath.Join(t.TempDir(), "ctxmgr.json")
	if err := os.WriteFile(conf, []byte(`{"ui_token": "from-the-file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ = startServe(t, "--upstream-openai", "http://127.0.0.1:1", "--store", db(), "--listen", "0.0.0.0:0", "--config", conf)
	if code := get(local(addr)+"/ui/api/sessions", ""); code != http.StatusUnauthorized {
		t.Errorf("token from the file, none given: %d, want 401", code)
	}
	if code := get(local(addr)+"/ui/api/sessions", "from-the-file"); code != http.StatusOK {
		t.Errorf("token from the file: %d, want 200", code)
	}

	addr, _ = startServe(t, "--upstream-openai", "http://127.0.0.1:1", "--store", db())
	if code := get("http://"+addr+"/ui/", ""); code != http.StatusOK {
		t.Errorf("loopback: /ui/ answered %d, want 200", code)
	}
}
