package ctxmgr

import (
	"context"
	"fmt"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/turns"
)

// Prepared is the request to send and what the pipeline did to make it.
type Prepared struct {
	// Request holds the system prompt, the tool definitions and the messages to send (the
	// summary first, as a user message, when there is one). Body fields such as model and
	// max_tokens are the caller's; package wire turns a Request into a provider body. It
	// fits Report.Window only when the caller sends at most Report.MaxOutput as max_tokens.
	Request chat.Request
	// Report says what the pipeline did to make Request, and the window it was made for.
	Report Report
}

// Report says what Prepare (or Recover) did. Token counts are by the Config's counter.
type Report struct {
	// Window is the context window in tokens (input + output) the request was made to fit:
	// Config.Budget.Window, or the smaller window Recover settled on for the session, which
	// the session keeps from then on (across restarts, through its Store).
	Window int
	// MaxOutput is the reply budget the request leaves room for, in tokens: the request fits
	// Window (input + MaxOutput + safety margin <= Window) only if the caller sends at most
	// MaxOutput as the request's max_tokens (max_output_tokens, maxOutputTokens). It is
	// Config.Budget.MaxOutput until Recover makes the window smaller; from then on it is
	// min(Config.Budget.MaxOutput, Window/4), at least 1, and the caller must send it as
	// max_tokens (or less), on the retry Recover prepares and on every later request.
	MaxOutput int
	// Before and After are the tokens per region (system prompt, tools, summary, history)
	// when the call began and of the request it returns.
	Before, After budget.Regions
	// InputBefore and InputAfter are the sums of Before and After: the input tokens of the
	// request as it stood when the call began and of the one it returns.
	InputBefore, InputAfter int
	// Steps are the events this call raised, in order; each also goes to Config.OnEvent and
	// the Store. After Recover the last one is the StepRecover event naming the new window.
	Steps []Event
	// Freed = InputBefore - InputAfter: the input tokens this call removed (negative if it
	// made the request larger).
	Freed int
	// PrefixChanged: the request does not begin with the previous request's messages (a
	// compaction event happened since), so provider prompt caches miss from the change on.
	// False on the first request after NewSession or LoadSession.
	PrefixChanged bool
	// SummaryVersion is the version of the summary in force (0: none). Evicted is how many
	// history messages, from the first, it covers: they are not sent, but for Pinned. Pinned
	// is the history position of the latest user message when a cut passed it: it is then
	// sent first, before the summary (-1: none). The request is [pinned], [summary], then the
	// views of history[Evicted:].
	SummaryVersion int
	Evicted        int
	Pinned         int
	// SummaryInputTokens and SummaryOutputTokens are what the summaries applied in this call
	// cost: the tokens the summarizer billed (the extractive one reports what an LLM call
	// would have billed). Zero when no summary was applied.
	SummaryInputTokens, SummaryOutputTokens int
	// Compactions counts the summaries applied in this call (a background summary applied
	// here included).
	Compactions int
}

// Prepare runs the pipeline and returns the exact request to send. Call it before every LLM
// call. The request is valid (tool calls paired), fits the window (input + max output + margin
// <= window, by the configured counter), and begins with the previous request's messages
// unless Report.PrefixChanged. If even the system prompt, the tools and the latest user
// message do not fit, it returns a *NoFitError (errors.Is ErrDoesNotFit) with the numbers.
func (s *Session) Prepare(ctx context.Context) (Prepared, error) {
	return s.prepare(ctx, false)
}

