package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ctxmgr/ctxmgr/internal/serveconfig"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// summarizerOptions are serve's --summarizer-* flags: the LLM that writes summaries.
//
// The summarizer has its own URL and key rather than reusing the key of the client request
// that triggered a compaction: a summary can be made in the background after that request
// has been answered, the proxy keeps no client credentials beyond a request, and operators
// usually want a small, cheap model billed to their own key.
type summarizerOptions struct {
	format  string
	model   string
	url     string
	keyEnv  string
	noKey   bool // the key variable was given as "": send no key
	timeout time.Duration
}

const summarizerHelp = `
An LLM summarizer (--summarizer-model) writes the summaries instead of the
extractive one. It is called at --summarizer-url (default: the upstream of
its --summarizer format, "/v1" appended for openai) with the API key in the
environment variable --summarizer-key-env (default OPENAI_API_KEY or
ANTHROPIC_API_KEY; an empty name sends no key, for a local server). Each
answer is validated (the summary's sections, its size); a failed or invalid
attempt is retried (3 attempts, each bounded by --summarizer-timeout), then
the extractive summary stands in and the fallback is logged and counted in
ctxmgr_summarizer_fallbacks_total. /context names the summarizer.`

func addSummarizerFlags(f *pflag.FlagSet, o *summarizerOptions) {
	f.StringVar(&o.model, "summarizer-model", "", "LLM that writes summaries, e.g. gpt-4o-mini (default: the extractive summarizer)")
	f.StringVar(&o.format, "summarizer", "", "summarizer API format: openai or anthropic (default: the upstream's; openai if both)")
	f.StringVar(&o.url, "summarizer-url", "", "summarizer API root (default: the upstream of its format)")
	f.StringVar(&o.keyEnv, "summarizer-key-env", "", `variable with the summarizer's API key (default OPENAI_API_KEY/ANTHROPIC_API_KEY; "": none)`)
	f.DurationVar(&o.timeout, "summarizer-timeout", 60*time.Second, "bound on each of the 3 summarizer attempts before the extractive fallback")
}

// mergeSummarizerConfig fills the options from the config file's "summarizer" where the flag
// was not given.
func mergeSummarizerConfig(cmd *cobra.Command, o *summarizerOptions, sc *serveconfig.Summarizer) {
	if sc == nil {
		return
	}
	unset := func(name string) bool { return !cmd.Flags().Changed(name) }
	if sc.Model != "" && unset("summarizer-model") {
		o.model = sc.Model
	}
	if sc.Format != "" && unset("summarizer") {
		o.format = sc.Format
	}
	if sc.URL != "" && unset("summarizer-url") {
		o.url = sc.URL
	}
	if sc.KeyEnv != nil && unset("summarizer-key-env") {
		o.keyEnv = *sc.KeyEnv
		o.noKey = o.keyEnv == "" // an explicit "" means no key, as with the flag
	}
	if cmd.Flags().Changed("summarizer-key-env") {
		o.noKey = o.keyEnv == ""
	}
	if sc.Timeout != 0 && unset("summarizer-timeout") {
		o.timeout = time.Duration(sc.Timeout)
	}
}

// serveSummarizer builds the LLM summarizer the options name, or returns nil (the extractive
// one) when no model is given. Everything is checked here, before serve starts: the format,
// the URL, the key variable being set, the timeout. name describes it for /context and the log.
func serveSummarizer(cmd *cobra.Command, o *summarizerOptions, upstreamOpenAI, upstreamAnthropic string, logger *slog.Logger) (s summarize.Summarizer, name string, err error) {
	changed := func(flag string) bool { return cmd.Flags().Changed(flag) }
	if o.model == "" {
		for _, f := range []string{"summarizer", "summarizer-url", "summarizer-key-env", "summarizer-timeout"} {
			if changed(f) {
				return nil, "", usageErrorf("--%s needs --summarizer-model", f)
			}
		}
		if o.format != "" || o.url != "" {
			return nil, "", usageErrorf("--config: summarizer: needs a model")
		}
		return nil, "extractive", nil
	}
	format := wire.Format(strings.ToLower(o.format))
	if format == "" {
		format = wire.OpenAI
		if upstreamOpenAI == "" && upstreamAnthropic != "" {
			format = wire.Anthropic
		}
	}
	opts := summarize.LLMOptions{Model: o.model, BaseURL: o.url, Timeout: o.timeout, Logger: logger}
	keyEnv := o.keyEnv
	if changed("summarizer-key-env") {
		o.noKey = keyEnv == ""
	}
	switch format {
	case wire.OpenAI:
		opts.Format = wire.OpenAI
		if opts.BaseURL == "" && upstreamOpenAI != "" {
			opts.BaseURL = strings.TrimSuffix(upstreamOpenAI, "/")
			if !strings.HasSuffix(opts.BaseURL, "/v1") {
				opts.BaseURL += "/v1"
			}
		}
		if keyEnv == "" && !o.noKey {
			keyEnv = "OPENAI_API_KEY"
		}
	case wire.Anthropic:
		opts.Format = wire.Anthropic
		if opts.BaseURL == "" {
			opts.BaseURL = upstreamAnthropic
		}
		if keyEnv == "" && !o.noKey {
			keyEnv = "ANTHROPIC_API_KEY"
		}
	default:
		return nil, "", usageErrorf("--summarizer %q: want openai or anthropic", o.format)
	}
	if opts.BaseURL == "" {
		return nil, "", usageErrorf("--summarizer %s: no upstream of that format to default to; give --summarizer-url", format)
	}
	if err := checkHTTPURL(opts.BaseURL); err != nil {
		return nil, "", usageErrorf("--summarizer-url %q: %v", opts.BaseURL, err)
	}
	if o.timeout <= 0 {
		return nil, "", usageErrorf("--summarizer-timeout %v: must be positive", o.timeout)
	}
	if keyEnv != "" {
		opts.APIKey = os.Getenv(keyEnv)
		if opts.APIKey == "" {
			return nil, "", usageErrorf("the summarizer's API key variable %s is not set (name another with --summarizer-key-env, or --summarizer-key-env '' for a server without keys)", keyEnv)
		}
	}
	counter, err := tokens.ForEncoding(tokens.O200kBase)
	if err != nil {
		return nil, "", err
	}
	opts.Counter = counter
	s, err = summarize.NewLLM(opts)
	if err != nil {
		return nil, "", usageErrorf("summarizer: %v", err)
	}
	key := "no API key"
	if opts.APIKey != "" {
		key = "key from $" + keyEnv
	}
	name = fmt.Sprintf("LLM %s (%s) at %s, %s, timeout %v per attempt, falls back to extractive", o.model, format, opts.BaseURL, key, o.timeout)
	return s, name, nil
}
