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

// Config configures a Manager (New). The zero value of every field means its documented
// default, wherever the Config came from (a literal, Preset, WithDefaults): New fills the
// defaults (WithDefaults shows them) and Validate refuses what cannot work. Turning a mechanism
// off is an explicit switch (DisableOffload, KeepOffloads, DisableMasking, DisableSummary,
// Budget.NoSafetyMargin); a negative number is an error, never a way to say off.
//
// Sizes of tool results are in bytes of their text, everything else in tokens of Counter.
//
// Preset returns the Config of a named strategy. The seed presets (masking, copaw, qwenpaw,
// picoclaw, cowagent, baseagent) also carry rules of the systems they reproduce (count
// triggers, keep rules, turn-only cuts, masking on every call), which no field sets: they are
// selected by the preset's name, and a Config keeps them when it is copied, with any field
// changed.
type Config struct {
	// Budget is the window: its size, the reply reserve, the compaction and soft thresholds,
	// the recent history compaction keeps, the safety margin. Zero fields take the
	// budget.Window defaults (200000 tokens, 32000 of output, threshold 0.80, soft threshold
	// 0.60, reserve 0.10, margin 0.02), except the safety margin when Counter is left nil:
	// the default counter is exact, so the margin is off (Budget.NoSafetyMargin) unless
	// Budget.SafetyMargin is set.
	Budget budget.Window

	// What enters the context: the ingestion cap.

	// ToolResultCap is the ingestion cap in bytes: a tool result larger than this is written
	// whole to the Store when it is appended and replaced in context by a head+tail snippet
	// and a reference. Zero: 50000 (QwenPaw's recent-message cap). Non-zero values are at
	// least 256. DisableOffload turns the cap off.
	ToolResultCap int
	// DisableOffload turns the ingestion cap off: tool results enter context whole (they may
	// still be cut or masked later). Default false.
	DisableOffload bool
	// RequestedReadCap is the ingestion cap in bytes for results the agent requested as file
	// reads (see ReadTools), which age out by the cost model like the others. Such a result
	// keeps at most what fits under the compaction threshold beside the conversation's own
	// messages (the whole history with every tool result counted as a mask stub), and never
	// less than ToolResultCap: at a small window a page read early in a run stays whole, one
	// read late is cut. Zero: four times ToolResultCap. A value no larger than ToolResultCap
	// gives requested reads the ordinary cap.
	RequestedReadCap int
	// ReadTools declares tools that read files, beside the ones ctxmgr recognises (Claude
	// Code's Read, read_file, view, str_replace_based_edit_tool's view, cat/sed -n/head/tail
	// through a shell tool): their results are what the agent asked for, so they are not
	// capped at ingestion while recent (up to RequestedReadCap) and they can be superseded
	// by a later read of the same range. Each needs a Name and a PathArg. Default: none.
	ReadTools []ReadTool
	// ExemptTools names tools whose results are never offloaded, truncated or masked.
	// Default: none.
	ExemptTools []string
	// OffloadRetention is how long the Store keeps offloaded results. Zero: 5 days.
	// KeepOffloads keeps them forever.
	OffloadRetention time.Duration
	// KeepOffloads keeps offloaded results forever (no expiry). Default false.
	KeepOffloads bool

	// Rewrites of history already sent, made whenever the cost model says they pay.

	// Prices is the price profile rewrites are decided by (see Prices.Expected): a rewrite of
	// history already sent is a prompt-cache miss for what follows it, and is made only when
	// the saving over the calls to come covers it. Zero: PricesAnthropic.
	Prices Prices
	// Supersede replaces an older tool result that a later one shows again (the same file or
	// range read again, the same command re-run, the same search, an identical result) by a
	// reference to the later one, in batches, when that pays under the cost model (Prices).
	// It loses nothing the agent can still see; the earlier text stays in the Store. Default
	// false (the default preset turns it on).
	Supersede bool
	// AgeOut re-truncates a tool result to OldToolResultCap on any call once it is older than
	// the RecentToolResults newest, but only where that pays for itself under the cost model
	// (Prices.Expected): aged results are cut in batches, together with superseded ones, and a
	// batch is made when what it saves on the calls to come outweighs the prompt-cache miss it
	// causes for the tokens after its first change point. Results then mostly age out while
	// still near the end of the request, where the miss is small. It needs OldToolResultCap.
	// Default false (the default preset turns it on).
	AgeOut bool
	// OldToolResultCap is the smaller cap in bytes for tool results older than the
	// RecentToolResults newest (QwenPaw: 3000). Re-truncation keeps the same stored reference.
	// It is applied by AgeOut, and by the batched rewrite over the compaction threshold. Zero:
	// off (no older cap). Non-zero values are at least 256.
	OldToolResultCap int
	// PagedPastCap is the smaller cap in bytes, in place of OldToolResultCap, for a page an
	// agent has read past: a ranged read of a file that the next read of the same file
	// continues where it ended (Claude Code's Read paging through a document with offset and
	// limit). The agent read the page in order and quoted what it needed in its own messages,
	// which stay verbatim; the page ages out like any result (AgeOut), to this size, and its
	// full text stays readable through its reference. A read that jumps elsewhere (an agent
	// looking at ranges of code) keeps OldToolResultCap, and so does a page no larger than
	// that. Zero: OldToolResultCap. Non-zero values are at least 256.
	PagedPastCap int
	// RecentToolResults is how many of the newest tool results keep ToolResultCap (the older
	// ones are subject to OldToolResultCap). Zero: 2.
	RecentToolResults int
	// CostMaskKeep, when > 0, masks tool results older than the CostMaskKeep newest whenever
	// the cost model says it pays (batched with superseding and age-out; see AgeOut), not only
	// over the threshold. It is the knob between cost and recall that replay's report sweeps
	// for the default preset (default@N): smaller masks sooner, so costs less and recalls
	// less. Zero: off. It needs AgeOut.
	CostMaskKeep int

	// Compaction, when the request is over the compaction threshold (Budget.Threshold).

	// MaskKeep is how many of the newest tool results masking over the threshold never
	// replaces by one-line stubs. Zero: 10 (none under the baseagent preset, which protects
	// the newest 40000 tokens of history instead). DisableMasking turns masking off.
	MaskKeep int
	// MaskMinSaving is the fewest tokens a mask over the threshold must free to be made, so
	// that the prefix (and the provider's prompt cache) changes rarely. Zero: 5% of
	// Budget.Window.
	MaskMinSaving int
	// DisableMasking turns masking over the threshold off (MaskKeep and MaskMinSaving are
	// then unused). Default false.
	DisableMasking bool
	// MaskBeforeSummary, when the request is still over the compaction threshold after the
	// threshold rewrite, masks every tool result but the RecentToolResults newest before
	// summarizing, then, if still over, all but the newest, so that the conversation's own
	// messages stay verbatim (the summary runs only if that is not enough). Default false
	// (the default preset turns it on).
	MaskBeforeSummary bool
	// Summarizer summarizes evicted turns. Default (nil): the extractive summarizer, which
	// makes no LLM call. A Summarizer that fails is replaced, for that summary, by the
	// extractive one (a StepFallback event says so).
	Summarizer summarize.Summarizer
	// SummaryTokens is the summary's size target in tokens. Zero: 4% of Budget.Window, at
	// least 1000. It must be below half of Budget.Window.
	SummaryTokens int
	// DisableSummary turns summarization off: then only masking and truncation shrink a
	// request. Default false.
	DisableSummary bool
	// Background starts a summary in the background once the soft threshold
	// (Budget.SoftThreshold) is crossed; it is applied at the compaction threshold if the
	// history it covered is unchanged. Results then depend on timing (invariant 5 holds for
	// synchronous summaries), so the default is false; turn it on with a slow LLM Summarizer.
	Background bool

	// MaxRecoveries bounds Session.Recover calls in a row without a new message, in [0,10].
	// Zero: 3.
	MaxRecoveries int

	// Store keeps history, summaries, the archive and offloaded results. Default (nil): a new
	// in-memory store, private to the Manager.
	Store store.Store
	// Counter counts tokens. Default (nil): exact o200k_base with a per-message cache (and no
	// safety margin; see Budget).
	Counter tokens.Counter
	// Now is the clock. Default (nil): time.Now.
	Now func() time.Time
	// Logger receives one record per pipeline event. Default (nil): slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called with every event, in the order the session raised them, never
	// with a lock of the session held and never concurrently for one session: it may call any
	// method of the session (Stats, Prepare, ...). It runs on the goroutine of the call that
	// raised the event before that call returns, unless another call of the session is
	// delivering events at that moment (another goroutine, or OnEvent itself calling the
	// session): that call delivers it, after the events before it. Events are stored
	// (Store.AppendEvent) and logged with the context of the call that delivers them.
	// Default (nil): none.
	OnEvent func(Event)

	// seed holds the rules of the systems the seed presets reproduce; only Preset sets them.
	seed seedRules
}

