package ctxmgr

import (
	"errors"
	"fmt"
)

// Step names a pipeline step.
type Step string

// Pipeline steps, cheapest first: what loses least and costs least runs before what loses
// more (see the pipeline in the package doc).
const (
	StepOffload   Step = "offload"    // ingestion cap: a large tool result went to the store
	StepRetrunc   Step = "retruncate" // older tool results cut to the smaller cap
	StepMask      Step = "mask"       // old tool results replaced by stubs
	StepSupersede Step = "supersede"  // tool results a later one shows again replaced by references
	StepSummarize Step = "summarize"  // oldest turns folded into the summary and archived
	StepTruncate  Step = "truncate"   // one huge turn cut middle-out
	StepFallback  Step = "summarizer-fallback"
	StepRecover   Step = "recover" // a provider overflow answered with a tighter request
	StepClear     Step = "clear"
	StepCompact   Step = "compact" // manual /compact
	StepSkip      Step = "skip"    // a step that would have run but did not (reason says why)
)

// Event reports one pipeline step. Events go to Config.OnEvent and to Config.Logger.
type Event struct {
	Session string `json:"session"`
	Step    Step   `json:"step"`
	// Reason says why the step ran (or was skipped).
	Reason string `json:"reason,omitempty"`
	// Before and After are the prepared input tokens around the step; Freed = Before - After.
	Before int `json:"before"`
	After  int `json:"after"`
	Freed  int `json:"freed"`
	// Messages is how many messages the step touched.
	Messages int `json:"messages"`
	// ExpectedSaving is, for a rewrite of history already sent (supersede, retruncate,
	// mask), the net saving the cost model expected of it, in tokens at the base input price
	// (Prices.Expected): positive for the rewrites it decided, possibly negative for those
	// made under window pressure (over the threshold or the budget); 0 for other steps.
	ExpectedSaving float64 `json:"expected_saving,omitempty"`
}

// ErrDoesNotFit is wrapped by *NoFitError.
var ErrDoesNotFit = errors.New("ctxmgr: request does not fit the window")

// ErrRecoveryExhausted is returned by Recover after Config.MaxRecoveries attempts in a row.
var ErrRecoveryExhausted = errors.New("ctxmgr: overflow recovery exhausted")

// ErrNotStored: messages taken in by Session.AppendDeferred could not be written to the
// Store, so the session in memory no longer matches it; load the session again.
var ErrNotStored = errors.New("ctxmgr: deferred messages not stored")

// NoFitError says that even after every step the request does not fit: the parts that are
// never altered (system prompt, tool definitions, the latest user message) and what is left
// need more than the window.
type NoFitError struct {
	Window, MaxOutput, Margin int
	System, Tools, Summary    int
	// History is what is left of the history after every step; LatestUser is the latest user
	// message's share of it.
	History, LatestUser int
}

func (e *NoFitError) Error() string {
	need := e.System + e.Tools + e.Summary + e.History + e.MaxOutput + e.Margin
	return fmt.Sprintf("ctxmgr: request does not fit the window: needs %d tokens (system %d, tools %d, summary %d, history %d of which latest user message %d, max output %d, margin %d) > window %d",
		need, e.System, e.Tools, e.Summary, e.History, e.LatestUser, e.MaxOutput, e.Margin, e.Window)
}

func (e *NoFitError) Unwrap() error { return ErrDoesNotFit }
