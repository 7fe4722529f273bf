package ctxmgr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// viewKind says what a history entry's view is.
type viewKind uint8

const (
	viewOriginal    viewKind = iota
	viewOffloaded            // ingestion cap: head+tail snippet and reference
	viewRetruncated          // older cap: shorter snippet, same reference
	viewMasked               // one-line stub with the reference
	viewTruncated            // huge turn: middle-out cut with the reference
	viewNoReasoning          // older reasoning dropped
	viewSuperseded           // a later result shows it again: a reference to it (supersede.go)
)

func (k viewKind) String() string {
	return [...]string{"original", "offloaded", "retruncated", "masked", "truncated", "no-reasoning", "superseded"}[k]
}

// entry is one message of the history: the original exactly as appended, and the view that is
// sent (the same message unless a step replaced it). Views are replaced, never mutated, so a
// Prepared request never changes under its holder.
type entry struct {
	orig   chat.Message
	view   chat.Message
	tokens int // tokens of view
	kind   viewKind
	off    *store.Offloaded // where the full text of a tool result is, once offloaded
	size   int              // text bytes of the original (tool results)
	exempt bool
}

// archiveRange records one archived span of history.
type archiveRange struct {
	From, To int
	Where    store.Location
}

// Session is one conversation: system prompt, tool definitions, the full append-only history,
// the current summary and what has been evicted. Methods are safe for concurrent use.
type Session struct {
	m  *Manager
	id string

	mu sync.Mutex
	// events are raised under mu and delivered, in order, once it is released (deliver);
	// delivering says that a call is delivering them.
	events     []Event
	delivering bool
	system     []chat.Message
	tools      []chat.Tool
	sysTokens  int // system messages + reply priming
	toolTokens int

	entries    []entry
	start      int // entries[:start] are evicted (archived, in the summary), but for pinned
	pinned     int // the latest user message when a cut passed it: shown before the summary (-1: none)
	lastUser   int // index of the latest user message (-1: none)
	assistants int // assistant messages appended: the LLM calls made so far
	histTokens int // tokens of the history sent: entries[start:] and the pinned message
	// ownTokens is the tokens of the whole history (evicted messages included) with every
	// tool result counted as a mask stub: the conversation's own messages, which compaction
	// keeps verbatim before it summarizes (see roomBytes).
	ownTokens int
	open      map[string]int
	results   []int // indices of tool-result entries, ascending
	// unsettled holds the indices into results of the tool results that may still become an
	// age-out or masking candidate, ascending: a result leaves it for good once its view can
	// no longer shrink (ageCandidates), so a call looks at those, not at every result.
	unsettled []int

	summary       *store.Summary
	summaryMsg    chat.Message
	summaryTokens int
	archives      []archiveRange

	epoch      uint64 // bumps whenever something already sent changes
	sentEpoch  uint64
	savedEpoch uint64 // epoch of the state last written to the store
	validEpoch uint64 // epoch at which the whole request was last validated
	validated  bool
	sent       bool
	// built is the request's messages as of the last build, at builtEpoch, with the views of
	// entries up to builtLen (see build).
	built      []chat.Message
	builtLen   int
	builtEpoch uint64
	recoveries int
	// windowLimit, when > 0, is the window in force instead of the configured one when it is
	// smaller: what Recover learned from provider overflows.
	windowLimit int

	bg *job // background summary in flight or done, not yet applied

	// stored is how many entries the Store holds: entries[stored:] were taken in by
	// AppendDeferred and wait for Flush (or for the session's next write of any kind).
	stored int
	// broken, once set, is why a deferred write failed: the session no longer matches its
	// Store and refuses further work (ErrNotStored); load it again.
	broken error

	sup supState // which results later ones show again (supersede.go)
	// readBacks are the stored results the model read back, in call order (NoteReadBack);
	// the state last written to the store holds readBacks[:savedReads].
	readBacks  []readBack
	savedReads int
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Len returns how many messages have been appended in all.
func (s *Session) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// History returns every message ever appended, verbatim, in order (evicted ones included).
func (s *Session) History() []chat.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]chat.Message, len(s.entries))
	for i := range s.entries {
		out[i] = s.entries[i].orig.Clone()
	}
	return out
}

// Summary returns the current summary, or nil.
func (s *Session) Summary() *store.Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.summary == nil {
		return nil
	}
	sum := *s.summary
	return &sum
}

// SetSystem replaces the system prompt and tool definitions (a client that changed them). The
// next request's prefix changes.
func (s *Session) SetSystem(system []chat.Message, tools []chat.Tool) error {
	if err := chat.Validate(system); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setSystem(system, tools)
	s.epoch++
	return nil
}

func (s *Session) setSystem(system []chat.Message, tools []chat.Tool) {
	c := s.m.cfg.Counter
	s.system = make([]chat.Message, len(system))
	s.sysTokens = 3 // reply priming
	for i := range system {
		s.system[i] = system[i].Clone()
		s.sysTokens += c.Message(&s.system[i])
	}
	s.tools = slices.Clone(tools)
	s.toolTokens = 0
	if len(tools) > 0 {
		s.toolTokens = c.Tools(s.tools)
	}
}

