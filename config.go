package ctxmgr

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// Config configures a Manager. The zero value of every field means its documented default;
// call WithDefaults to see them filled, and Validate (New does both). A Config that already has
// its defaults (from WithDefaults or Preset) keeps every tuning value it holds, zeros
// included: a zero set in it then means zero.
type Config struct {
	// Budget is the window: size, reply reserve, thresholds, reserved recent history, safety
	// margin. Defaults: budget.DefaultWindow (200000 tokens, 32000 output, threshold 0.80, soft
	// 0.60, reserve 0.10, margin 0.02; the margin is 0 when Counter is exact, the default).
	Budget budget.Window

	// ToolResultCap is the ingestion cap in bytes: a tool result larger than this is written
	// whole to the store when it is appended and replaced in context by a head+tail snippet and
	// a reference. Default 50000 (QwenPaw's recent-message cap).
	ToolResultCap int
	// DisableOffload turns the ingestion cap off: tool results enter context whole.
	DisableOffload bool
	// OldToolResultCap, when > 0, is the smaller cap for tool results older than the
	// RecentToolResults most recent ones (QwenPaw: 3000 bytes). Re-truncation keeps the same
	// stored reference. It is applied together with masking (a batched rewrite), or on every
	// call when RollingRewrite is set. Default 0 (off).
	OldToolResultCap int
	// PagedPastCap, when > 0, is the smaller cap, in place of OldToolResultCap, for a page an
	// agent has read past: a ranged read of a file that the next read of the same file
	// continues where it ended (Claude Code's Read paging through a document with offset and
	// limit). The agent read the page in order and quoted what it needed in its own messages,
	// which stay verbatim; the page ages out like any result (AgeOut), to this size, and its
	// full text stays readable through its reference. A read that jumps elsewhere (an agent
	// looking at ranges of code) keeps OldToolResultCap, and so does a page no larger than
	// that. Default 0: OldToolResultCap.
	PagedPastCap int
	// RecentToolResults is how many of the newest tool results keep ToolResultCap. Default 2.
	RecentToolResults int
	// ExemptTools names tools whose results are never offloaded, truncated or masked.
	ExemptTools []string
	// OffloadRetention is how long offloaded results are kept. Default 5 days.
	OffloadRetention time.Duration
	// KeepOffloads keeps offloaded results forever (no retention).
	KeepOffloads bool

	// Masking replaces old tool results by one-line stubs. MaskKeep is how many of the newest
	// tool results are never masked (default 10; BaseAgent's preset sets 0, so that the
	// newest Seed.MaskProtectTokens tokens alone protect).
	// MaskMinSaving: mask only when that frees at least this many tokens, so that the prefix
	// changes rarely (default 5% of the window).
	MaskKeep      int
	MaskMinSaving int
	// DisableMasking turns masking over the threshold off; DisableMaskMinSaving masks whatever
	// it frees (no minimum).
	DisableMasking       bool
	DisableMaskMinSaving bool
	// AgeOut re-truncates a tool result to OldToolResultCap on any call once it is older than
	// the RecentToolResults newest, but only where that pays for itself under the cost model
	// (Prices.Expected): aged results are cut in batches, together with superseded ones, and a
	// batch is made when what it saves on the calls to come (estimated as a third of the calls
	// made so far) outweighs the prompt-cache miss it causes for the tokens after its first
	// change point. Results then mostly age out while still near the end of the request, where
	// the miss is small.
	AgeOut bool
	// CostMaskKeep, when > 0, masks tool results older than the CostMaskKeep newest whenever
	// the cost model says it pays (batched with superseding and age-out; see AgeOut), not only
	// over the threshold. It is the knob between cost and recall that replay's report sweeps
	// for the default preset (which leaves it off): smaller masks sooner, so costs less and
	// recalls less. Default 0 (off); it needs AgeOut.
	CostMaskKeep int
	// MaskBeforeSummary, when the request is still over the compaction trigger after the
	// threshold rewrite, masks every tool result but the RecentToolResults newest before
	// summarizing, then, if still over, all but the newest, so that the conversation's own
	// messages stay verbatim (the summary runs only if that is not enough). Default off (the
	// default preset turns it on).
	MaskBeforeSummary bool

	// Prices is the price profile rewrites are decided by (see Prices.Expected): a rewrite
	// of history already sent is a prompt-cache miss for what follows it, and is made only
	// when the saving over the calls to come covers it. Default PricesAnthropic.
	Prices Prices
	// Supersede replaces an older tool result that a later one shows again (the same file or
	// range read again, the same command re-run, the same search, an identical result) by a
	// reference to the later one, in batches, when that pays under the cost model (Prices).
	// It loses nothing the agent can still see; the earlier text stays in the store. Default
	// off (the default preset turns it on).
	Supersede bool
	// ReadTools declares tools that read files, beside the ones ctxmgr recognises (Claude
	// Code's Read, read_file, view, str_replace_based_edit_tool's view, cat/sed -n/head/tail
	// through a shell tool): their results are what the agent asked for, so they are not
	// capped at ingestion while recent (up to RequestedReadCap) and they can be superseded
	// by a later read of the same range.
	ReadTools []ReadTool
	// RequestedReadCap is the ingestion cap in bytes for results the agent requested as file
	// reads (see ReadTools); they age out by the cost model like the others. Such a result
	// keeps at most what fits under the compaction threshold beside the conversation's own
	// messages (the whole history with every tool result counted as a mask stub), and never
	// less than ToolResultCap: at a small window a page read early in a run stays whole, one
	// read late is cut. Default: four times ToolResultCap.
	RequestedReadCap int
	// DisableRequestedReadCap gives requested reads the ordinary ToolResultCap.
	DisableRequestedReadCap bool

	// Summarizer summarizes evicted turns. Default: the extractive summarizer.
	Summarizer summarize.Summarizer
	// SummaryTokens is the summary's size target. Default 4% of the window, at least 1000.
	SummaryTokens int
	// DisableSummary turns summarization off (then only masking and truncation shrink a request).
	DisableSummary bool
	// Background starts summarization in the background once the soft threshold is crossed;
	// the result is applied at the hard threshold if the history it covered is unchanged.
	// Results then depend on timing (invariant 5 holds for synchronous summaries), so the
	// default is off; turn it on with a slow LLM summarizer.
	Background bool

	// Seed holds the rules only the seed presets use (count triggers, keep rules, turn-only
	// cuts, rolling rewrites): ctxmgr's own pipeline needs none of them. Zero: all off.
	Seed SeedRules

	// MaxRecoveries bounds Recover calls in a row without a new message. Default 3.
	MaxRecoveries int

	// Store keeps history, summaries, the archive and offloaded results. Default: a new
	// in-memory store.
	Store store.Store
	// Counter counts tokens. Default: exact o200k_base with a per-message cache.
	Counter tokens.Counter
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives one record per pipeline event. Default: slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called with every event, in the order the session raised them, never
	// with a lock of the session held and never concurrently for one session: it may call any
	// method of the session (Stats, Prepare, ...). It runs on the goroutine of the call that
	// raised the event before that call returns, unless another call of the session is
	// delivering events at that moment (another goroutine, or OnEvent itself calling the
	// session): that call delivers it, after the events before it. Events are stored
	// (Store.AppendEvent) and logged with the context of the call that delivers them.
	OnEvent func(Event)

	// tuned: the tuning values have their defaults (tuningDefaults ran), so a zero among them
	// is meant, not unset.
	tuned bool
}

