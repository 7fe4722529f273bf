package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/internal/sample"
	"github.com/ctxmgr/ctxmgr/replay"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// replayOptions holds the flags of the replay command.
type replayOptions struct {
	window, maxOutput int
	strategies        string
	profile           string
	json              bool
	report            string
	reportTrajectory  string
	workers           int
	format            string
	summarizer        string
	baseURL           string
	model             string
	keyEnv            string
	quiet             bool
}

func newReplayCmd() *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay [flags] [PATH...]",
		Short: "Compare context strategies side by side on recorded agent trajectories",
		Long: `Replay rebuilds every LLM call of recorded agent runs under each context strategy
and measures the result: input tokens, prompt-cache hits, summary calls, cost,
overflows, invalid requests, lost messages, reference recall and Prepare latency.

Each assistant message of a run was produced by one LLM call whose input was the
history before it. For each strategy, the history is fed to a fresh manager
message by message, as an agent would (append, and prepare before each assistant
message), and the recorded assistant message is appended after the call. "raw"
sends the whole history unmanaged; the other strategies are the presets
(default, masking, copaw, qwenpaw, picoclaw, cowagent, baseagent).

PATHs are files or directories (searched for *.json and *.jsonl). Formats are
detected per file (--format to force): a JSON array of OpenAI messages, an
object with "messages" (an OpenAI or Anthropic body, or a trajectory with
"tools"), JSONL with one such object a line, tau-bench result files and
mini-swe-agent trajectories. With no PATH, replay replays the sample of real runs
embedded in the binary (12 mini-swe-agent runs on SWE-bench tasks and 30 tau-bench
airline runs, MIT-licensed; their licences are in the repository beside them).

--summarizer openai|anthropic --model NAME summarizes with an LLM instead of the
extractive summarizer. The API key is read from OPENAI_API_KEY (openai) or
ANTHROPIC_API_KEY (anthropic), or the variable --key-env names ("" for a local
server without keys), and checked before anything runs. A summary the LLM fails
to write is made by the extractive summarizer instead and counted; when the
summarizer never answers (unreachable, wrong key, unknown model) the replay stops
with an error and a non-zero exit rather than measuring the fallback.

Cost is in units of the price of a million input tokens under --profile:
anthropic (uncached input 1.25, cached 0.1, output 5) or openai (1, 0.1, 8).
--json prints one JSON object; --report DIR writes DIR/index.html with charts;
with --report, default's knob between cost and recall (how many of the newest tool
results the cost model never masks; default leaves it off) is swept too: default@10,
default@20, default@30, default@60 appear in the tables and on the cost/recall chart
beside every preset.`,
		Example: `  ctxmgr replay
  ctxmgr replay --window 32768 --max-output 4096
  ctxmgr replay --window 32768 --max-output 4096 path/to/trajectories/
  ctxmgr replay --strategy raw,masking,default --json runs/
  ctxmgr replay --report out/ --report-trajectory mini-swe-agent/django__django-11149.traj.json
  OPENAI_API_KEY=sk-... ctxmgr replay --window 32768 --max-output 4096 --summarizer openai --model gpt-4o-mini`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReplay(cmd, &o, args)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.window, "window", 200000, "context window in tokens")
	f.IntVar(&o.maxOutput, "max-output", 32000, "tokens reserved for the reply")
	f.StringVar(&o.strategies, "strategy", "", "comma-separated strategies (default all: "+strings.Join(replay.Strategies(), ",")+")")
	f.StringVar(&o.profile, "profile", "anthropic", "price profile: anthropic or openai")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of tables")
	f.StringVar(&o.report, "report", "", "write a self-contained HTML report with charts to DIR/index.html")
	f.StringVar(&o.reportTrajectory, "report-trajectory", "", "trajectory charted call by call in the report (default: the one with the most calls)")
	f.IntVar(&o.workers, "workers", 0, "trajectories replayed in parallel (default GOMAXPROCS)")
	f.StringVar(&o.format, "format", "", "input format: "+strings.Join(replay.Formats(), ", ")+" (default auto)")
	f.StringVar(&o.summarizer, "summarizer", "", "summarize with an LLM: openai or anthropic (default: the extractive summarizer)")
	f.StringVar(&o.baseURL, "base-url", "", "with --summarizer: the API root (default https://api.openai.com/v1 or https://api.anthropic.com)")
	f.StringVar(&o.model, "model", "", "with --summarizer: the model name")
	f.StringVar(&o.keyEnv, "key-env", "", `with --summarizer: the environment variable holding the API key (default OPENAI_API_KEY or ANTHROPIC_API_KEY; "" for none)`)
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress bar and no notes on stderr")
	return cmd
}

