package serveconfig

import (
	"testing"

	"github.com/ctxmgr/ctxmgr/proxy"
)

func TestParseProviderContext(t *testing.T) {
	got, err := ParseProviderContext([]string{"local", "https://relay.example=passthrough", "api.openai.com=auto"})
	if err != nil || got["*"] != proxy.ProviderContextLocal || got["https://relay.example"] != proxy.ProviderContextPassthrough || got["api.openai.com"] != proxy.ProviderContextAuto {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"never", "=local", "x=sometimes"} {
		if _, err := ParseProviderContext([]string{bad}); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}
