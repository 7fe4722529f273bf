// Package replay rebuilds every LLM call of recorded agent runs under each context strategy
// and measures the result: input tokens, prompt-cache hits, summary calls, cost, overflows,
// invalid requests, lost messages, reference recall and Prepare latency (the definitions are
// in docs/replay.md).
//
// Load reads trajectories (OpenAI message arrays and bodies, JSONL, tau-bench results,
// mini-swe-agent trajectories); Run replays them under the strategies, in parallel; a Result
// prints as a text table (WriteText), one JSON object (WriteJSON) or a self-contained HTML
// report with charts (WriteReport).
package replay

import (
	"context"
	"errors"
	"fmt"
	"github.com/ctxmgr/ctxmgr/internal/readtool"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/turns"
)

// StrategyRaw sends the whole history unmanaged. Every other strategy is a ctxmgr preset.
const StrategyRaw = "raw"

// Strategies lists every strategy: raw, then the presets (default, masking, and the seeds).
func Strategies() []string {
	return append([]string{StrategyRaw}, ctxmgr.Presets()...)
}

// Profile is a price profile, in units of the price of one million (base) input tokens.
type Profile struct {
	Name string `json:"name"`
	// Uncached is the price of a million input tokens that the prompt cache does not serve
	// (Anthropic bills cache writes at 1.25x), Cached of a million it serves, Output of a
	// million output tokens.
	Uncached float64 `json:"uncached"`
	Cached   float64 `json:"cached"`
	Output   float64 `json:"output"`
}

// Price profiles.
var (
	ProfileAnthropic = Profile{Name: "anthropic", Uncached: 1.25, Cached: 0.1, Output: 5.0}
	ProfileOpenAI    = Profile{Name: "openai", Uncached: 1.0, Cached: 0.1, Output: 8.0}
)

// ProfileByName returns a price profile: "anthropic" (the default, also for "") or "openai".
func ProfileByName(name string) (Profile, error) {
	switch strings.ToLower(name) {
	case "", "anthropic":
		return ProfileAnthropic, nil
	case "openai":
		return ProfileOpenAI, nil
	}
	return Profile{}, fmt.Errorf("replay: unknown price profile %q (known: anthropic, openai)", name)
}

// Cost is the price of the tokens under p: uncached and cached input of the calls, plus the
// summary calls (their input at the uncached price, their output at the output price). The
// recorded assistant messages are the same under every strategy and are left out.
func (p Profile) Cost(input, cached, summaryIn, summaryOut int64) float64 {
	return (float64(input-cached)*p.Uncached + float64(cached)*p.Cached +
		float64(summaryIn)*p.Uncached + float64(summaryOut)*p.Output) / 1e6
}

// Options configure Run. Zero values mean the documented defaults.
type Options struct {
	// Window and MaxOutput are the model's context window and reply reserve in tokens.
	// Defaults 200000 and 32000.
	Window, MaxOutput int
	// Strategies to replay, by name (see Strategies; also sweep strategies, SweepStrategy).
	// Default: all.
	Strategies []string
	// Profile names the price profile (see ProfileByName). Default "anthropic".
	Profile string
	// Workers is how many (trajectory, strategy) replays run at once. Default GOMAXPROCS.
	Workers int
	// Summarizer summarizes for every strategy. Default (nil): the extractive summarizer,
	// sized by each strategy's own token counter, billed by Counter.
	Summarizer summarize.Summarizer
	// Counter measures every strategy's requests, whatever counter the strategy itself uses
	// internally. Default: the exact o200k_base counter with a per-message cache.
	Counter tokens.Counter
	// Progress, when set, receives a one-line progress bar ("\r[====>   ] 12/42"), redrawn as
	// trajectories finish. The caller decides whether its writer is a terminal.
	Progress io.Writer
	// KeepRuns, when set, says which trajectories' per-call series Result.Runs keeps (the
	// report's trajectory view needs them); the totals are folded in as each trajectory is
	// done, so a caller that keeps none holds memory for the runs in flight only. Default: all.
	KeepRuns func(trajectory string) bool
}

