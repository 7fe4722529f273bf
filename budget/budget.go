// Package budget turns a context-window configuration and the token counts of a request's
// regions into decisions: does the request fit, has it crossed the soft (background
// summarization) or the hard (compaction) threshold, how many tokens may the history use.
//
// A request fills four regions (system prompt, tool definitions, summary, history) and the reply
// needs MaxOutput tokens on top. Every decision uses one formula:
//
//	history_budget = window - system - tools - summary - max_output - margin
//
// and the thresholds are turned into history limits the same way:
//
//	history_limit(threshold) = threshold_tokens - system - tools - summary - max_output
//
// Nothing compares the history alone against a percentage of the window.
//
// The package is pure: no I/O, no state; every function is safe for concurrent use.
package budget

import (
	"errors"
	"fmt"
	"math"
)

// Documented defaults (see DefaultWindow and Window.WithDefaults).
const (
	DefaultWindowTokens  = 200000
	DefaultMaxOutput     = 32000
	DefaultThreshold     = 0.80
	DefaultSoftThreshold = 0.60
	DefaultReserve       = 0.10
	DefaultSafetyMargin  = 0.02
)

// Window is the context-window configuration of one model. A zero field means its default
// (WithDefaults fills them); the one thing that can be turned off, the safety margin, is
// turned off by a switch (NoSafetyMargin), never by a special number.
type Window struct {
	// Window is the model's context window in tokens (input + output). Default
	// DefaultWindowTokens (200000).
	Window int
	// MaxOutput is the number of tokens reserved for the reply (the request's max_tokens).
	// Default DefaultMaxOutput (32000), at most a quarter of Window.
	MaxOutput int
	// Threshold is the compaction threshold as a ratio of Window, in (0,1]: compact when
	// input + MaxOutput exceeds Threshold*Window. Default 0.80.
	Threshold float64
	// SoftThreshold is the ratio of Window, in (0,1] and <= Threshold, above which background
	// summarization may start. Default 0.60, at most Threshold.
	SoftThreshold float64
	// Reserve is the ratio of Window, in [0,1), of most recent history that compaction never
	// touches (snapped to a turn boundary by the caller). Zero: DefaultReserve (0.10).
	Reserve float64
	// SafetyMargin is the ratio of Window, in [0,1), kept free to absorb token-counter error.
	// Zero: DefaultSafetyMargin (0.02). NoSafetyMargin turns the margin off.
	SafetyMargin float64
	// NoSafetyMargin keeps no safety margin, for a token counter whose counts are exact (the
	// provider's own tokenizer): SafetyMargin must then be 0. Default false.
	NoSafetyMargin bool
}

// DefaultWindow returns the documented defaults: a 200000-token window, 32000 tokens of output,
// threshold 0.80, soft threshold 0.60, reserve 0.10, safety margin 0.02.
func DefaultWindow() Window {
	return Window{
		Window:        DefaultWindowTokens,
		MaxOutput:     DefaultMaxOutput,
		Threshold:     DefaultThreshold,
		SoftThreshold: DefaultSoftThreshold,
		Reserve:       DefaultReserve,
		SafetyMargin:  DefaultSafetyMargin,
	}
}

// WithDefaults returns w with its zero fields filled:
//   - Window: DefaultWindowTokens;
//   - MaxOutput: DefaultMaxOutput, but at most a quarter of the window (so that a small window
//     given alone stays valid);
//   - Threshold: DefaultThreshold;
//   - SoftThreshold: DefaultSoftThreshold, but at most Threshold;
//   - Reserve: DefaultReserve;
//   - SafetyMargin: DefaultSafetyMargin, unless NoSafetyMargin.
//
// Non-zero fields are kept as they are, even invalid ones: call Validate afterwards.
// WithDefaults is idempotent.
func (w Window) WithDefaults() Window {
	if w.Window == 0 {
		w.Window = DefaultWindowTokens
	}
	if w.MaxOutput == 0 {
		w.MaxOutput = DefaultMaxOutput
		if w.Window > 0 && w.MaxOutput > w.Window/4 {
			w.MaxOutput = w.Window / 4
		}
	}
	if w.Threshold == 0 {
		w.Threshold = DefaultThreshold
	}
	if w.SoftThreshold == 0 {
		w.SoftThreshold = DefaultSoftThreshold
		if w.Threshold > 0 && w.SoftThreshold > w.Threshold {
			w.SoftThreshold = w.Threshold
		}
	}
	if w.Reserve == 0 {
		w.Reserve = DefaultReserve
	}
	if w.SafetyMargin == 0 && !w.NoSafetyMargin {
		w.SafetyMargin = DefaultSafetyMargin
	}
	return w
}

// ErrInvalidConfig is wrapped by every *ConfigError.
var ErrInvalidConfig = errors.New("invalid window configuration")

