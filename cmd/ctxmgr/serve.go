package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/internal/serveconfig"
	"github.com/ctxmgr/ctxmgr/proxy"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
)

// serveOptions holds the flags of the serve command.
// serveWriteBehind is how long a journaled append may wait before it is applied to the SQLite
// database (sqlite.Options.WriteBehind): long enough that a batch holds many appends when
// requests come fast, short enough that another process reading the database (ctxmgr
// sessions) sees them almost at once.
const serveWriteBehind = 20 * time.Millisecond

type serveOptions struct {
	listen            string
	upstreamOpenAI    string
	upstreamAnthropic string
	upstreamGemini    string
	store             string
	window            int
	maxOutput         int
	preset            string
	config            string
	maxBodyBytes      int64
	upstreamTimeout   time.Duration
	shutdownTimeout   time.Duration
	logFormat         string
	logLevel          string
	addrFile          string
	disableReadTool   bool
	providerContext   []string
	limits            serveconfig.Limits
	pprof             string
	uiToken           string
	syncAppends       bool
	summarizer        summarizerOptions // serve_summarizer.go
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR] [--upstream-openai URL] [--upstream-anthropic URL] [--upstream-gemini URL] [--store SPEC] [--config FILE]",
		Short: "Run the OpenAI-, Anthropic- and Gemini-compatible proxy that manages context",
		Long: `Run an OpenAI- and Anthropic-compatible HTTP proxy that manages the context of
any agent that talks to it.

Point an agent's base URL at the proxy (OpenAI: http://ADDR/v1, Anthropic and
Gemini: http://ADDR). POST /v1/chat/completions, POST /v1/messages, POST
/v1/responses and POST /v1beta/models/MODEL:generateContent (and
:streamGenerateContent), streaming or not, are forwarded to the upstream of their format with the conversation
managed: sessions are recognized from the X-Ctxmgr-Session header, else the
Anthropic metadata.user_id, else a hash of the system prompt and first user
message; compacted history is replaced by its summary; large tool results are
offloaded and stay readable through a ctxmgr_read tool the proxy answers
itself; a context-overflow answer is recovered from by a tighter retry.
Everything else (headers, unknown body fields, errors, usage, stream events)
passes through untouched. /compact [instruction], /context and
/context clear typed as the latest user message are answered by the proxy.

GET /healthz answers ok, GET /metrics serves Prometheus metrics, /ui/ serves the
session inspector (see --ui-token), and any other
path (GET /v1/models, ...) is passed through.

Sessions are kept in --store: ` + storeSpecHelp + `.
The embedded SQLite store is the default; use PostgreSQL to run several
instances on the same sessions.

--config FILE reads a JSON file with the same settings plus per-model routes
and windows (see the proxy package documentation); flags given explicitly
override it. SIGINT or SIGTERM shut the proxy down gracefully: in-flight
requests and streams finish (up to --shutdown-timeout).
` + summarizerHelp,
		Example: `  ctxmgr serve --upstream-openai https://api.openai.com --upstream-anthropic https://api.anthropic.com
  ctxmgr serve --listen 127.0.0.1:8088 --store postgres://ctxmgr@db:5432/ctxmgr --window 128000
  ctxmgr serve --config ctxmgr.json`,
		Args:                  cobra.NoArgs,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8088", "address to listen on (port 0 picks a free port)")
	f.StringVar(&o.upstreamOpenAI, "upstream-openai", "", "base URL of the OpenAI-format upstream, e.g. https://api.openai.com")
	f.StringVar(&o.upstreamAnthropic, "upstream-anthropic", "", "base URL of the Anthropic-format upstream, e.g. https://api.anthropic.com")
	f.StringVar(&o.upstreamGemini, "upstream-gemini", "", "base URL of the Gemini API upstream, e.g. https://generativelanguage.googleapis.com")
	f.StringVar(&o.store, "store", defaultStore, "where sessions are kept: "+storeSpecHelp)
	f.IntVar(&o.window, "window", 0, "context window in tokens of models the config file does not list (0: the known window of common models such as gpt-4o or claude-*, else 200000)")
	f.IntVar(&o.maxOutput, "max-output", 0, "reply tokens reserved when a request has no max_tokens (0: 32000, at most a quarter of the window)")
	f.StringVar(&o.preset, "preset", ctxmgr.PresetDefault, "context-management preset: "+fmt.Sprint(ctxmgr.Presets()))
	f.StringVar(&o.config, "config", "", "JSON configuration file (flags given explicitly override it)")
	f.Int64Var(&o.maxBodyBytes, "max-body-bytes", 32<<20, "largest request body accepted (larger: 413)")
	f.DurationVar(&o.upstreamTimeout, "upstream-timeout", 10*time.Minute, "how long to wait for the upstream's response headers")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for in-flight requests")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json (logs go to stderr)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&o.addrFile, "addr-file", "", "write the address listened on to this file once listening")
	f.BoolVar(&o.disableReadTool, "disable-read-tool", false, "never inject the ctxmgr_read tool (offload references then name store locations only)")
	f.StringArrayVar(&o.providerContext, "provider-context", nil, "who answers the providers' own context management (Responses compaction, Anthropic context editing and compaction): MODE for every upstream or UPSTREAM=MODE for one (its base URL or host); MODE is auto (pass through to api.openai.com and api.anthropic.com, answer locally elsewhere, learn from refusals), local or passthrough; repeatable")
	f.DurationVar(&o.limits.ReadHeaderTimeout, "read-header-timeout", serveconfig.DefaultReadHeaderTimeout, "how long a client may take to send a request's headers")
	f.DurationVar(&o.limits.ReadTimeout, "read-timeout", serveconfig.DefaultReadTimeout, "how long a client may take to send a whole request, body included")
	f.DurationVar(&o.limits.WriteTimeout, "write-timeout", serveconfig.DefaultWriteTimeout, "how long each write of an answer may take (a stream gets it anew for every event)")
	f.DurationVar(&o.limits.IdleTimeout, "idle-timeout", serveconfig.DefaultIdleTimeout, "how long a keep-alive connection may wait for its next request")
	f.IntVar(&o.limits.MaxConns, "max-conns", serveconfig.DefaultMaxConns, "connections served at once (more wait to be accepted)")
	f.BoolVar(&o.syncAppends, "sync-appends", false, "SQLite: fsync every append (synchronous=FULL), each in its own transaction. Off: synchronous=NORMAL and appends journaled, applied in batches 20ms later; safe when the process dies, and an append lost to a power cut is sent again by the client with its next request")
	f.StringVar(&o.uiToken, "ui-token", "", "token the session inspector (/ui/) requires: on a loopback --listen it is served without one unless this is set; on any other address it is off unless this is set")
	f.StringVar(&o.pprof, "pprof", "", "serve net/http/pprof on this address, e.g. 127.0.0.1:6060 (off by default; never expose it publicly)")
	addSummarizerFlags(f, &o.summarizer)
	return cmd
}

