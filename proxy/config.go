package proxy

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/wire"
)

// Format names the API format of an endpoint: the wire format of its bodies (package wire
// owns the formats; this is the same type).
type Format = wire.Format

// Formats.
const (
	FormatOpenAI    = wire.OpenAI
	FormatAnthropic = wire.Anthropic
	// FormatResponses is the OpenAI Responses API (POST /v1/responses). Its requests go to
	// the OpenAI upstream, and routes of format "openai" apply to it.
	FormatResponses = wire.Responses
	// FormatGemini is the Gemini API (POST /v1beta/models/{model}:generateContent and
	// :streamGenerateContent). Its requests go to Config.UpstreamGemini.
	FormatGemini = wire.Gemini
)

// Route sends the requests of one format whose model starts with ModelPrefix to URL. The
// longest matching prefix wins; requests no route matches go to Config.UpstreamOpenAI or
// Config.UpstreamAnthropic.
type Route struct {
	ModelPrefix string `json:"model_prefix"`
	Format      Format `json:"format"`
	URL         string `json:"url"`
}

// ModelLimits overrides the window and the default reply size for models whose name starts
// with Prefix (longest prefix wins).
type ModelLimits struct {
	Prefix    string `json:"prefix"`
	Window    int    `json:"window"`
	MaxOutput int    `json:"max_output,omitempty"`
}