// seedRules are the rules of the systems the seed presets reproduce (CoPaw, QwenPaw, Picoclaw,
// CowAgent, BaseAgent) and of the masking baseline, which ctxmgr's own pipeline does not use.
// Only Preset sets them; every zero value is off.
type seedRules struct {
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
	// seed systems do. Otherwise a cut may also fall between two complete tool iterations
	// inside a turn, so that a long single-turn agent run (a coding agent's whole task) can be
	// summarized; the latest user message then stays pinned before the summary.
	TurnCuts bool
	// RollingRewrite applies masking and the older cap on every call, not only over the
	// threshold: the published "observation masking" baseline. Every rewrite is a prompt-cache
	// miss for what follows it, so ctxmgr's own pipeline never does it.
	RollingRewrite bool
	// NoMaskMinSaving masks whatever masking frees (MaskMinSaving is 0).
	NoMaskMinSaving bool
	// MaskProtectTokens protects from masking the tool results within that many of the newest
	// history tokens (BaseAgent); the default MaskKeep is then 0, so that they alone protect.
	MaskProtectTokens int
	// TruncateTokens is the middle-out cap in tokens for a tool result of the active turn when
	// one huge turn does not fit (BaseAgent: 2500). 0: what makes it fit.
	TruncateTokens int
	// PlainReads gives requested reads the ordinary ToolResultCap (RequestedReadCap is 0): the
	// wider cap is ctxmgr's own.
	PlainReads bool
}