func runReplay(cmd *cobra.Command, o *replayOptions, args []string) error {
	if o.window <= 0 || o.maxOutput <= 0 || o.maxOutput >= o.window {
		return usageErrorf("--window %d and --max-output %d: want 0 < max output < window", o.window, o.maxOutput)
	}
	if _, err := replay.ProfileByName(o.profile); err != nil {
		return usageErrorf("invalid --profile %q: want anthropic or openai", o.profile)
	}
	if o.workers < 0 {
		return usageErrorf("invalid --workers %d", o.workers)
	}
	var strategies []string
	if o.strategies != "" {
		known := replay.Strategies()
		for _, s := range strings.Split(o.strategies, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			ok := false
			for _, k := range known {
				ok = ok || k == s
			}
			if !ok {
				return usageErrorf("unknown strategy %q (known: %s)", s, strings.Join(known, ", "))
			}
			strategies = append(strategies, s)
		}
		if len(strategies) == 0 {
			return usageErrorf("--strategy names no strategy")
		}
	}
	if o.report != "" && (len(strategies) == 0 || slices.Contains(strategies, ctxmgr.PresetDefault)) {
		// The report draws default's main knob swept, with every preset, on the cost/recall
		// chart.
		if len(strategies) == 0 {
			strategies = replay.Strategies()
		}
		for _, n := range replay.DefaultSweep {
			strategies = append(strategies, replay.SweepStrategy(n))
		}
	}
	if o.format != "" {
		ok := false
		for _, f := range replay.Formats() {
			ok = ok || f == o.format
		}
		if !ok {
			return usageErrorf("invalid --format %q: want one of %s", o.format, strings.Join(replay.Formats(), ", "))
		}
	}
	if (o.baseURL != "" || o.model != "" || cmd.Flags().Changed("key-env")) && o.summarizer == "" {
		return usageErrorf("--base-url, --model and --key-env need --summarizer")
	}
	if o.reportTrajectory != "" && o.report == "" {
		return usageErrorf("--report-trajectory needs --report")
	}
	counter, err := tokens.ForEncoding(tokens.O200kBase)
	if err != nil {
		return err
	}
	counter = tokens.NewCache(counter, 1<<18)
	stderr := cmd.ErrOrStderr()
	sum, err := replaySummarizer(cmd, o, counter, stderr)
	if err != nil {
		return err
	}
	// With no PATH, the sample embedded in the binary is replayed.
	loadEach := func(fn func(replay.Trajectory) error) ([]replay.Skipped, error) {
		return replay.LoadEach(args, o.format, fn)
	}
	inputs := strings.Join(args, ", ")
	if len(args) == 0 {
		loadEach = func(fn func(replay.Trajectory) error) ([]replay.Skipped, error) {
			return replay.LoadEachFS(sample.FS(), []string{sample.Dir}, o.format, fn)
		}
		inputs = "the embedded sample"
		if !o.quiet {
			fmt.Fprintf(stderr, "ctxmgr: replay: replaying the embedded sample of %d real runs (%s); pass a PATH to replay your own\n",
				sample.Runs, strings.Join(sample.Sets(), ", "))
		}
	}
	// The trajectories are read and replayed one file at a time (replay.RunStream), and only
	// the per-call series of the trajectory the report charts are kept: memory is bounded by
	// the workers times the largest trajectory, not by the input. With --report, a first pass
	// that keeps only names and call counts checks --report-trajectory before anything runs,
	// or picks the trajectory with the most calls (the report's own default).
	charted := ""
	if o.report != "" {
		var first string
		found, best := false, -1
		if _, err := loadEach(func(t replay.Trajectory) error {
			if first == "" {
				first = t.Name
			}
			found = found || t.Name == o.reportTrajectory
			if n := t.Calls(); n > best {
				best, charted = n, t.Name
			}
			return nil
		}); err != nil {
			return err
		}
		if o.reportTrajectory != "" {
			if !found {
				return usageErrorf("--report-trajectory %q: no such trajectory (names look like %q)", o.reportTrajectory, first)
			}
			charted = o.reportTrajectory
		}
	}
	var skipped []replay.Skipped
	source := func(yield func(replay.Trajectory) error) error {
		var err error
		skipped, err = loadEach(yield)
		return err
	}
	opts := replay.Options{
		Window: o.window, MaxOutput: o.maxOutput, Strategies: strategies, Profile: o.profile,
		Workers: o.workers, Summarizer: sum, Counter: counter,
		KeepRuns: func(name string) bool { return name == charted && charted != "" },
	}
	if !o.quiet && isTerminal(stderr) {
		opts.Progress = stderr
	}
	ctx, cancel := context.WithCancelCause(cmd.Context())
	defer cancel(nil)
	var guard *summarizerGuard
	if sum != nil {
		guard = &summarizerGuard{inner: sum, cancel: cancel}
		opts.Summarizer = guard
	}
	res, err := replay.RunStream(ctx, source, 0, opts)
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, errSummarizerDown) {
		return cause
	}
	if err != nil {
		return err
	}
	if !o.quiet {
		for _, s := range skipped {
			fmt.Fprintf(stderr, "ctxmgr: replay: skipped %s: %s\n", s.Path, s.Reason)
		}
	}
	if res.Trajectories == 0 {
		return fmt.Errorf("replay: no trajectories in %s", inputs)
	}
	if guard != nil && !o.quiet {
		if n, ok, reason := guard.counts(); n > 0 {
			fmt.Fprintf(stderr, "ctxmgr: replay: the LLM summarizer wrote %d summaries; %d fell back to the extractive summarizer (last reason: %s)\n", ok, n, reason)
		}
	}
	if o.report != "" {
		path, err := res.WriteReportDir(o.report, charted)
		if err != nil {
			return err
		}
		if !o.quiet {
			fmt.Fprintf(stderr, "ctxmgr: replay: report written to %s\n", path)
		}
	}
	if o.json {
		return res.WriteJSON(cmd.OutOrStdout())
	}
	return res.WriteText(cmd.OutOrStdout())
}