// Config configures a Server (New) or a Transport (NewTransport). The zero value of every
// field means its documented default, and a Config means the same wherever it came from.
// Turning a mechanism off is an explicit switch (DisableDecodeCache, DisableCutThrough,
// DisableReadTool); a negative number is an error (*ConfigError), never a way to say off.
type Config struct {
	// UpstreamOpenAI and UpstreamAnthropic are the base URLs requests are forwarded to, e.g.
	// "https://api.openai.com" and "https://api.anthropic.com": http:// or https:// with a
	// host. The request path is appended ("/v1/chat/completions"); a base that already ends
	// in "/v1" is not doubled. Default: none; a Server needs at least one upstream (these,
	// UpstreamGemini or Routes).
	UpstreamOpenAI    string
	UpstreamAnthropic string
	// UpstreamGemini is the base URL Gemini API requests are forwarded to, e.g.
	// "https://generativelanguage.googleapis.com" (the path, "/v1beta/models/...", is
	// appended). Default: none.
	UpstreamGemini string
	// Routes choose an upstream by model prefix (config-file alternative). Default: none.
	Routes []Route

	// Store keeps sessions. Default: a new in-memory store (nothing survives a restart).
	Store store.Store
	// SharedStore says that other instances write the Store's sessions too (PostgreSQL
	// behind several proxies; ctxmgr serve sets it for a postgres:// store). A request's new
	// messages are then written before it goes upstream, so that a write another instance
	// contended is retried before any upstream call (see conflict.go). Otherwise (the
	// default: this Server is the only writer, as with a SQLite database or a files
	// directory) they are written while the upstream call is under way
	// (ctxmgr.Session.AppendDeferred), and the answer is relayed only once they are stored:
	// the write costs no latency beyond what exceeds the upstream's own time. Should another
	// writer contend such a write all the same, the upstream's answer is dropped and the
	// client gets 503 and retries: nothing is lost and nothing goes unmanaged, but the
	// upstream call was wasted.
	SharedStore bool
	// Window is the context window in tokens of models that no Models entry names. Zero: the
	// built-in table of common models (gpt-4o 128000, claude-* 200000, ...; see
	// docs/configuration.md), and 200000 for the others. A non-zero Window applies to every
	// model no Models entry names.
	Window int
	// MaxOutput is the reply size in tokens reserved when a request carries no max_tokens /
	// max_completion_tokens. Zero: the budget default (32000, at most a quarter of the
	// window).
	MaxOutput int
	// Models are per-model overrides of Window and MaxOutput (longest prefix wins). Default:
	// none.
	Models []ModelLimits
	// Preset names the ctxmgr preset (ctxmgr.Presets). Zero: "default".
	Preset string
	// Summarizer, if set, replaces the preset's (extractive) summarizer. Default: none.
	Summarizer summarize.Summarizer
	// SummarizerName describes Summarizer in /context, e.g. "LLM gpt-4o-mini (openai) at
	// https://api.openai.com/v1, ...". Zero: "extractive" without a Summarizer, "custom"
	// with one.
	SummarizerName string
	// DecodeCacheBytes bounds the request bodies kept (the capacity of their buffers) so
	// that the next request of a conversation is decoded only where it differs (see
	// decode.go). Zero: 64 MiB. DisableDecodeCache turns the cache off.
	DecodeCacheBytes int
	// DisableDecodeCache turns the decode cache off: every body is decoded whole. It turns
	// cut-through forwarding off too (the cache holds its prediction). Default false.
	DisableDecodeCache bool
	// CutThroughBytes: a body of at least this many bytes whose conversation's previous body
	// was forwarded as the client sent it starts upstream while it is read, all but its last
	// byte, which goes once the proxy has decided to forward it as it is (see cutthrough.go;
	// the decode cache holds the prediction). Zero: 32 KiB for a Server (bodies of 1 KiB or
	// less never are); for a Transport, cut-through is off unless CutThroughBytes is set.
	// DisableCutThrough turns it off.
	CutThroughBytes int
	// DisableCutThrough turns cut-through forwarding off: every body is read whole before
	// anything goes upstream. Default false.
	DisableCutThrough bool
	// Tune, if set, adjusts each Manager's configuration after the preset is applied: a
	// program that embeds the proxy declares its agent's own tools there, say (see
	// ExampleConfig_tune). The configuration is the preset's (ctxmgr.Preset) with what the
	// proxy sets: Prices, Store, Logger, OnEvent, the Counter unless the preset has its own,
	// Summarizer when the proxy has one, and ToolResultCap at most the
	// window. As in any ctxmgr.Config, a zero field means its default (ctxmgr.New fills it).
	// With an exact counter the proxy sets Budget.NoSafetyMargin: a Tune that sets
	// Budget.SafetyMargin sets NoSafetyMargin to false too. Default: none.
	Tune func(*ctxmgr.Config)

	// MaxBodyBytes bounds a request body in bytes; larger ones get 413. Zero: 32 MiB.
	MaxBodyBytes int64
	// UpstreamTimeout bounds the wait for the upstream's response headers (a stream then runs
	// as long as the upstream streams). Zero: 10 minutes. Ignored when HTTPClient is set.
	UpstreamTimeout time.Duration
	// HTTPClient sends upstream requests. Default: a client with UpstreamTimeout as its
	// response-header timeout and no overall timeout. For NewTransport, its Transport is also
	// the base transport of the requests the Transport does not manage; default there: a
	// client over http.DefaultTransport.
	HTTPClient *http.Client
	// Logger receives structured logs (one record per request, with the session id). API keys
	// and other header values are never logged. Default (nil): slog.Default().
	Logger *slog.Logger
	// Registry receives the Prometheus metrics; /metrics serves it when it is also a
	// prometheus.Gatherer. Default: a registry of the Server's own.
	Registry prometheus.Registerer

	// MaxSessions bounds the sessions kept in memory (least recently used are dropped and
	// reloaded from the Store when they come back). A session a request is using is never
	// dropped: the cache holds more while more are in use. Zero: 1024.
	MaxSessions int
	// DisableReadTool turns off the ctxmgr_read tool (see the package documentation): offload
	// references then only name Store locations (use a files store in a directory the agent
	// can read). Default false.
	DisableReadTool bool
	// MaxReads bounds the ctxmgr_read round trips answered for one client request. Zero: 3.
	// DisableReadTool turns the tool off.
	MaxReads int
	// ProviderContext chooses, per upstream, who answers the providers' own context
	// management (native.go): keys are upstream base URLs as configured, their hosts, or "*"
	// for every upstream; absent upstreams are ProviderContextAuto. Default: none (auto).
	ProviderContext map[string]ProviderContextMode

	// UILoopback says that the Handler is served on a loopback address only (ctxmgr serve
	// sets it from its listen address): the session inspector (/ui/, see inspector.go) is
	// then served without a token. Otherwise, the default, it is served only when UIToken
	// is set, and /ui/ answers 403.
	UILoopback bool
	// UIToken, if set, must be carried by every inspector request, on any address: as
	// "Authorization: Bearer TOKEN", or as the cookie a first "?token=TOKEN" sets. Default:
	// none.
	UIToken string
}