// ConfigError reports an invalid Window field. errors.Is(err, ErrInvalidConfig) holds.
type ConfigError struct {
	// Field is the Window field at fault ("Window", "MaxOutput", "Threshold", "SoftThreshold",
	// "Reserve", "SafetyMargin" (NoSafetyMargin with a margin set included)).
	Field string
	// Reason says what is wrong, with the numbers.
	Reason string
}

func (e *ConfigError) Error() string { return "budget: " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Validate checks w as it is (zero fields are not defaulted: call WithDefaults first) and returns
// the first problem as a *ConfigError:
//   - Window <= 0; MaxOutput < 0; Window <= MaxOutput;
//   - Threshold or SoftThreshold outside (0,1]; Reserve or SafetyMargin outside [0,1); NaN
//     anywhere; NoSafetyMargin with a SafetyMargin other than 0;
//   - SoftThreshold > Threshold;
//   - MaxOutput + margin tokens >= Window: no room for any input;
//   - Threshold*Window <= MaxOutput: the threshold is crossed by an empty request;
//   - reserve tokens >= the history limit at the threshold with empty system, tools and summary:
//     compaction could never bring the history under the threshold, nothing is compactable.
func (w Window) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if w.Window <= 0 {
		return bad("Window", "window must be positive, got %d", w.Window)
	}
	if w.MaxOutput < 0 {
		return bad("MaxOutput", "max output must not be negative, got %d", w.MaxOutput)
	}
	if w.Window <= w.MaxOutput {
		return bad("MaxOutput", "max output %d leaves no room in a window of %d", w.MaxOutput, w.Window)
	}
	if !(w.Threshold > 0 && w.Threshold <= 1) {
		return bad("Threshold", "must be in (0,1], got %v", w.Threshold)
	}
	if !(w.SoftThreshold > 0 && w.SoftThreshold <= 1) {
		return bad("SoftThreshold", "must be in (0,1], got %v", w.SoftThreshold)
	}
	if !(w.Reserve >= 0 && w.Reserve < 1) {
		return bad("Reserve", "must be in [0,1), got %v", w.Reserve)
	}
	if !(w.SafetyMargin >= 0 && w.SafetyMargin < 1) {
		return bad("SafetyMargin", "must be in [0,1), got %v (NoSafetyMargin turns the margin off)", w.SafetyMargin)
	}
	if w.NoSafetyMargin && w.SafetyMargin != 0 {
		return bad("SafetyMargin", "%v with NoSafetyMargin: set one or the other", w.SafetyMargin)
	}
	if w.SoftThreshold > w.Threshold {
		return bad("SoftThreshold", "soft threshold %v above threshold %v", w.SoftThreshold, w.Threshold)
	}
	if m := w.MarginTokens(); w.MaxOutput+m >= w.Window {
		return bad("SafetyMargin", "max output %d + margin %d leave no room in a window of %d", w.MaxOutput, m, w.Window)
	}
	t := w.ThresholdTokens()
	if t <= w.MaxOutput {
		return bad("Threshold", "threshold %d tokens (%v x %d) is not above max output %d", t, w.Threshold, w.Window, w.MaxOutput)
	}
	if r, limit := w.ReserveTokens(), t-w.MaxOutput; r >= limit {
		return bad("Reserve", "reserve %d tokens is not below the history limit at the threshold (%d): nothing is compactable", r, limit)
	}
	return nil
}

// ratioTokens returns r*n rounded down (up when ceil), treating a float product within 1e-6 of
// an integer as that integer, and ratios <= 0 (or NaN) as 0.
func ratioTokens(r float64, n int, ceil bool) int {
	if !(r > 0) || n <= 0 {
		return 0
	}
	x := r * float64(n)
	if near := math.Round(x); math.Abs(x-near) < 1e-6 {
		return int(near)
	}
	if ceil {
		return int(math.Ceil(x))
	}
	return int(math.Floor(x))
}

// MarginTokens is SafetyMargin*Window rounded up (0 with NoSafetyMargin).
func (w Window) MarginTokens() int {
	if w.NoSafetyMargin {
		return 0
	}
	return ratioTokens(w.SafetyMargin, w.Window, true)
}

// ReserveTokens is Reserve*Window rounded down.
func (w Window) ReserveTokens() int { return ratioTokens(w.Reserve, w.Window, false) }

// ThresholdTokens is the compaction limit on input + MaxOutput: Threshold*Window rounded down,
// capped at Window - MarginTokens so that a request over budget is always over the threshold.
func (w Window) ThresholdTokens() int {
	return min(ratioTokens(w.Threshold, w.Window, false), w.Window-w.MarginTokens())
}

