package serveconfig

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLoadFile: the JSON config file parses; an unknown field is an error.
func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctxmgr.json")
	if err := os.WriteFile(path, []byte(`{"listen":"127.0.0.1:0","upstream_openai":"http://a","window":100000,"upstream_timeout":"90s",
		"shutdown_timeout":5,"routes":[{"model_prefix":"local-","format":"openai","url":"http://b"}],
		"models":[{"prefix":"gpt-4o","window":128000,"max_output":16384}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fc.Window != 100000 || len(fc.Routes) != 1 || fc.Models[0].Window != 128000 || time.Duration(fc.UpstreamTimeout) != 90*time.Second || time.Duration(fc.ShutdownTimeout) != 5*time.Second {
		t.Fatalf("%+v", fc)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"windw":1}`), 0o600)
	if _, err := LoadFile(bad); err == nil {
		t.Errorf("unknown field accepted")
	}
}