// ConfigError reports an invalid Config field: New and NewTransport return one for the first
// they find. errors.Is(err, ctxmgr.ErrInvalidConfig) holds.
type ConfigError struct {
	// Field names the field at fault as it is written in Go: "MaxBodyBytes", "Routes[1].URL",
	// "UpstreamOpenAI", ...
	Field string
	// Reason says what is wrong, with the values.
	Reason string
}

func (e *ConfigError) Error() string { return "proxy: " + e.Field + ": " + e.Reason }

// Unwrap returns ctxmgr.ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ctxmgr.ErrInvalidConfig }

func configErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func (c Config) withDefaults() Config {
	if c.Store == nil {
		c.Store = store.NewMemory()
	}
	if c.Preset == "" {
		c.Preset = ctxmgr.PresetDefault
	}
	if c.SummarizerName == "" {
		c.SummarizerName = "extractive"
		if c.Summarizer != nil {
			c.SummarizerName = "custom"
		}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = 10 * time.Minute
	}
	if c.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = c.UpstreamTimeout
		tr.MaxIdleConnsPerHost = 64
		c.HTTPClient = &http.Client{Transport: tr}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = 1024
	}
	if c.MaxReads == 0 {
		c.MaxReads = 3
	}
	if c.DecodeCacheBytes == 0 && !c.DisableDecodeCache {
		c.DecodeCacheBytes = 64 << 20
	}
	if c.CutThroughBytes == 0 {
		c.CutThroughBytes = 32 << 10
	}
	return c
}

// decodeCacheLimit is the decode cache's bound in bytes: 0 when it is off.
func (c *Config) decodeCacheLimit() int {
	if c.DisableDecodeCache {
		return 0
	}
	return c.DecodeCacheBytes
}

// validate checks c and returns the first invalid field as a *ConfigError; addressed: the
// requests name their upstream (Transport), none need be configured.
func (c Config) validate(addressed bool) error {
	if !addressed && c.UpstreamOpenAI == "" && c.UpstreamAnthropic == "" && c.UpstreamGemini == "" && len(c.Routes) == 0 {
		return configErr("UpstreamOpenAI", "no upstream: set UpstreamOpenAI, UpstreamAnthropic, UpstreamGemini or Routes")
	}
	for _, u := range []struct{ field, url string }{
		{"UpstreamOpenAI", c.UpstreamOpenAI}, {"UpstreamAnthropic", c.UpstreamAnthropic}, {"UpstreamGemini", c.UpstreamGemini},
	} {
		if u.url != "" && !isHTTPURL(u.url) {
			return configErr(u.field, "%q: want an http:// or https:// URL with a host", u.url)
		}
	}
	if !ctxmgr.IsPreset(c.Preset) {
		return configErr("Preset", "unknown preset %q (known: %v)", c.Preset, ctxmgr.Presets())
	}
	for i, r := range c.Routes {
		if r.Format != FormatOpenAI && r.Format != FormatAnthropic && r.Format != FormatGemini {
			return configErr(fmt.Sprintf("Routes[%d].Format", i), "route %q: format %q must be openai, anthropic or gemini", r.ModelPrefix, r.Format)
		}
		if !isHTTPURL(r.URL) {
			return configErr(fmt.Sprintf("Routes[%d].URL", i), "route %q: url %q: want an http:// or https:// URL with a host", r.ModelPrefix, r.URL)
		}
	}
	for i, m := range c.Models {
		if m.Window <= 0 || m.MaxOutput < 0 {
			return configErr(fmt.Sprintf("Models[%d]", i), "model limits %q: window %d must be positive, max_output %d not negative", m.Prefix, m.Window, m.MaxOutput)
		}
	}
	for k, m := range c.ProviderContext {
		if _, err := ParseProviderContextMode(string(m)); err != nil {
			return configErr(fmt.Sprintf("ProviderContext[%q]", k), "%v", err)
		}
	}
	for _, n := range []struct {
		field string
		v     int64
		off   string // the switch that turns it off, if any
	}{
		{"Window", int64(c.Window), ""}, {"MaxOutput", int64(c.MaxOutput), ""},
		{"DecodeCacheBytes", int64(c.DecodeCacheBytes), "DisableDecodeCache"},
		{"CutThroughBytes", int64(c.CutThroughBytes), "DisableCutThrough"},
		{"MaxBodyBytes", c.MaxBodyBytes, ""}, {"UpstreamTimeout", int64(c.UpstreamTimeout), ""},
		{"MaxSessions", int64(c.MaxSessions), ""}, {"MaxReads", int64(c.MaxReads), "DisableReadTool"},
	} {
		switch {
		case n.v < 0 && n.off != "":
			return configErr(n.field, "%d < 0 (0 means the default; %s turns it off)", n.v, n.off)
		case n.v < 0:
			return configErr(n.field, "%d < 0 (0 means the default)", n.v)
		}
	}
	return nil
}