// mergeFileConfig fills the options from the config file where the flag was not given.
func mergeFileConfig(cmd *cobra.Command, o *serveOptions, fc serveconfig.File) {
	set := func(name string) bool { return !cmd.Flags().Changed(name) }
	if fc.Listen != "" && set("listen") {
		o.listen = fc.Listen
	}
	if fc.UpstreamOpenAI != "" && set("upstream-openai") {
		o.upstreamOpenAI = fc.UpstreamOpenAI
	}
	if fc.UpstreamAnthropic != "" && set("upstream-anthropic") {
		o.upstreamAnthropic = fc.UpstreamAnthropic
	}
	if fc.UpstreamGemini != "" && set("upstream-gemini") {
		o.upstreamGemini = fc.UpstreamGemini
	}
	if fc.Store != "" && set("store") {
		o.store = fc.Store
	}
	if fc.Window != 0 && set("window") {
		o.window = fc.Window
	}
	if fc.MaxOutput != 0 && set("max-output") {
		o.maxOutput = fc.MaxOutput
	}
	if fc.Preset != "" && set("preset") {
		o.preset = fc.Preset
	}
	if fc.MaxBodyBytes != 0 && set("max-body-bytes") {
		o.maxBodyBytes = fc.MaxBodyBytes
	}
	if fc.UpstreamTimeout != 0 && set("upstream-timeout") {
		o.upstreamTimeout = time.Duration(fc.UpstreamTimeout)
	}
	if fc.ShutdownTimeout != 0 && set("shutdown-timeout") {
		o.shutdownTimeout = time.Duration(fc.ShutdownTimeout)
	}
	if fc.DisableReadTool && set("disable-read-tool") {
		o.disableReadTool = true
	}
	if fc.UIToken != "" && set("ui-token") {
		o.uiToken = fc.UIToken
	}
	mergeSummarizerConfig(cmd, &o.summarizer, fc.Summarizer)
}