func (o Options) withDefaults() (Options, error) {
	if o.Window == 0 {
		o.Window = 200000
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = 32000
	}
	if o.Window < 0 || o.MaxOutput < 0 || o.MaxOutput >= o.Window {
		return o, fmt.Errorf("replay: window %d and max output %d: want 0 < max output < window", o.Window, o.MaxOutput)
	}
	if len(o.Strategies) == 0 {
		o.Strategies = Strategies()
	}
	seen := map[string]bool{}
	for _, s := range o.Strategies {
		if !knownStrategy(s) {
			return o, fmt.Errorf("replay: unknown strategy %q (known: %s)", s, strings.Join(Strategies(), ", "))
		}
		if seen[s] {
			return o, fmt.Errorf("replay: strategy %q given twice", s)
		}
		seen[s] = true
	}
	if _, err := ProfileByName(o.Profile); err != nil {
		return o, err
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Counter == nil {
		c, err := tokens.ForEncoding(tokens.O200kBase)
		if err != nil {
			return o, fmt.Errorf("replay: measuring counter: %w", err)
		}
		o.Counter = tokens.NewCache(c, 1<<18)
	}
	return o, nil
}

// Result is what Run measured. Strategies, Sets and Runs are in a fixed order (strategies as
// given, sets by name, runs by trajectory then strategy), so the same input gives the same
// Result but for the timing fields.
type Result struct {
	Window       int    `json:"window"`
	MaxOutput    int    `json:"max_output"`
	Profile      string `json:"profile"`
	Trajectories int    `json:"trajectories"`
	Calls        int    `json:"calls"`
	// Strategies are the totals over every trajectory, one per strategy.
	Strategies []Totals `json:"strategies"`
	// Sets are the totals per set of trajectories (the directory a file is in).
	Sets []SetResult `json:"sets"`
	// Prices is the price profile in force.
	Prices Profile `json:"prices"`
	// Floor is what sending every message once costs, over every trajectory.
	Floor Floor `json:"floor"`
	// ElapsedMS is the wall time of Run.
	ElapsedMS float64 `json:"elapsed_ms"`
	// Runs hold the per-call series of every trajectory under every strategy.
	Runs []Replay `json:"-"`
	// Trajs describe the trajectories, in input order.
	Trajs []TrajectoryInfo `json:"-"`
}

// TrajectoryInfo describes one replayed trajectory.
type TrajectoryInfo struct {
	Name     string `json:"name"`
	Set      string `json:"set"`
	Messages int    `json:"messages"`
	Calls    int    `json:"calls"`
}

// SetResult holds the totals of one set of trajectories.
type SetResult struct {
	Name         string   `json:"name"`
	Trajectories int      `json:"trajectories"`
	Calls        int      `json:"calls"`
	Strategies   []Totals `json:"strategies"`
	// Floor is what sending every message of the set once costs.
	Floor Floor `json:"floor"`
	// Recorded sums the usage the provider reported for the recorded calls, when the files
	// carry it (mini-swe-agent): a reference for the measured raw figures (the recorded model
	// may tokenize differently).
	Recorded *RecordedUsage `json:"recorded,omitempty"`
}

// Floor is the cost of sending every message of the history once, whole, at the uncached
// price, the system prompt and the tools once too: the messages before each trajectory's last
// call, each billed the first time it is sent, and each call's reply priming (the tokens
// every request ends with), and nothing ever read again from a cache. A strategy that shows
// every message whole at least once costs at least this, whatever it does afterwards (a
// message is new, so uncached, the first time it is sent). One that costs less has cut or
// dropped something before the model ever saw it whole: an ingestion cap, a truncated page,
// a summary of turns it never sent. It is the measure of how much is left to save without
// that.
type Floor struct {
	InputTokens int64   `json:"input_tokens"`
	Cost        float64 `json:"cost"`
	// CostVsRaw is Cost / the raw strategy's Cost over the same calls (0 without raw).
	CostVsRaw float64 `json:"cost_vs_raw"`
}

func (f *Floor) finish(prof Profile, strategies []Totals) {
	f.Cost = prof.Cost(f.InputTokens, 0, 0, 0)
	for _, t := range strategies {
		if t.Name == StrategyRaw && t.Cost > 0 {
			f.CostVsRaw = f.Cost / t.Cost
		}
	}
}

// RecordedUsage sums reported usage over the calls that report it.
type RecordedUsage struct {
	Calls        int   `json:"calls"`
	InputTokens  int64 `json:"input_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Totals are one strategy's figures over a set of calls. The JSON names are the replay's
// output format.
type Totals struct {
	Name string `json:"name"`
	// CostWithReadBack is the headline: Cost plus what reading back the terms the requests
	// no longer showed costs, what an agent pays for what it forgot: one round trip per call
	// that misses any (ReadBackCalls: the call's input sent again, cached, to ask for them)
	// and what it reads (ReadBackTokens, billed uncached). CostWithReadBackVsRaw is it over raw's (0 without raw; raw never reads back).
	CostWithReadBack      float64 `json:"cost_with_read_back"`
	CostWithReadBackVsRaw float64 `json:"cost_with_read_back_vs_raw"`
	// InputTokens sums the measured input tokens of every prepared request; CachedTokens the
	// part a prompt cache would serve (see docs/replay.md).
	InputTokens  int64 `json:"input_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	// SummaryInputTokens and SummaryOutputTokens are what the summary calls would bill.
	SummaryInputTokens  int64 `json:"summary_input_tokens"`
	SummaryOutputTokens int64 `json:"summary_output_tokens"`
	// Cost under the price profile, in units of the price of a million input tokens.
	Cost float64 `json:"cost"`
	// PeakTokens is the largest prepared input.
	PeakTokens int `json:"peak_tokens"`
	// Overflows counts calls whose input + max output exceeds the window (a failed Prepare
	// counts too: the unmanaged request is measured instead); Invalid calls whose request
	// breaks tool-call pairing; Lost distinct messages that were at some call neither in the
	// request nor recoverable from the store.
	Overflows int `json:"overflows"`
	Invalid   int `json:"invalid"`
	Lost      int `json:"lost"`
	// Recall is recalled / referenced terms over all calls (micro-average); 1 when no call
	// references anything.
	Recall float64 `json:"recall"`
	// RecoverableRecall is (recalled + recoverable) / referenced terms: recoverable terms are
	// not in the request but readable through a reference it shows (a stored tool result, the
	// archive). ReadBackTokens sums what reading them back would take (one ctxmgr_read of the
	// message each, per call).
	RecoverableRecall float64 `json:"recoverable_recall"`
	RecoverableTerms  int64   `json:"recoverable_terms"`
	ReadBackTokens    int64   `json:"read_back_tokens"`
	ReadBackCalls     int     `json:"read_back_calls"`
	readBackContext   int64   // the input tokens of the calls that read back
	// Compactions counts summaries made.
	Compactions int `json:"compactions"`
	// PrepareP50US and PrepareP99US are percentiles of the time one Prepare took, in µs.
	PrepareP50US float64 `json:"prepare_p50_us"`
	PrepareP99US float64 `json:"prepare_p99_us"`

	Calls          int     `json:"calls"`
	ReferenceTerms int64   `json:"reference_terms"`
	RecalledTerms  int64   `json:"recalled_terms"`
	CacheHitRate   float64 `json:"cache_hit_rate"`
	// CostVsRaw is Cost / the raw strategy's Cost over the same calls (0 without raw).
	CostVsRaw float64 `json:"cost_vs_raw"`
	// PrefixChanges counts calls whose request did not begin with the previous one's messages.
	PrefixChanges int `json:"prefix_changes"`
	// Errors counts failed Prepare calls by kind ("no_fit", "other").
	Errors map[string]int `json:"errors,omitempty"`
	// Events counts pipeline steps by name (offload, mask, summarize, truncate, ...).
	Events map[string]int `json:"events,omitempty"`

	durations []time.Duration
}

// Replay is one trajectory replayed under one strategy.
type Replay struct {
	Trajectory string
	Set        string
	Strategy   string
	Calls      []Call
	// Lost lists the history positions of the lost messages.
	Lost []int
}

// Call is one rebuilt LLM call.
type Call struct {
	// Index is the position of the recorded assistant message in the history.
	Index         int
	Input, Cached int
	SummaryInput  int
	SummaryOutput int
	Compactions   int
	// Steps are the pipeline steps Prepare took.
	Steps         []string
	PrefixChanged bool
	Overflow      bool
	Invalid       bool
	// Error is the kind of Prepare failure ("no_fit", "other"), empty when it succeeded.
	Error string
	// Terms and Recalled: the size of the reference set and how many of it are recalled.
	Terms, Recalled int
	// Recoverable counts the terms not recalled but readable through a reference the request
	// shows (see recoverable); ReadBack is the tokens an agent would read back for them.
	Recoverable, ReadBack int
	Prepare               time.Duration
}

// trajData is what every strategy's replay of one trajectory shares, computed once.
type trajData struct {
	t      *Trajectory
	fps    []fp  // fingerprints of the history messages
	toks   []int // their tokens
	base   map[fp]int
	prefix int // tokens of the system prompt and the tool definitions
	// prefixRead is prefix with the ctxmgr_read tool declared, as the proxy sends every
	// managed request of a conversation with tools.
	prefixRead int
	once       int64 // tokens of sending every message once (see Floor)
	refs       [][]refTerm
	calls      int
	weight     int64 // estimated work, to schedule long runs first
}

func analyze(t *Trajectory, c tokens.Counter) *trajData {
	d := &trajData{t: t, fps: make([]fp, len(t.Messages)), toks: make([]int, len(t.Messages)), base: make(map[fp]int, len(t.Messages))}
	for i := range t.System {
		d.prefix += c.Message(&t.System[i])
	}
	d.prefixRead = d.prefix + c.Tools(readtool.With(t.Tools))
	d.prefix += c.Tools(t.Tools)
	var sum int64
	for i := range t.Messages {
		d.fps[i] = fingerprint(&t.Messages[i])
		d.toks[i] = c.Message(&t.Messages[i])
		d.base[d.fps[i]] = d.toks[i]
		if t.Messages[i].Role == chat.RoleAssistant {
			// Every message before this call once, and each call's reply priming.
			d.once = int64(d.prefix) + sum + int64(tokens.ReplyPriming*(d.calls+1))
		}
		sum += int64(d.toks[i])
		if t.Messages[i].Role == chat.RoleAssistant {
			d.calls++
			d.weight += sum
		}
	}
	d.refs = references(t.Messages)
	return d
}

// Run replays every trajectory under every strategy of opts and measures the calls.
func Run(ctx context.Context, trajs []Trajectory, opts Options) (*Result, error) {
	return RunStream(ctx, func(yield func(Trajectory) error) error {
		for _, t := range trajs {
			if err := yield(t); err != nil {
				return err
			}
		}
		return nil
	}, len(trajs), opts)
}

// RunStream is Run over trajectories a source produces one after the other (LoadEach, for
// instance): each is replayed under every strategy by one of opts.Workers workers as it comes
// and then dropped, keeping only its measurements, so that memory is bounded by the workers
// times the largest trajectory, not by the input. total, when known (> 0), sizes the progress
// bar. The result is the same as Run's on the same trajectories in the same order.
func RunStream(ctx context.Context, source func(yield func(Trajectory) error) error, total int, opts Options) (*Result, error) {
	started := time.Now()
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	prof, _ := ProfileByName(opts.Profile)
	ns := len(opts.Strategies)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	type item struct {
		index int
		t     Trajectory
	}
	type done struct {
		info     TrajectoryInfo
		once     int64
		recorded RecordedUsage
		runs     []Replay
		ok       bool
	}
	// Trajectories are folded into the totals in input order as they are done (an earlier
	// one still running holds the later ones back), so that the result does not depend on
	// which worker finished first; only the runs KeepRuns asks for are kept.
	var (
		mu      sync.Mutex
		pending []done // indexed from next
		next    int
		res     = &Result{Window: opts.Window, MaxOutput: opts.MaxOutput, Profile: prof.Name, Prices: prof}
		all     = newTotals(opts)
		bySet   = map[string]totals{}
		setRec  = map[string]*RecordedUsage{}
		setInfo = map[string]*SetResult{}
	)
	fold := func(d done) {
		res.Trajectories++
		res.Calls += d.info.Calls
		res.Trajs = append(res.Trajs, d.info)
		res.Floor.InputTokens += d.once
		all.add(d.runs)
		set := d.info.Set
		if bySet[set] == nil {
			bySet[set], setRec[set], setInfo[set] = newTotals(opts), &RecordedUsage{}, &SetResult{Name: set}
		}
		bySet[set].add(d.runs)
		sr := setInfo[set]
		sr.Trajectories++
		sr.Calls += d.info.Calls
		sr.Floor.InputTokens += d.once
		rec := setRec[set]
		rec.Calls += d.recorded.Calls
		rec.InputTokens += d.recorded.InputTokens
		rec.CachedTokens += d.recorded.CachedTokens
		rec.OutputTokens += d.recorded.OutputTokens
		if opts.KeepRuns == nil || opts.KeepRuns(d.info.Name) {
			res.Runs = append(res.Runs, d.runs...)
		}
	}
	put := func(i int, d done) {
		mu.Lock()
		defer mu.Unlock()
		for len(pending) <= i-next {
			pending = append(pending, done{})
		}
		d.ok = true
		pending[i-next] = d
		for len(pending) > 0 && pending[0].ok {
			fold(pending[0])
			pending[0] = done{}
			pending = pending[1:]
			next++
		}
	}
	bar := newProgress(opts.Progress, total)
	r := &runner{opts: opts}
	items := make(chan item)
	var wg sync.WaitGroup
	for range max(1, opts.Workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range items {
				if ctx.Err() != nil {
					continue // drain
				}
				d := analyze(&it.t, opts.Counter)
				out := done{info: TrajectoryInfo{Name: it.t.Name, Set: it.t.Set, Messages: len(it.t.Messages), Calls: d.calls}, once: d.once, runs: make([]Replay, ns)}
				for _, u := range it.t.Recorded {
					out.recorded.Calls++
					out.recorded.InputTokens += int64(u.InputTokens)
					out.recorded.CachedTokens += int64(u.CachedTokens)
					out.recorded.OutputTokens += int64(u.OutputTokens)
				}
				for si, strategy := range opts.Strategies {
					run, err := r.replay(ctx, d, strategy)
					if err != nil {
						cancel(fmt.Errorf("replay: %s under %s: %w", it.t.Name, strategy, err))
						break
					}
					out.runs[si] = run
				}
				put(it.index, out)
				bar.step()
			}
		}()
	}
	n := 0
	serr := source(func(t Trajectory) error {
		select {
		case items <- item{n, t}:
			n++
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	close(items)
	wg.Wait()
	bar.done()
	if cause := context.Cause(ctx); cause != nil {
		return nil, cause
	}
	if serr != nil {
		return nil, serr
	}

	res.Strategies = all.finish(opts, prof)
	res.Floor.finish(prof, res.Strategies)
	sets := make([]string, 0, len(bySet))
	for set := range bySet {
		sets = append(sets, set)
	}
	sort.Strings(sets)
	for _, set := range sets {
		sr := setInfo[set]
		if setRec[set].Calls > 0 {
			sr.Recorded = setRec[set]
		}
		sr.Strategies = bySet[set].finish(opts, prof)
		sr.Floor.finish(prof, sr.Strategies)
		res.Sets = append(res.Sets, *sr)
	}
	res.ElapsedMS = float64(time.Since(started).Microseconds()) / 1000
	return res, nil
}

// totals accumulates the runs of one scope (every trajectory, or one set), per strategy, as
// trajectories are done; finish computes the figures.
type totals []Totals

func newTotals(opts Options) totals {
	t := make(totals, len(opts.Strategies))
	for si, name := range opts.Strategies {
		t[si].Name = name
	}
	return t
}

// add folds the runs of one trajectory (one per strategy, in opts.Strategies' order).
func (tt totals) add(runs []Replay) {
	for si := range runs {
		t, run := &tt[si], &runs[si]
		t.Lost += len(run.Lost)
		for k := range run.Calls {
			c := &run.Calls[k]
			t.Calls++
			t.InputTokens += int64(c.Input)
			t.CachedTokens += int64(c.Cached)
			t.SummaryInputTokens += int64(c.SummaryInput)
			t.SummaryOutputTokens += int64(c.SummaryOutput)
			t.PeakTokens = max(t.PeakTokens, c.Input)
			t.Compactions += c.Compactions
			t.ReferenceTerms += int64(c.Terms)
			t.RecalledTerms += int64(c.Recalled)
			t.RecoverableTerms += int64(c.Recoverable)
			t.ReadBackTokens += int64(c.ReadBack)
			if c.ReadBack > 0 {
				t.ReadBackCalls++
				t.readBackContext += int64(c.Input)
			}
			t.durations = append(t.durations, c.Prepare)
			if c.Overflow {
				t.Overflows++
			}
			if c.Invalid {
				t.Invalid++
			}
			if c.PrefixChanged {
				t.PrefixChanges++
			}
			if c.Error != "" {
				if t.Errors == nil {
					t.Errors = map[string]int{}
				}
				t.Errors[c.Error]++
			}
			for _, s := range c.Steps {
				if t.Events == nil {
					t.Events = map[string]int{}
				}
				t.Events[s]++
			}
		}
	}
}

// finish computes costs, recall and percentiles.
func (tt totals) finish(opts Options, prof Profile) []Totals {
	for si := range tt {
		t := &tt[si]
		t.Cost = prof.Cost(t.InputTokens, t.CachedTokens, t.SummaryInputTokens, t.SummaryOutputTokens)
		t.Recall, t.RecoverableRecall = 1, 1
		if t.ReferenceTerms > 0 {
			t.Recall = float64(t.RecalledTerms) / float64(t.ReferenceTerms)
			t.RecoverableRecall = float64(t.RecalledTerms+t.RecoverableTerms) / float64(t.ReferenceTerms)
		}
		t.CostWithReadBack = t.Cost + (float64(t.ReadBackTokens)*prof.Uncached+float64(t.readBackContext)*prof.Cached)/1e6
		if t.InputTokens > 0 {
			t.CacheHitRate = float64(t.CachedTokens) / float64(t.InputTokens)
		}
		slices.Sort(t.durations)
		t.PrepareP50US = percentile(t.durations, 0.50)
		t.PrepareP99US = percentile(t.durations, 0.99)
		t.durations = nil
	}
	if i := slices.Index(opts.Strategies, StrategyRaw); i >= 0 && tt[i].Cost > 0 {
		for k := range tt {
			tt[k].CostVsRaw = tt[k].Cost / tt[i].Cost
			tt[k].CostWithReadBackVsRaw = tt[k].CostWithReadBack / tt[i].CostWithReadBack
		}
	}
	return tt
}

// percentile returns the nearest-rank percentile of sorted durations, in µs.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(float64(len(sorted))*p+0.999999) - 1
	k = min(max(k, 0), len(sorted)-1)
	return float64(sorted[k].Nanoseconds()) / 1000
}

// runner replays one (trajectory, strategy) pair at a time per goroutine.
type runner struct {
	opts Options
}

// replay feeds the history to a fresh Manager message by message, as an agent would: before
// each recorded assistant message it prepares the request and measures it, then appends the
// recorded message. raw sends the history as it is.
func (r *runner) replay(ctx context.Context, d *trajData, strategy string) (Replay, error) {
	t := d.t
	run := Replay{Trajectory: t.Name, Set: t.Set, Strategy: strategy, Calls: make([]Call, 0, d.calls)}
	mt := newMeter(r.opts.Counter, d.base)
	var prev *measured
	var (
		m   *ctxmgr.Manager
		s   *ctxmgr.Session
		st  *store.Memory
		lc  *lostCheck
		err error
	)
	// readTool: the request declares ctxmgr_read, as the proxy does in every request it
	// manages of a conversation with tools.
	readTool := strategy != StrategyRaw && readtool.Declared(t.Tools)
	if strategy != StrategyRaw {
		m, s, st, err = r.manager(strategy, t)
		if err != nil {
			return run, err
		}
		defer m.Close()
		lc = newLostCheck(d, m, s, st)
	}
	for i := range t.Messages {
		msg := &t.Messages[i]
		if msg.Role == chat.RoleAssistant {
			c := Call{Index: i}
			var (
				msgs    []chat.Message
				evicted int
				pinned  = -1
			)
			if strategy == StrategyRaw {
				start := time.Now()
				msgs = t.Messages[:i:i]
				c.Prepare = time.Since(start)
			} else {
				start := time.Now()
				p, err := s.Prepare(ctx)
				c.Prepare = time.Since(start)
				if err != nil {
					if ctx.Err() != nil {
						return run, ctx.Err()
					}
					// The agent would have sent the history unmanaged.
					c.Error = errorKind(err)
					c.Overflow = true
					msgs = t.Messages[:i:i]
				} else {
					msgs = p.Request.Messages
					evicted, pinned = p.Report.Evicted, p.Report.Pinned
					c.SummaryInput = p.Report.SummaryInputTokens
					c.SummaryOutput = p.Report.SummaryOutputTokens
					c.Compactions = p.Report.Compactions
					c.PrefixChanged = p.Report.PrefixChanged
					for _, ev := range p.Report.Steps {
						c.Steps = append(c.Steps, string(ev.Step))
					}
				}
			}
			prefix := d.prefix
			if readTool && c.Error == "" {
				prefix = d.prefixRead
			}
			me := mt.measure(msgs, prefix)
			me.readTool = readTool && c.Error == ""
			c.Input = me.total
			c.Cached = cachedPrefix(prev, &me)
			prev = &me
			if c.Input+r.opts.MaxOutput > r.opts.Window {
				c.Overflow = true
			}
			if turns.Validate(msgs, turns.ValidateOptions{}) != nil {
				c.Invalid = true
			}
			view := mapView(d, msgs, &me, evicted, pinned, i)
			c.Terms = len(d.refs[i])
			var missed []int
			c.Recalled, missed = recalled(d.refs[i], msgs, view)
			c.Recoverable, c.ReadBack = recoverable(d, d.refs[i], missed, msgs, view, evicted)
			if lc != nil && c.Error == "" {
				if err := lc.check(ctx, msgs, view, evicted, i); err != nil {
					return run, err
				}
			}
			run.Calls = append(run.Calls, c)
		}
		if s != nil {
			if err := s.Append(ctx, *msg); err != nil {
				return run, fmt.Errorf("append message %d: %w", i, err)
			}
		}
	}
	if lc != nil {
		// What the next call would send: every message appended is in it or recoverable.
		if p, err := s.Prepare(ctx); err == nil {
			view := mapView(d, p.Request.Messages, nil, p.Report.Evicted, p.Report.Pinned, len(t.Messages))
			if err := lc.check(ctx, p.Request.Messages, view, p.Report.Evicted, len(t.Messages)); err != nil {
				return run, err
			}
		} else if ctx.Err() != nil {
			return run, ctx.Err()
		}
		run.Lost = lc.positions()
	}
	return run, nil
}

func errorKind(err error) string {
	if errors.Is(err, ctxmgr.ErrDoesNotFit) {
		return "no_fit"
	}
	return "other"
}

// manager builds a fresh Manager for the strategy with a memory store, a discarding logger
// and the replay's summarizer, and opens the trajectory's session.
func (r *runner) manager(strategy string, t *Trajectory) (*ctxmgr.Manager, *ctxmgr.Session, *store.Memory, error) {
	cfg, err := strategyConfig(strategy, r.opts.Window, r.opts.MaxOutput)
	if err != nil {
		return nil, nil, nil, err
	}
	if cfg.Counter == nil && cfg.Budget.SafetyMargin == 0 && r.opts.Counter.Name() == tokens.O200kBase {
		// The strategy counts with ctxmgr's exact default counter, which the measuring counter
		// is: share it (and its cache of counts) instead of counting every message again. The
		// default counter comes with no safety margin (Config.WithDefaults); keep it so.
		cfg.Counter = r.opts.Counter
		cfg.Budget.NoSafetyMargin = true
	}
	if prof, err := ProfileByName(r.opts.Profile); err == nil && cfg.Prices == (ctxmgr.Prices{}) {
		// Rewrites are decided under the prices the replay bills (--profile).
		cfg.Prices = ctxmgr.Prices{Uncached: prof.Uncached, Cached: prof.Cached}
	}
	st := store.NewMemory()
	cfg.Store = st
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Summarizer = r.summarizer(cfg.Counter)
	m, err := ctxmgr.New(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	tools := t.Tools
	if readtool.Declared(tools) {
		// The proxy declares ctxmgr_read from a tool-using conversation's first request.
		tools = readtool.With(tools)
	}
	s, err := m.NewSession("replay", t.System, tools)
	if err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	return m, s, st, nil
}

// view maps the messages of a prepared request to the history: which history positions are
// in it verbatim, and which request messages are not verbatim history (the summary, masked,
// offloaded or truncated views).
type view struct {
	// verbatim[j] for history position j < the call's position.
	verbatim []bool
	// other lists the indices of request messages that are not verbatim history.
	other []int
	// mapped is false when the request does not have the shape the pipeline builds; then
	// verbatim is all false and other lists every message.
	mapped bool
	// pinned is the history position sent first, before the summary (-1: none).
	pinned int
}

// mapView relates a request to the history before position upto. The request is the pinned
// latest user message (history position pinned, when >= 0), the summary (when there is one),
// then the views of history[evicted:upto]. me, when given, holds the request's fingerprints.
func mapView(d *trajData, msgs []chat.Message, me *measured, evicted, pinned, upto int) view {
	v := view{verbatim: make([]bool, upto), pinned: -1}
	off := 0
	if pinned >= 0 && pinned < upto && len(msgs) > 0 && fingerprint(&msgs[0]) == d.fps[pinned] {
		v.verbatim[pinned] = true
		v.pinned = pinned
		off = 1
	}
	if len(msgs) > off && msgs[off].Meta["ctxmgr"] == "summary" {
		v.other = append(v.other, off)
		off++
	}
	if len(msgs)-off != upto-evicted || evicted < 0 {
		// Not the shape the pipeline builds: treat every message as non-verbatim, so that
		// recall searches all of the request's text.
		v.other = v.other[:0]
		for k := range msgs {
			v.other = append(v.other, k)
		}
		return v
	}
	v.mapped = true
	for j := max(evicted, 0); j < upto; j++ {
		k := j - evicted + off
		var f fp
		if me != nil {
			f = me.fps[k]
		} else {
			f = fingerprint(&msgs[k])
		}
		if f == d.fps[j] {
			v.verbatim[j] = true
		} else {
			v.other = append(v.other, k)
		}
	}
	return v
}

// recalled counts the reference terms present in the request: a term is present when a
// message it occurs in is in the request verbatim, or when it is a substring of the text of
// the request's other messages (the summary, and masked, offloaded or truncated views).
// It also returns the indices of the terms it missed.
func recalled(refs []refTerm, msgs []chat.Message, v view) (int, []int) {
	n := 0
	var missed []int
	var other string
	built := false
	for i, r := range refs {
		found := false
		for _, j := range r.occ {
			if j < len(v.verbatim) && v.verbatim[j] {
				found = true
				break
			}
		}
		if !found {
			if !built {
				var b strings.Builder
				for _, k := range v.other {
					b.WriteString(searchText(&msgs[k]))
					b.WriteByte('\n')
				}
				other, built = b.String(), true
			}
			found = strings.Contains(other, r.term)
		}
		if found {
			n++
		} else {
			missed = append(missed, i)
		}
	}
	return n, missed
}

// billed wraps a strategy's summarizer so that summary calls are billed as an LLM would bill
// them, by the measuring counter: the prompt an LLM summarizer would be sent (instructions,
// previous summary, transcript of the evicted messages) and the summary text. A custom
// summarizer's own figures (the provider's reported usage) are kept unless it fell back to the
// extractive one.
type billed struct {
	inner  summarize.Summarizer
	bill   summarize.Summarizer // extractive with the measuring counter; nil: inner already is
	c      tokens.Counter
	custom bool
}

func (b *billed) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	res, err := b.inner.Summarize(ctx, req)
	if err != nil || b.custom && !res.Fallback {
		return res, err
	}
	if b.bill != nil {
		if br, err := b.bill.Summarize(ctx, req); err == nil {
			res.InputTokens = br.InputTokens
		}
	}
	res.OutputTokens = b.c.Text(res.Text)
	return res, nil
}

// summarizer returns the summarizer of a strategy whose own counter is c (nil: exact).
func (r *runner) summarizer(c tokens.Counter) summarize.Summarizer {
	measuring := r.opts.Counter
	billing := summarize.NewExtractive(summarize.ExtractiveOptions{Counter: measuring})
	if r.opts.Summarizer != nil {
		return &billed{inner: r.opts.Summarizer, bill: billing, c: measuring, custom: true}
	}
	if c == nil || c == measuring {
		// The strategy counts exactly, as the measuring counter does: one summarizer both
		// sizes and bills.
		return &billed{inner: billing, c: measuring}
	}
	return &billed{inner: summarize.NewExtractive(summarize.ExtractiveOptions{Counter: c}), bill: billing, c: measuring}
}

// lostCheck finds messages that are neither in a prepared request verbatim nor recoverable
// from the store: archived verbatim (ReadArchive) when evicted, or, for a tool result whose
// view was replaced (offloaded, masked, truncated), whose full text the store returns
// (ReadOffload) under the reference its view names.
type lostCheck struct {
	d        *trajData
	m        *ctxmgr.Manager
	s        *ctxmgr.Session
	st       *store.Memory
	archived int          // positions below this were checked in the archive
	pending  map[int]bool // evicted positions sent pinned instead of archived: checked again later
	views    map[int]fp   // position -> replaced view already verified recoverable
	lost     map[int]bool
}

func newLostCheck(d *trajData, m *ctxmgr.Manager, s *ctxmgr.Session, st *store.Memory) *lostCheck {
	return &lostCheck{d: d, m: m, s: s, st: st, views: map[int]fp{}, lost: map[int]bool{}, pending: map[int]bool{}}
}

func (lc *lostCheck) positions() []int {
	out := make([]int, 0, len(lc.lost))
	for j := range lc.lost {
		out = append(out, j)
	}
	slices.Sort(out)
	return out
}

// check checks history[:upto] against a request whose first live position is evicted.
func (lc *lostCheck) check(ctx context.Context, msgs []chat.Message, v view, evicted, upto int) error {
	t := lc.d.t
	// A pinned message is evicted but sent verbatim; once released it must be archived.
	for j := range lc.pending {
		if j == v.pinned {
			continue
		}
		one, err := lc.st.ReadArchive(ctx, lc.s.ID(), j, j+1)
		if err != nil {
			return err
		}
		if len(one) != 1 || !sameStored(&one[0].Message, &t.Messages[j], lc.d.fps[j]) {
			lc.lost[j] = true
		}
		delete(lc.pending, j)
	}
	if evicted > lc.archived {
		arch, err := lc.st.ReadArchive(ctx, lc.s.ID(), lc.archived, evicted)
		if err != nil {
			return err
		}
		byPos := make(map[int]*chat.Message, len(arch))
		for i := range arch {
			byPos[arch[i].Pos] = &arch[i].Message
		}
		for j := lc.archived; j < evicted; j++ {
			if j == v.pinned {
				lc.pending[j] = true
				continue
			}
			got := byPos[j]
			if got == nil || !sameStored(got, &t.Messages[j], lc.d.fps[j]) {
				lc.lost[j] = true
			}
		}
		lc.archived = evicted
	}
	if !v.mapped {
		// Not the pipeline's shape: a message is present when it is anywhere in the request.
		in := make(map[fp]bool, len(msgs))
		for k := range msgs {
			in[fingerprint(&msgs[k])] = true
		}
		for j := max(evicted, 0); j < upto; j++ {
			if !in[lc.d.fps[j]] {
				lc.lost[j] = true
			}
		}
		return nil
	}
	var offloads []store.Offloaded
	off := 0
	if v.pinned >= 0 {
		off = 1
	}
	if len(msgs) > off && msgs[off].Meta["ctxmgr"] == "summary" {
		off++
	}
	for j := max(evicted, 0); j < upto; j++ {
		if v.verbatim[j] || lc.lost[j] {
			continue
		}
		k := j - evicted + off
		if k >= len(msgs) {
			lc.lost[j] = true
			continue
		}
		vf := fingerprint(&msgs[k])
		if f, ok := lc.views[j]; ok && f == vf {
			continue
		}
		orig := &t.Messages[j]
		if orig.Role != chat.RoleTool {
			lc.lost[j] = true
			continue
		}
		if offloads == nil {
			offloads = lc.s.Stats().Offloads
		}
		text := searchText(&msgs[k])
		var ref *store.Offloaded
		for i := range offloads {
			o := &offloads[i]
			if strings.Contains(text, o.Ref()) && (ref == nil || len(o.Key) > len(ref.Key)) {
				ref = o
			}
		}
		if ref == nil {
			lc.lost[j] = true
			continue
		}
		full, _, err := lc.st.ReadOffload(ctx, lc.s.ID(), ref.Key, 1, 0)
		if err != nil || full != ctxmgr.OffloadedText(orig) {
			lc.lost[j] = true
			continue
		}
		lc.views[j] = vf
	}
	return nil
}

// sameStored reports whether a message read back from the store is orig (whose fingerprint
// is f), allowing for the JSON round trip the store makes.
func sameStored(got, orig *chat.Message, f fp) bool {
	g := fingerprint(got)
	if g == f {
		return true
	}
	rt := roundTrip(*orig)
	return g == fingerprint(&rt)
}