// isHTTPURL reports whether raw is an absolute http or https URL with a host.
func isHTTPURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// upstream returns the base URL for a request of format f and model.
func (c *Config) upstream(f Format, model string) string {
	best, n := "", -1
	for _, r := range c.Routes {
		if (r.Format == f || f == FormatResponses && r.Format == FormatOpenAI) && strings.HasPrefix(model, r.ModelPrefix) && len(r.ModelPrefix) > n {
			best, n = r.URL, len(r.ModelPrefix)
		}
	}
	if n >= 0 {
		return best
	}
	switch f {
	case FormatAnthropic:
		return c.UpstreamAnthropic
	case FormatGemini:
		return c.UpstreamGemini
	}
	return c.UpstreamOpenAI
}

// knownWindows are the context windows of common models, used when no Models entry matches
// (longest prefix wins; a "provider/" prefix such as "openai/" is ignored). They are the
// providers' documented figures, rounded down where they vary by release, so that a request is
// never sent above a model's limit just because the operator did not configure it; the
// --window flag (Config.Window) covers every other model.
var knownWindows = []ModelLimits{
	{Prefix: "gpt-3.5-turbo", Window: 16385},
	{Prefix: "gpt-4", Window: 8192},
	{Prefix: "gpt-4-32k", Window: 32768},
	{Prefix: "gpt-4-turbo", Window: 128000},
	{Prefix: "gpt-4-1106", Window: 128000},
	{Prefix: "gpt-4-0125", Window: 128000},
	{Prefix: "gpt-4o", Window: 128000},
	{Prefix: "chatgpt-4o", Window: 128000},
	{Prefix: "gpt-4.1", Window: 1000000},
	{Prefix: "gpt-5", Window: 400000},
	{Prefix: "o1", Window: 200000},
	{Prefix: "o1-mini", Window: 128000},
	{Prefix: "o3", Window: 200000},
	{Prefix: "o4-mini", Window: 200000},
	{Prefix: "claude-", Window: 200000},
	{Prefix: "gemini-", Window: 1000000},
	{Prefix: "gemini-1.5-pro", Window: 2000000},
	{Prefix: "gemini-2.0-flash", Window: 1048576},
	{Prefix: "gemini-2.5-", Window: 1048576},
	{Prefix: "gemini-3-", Window: 1048576},
	{Prefix: "deepseek-", Window: 64000},
}

// limits returns the window and default reply size for a model: the operator's Models entry
// with the longest matching prefix, else Window when it is set, else the known window of the
// model, else 200000.
func (c *Config) limits(model string) (window, maxOutput int) {
	window, maxOutput = c.Window, c.MaxOutput
	if m, ok := longestPrefix(c.Models, model); ok {
		window = m.Window
		if m.MaxOutput > 0 {
			maxOutput = m.MaxOutput
		}
		return window, maxOutput
	}
	if window > 0 {
		return window, maxOutput
	}
	window = 200000
	name := model
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if m, ok := longestPrefix(knownWindows, name); ok {
		window = m.Window
	}
	return window, maxOutput
}

func longestPrefix(list []ModelLimits, model string) (ModelLimits, bool) {
	var best ModelLimits
	n := -1
	for _, m := range list {
		if strings.HasPrefix(model, m.Prefix) && len(m.Prefix) > n {
			n, best = len(m.Prefix), m
		}
	}
	return best, n >= 0
}