// SeedRules are the rules of the systems the seed presets reproduce (CoPaw, QwenPaw,
// Picoclaw, CowAgent, BaseAgent) and of the masking baseline, which ctxmgr's own pipeline does
// not use. Every zero value is off.
type SeedRules struct {
	// Triggers by count (0: off): compact when the live history has more than MaxMessages
	// messages or more than MaxTurns turns. TriggerTokens, when > 0, replaces the threshold
	// ratio by an absolute limit on input + max output.
	MaxMessages   int
	MaxTurns      int
	TriggerTokens int
	// Keep rules decide what compaction leaves (default: the reserve of Budget). KeepMessages
	// keeps at least that many newest messages, KeepUserTurns that many newest turns,
	// KeepTurnFraction that fraction of the turns; every cut is snapped to a turn boundary.
	KeepMessages     int
	KeepUserTurns    int
	KeepTurnFraction float64
	// TurnCuts restricts compaction cuts to turn boundaries (before a user message), as the
	// seed systems do. By default a cut may also fall between two complete tool iterations
	// inside a turn, so that a long single-turn agent run (a coding agent's whole task) can be
	// summarized; the latest user message then stays pinned before the summary.
	TurnCuts bool
	// RollingRewrite applies masking and the older cap on every call, not only over the
	// threshold: the published "observation masking" baseline. Every rewrite is a prompt-cache
	// miss for what follows it, so ctxmgr's own pipeline never does it.
	RollingRewrite bool
	// MaskProtectTokens protects from masking the tool results within that many of the newest
	// history tokens (BaseAgent).
	MaskProtectTokens int
	// TruncateTokens is the middle-out cap in tokens for a tool result of the active turn when
	// one huge turn does not fit (BaseAgent: 2500). 0: what makes it fit.
	TruncateTokens int
}