// replaySummarizer builds the LLM summarizer of --summarizer, or nil for the extractive one.
// The API key comes from OPENAI_API_KEY or ANTHROPIC_API_KEY (or --key-env) and must be set.
// Attempt and fallback logs go to stderr as warnings, or nowhere with -q.
func replaySummarizer(cmd *cobra.Command, o *replayOptions, counter tokens.Counter, stderr io.Writer) (summarize.Summarizer, error) {
	if o.summarizer == "" {
		return nil, nil
	}
	opts := summarize.LLMOptions{Model: o.model, BaseURL: o.baseURL, Counter: counter}
	keyEnv := o.keyEnv
	switch wire.Format(strings.ToLower(o.summarizer)) {
	case wire.OpenAI:
		opts.Format = wire.OpenAI
		if opts.BaseURL == "" {
			opts.BaseURL = "https://api.openai.com/v1"
		}
		if !cmd.Flags().Changed("key-env") {
			keyEnv = "OPENAI_API_KEY"
		}
	case wire.Anthropic:
		opts.Format = wire.Anthropic
		if opts.BaseURL == "" {
			opts.BaseURL = "https://api.anthropic.com"
		}
		if !cmd.Flags().Changed("key-env") {
			keyEnv = "ANTHROPIC_API_KEY"
		}
	default:
		return nil, usageErrorf("invalid --summarizer %q: want openai or anthropic", o.summarizer)
	}
	if o.model == "" {
		return nil, usageErrorf("--summarizer %s needs --model", o.summarizer)
	}
	if keyEnv != "" {
		opts.APIKey = os.Getenv(keyEnv)
		if opts.APIKey == "" {
			return nil, usageErrorf("--summarizer %s: %s is not set (export it, name another variable with --key-env, or --key-env '' for a server without keys)", o.summarizer, keyEnv)
		}
	}
	level := slog.LevelWarn
	out := stderr
	if o.quiet {
		out = io.Discard
	}
	opts.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	s, err := summarize.NewLLM(opts)
	if err != nil {
		return nil, usageErrorf("--summarizer: %v", err)
	}
	return s, nil
}

// errSummarizerDown says that the LLM summarizer never answered.
var errSummarizerDown = errors.New("the LLM summarizer is not answering")

// guardAfter is how many summaries in a row may fall back, with none written by the LLM,
// before the replay stops: the figures would measure the extractive fallback, not the LLM.
const guardAfter = 3

// summarizerGuard wraps the LLM summarizer of a replay: it counts fallbacks, and cancels the
// replay (with errSummarizerDown as the cause) when the first guardAfter summaries all fell back.
type summarizerGuard struct {
	inner  summarize.Summarizer
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	ok, fell  int
	lastCause string
}

// Summarize implements summarize.Summarizer.
func (g *summarizerGuard) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	res, err := g.inner.Summarize(ctx, req)
	if err != nil {
		return res, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !res.Fallback {
		g.ok++
		return res, nil
	}
	g.fell++
	g.lastCause = res.FallbackReason
	if g.ok == 0 && g.fell >= guardAfter {
		g.cancel(fmt.Errorf("%w: its first %d summaries all failed (%s); fix --base-url, --model or the API key, or drop --summarizer to measure the extractive summarizer",
			errSummarizerDown, g.fell, g.lastCause))
	}
	return res, nil
}

// counts returns the fallbacks, the summaries the LLM wrote, and the last fallback reason.
func (g *summarizerGuard) counts() (fell, ok int, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fell, g.ok, g.lastCause
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