func runServe(cmd *cobra.Command, o *serveOptions) error {
	var fc serveconfig.File
	if o.config != "" {
		var err error
		if fc, err = serveconfig.LoadFile(o.config); err != nil {
			return usageErrorf("--config: %v", err)
		}
		mergeFileConfig(cmd, o, fc)
	}
	if o.upstreamOpenAI == "" && o.upstreamAnthropic == "" && o.upstreamGemini == "" && len(fc.Routes) == 0 {
		return usageErrorf("no upstream: give --upstream-openai, --upstream-anthropic and/or --upstream-gemini (or routes in --config)")
	}
	if !ctxmgr.IsPreset(o.preset) {
		return usageErrorf("--preset %q: want one of %v", o.preset, ctxmgr.Presets())
	}
	if err := validateServe(o, fc); err != nil {
		return err
	}
	if err := o.limits.Validate(); err != nil {
		return usageErrorf("--max-conns: %v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usageErrorf("--log-level %q: %v", o.logLevel, err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	var logger *slog.Logger
	switch o.logFormat {
	case "text":
		logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), hopts))
	case "json":
		logger = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), hopts))
	default:
		return usageErrorf("--log-format %q: want text or json", o.logFormat)
	}

	providerContext, err := serveconfig.ParseProviderContext(o.providerContext)
	if err != nil {
		return usageErrorf("--provider-context: %v", err)
	}
	for k, m := range fc.ProviderContext {
		if _, ok := providerContext[k]; !ok {
			providerContext[k] = m
		}
	}

	sum, sumName, err := serveSummarizer(cmd, &o.summarizer, o.upstreamOpenAI, o.upstreamAnthropic, logger)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SQLite checkpoints run beside the writes, not inside them (sqlite.Options.CheckpointEvery),
	// and, unless every append is fsynced, appends are journaled and applied in batches
	// (sqlite.Options.WriteBehind): an append then costs a write(2), not a commit.
	lite := sqlite.Options{Relaxed: !o.syncAppends, CheckpointEvery: 200 * time.Millisecond, Logger: logger}
	if lite.Relaxed {
		lite.WriteBehind = serveWriteBehind
	}
	st, err := openStore(ctx, o.store, lite)
	if err != nil {
		return err
	}
	defer st.Close()
	srv, err := proxy.New(proxy.Config{
		UpstreamOpenAI:    o.upstreamOpenAI,
		UpstreamAnthropic: o.upstreamAnthropic,
		UpstreamGemini:    o.upstreamGemini,
		Routes:            fc.Routes,
		Models:            fc.Models,
		Store:             st,
		SharedStore:       isPostgres(o.store), // several instances may share a PostgreSQL database
		Window:            o.window,
		MaxOutput:         o.maxOutput,
		Preset:            o.preset,
		MaxBodyBytes:      o.maxBodyBytes,
		UpstreamTimeout:   o.upstreamTimeout,
		Logger:            logger,
		DisableReadTool:   o.disableReadTool,
		ProviderContext:   providerContext,
		Summarizer:        sum,
		SummarizerName:    sumName,
		UILoopback:        proxy.IsLoopback(o.listen),
		UIToken:           o.uiToken,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	hs := serveconfig.NewHTTPServer(srv.Handler(), o.limits, slog.NewLogLogger(logger.Handler(), slog.LevelWarn))
	lim := o.limits.WithDefaults()
	logger.Info("ctxmgr serve: listening", slog.String("addr", "http://"+addr), slog.String("store", redact.URL(o.store)),
		slog.String("upstream_openai", redact.URL(o.upstreamOpenAI)), slog.String("upstream_anthropic", redact.URL(o.upstreamAnthropic)),
		slog.String("upstream_gemini", redact.URL(o.upstreamGemini)),
		slog.String("window", windowDesc(o.window)), slog.String("preset", o.preset), slog.String("summarizer", sumName),
		slog.Duration("read_timeout", lim.ReadTimeout), slog.Duration("write_timeout", lim.WriteTimeout),
		slog.Duration("idle_timeout", lim.IdleTimeout), slog.Int("max_conns", lim.MaxConns))
	switch {
	case o.uiToken != "":
		logger.Info("ctxmgr serve: session inspector at http://" + addr + "/ui/ (token required: Authorization: Bearer, or /ui/?token= once)")
	case proxy.IsLoopback(o.listen):
		logger.Info("ctxmgr serve: session inspector at http://" + addr + "/ui/")
	default:
		logger.Info("ctxmgr serve: session inspector off: listening beyond loopback without --ui-token")
	}
	// The address file says the server is up: written once its start-up lines are logged.
	if o.addrFile != "" {
		if err := os.WriteFile(o.addrFile, []byte(addr+"\n"), 0o600); err != nil {
			ln.Close()
			return err
		}
	}
	if o.pprof != "" {
		stopPprof, err := servePprof(o.pprof, logger)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--pprof: %w", err)
		}
		defer stopPprof()
	}
	// Offloaded tool results expire after their retention (5 days by default): clean them up
	// now and every hour while serving.
	go runCleanup(ctx, st, time.Hour, logger)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(serveconfig.LimitListener(ln, o.limits)) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	case <-ctx.Done():
	}
	logger.Info("ctxmgr serve: shutting down; waiting for in-flight requests", slog.Duration("timeout", o.shutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		logger.Warn("ctxmgr serve: shutdown timed out; closing open connections", slog.String("error", err.Error()))
		_ = hs.Close()
	}
	logger.Info("ctxmgr serve: stopped")
	return nil
}