// ErrInvalidConfig is wrapped by every Config.Validate error.
var ErrInvalidConfig = errors.New("ctxmgr: invalid config")

func configErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// WithDefaults returns c with every zero field set to its documented default. The tuning
// values (caps, retention, masking, summary size, recoveries) are defaulted once: in a Config
// that already has its defaults (from WithDefaults or Preset) they stay as they are, zeros
// included. Budget fields, Prices (what the provider charges, which callers set after Preset)
// and the components (Counter, Summarizer, Store, Now, Logger) are filled whenever they are
// zero or nil.
func (c Config) WithDefaults() Config {
	exactDefault := c.Counter == nil
	if c.Counter == nil {
		c.Counter = defaultCounter()
	}
	if c.Summarizer == nil && c.Counter != nil {
		c.Summarizer = summarize.NewExtractive(summarize.ExtractiveOptions{Counter: c.Counter})
	}
	if exactDefault && c.Budget.SafetyMargin == 0 {
		c.Budget.SafetyMargin = budget.ZeroRatio
	}
	c.Budget = c.Budget.WithDefaults()
	if !c.tuned {
		c = c.tuningDefaults()
	}
	if c.Prices == (Prices{}) {
		c.Prices = PricesAnthropic
	}
	if c.Store == nil {
		c.Store = store.NewMemory()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// tuningDefaults sets the zero tuning values of c to their defaults, as its switches
// (DisableOffload, KeepOffloads, DisableRequestedReadCap, DisableMasking,
// DisableMaskMinSaving) allow, and marks c as having its defaults. Window-relative defaults
// use the window as Budget's defaults make it.
func (c Config) tuningDefaults() Config {
	window := c.Budget.WithDefaults().Window
	if c.ToolResultCap == 0 && !c.DisableOffload {
		c.ToolResultCap = 50000
	}
	if c.RecentToolResults == 0 {
		c.RecentToolResults = 2
	}
	if c.OffloadRetention == 0 && !c.KeepOffloads {
		c.OffloadRetention = 5 * 24 * time.Hour
	}
	if c.RequestedReadCap == 0 && c.ToolResultCap > 0 && !c.DisableOffload && !c.DisableRequestedReadCap {
		c.RequestedReadCap = 4 * c.ToolResultCap
	}
	if c.MaskKeep == 0 && !c.DisableMasking {
		c.MaskKeep = 10
	}
	if c.MaskMinSaving == 0 && !c.DisableMaskMinSaving {
		c.MaskMinSaving = window / 20
	}
	if c.SummaryTokens == 0 {
		c.SummaryTokens = max(1000, window/25)
	}
	if c.MaxRecoveries == 0 {
		c.MaxRecoveries = 3
	}
	c.tuned = true
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if err := c.Budget.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := c.Prices.validate(); err != nil {
		return err
	}
	for i, rt := range c.ReadTools {
		if rt.Name == "" || rt.PathArg == "" {
			return configErr("ReadTools", "[%d]: Name and PathArg are required", i)
		}
	}
	switch {
	case c.CostMaskKeep < 0:
		return configErr("CostMaskKeep", "%d < 0", c.CostMaskKeep)
	case c.RequestedReadCap < 0:
		return configErr("RequestedReadCap", "%d < 0 (DisableRequestedReadCap turns it off)", c.RequestedReadCap)
	case c.ToolResultCap < 0:
		return configErr("ToolResultCap", "%d < 0 (DisableOffload turns it off)", c.ToolResultCap)
	case c.OffloadRetention < 0:
		return configErr("OffloadRetention", "%v < 0 (KeepOffloads keeps them forever)", c.OffloadRetention)
	case c.ToolResultCap > 0 && c.ToolResultCap < 256:
		return configErr("ToolResultCap", "%d bytes leaves no room for a snippet and its reference (min 256)", c.ToolResultCap)
	case c.OldToolResultCap < 0 || c.OldToolResultCap > 0 && c.OldToolResultCap < 256:
		return configErr("OldToolResultCap", "%d: 0 (off) or at least 256", c.OldToolResultCap)
	case c.PagedPastCap < 0 || c.PagedPastCap > 0 && c.PagedPastCap < 256:
		return configErr("PagedPastCap", "%d: 0 (OldToolResultCap) or at least 256", c.PagedPastCap)
	case c.RecentToolResults < 0:
		return configErr("RecentToolResults", "%d < 0", c.RecentToolResults)
	case c.MaskKeep < 0:
		return configErr("MaskKeep", "%d < 0 (DisableMasking turns masking off)", c.MaskKeep)
	case c.Seed.MaskProtectTokens < 0 || c.MaskMinSaving < 0:
		return configErr("MaskProtectTokens/MaskMinSaving", "negative")
	case c.SummaryTokens < 0 || c.SummaryTokens >= c.Budget.Window/2:
		return configErr("SummaryTokens", "%d must be below half the window", c.SummaryTokens)
	case c.Seed.MaxMessages < 0 || c.Seed.MaxTurns < 0 || c.Seed.TriggerTokens < 0:
		return configErr("MaxMessages/MaxTurns/TriggerTokens", "negative")
	case c.Seed.TriggerTokens > c.Budget.Window:
		return configErr("TriggerTokens", "%d above the window %d", c.Seed.TriggerTokens, c.Budget.Window)
	case c.Seed.KeepMessages < 0 || c.Seed.KeepUserTurns < 0:
		return configErr("KeepMessages/KeepUserTurns", "negative")
	case c.Seed.KeepTurnFraction < 0 || c.Seed.KeepTurnFraction >= 1:
		return configErr("KeepTurnFraction", "%v not in [0,1)", c.Seed.KeepTurnFraction)
	case c.Seed.TruncateTokens < 0:
		return configErr("TruncateTokens", "negative")
	case c.MaxRecoveries < 0 || c.MaxRecoveries > 10:
		return configErr("MaxRecoveries", "%d not in [0,10]", c.MaxRecoveries)
	case c.Store == nil || c.Counter == nil || c.Summarizer == nil || c.Now == nil || c.Logger == nil:
		return configErr("Store/Counter/Summarizer/Now/Logger", "nil (use WithDefaults)")
	}
	return nil
}

// defaultCounter is the exact o200k_base counter with a per-message cache, or nil when the
// embedded vocabulary cannot be loaded (a broken build; Validate then reports it).
func defaultCounter() tokens.Counter {
	c, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil
	}
	return tokens.NewCache(c, 1<<16)
}