// SoftTokens is the background-summarization limit on input + MaxOutput: SoftThreshold*Window
// rounded down, capped at ThresholdTokens so that over the threshold is always over soft.
func (w Window) SoftTokens() int {
	return min(ratioTokens(w.SoftThreshold, w.Window, false), w.ThresholdTokens())
}

// Regions are the token counts of a request's four input regions.
type Regions struct {
	System  int // system prompt
	Tools   int // tool definitions
	Summary int // compact summary, if any
	History int // conversation messages
}

// Plan is the breakdown of a request against a Window. Every limit is a plain int that may be
// negative (when the fixed regions alone exceed it).
type Plan struct {
	// Window, MaxOutput and Margin are the window's numbers in tokens.
	Window, MaxOutput, Margin int
	// Regions are the counts the plan was made from.
	Regions
	// Input is System + Tools + Summary + History.
	Input int
	// HistoryBudget = Window - System - Tools - Summary - MaxOutput - Margin: the most history
	// that fits. Negative when the fixed regions alone do not fit.
	HistoryBudget int
	// ThresholdTokens and SoftTokens are the limits on Input + MaxOutput (Window.ThresholdTokens,
	// Window.SoftTokens).
	ThresholdTokens, SoftTokens int
	// ThresholdHistory = ThresholdTokens - System - Tools - Summary - MaxOutput and SoftHistory
	// likewise: the history limits at the thresholds.
	ThresholdHistory, SoftHistory int
	// ReserveTokens is the recent history compaction keeps (Window.ReserveTokens).
	ReserveTokens int
	// Compactable = max(0, History - ReserveTokens): history outside the reserved zone.
	Compactable int
	// Excess = max(0, History - ThresholdHistory): how far Input + MaxOutput is over the
	// threshold, i.e. the history to shed to be back at it. It exceeds History when the fixed
	// regions alone are over the threshold (then shedding history cannot be enough).
	Excess int
	// Free = HistoryBudget - History: tokens left before the request stops fitting; negative
	// when over budget (then -Free tokens must go).
	Free int
	// OverSoft: Input + MaxOutput > SoftTokens (History > SoftHistory).
	OverSoft bool
	// OverThreshold: Input + MaxOutput > ThresholdTokens (History > ThresholdHistory).
	OverThreshold bool
	// OverBudget: Input + MaxOutput + Margin > Window (History > HistoryBudget).
	OverBudget bool
	// Fits is !OverBudget.
	Fits bool
	// NoRoom: HistoryBudget < 0, even an empty history does not fit (system, tools, summary and
	// the reply alone exceed the window).
	NoRoom bool
}

// Breakdown computes the plan for regions r under w. It uses w as given (it neither defaults
// nor validates it: do both once when the configuration is made). Implications that always
// hold: OverBudget => OverThreshold => OverSoft, and Fits == (Free >= 0).
func Breakdown(w Window, r Regions) Plan {
	p := Plan{
		Window:          w.Window,
		MaxOutput:       w.MaxOutput,
		Margin:          w.MarginTokens(),
		Regions:         r,
		Input:           r.System + r.Tools + r.Summary + r.History,
		ThresholdTokens: w.ThresholdTokens(),
		SoftTokens:      w.SoftTokens(),
		ReserveTokens:   w.ReserveTokens(),
	}
	fixed := r.System + r.Tools + r.Summary + w.MaxOutput
	p.HistoryBudget = w.Window - fixed - p.Margin
	p.ThresholdHistory = p.ThresholdTokens - fixed
	p.SoftHistory = p.SoftTokens - fixed
	p.Free = p.HistoryBudget - r.History
	p.Compactable = max(0, r.History-p.ReserveTokens)
	p.Excess = max(0, r.History-p.ThresholdHistory)
	p.OverSoft = r.History > p.SoftHistory
	p.OverThreshold = r.History > p.ThresholdHistory
	p.OverBudget = r.History > p.HistoryBudget
	p.Fits = !p.OverBudget
	p.NoRoom = p.HistoryBudget < 0
	return p
}

// String renders the plan on one line for logs.
func (p Plan) String() string {
	state := "fits"
	switch {
	case p.OverBudget:
		state = "OVER BUDGET"
	case p.OverThreshold:
		state = "over threshold"
	case p.OverSoft:
		state = "over soft"
	}
	return fmt.Sprintf("%s: input %d (system %d, tools %d, summary %d, history %d) + output %d + margin %d of window %d; "+
		"history budget %d, free %d; history limits soft %d, threshold %d; reserve %d, compactable %d, excess %d",
		state, p.Input, p.System, p.Tools, p.Summary, p.History, p.MaxOutput, p.Margin, p.Window,
		p.HistoryBudget, p.Free, p.SoftHistory, p.ThresholdHistory, p.ReserveTokens, p.Compactable, p.Excess)
}