// prepare is the driver of Prepare, and of Recover with force (compact even under the
// trigger). It runs the steps in order, cheapest first, each on the state the previous one
// left; the first error ends the call. Capping and offloading at ingestion (offload.go) ran
// when the messages were appended.
func (s *Session) prepare(ctx context.Context, force bool) (Prepared, error) {
	defer s.deliver(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Prepared{}, err
	}
	if err := s.pending(); err != nil {
		return Prepared{}, err
	}
	if s.broken != nil {
		return Prepared{}, s.broken
	}
	w := s.window()
	rep := &Report{Window: w.Window, MaxOutput: w.MaxOutput, Before: s.regions()}
	rep.InputBefore = s.plan().Input

	// A seed preset's rolling rewrite of old tool results, on every call (mask.go).
	if s.m.cfg.seed.RollingRewrite {
		if err := s.rewrite(ctx, false, "rolling", rep); err != nil {
			return Prepared{}, err
		}
	}
	// The rewrites that pay for their cache miss: superseding and age-out (economize.go).
	if err := s.economize(ctx, rep); err != nil {
		return Prepared{}, err
	}
	// Over the compaction trigger: masking, then a summary (compact.go).
	if err := s.compactOverTrigger(ctx, force, rep); err != nil {
		return Prepared{}, err
	}
	// Still too large: the forced steps, down to middle-out truncation (truncate.go).
	if err := s.shrinkToFit(ctx, rep); err != nil {
		return Prepared{}, err
	}
	return s.build(ctx, rep)
}

// pending reports tool calls still waiting for results: such a request would be rejected.
func (s *Session) pending() error {
	if len(s.open) == 0 {
		return nil
	}
	idx := -1
	var id string
	for k, i := range s.open {
		if idx < 0 || i < idx || i == idx && k < id {
			idx, id = i, k
		}
	}
	return &chat.Error{Index: idx, Field: "tool_calls", Err: chat.ErrMissingToolResult, Detail: fmt.Sprintf("call %q has no result yet; append the tool results before preparing the next request", id)}
}

// build assembles the request from the current state.
//
// The request's messages are kept between calls: while nothing already sent changes (the
// epoch), a call only appends the views of the new entries, so it costs what the new messages
// cost. The slice returned is capped at its length, so that appending to it, by the caller or
// by the next build, never shows through; its messages are never modified afterwards (a change
// builds a new slice), and callers must not modify them either.
func (s *Session) build(ctx context.Context, rep *Report) (Prepared, error) {
	if s.built == nil || s.builtEpoch != s.epoch || s.builtLen > len(s.entries) {
		msgs := make([]chat.Message, 0, len(s.entries)-s.start+2+len(s.entries)/8)
		if s.pinned >= 0 {
			msgs = append(msgs, s.entries[s.pinned].view)
		}
		if s.summary != nil && s.summary.Text != "" {
			msgs = append(msgs, s.summaryMsg)
		}
		s.built, s.builtLen, s.builtEpoch = msgs, s.start, s.epoch
	}
	for i := s.builtLen; i < len(s.entries); i++ {
		s.built = append(s.built, s.entries[i].view)
	}
	s.builtLen = len(s.entries)
	msgs := s.built[:len(s.built):len(s.built)]
	// Appends keep the history valid by construction (Session.check); only a compaction event
	// (a cut, a new view) could break it, so the whole request is re-validated only then. A
	// failure is a bug, never a request to send.
	if s.epoch != s.validEpoch || !s.validated {
		if err := turns.Validate(msgs, turns.ValidateOptions{}); err != nil {
			return Prepared{}, fmt.Errorf("ctxmgr: internal error: prepared request is invalid: %w", err)
		}
		s.validEpoch, s.validated = s.epoch, true
	}
	if err := s.persistState(ctx); err != nil {
		return Prepared{}, err
	}
	rep.After = s.regions()
	rep.InputAfter = s.plan().Input
	rep.Freed = rep.InputBefore - rep.InputAfter
	rep.PrefixChanged = s.sent && s.epoch != s.sentEpoch
	s.sent, s.sentEpoch = true, s.epoch
	if s.summary != nil {
		rep.SummaryVersion = s.summary.Version
	}
	rep.Evicted, rep.Pinned = s.start, s.pinned
	return Prepared{
		Request: chat.Request{System: s.system, Tools: s.tools, Messages: msgs},
		Report:  *rep,
	}, nil
}

func (s *Session) note(rep *Report, ev Event) {
	if ev.Freed == 0 {
		ev.Freed = ev.Before - ev.After
	}
	ev.Session = s.id
	rep.Steps = append(rep.Steps, ev)
	s.m.emit(s, ev)
}