// Append adds messages to the history, in order. Each is validated (role, UTF-8, tool-call
// pairing: a result answers a call still open, and no other message comes while calls wait
// for their results, as providers require) and written to the Store before Append returns; a tool
// result above the ingestion cap is offloaded whole and replaced in context by a snippet and a
// reference. On error nothing of this call is appended.
func (s *Session) Append(ctx context.Context, msgs ...chat.Message) error {
	defer s.deliver(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendLocked(ctx, msgs, true)
}

// AppendDeferred is Append whose store write of the messages themselves is left to Flush, so
// that a caller can overlap it with the LLM call it prepares: the messages join the history
// at once (the next Prepare sees them), and are written by Flush or, at the latest, before
// the session's next write of any kind (another Append, an offload, an archive, a summary,
// the compaction state), in order. A result offloaded at ingestion is still written before
// AppendDeferred returns. Whatever depends on the messages being durable (answering the
// request the caller prepared with them) must wait for Flush.
//
// A failed deferred write leaves the session out of step with its Store: from then on its
// methods return an error matching ErrNotStored (and the store's own error, such as
// store.ErrConflict); load the session again with Manager.LoadSession. A write that finds
// the same messages already stored at their positions (another process appended what this
// one was given, as proxy instances sharing a database do) is not a failure.
func (s *Session) AppendDeferred(ctx context.Context, msgs ...chat.Message) error {
	defer s.deliver(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendLocked(ctx, msgs, false)
}

// Flush writes the messages AppendDeferred took in and the Store does not hold yet; it
// returns at once when there are none. See AppendDeferred for what a failure means.
func (s *Session) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked(ctx)
}

// flushLocked writes entries[stored:]. Every write of the session calls it first, so the
// Store receives the history in order. Called with s.mu held.
func (s *Session) flushLocked(ctx context.Context) error {
	if s.broken != nil {
		return s.broken
	}
	if s.stored == len(s.entries) {
		return nil
	}
	msgs := make([]chat.Message, len(s.entries)-s.stored)
	for i := range msgs {
		msgs[i] = s.entries[s.stored+i].orig
	}
	err := s.m.cfg.Store.Append(ctx, s.id, s.stored, msgs)
	if errors.Is(err, store.ErrConflict) && s.storedAlready(ctx, msgs) {
		err = nil
	}
	if err != nil {
		s.broken = fmt.Errorf("%w: session %q, messages %d-%d: %w", ErrNotStored, s.id, s.stored, len(s.entries)-1, s.m.storeErr("append", err))
		return s.broken
	}
	s.stored = len(s.entries)
	return nil
}

// storedAlready reports whether the Store holds exactly msgs from position s.stored on.
func (s *Session) storedAlready(ctx context.Context, msgs []chat.Message) bool {
	got, err := s.m.cfg.Store.Messages(ctx, s.id, s.stored, s.stored+len(msgs))
	if err != nil || len(got) != len(msgs) {
		return false
	}
	for i := range got {
		if got[i].Hash() != msgs[i].Hash() {
			return false
		}
	}
	return true
}

// appendLocked validates msgs, offloads what is above the ingestion cap and takes them into
// the history. With write, they are written to the Store first (after any deferred ones), and
// a failed write appends nothing; without, their write is left to flushLocked. Called with
// s.mu held.
func (s *Session) appendLocked(ctx context.Context, msgs []chat.Message, write bool) error {
	if s.broken != nil {
		return s.broken
	}
	if len(msgs) == 0 {
		return nil
	}
	base := len(s.entries)
	if err := s.check(base, msgs); err != nil {
		return err
	}
	cfg := &s.m.cfg
	news := make([]entry, len(msgs))
	own := s.ownTokens
	for i := range msgs {
		if err := s.ingest(ctx, base+i, &news[i], msgs[i].Clone(), msgs[:i], &own); err != nil {
			return err
		}
	}
	if write {
		if err := s.flushLocked(ctx); err != nil {
			return err
		}
		if err := cfg.Store.Append(ctx, s.id, base, msgs); err != nil {
			return s.m.storeErr("append", err)
		}
		s.stored = base + len(msgs)
	}
	for i := range news {
		e := &news[i]
		s.account(base+i, e)
		if e.kind == viewOffloaded {
			// Before is an estimate (bytes/4): counting a 50 MB result exactly only for a log
			// line would cost seconds.
			s.m.emit(s, Event{Step: StepOffload, Reason: fmt.Sprintf("tool result of %d bytes above the ingestion cap of %d", e.size, cfg.ToolResultCap),
				Before: e.tokens + (e.size-textBytes(&e.view))/4, After: e.tokens, Messages: 1})
		}
	}
	s.entries = append(s.entries, news...)
	s.ownTokens = own
	s.recoveries = 0
	return nil
}

// account takes entry e, at history position pos, into the session's indexes and totals, as
// appendLocked and LoadSession both do for every message, in order: a tool result (or any
// entry whose view is not its original: one LoadSession restored) is counted on its view; a
// tool result joins results and closes its call; tool calls open; the latest user message
// and the count of assistant messages follow; the entry's tokens join histTokens (it is
// appended live). Called with s.mu held.
func (s *Session) account(pos int, e *entry) {
	if e.orig.Role == chat.RoleTool || e.kind != viewOriginal {
		e.tokens = s.m.cfg.Counter.Message(&e.view)
	}
	if e.orig.Role == chat.RoleTool {
		s.unsettled = append(s.unsettled, len(s.results))
		s.results = append(s.results, pos)
		delete(s.open, e.orig.ToolCallID)
	}
	for _, tc := range e.orig.ToolCalls {
		s.open[tc.ID] = pos
	}
	if e.orig.Role == chat.RoleUser {
		s.lastUser = pos
	}
	if e.orig.Role == chat.RoleAssistant {
		s.assistants++
	}
	s.histTokens += e.tokens
}

// check validates msgs as a continuation of the history (positions from base).
func (s *Session) check(base int, msgs []chat.Message) error {
	open := make(map[string]bool, len(s.open))
	for id := range s.open {
		open[id] = true
	}
	for i := range msgs {
		m := &msgs[i]
		if err := chat.ValidateMessage(base+i, m); err != nil {
			return err
		}
		if m.Role != chat.RoleTool && len(open) > 0 {
			// Providers want the results right after the calls; a history that goes on
			// without them can never be sent, so it is refused here, where the caller can
			// still fix it.
			first := ""
			for id := range open {
				if first == "" || id < first {
					first = id
				}
			}
			return &chat.Error{Index: base + i, Field: "role", Err: chat.ErrMissingToolResult,
				Detail: fmt.Sprintf("%d tool call(s) still wait for their results (%q first); append them before the next %s message", len(open), first, m.Role)}
		}
		if m.Role == chat.RoleTool {
			if !open[m.ToolCallID] {
				return &chat.Error{Index: base + i, Field: "tool_call_id", Err: chat.ErrOrphanToolResult, Detail: fmt.Sprintf("no open call %q", m.ToolCallID)}
			}
			delete(open, m.ToolCallID)
		}
		for j, tc := range m.ToolCalls {
			if open[tc.ID] {
				return &chat.Error{Index: base + i, Field: fmt.Sprintf("tool_calls[%d].id", j), Err: chat.ErrDuplicateToolCallID, Detail: fmt.Sprintf("%q is already waiting for a result", tc.ID)}
			}
			open[tc.ID] = true
		}
	}
	return nil
}

// regions returns the token counts of the request as it stands.
func (s *Session) regions() budget.Regions {
	return budget.Regions{System: s.sysTokens, Tools: s.toolTokens, Summary: s.summaryTokens, History: s.histTokens}
}

// window is the budget in force: the configured one, or the smaller window Recover settled
// on. Thresholds, reserve and margin keep their ratios; the reply reserve shrinks with the
// window (replyReserve).
func (s *Session) window() budget.Window {
	w := s.m.cfg.Budget
	if s.windowLimit > 0 && s.windowLimit < w.Window {
		w.Window = s.windowLimit
		w.MaxOutput = s.replyReserve(w.Window)
	}
	return w
}

// replyReserve is the reply size budgeted in a window smaller than configured: the configured
// MaxOutput, but at most a quarter of that window. A provider whose model is far smaller than
// configured (8K behind a 200K default with 32K of output) would otherwise leave no room for
// any input; Report.MaxOutput says what to send as max_tokens.
func (s *Session) replyReserve(window int) int {
	return max(1, min(s.m.cfg.Budget.MaxOutput, window/4))
}

// summaryTarget is the summary's size target: Config.SummaryTokens, scaled down with the
// window when Recover made it smaller.
func (s *Session) summaryTarget() int {
	t, cfgW := s.m.cfg.SummaryTokens, s.m.cfg.Budget.Window
	if w := s.window().Window; w < cfgW {
		t = min(t, max(256, int(int64(t)*int64(w)/int64(cfgW))))
	}
	return t
}

func (s *Session) plan() budget.Plan {
	return budget.Breakdown(s.window(), s.regions())
}

// live returns the views of the live history (entries[start:]).
func (s *Session) live() []chat.Message {
	out := make([]chat.Message, len(s.entries)-s.start)
	for i := range out {
		out[i] = s.entries[s.start+i].view
	}
	return out
}

// setView replaces an entry's view and keeps the token totals right.
func (s *Session) setView(i int, v chat.Message, kind viewKind) {
	e := &s.entries[i]
	t := s.m.cfg.Counter.Message(&v)
	if i >= s.start || i == s.pinned {
		s.histTokens += t - e.tokens
	}
	e.view, e.tokens, e.kind = v, t, kind
	s.epoch++
}

func textBytes(m *chat.Message) int {
	n := 0
	for _, p := range m.Content {
		n += len(p.Text) + len(p.Raw)
	}
	return n
}