// ErrInvalidConfig is wrapped by every Config.Validate error (and by Preset's and
// PricesByName's for an unknown name).
var ErrInvalidConfig = errors.New("ctxmgr: invalid config")

// ConfigError reports an invalid Config field; Config.Validate returns one for the first
// invalid field it finds. errors.Is(err, ErrInvalidConfig) holds, and for a Budget field
// errors.As finds the *budget.ConfigError too.
type ConfigError struct {
	// Field names the field at fault as it is written in Go: "ToolResultCap",
	// "Budget.Threshold", "ReadTools[2]".
	Field string
	// Reason says what is wrong, with the values.
	Reason string

	err error // the cause, for a Budget field
}

func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalidConfig and, for a Budget field, its *budget.ConfigError.
func (e *ConfigError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrInvalidConfig, e.err}
	}
	return []error{ErrInvalidConfig}
}

func configErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// WithDefaults returns c with every zero field set to its documented default, as its switches
// allow (DisableOffload leaves ToolResultCap and RequestedReadCap zero, KeepOffloads
// OffloadRetention, DisableMasking MaskKeep) and as a seed preset's rules have it, and with
// its nil components (Counter, Summarizer, Store, Now, Logger) made. Window-relative
// defaults use Budget.Window as filled. It keeps every non-zero field as it is, even an
// invalid one (call Validate), and is idempotent: a Config and its WithDefaults behave the
// same.
func (c Config) WithDefaults() Config {
	if c.Counter == nil {
		c.Counter = defaultCounter()
		// The default counter is exact: no margin, unless one is set.
		if c.Budget.SafetyMargin == 0 {
			c.Budget.NoSafetyMargin = true
		}
	}
	if c.Summarizer == nil && c.Counter != nil {
		c.Summarizer = summarize.NewExtractive(summarize.ExtractiveOptions{Counter: c.Counter})
	}
	c.Budget = c.Budget.WithDefaults()
	window := c.Budget.Window
	if c.ToolResultCap == 0 && !c.DisableOffload {
		c.ToolResultCap = 50000
	}
	if c.RequestedReadCap == 0 && c.ToolResultCap > 0 && !c.DisableOffload && !c.seed.PlainReads {
		c.RequestedReadCap = 4 * c.ToolResultCap
	}
	if c.OffloadRetention == 0 && !c.KeepOffloads {
		c.OffloadRetention = 5 * 24 * time.Hour
	}
	if c.Prices == (Prices{}) {
		c.Prices = PricesAnthropic
	}
	if c.RecentToolResults == 0 {
		c.RecentToolResults = 2
	}
	if c.MaskKeep == 0 && !c.DisableMasking && c.seed.MaskProtectTokens == 0 {
		c.MaskKeep = 10
	}
	if c.MaskMinSaving == 0 && !c.seed.NoMaskMinSaving {
		c.MaskMinSaving = window / 20
	}
	if c.SummaryTokens == 0 {
		c.SummaryTokens = max(1000, window/25)
	}
	if c.MaxRecoveries == 0 {
		c.MaxRecoveries = 3
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

// Validate checks c as it is (call it on c.WithDefaults(); New does) and returns the first
// invalid field as a *ConfigError: a negative number anywhere, a cap below 256 bytes, a
// SummaryTokens of half the window or more, MaxRecoveries above 10, a ReadTool without Name
// or PathArg, an invalid Budget or Prices, a nil component.
func (c Config) Validate() error {
	if err := c.Budget.Validate(); err != nil {
		var be *budget.ConfigError
		if errors.As(err, &be) {
			return &ConfigError{Field: "Budget." + be.Field, Reason: be.Reason, err: be}
		}
		return &ConfigError{Field: "Budget", Reason: err.Error(), err: err}
	}
	if err := c.Prices.validate(); err != nil {
		return err
	}
	for i, rt := range c.ReadTools {
		if rt.Name == "" || rt.PathArg == "" {
			return configErr(fmt.Sprintf("ReadTools[%d]", i), "Name and PathArg are required")
		}
	}
	capErr := func(field string, v int, zero string) error {
		if v < 0 || v > 0 && v < 256 {
			return configErr(field, "%d: 0 (%s) or at least 256 bytes, room for a snippet and its reference", v, zero)
		}
		return nil
	}
	negative := func(field string, v int, hint string) error {
		if v < 0 {
			return configErr(field, "%d < 0%s", v, hint)
		}
		return nil
	}
	for _, err := range []error{
		capErr("ToolResultCap", c.ToolResultCap, "the default; DisableOffload turns it off"),
		negative("RequestedReadCap", c.RequestedReadCap, ""),
		capErr("OldToolResultCap", c.OldToolResultCap, "off"),
		capErr("PagedPastCap", c.PagedPastCap, "OldToolResultCap"),
		negative("RecentToolResults", c.RecentToolResults, ""),
		negative("CostMaskKeep", c.CostMaskKeep, " (0 turns it off)"),
		negative("MaskKeep", c.MaskKeep, " (DisableMasking turns masking off)"),
		negative("MaskMinSaving", c.MaskMinSaving, ""),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case c.OffloadRetention < 0:
		return configErr("OffloadRetention", "%v < 0 (KeepOffloads keeps them forever)", c.OffloadRetention)
	case c.SummaryTokens < 0 || c.SummaryTokens >= c.Budget.Window/2:
		return configErr("SummaryTokens", "%d: want 0 or more, below half the window (%d)", c.SummaryTokens, c.Budget.Window)
	case c.MaxRecoveries < 0 || c.MaxRecoveries > 10:
		return configErr("MaxRecoveries", "%d not in [0,10]", c.MaxRecoveries)
	case c.seed.TriggerTokens > c.Budget.Window:
		return configErr("Budget.Window", "%d is below the preset's compaction trigger of %d tokens", c.Budget.Window, c.seed.TriggerTokens)
	case c.Store == nil:
		return configErr("Store", "nil (New fills it; see WithDefaults)")
	case c.Counter == nil:
		return configErr("Counter", "nil (New fills it; see WithDefaults)")
	case c.Summarizer == nil:
		return configErr("Summarizer", "nil (New fills it; see WithDefaults)")
	case c.Now == nil:
		return configErr("Now", "nil (New fills it; see WithDefaults)")
	case c.Logger == nil:
		return configErr("Logger", "nil (New fills it; see WithDefaults)")
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