// runCleanup calls st.Cleanup at once and then every interval until ctx is done, logging what
// it removed.
func runCleanup(ctx context.Context, st store.Store, interval time.Duration, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := st.Cleanup(ctx, time.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("ctxmgr serve: cleanup of expired offloads failed", slog.String("error", err.Error()))
		case n > 0:
			logger.Info("ctxmgr serve: expired offloaded results removed", slog.Int("removed", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// servePprof serves the net/http/pprof handlers on addr (their own mux, never the proxy's)
// until the returned function is called.
func servePprof(addr string, logger *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: serveconfig.DefaultReadHeaderTimeout}
	logger.Info("ctxmgr serve: pprof listening", slog.String("addr", "http://"+ln.Addr().String()+"/debug/pprof/"))
	go func() { _ = hs.Serve(ln) }()
	return func() { _ = hs.Close() }, nil
}

// validateServe checks the settings before anything starts, so that a broken setting is
// refused at once with the flag it came from instead of failing every request later.
func validateServe(o *serveOptions, fc serveconfig.File) error {
	for _, u := range []struct{ flag, val string }{
		{"--upstream-openai", o.upstreamOpenAI}, {"--upstream-anthropic", o.upstreamAnthropic}, {"--upstream-gemini", o.upstreamGemini},
	} {
		if u.val == "" {
			continue
		}
		if err := checkHTTPURL(u.val); err != nil {
			return usageErrorf("%s %q: %v", u.flag, u.val, err)
		}
	}
	for _, r := range fc.Routes {
		if err := checkHTTPURL(r.URL); err != nil {
			return usageErrorf("--config: route %q: url %q: %v", r.ModelPrefix, r.URL, err)
		}
	}
	if o.window < 0 {
		return usageErrorf("--window %d: must be positive, or 0 for the known window of each model", o.window)
	}
	if o.maxOutput < 0 {
		return usageErrorf("--max-output %d: must be positive, or 0 for the default", o.maxOutput)
	}
	if o.window > 0 && o.maxOutput >= o.window {
		return usageErrorf("--max-output %d: must be smaller than --window %d", o.maxOutput, o.window)
	}
	if o.maxBodyBytes <= 0 {
		return usageErrorf("--max-body-bytes %d: must be positive", o.maxBodyBytes)
	}
	if o.upstreamTimeout <= 0 {
		return usageErrorf("--upstream-timeout %v: must be positive", o.upstreamTimeout)
	}
	if o.shutdownTimeout < 0 {
		return usageErrorf("--shutdown-timeout %v: must not be negative", o.shutdownTimeout)
	}
	return checkStoreParent(o.store)
}

// checkHTTPURL accepts an absolute http or https URL with a host.
func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("want an http:// or https:// URL, e.g. https://api.openai.com")
	}
	if u.Host == "" {
		return errors.New("no host in the URL")
	}
	return nil
}

// checkStoreParent refuses a sqlite: or files: store whose parent directory does not exist:
// the database file or store directory itself is created, but a missing parent is almost
// always a typo and is not created silently.
func checkStoreParent(spec string) error {
	for _, prefix := range []string{"sqlite:", "files:"} {
		p, ok := strings.CutPrefix(spec, prefix)
		if !ok || p == "" {
			continue
		}
		parent := filepath.Dir(filepath.Clean(p))
		info, err := os.Stat(parent)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return usageErrorf("--store %s: directory %s does not exist (create it first)", spec, parent)
		case err != nil:
			return usageErrorf("--store %s: %v", spec, err)
		case !info.IsDir():
			return usageErrorf("--store %s: %s is not a directory", spec, parent)
		}
	}
	return nil
}

// windowDesc is the start-up log's description of --window.
func windowDesc(w int) string {
	if w == 0 {
		return "per model (known windows; 200000 for others)"
	}
	return strconv.Itoa(w)
}
