package serveconfig

import (
	"fmt"
	"strings"

	"github.com/ctxmgr/ctxmgr/proxy"
)

// ParseProviderContext reads `ctxmgr serve --provider-context` values: "MODE" (every
// upstream, the "*" key) or "UPSTREAM=MODE" (an upstream's base URL or host).
func ParseProviderContext(specs []string) (map[string]proxy.ProviderContextMode, error) {
	out := map[string]proxy.ProviderContextMode{}
	for _, spec := range specs {
		key, mode := "*", spec
		if i := strings.LastIndexByte(spec, '='); i >= 0 {
			key, mode = strings.TrimSpace(spec[:i]), spec[i+1:]
		}
		m, err := proxy.ParseProviderContextMode(mode)
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, fmt.Errorf("proxy: provider context %q: an empty upstream", spec)
		}
		out[key] = m
	}
	return out, nil
}
