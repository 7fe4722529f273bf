// Package serveconfig holds what `ctxmgr serve` reads and sets up around the proxy: the JSON
// configuration file (File, LoadFile), the syntax of the --provider-context flag
// (ParseProviderContext), and the HTTP server's timeouts and connection cap (Limits,
// NewHTTPServer, LimitListener). A program that embeds the proxy builds its own http.Server
// around proxy.Server.Handler, or uses proxy.NewTransport.
package serveconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/ctxmgr/ctxmgr/proxy"
)

// File is the JSON configuration file of `ctxmgr serve --config FILE`. Command-line
// flags given explicitly override it. Example:
//
//	{
//	  "listen": "127.0.0.1:8088",
//	  "upstream_openai": "https://api.openai.com",
//	  "upstream_anthropic": "https://api.anthropic.com",
//	  "upstream_gemini": "https://generativelanguage.googleapis.com",
//	  "store": "sqlite:./ctxmgr.db",
//	  "window": 200000,
//	  "preset": "default",
//	  "max_body_bytes": 33554432,
//	  "upstream_timeout": "10m",
//	  "shutdown_timeout": "30s",
//	  "routes": [{"model_prefix": "llama", "format": "openai", "url": "http://127.0.0.1:8080"}],
//	  "models": [{"prefix": "gpt-4o", "window": 128000, "max_output": 16384},
//	             {"prefix": "claude-", "window": 200000, "max_output": 32000}],
//	  "summarizer": {"format": "openai", "model": "gpt-4o-mini", "key_env": "OPENAI_API_KEY", "timeout": "60s"}
//	}
type File struct {
	Listen            string              `json:"listen,omitempty"`
	UpstreamOpenAI    string              `json:"upstream_openai,omitempty"`
	UpstreamAnthropic string              `json:"upstream_anthropic,omitempty"`
	UpstreamGemini    string              `json:"upstream_gemini,omitempty"`
	Store             string              `json:"store,omitempty"`
	Window            int                 `json:"window,omitempty"`
	MaxOutput         int                 `json:"max_output,omitempty"`
	Preset            string              `json:"preset,omitempty"`
	MaxBodyBytes      int64               `json:"max_body_bytes,omitempty"`
	UpstreamTimeout   Duration            `json:"upstream_timeout,omitempty"`
	ShutdownTimeout   Duration            `json:"shutdown_timeout,omitempty"`
	DisableReadTool   bool                `json:"disable_read_tool,omitempty"`
	Routes            []proxy.Route       `json:"routes,omitempty"`
	Models            []proxy.ModelLimits `json:"models,omitempty"`
	// ProviderContext is proxy.Config.ProviderContext: {"*": "local", "https://relay.example": "passthrough"}.
	ProviderContext map[string]proxy.ProviderContextMode `json:"provider_context,omitempty"`
	// Summarizer configures an LLM summarizer (`ctxmgr serve --summarizer-*`); absent: the
	// extractive one.
	Summarizer *Summarizer `json:"summarizer,omitempty"`
	// UIToken is proxy.Config.UIToken (`ctxmgr serve --ui-token`).
	UIToken string `json:"ui_token,omitempty"`
}

// Summarizer is the "summarizer" object of the configuration file: the LLM that writes
// summaries. Example:
//
//	"summarizer": {"format": "openai", "model": "gpt-4o-mini", "key_env": "OPENAI_API_KEY", "timeout": "60s"}
//
// Format defaults to the format of the one upstream configured (openai when both are); URL
// defaults to that upstream ("/v1" appended for openai); KeyEnv names the environment
// variable holding the API key (default OPENAI_API_KEY or ANTHROPIC_API_KEY; "" sends no
// key, for a local server). Timeout bounds each attempt (default 60s).
type Summarizer struct {
	Format  string   `json:"format,omitempty"`
	Model   string   `json:"model"`
	URL     string   `json:"url,omitempty"`
	KeyEnv  *string  `json:"key_env,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

// Duration is a time.Duration that reads "30s" or a number of seconds in JSON.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: want \"30s\" or seconds, got %s", b)
	}
	*d = Duration(n * float64(time.Second))
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadFile reads a JSON configuration file; unknown fields are an error.
func LoadFile(path string) (File, error) {
	var fc File
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return fc, fmt.Errorf("%s: %w", path, err)
	}
	return fc, nil
}
