package ctxmgr

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/provider"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/summarize"
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
	cfg := &s.m.cfg
	w := s.window()
	rep := &Report{Window: w.Window, MaxOutput: w.MaxOutput, Before: s.regions()}
	rep.InputBefore = s.plan().Input

	if cfg.seed.RollingRewrite {
		if err := s.rewrite(ctx, false, "rolling", rep); err != nil {
			return Prepared{}, err
		}
	}
	if err := s.economize(ctx, rep); err != nil {
		return Prepared{}, err
	}
	if force || s.overTrigger() {
		if !cfg.seed.RollingRewrite {
			if err := s.rewrite(ctx, force, "over the compaction threshold", rep); err != nil {
				return Prepared{}, err
			}
		}
		if cfg.MaskBeforeSummary && s.overTrigger() {
			if err := s.maskBeforeSummary(ctx, rep); err != nil {
				return Prepared{}, err
			}
		}
		if (force || s.overTrigger()) && !cfg.DisableSummary {
			if err := s.summarize(ctx, s.keepCut, "", "over the compaction threshold", rep); err != nil {
				return Prepared{}, err
			}
		}
	} else if cfg.Background && !cfg.DisableSummary && s.plan().OverSoft {
		if err := s.startBackground(ctx); err != nil {
			return Prepared{}, err
		}
	}
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

// overTrigger reports whether compaction should run: over the threshold by the one budget
// formula, or over a count trigger of a seed preset.
func (s *Session) overTrigger() bool {
	cfg := &s.m.cfg
	p := s.plan()
	if cfg.seed.TriggerTokens > 0 {
		if p.Input+p.MaxOutput > cfg.seed.TriggerTokens {
			return true
		}
	} else if p.OverThreshold {
		return true
	}
	n := len(s.entries) - s.start
	if cfg.seed.MaxMessages > 0 && n > cfg.seed.MaxMessages {
		return true
	}
	if cfg.seed.MaxTurns > 0 && len(turns.Boundaries(s.live())) > cfg.seed.MaxTurns {
		return true
	}
	return p.OverBudget
}

// shrinkToFit runs the forced steps until the request fits: every rewrite regardless of its
// saving, a summary that keeps only the active turn, middle-out truncation, dropping older
// reasoning. Then a *NoFitError if it still does not fit.
func (s *Session) shrinkToFit(ctx context.Context, rep *Report) error {
	if s.plan().Fits {
		return nil
	}
	if err := s.rewrite(ctx, true, "over budget", rep); err != nil {
		return err
	}
	if !s.plan().Fits && !s.m.cfg.DisableSummary {
		if err := s.summarize(ctx, s.minCut, "", "over budget: keep only the latest iteration", rep); err != nil {
			return err
		}
	}
	for round := 0; round < 4 && !s.plan().Fits; round++ {
		if err := s.truncate(ctx, rep); err != nil {
			return err
		}
	}
	if !s.plan().Fits {
		s.dropReasoning(rep)
	}
	if p := s.plan(); !p.Fits {
		latest := 0
		for i := len(s.entries) - 1; i >= s.start; i-- {
			if s.entries[i].orig.Role == chat.RoleUser {
				latest = s.entries[i].tokens
				break
			}
		}
		return &NoFitError{Window: p.Window, MaxOutput: p.MaxOutput, Margin: p.Margin, System: p.System,
			Tools: p.Tools, Summary: p.Summary, History: p.History, LatestUser: latest}
	}
	return nil
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

// keepCut is the history position compaction may evict up to: the keep rules of the config
// (the reserve by default), snapped backwards to a safe cut (see snapCut). It returns s.start
// when nothing can be evicted.
func (s *Session) keepCut() int {
	cfg := &s.m.cfg
	live := s.live()
	n := len(live)
	if n == 0 {
		return s.start
	}
	target := n
	counted := cfg.seed.KeepMessages > 0 || cfg.seed.KeepUserTurns > 0 || cfg.seed.KeepTurnFraction > 0
	if !counted {
		keep := s.window().ReserveTokens()
		sum := 0
		for i := n - 1; i >= 0; i-- {
			sum += s.entries[s.start+i].tokens
			if sum > keep {
				target = i + 1
				break
			}
			target = i
		}
	}
	b := turns.Boundaries(live)
	if cfg.seed.KeepMessages > 0 {
		target = min(target, max(0, n-cfg.seed.KeepMessages))
	}
	if cfg.seed.KeepUserTurns > 0 {
		if len(b) >= cfg.seed.KeepUserTurns {
			target = min(target, b[len(b)-cfg.seed.KeepUserTurns])
		} else {
			target = 0
		}
	}
	if cfg.seed.KeepTurnFraction > 0 && len(b) > 0 {
		keepTurns := int(math.Ceil(cfg.seed.KeepTurnFraction * float64(len(b))))
		target = min(target, b[len(b)-max(1, keepTurns)])
	}
	return s.snapCut(live, target)
}

// minCut evicts all but the last safe part of the live history: the latest iteration (an
// assistant message and its results) or the latest user message.
func (s *Session) minCut() int {
	live := s.live()
	return s.snapCut(live, len(live)-1)
}

// snapCut snaps a live-relative target backwards to the nearest safe cut and returns it as a
// history position (s.start when there is none): a turn boundary, or, unless the seed rule
// TurnCuts, the start of a tool iteration no call crosses (turns.SafeCut with Iterations), so
// that one long turn (a coding agent's whole run) can be cut too. The latest user message is
// never evicted: a cut past it pins it (see Session.pinned).
func (s *Session) snapCut(live []chat.Message, target int) int {
	target = min(target, len(live)-1)
	if target <= 0 {
		return s.start
	}
	opts := turns.CutOptions{Search: turns.Backward, Iterations: !s.m.cfg.seed.TurnCuts}
	if cut, ok := turns.SafeCut(live, target, opts); ok && cut > 0 {
		return s.start + cut
	}
	return s.start
}

// rewrite is the batched step on old tool results: re-truncation to the older cap and masking
// to stubs. Unless force, it applies only when that frees at least MaskMinSaving tokens, so the
// prefix (and the provider's prompt cache) changes rarely.
func (s *Session) rewrite(ctx context.Context, force bool, reason string, rep *Report) error {
	cfg := &s.m.cfg
	if cfg.DisableMasking && cfg.OldToolResultCap == 0 {
		return nil
	}
	// Live tool results, newest first, with their rank and position from the end in tokens.
	type cand struct {
		i    int
		kind viewKind
		save int
	}
	var cands []cand
	saving := 0
	protected := make(map[int]bool)
	if cfg.seed.MaskProtectTokens > 0 {
		sum := 0
		for i := len(s.entries) - 1; i >= s.start && sum < cfg.seed.MaskProtectTokens; i-- {
			sum += s.entries[i].tokens
			protected[i] = true
		}
	}
	rank := 0
	for k := len(s.results) - 1; k >= 0; k-- {
		i := s.results[k]
		if i < s.start {
			break
		}
		r := rank
		rank++
		e := &s.entries[i]
		if e.exempt || e.kind == viewMasked || e.kind == viewTruncated || e.kind == viewSuperseded {
			continue
		}
		if !cfg.DisableMasking && r >= cfg.MaskKeep && !protected[i] {
			const stubTokens = 60
			if e.tokens >= 2*stubTokens {
				cands = append(cands, cand{i, viewMasked, e.tokens - stubTokens})
				saving += e.tokens - stubTokens
			}
			continue
		}
		if cfg.OldToolResultCap > 0 && r >= cfg.RecentToolResults && e.size > cfg.OldToolResultCap && e.kind != viewRetruncated {
			est := e.tokens - e.tokens*cfg.OldToolResultCap/max(1, textBytes(&e.view))
			if est > 0 {
				cands = append(cands, cand{i, viewRetruncated, est})
				saving += est
			}
		}
	}
	if len(cands) == 0 {
		return nil
	}
	if !force && saving < cfg.MaskMinSaving {
		return nil
	}
	before := s.plan().Input
	slices.SortFunc(cands, func(a, b cand) int { return a.i - b.i })
	masked, cut := 0, 0
	for _, c := range cands {
		e := &s.entries[c.i]
		off, err := s.offload(ctx, c.i, e)
		if err != nil {
			return err
		}
		e.off = &off
		if c.kind == viewMasked {
			s.setView(c.i, stubView(&e.orig, off, e.tokens), viewMasked)
			masked++
		} else {
			s.setView(c.i, snippetView(&e.orig, off, cfg.OldToolResultCap), viewRetruncated)
			cut++
		}
	}
	after := s.plan().Input
	// Made under window pressure, not because it pays; the event still records what the cost
	// model expects of it (often negative: the price of staying in the window).
	tail := 0
	for i := cands[0].i; i < len(s.entries); i++ {
		tail += s.entries[i].tokens
	}
	expected := cfg.Prices.Expected(before-after, tail, s.assistants)
	if masked > 0 {
		s.note(rep, Event{Step: StepMask, Reason: reason, Before: before, After: after, Messages: masked + cut, ExpectedSaving: expected})
	} else {
		s.note(rep, Event{Step: StepRetrunc, Reason: reason, Before: before, After: after, Messages: cut, ExpectedSaving: expected})
	}
	return nil
}

// truncate cuts the largest live tool results middle-out so that the request fits, by water
// filling: every result above a common cap is cut to it.
func (s *Session) truncate(ctx context.Context, rep *Report) error {
	p := s.plan()
	need := -p.Free
	if need <= 0 {
		return nil
	}
	const overhead = 80 // tokens of the reference line
	var idx []int
	for _, i := range s.results {
		if i >= s.start && !s.entries[i].exempt && s.entries[i].tokens > 2*overhead {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	freed := func(capTok int) int {
		f := 0
		for _, i := range idx {
			if t := s.entries[i].tokens; t > capTok+overhead {
				f += t - capTok - overhead
			}
		}
		return f
	}
	lo, hi := 0, 0
	for _, i := range idx {
		hi = max(hi, s.entries[i].tokens)
	}
	if freed(lo) < need {
		lo = 0 // cannot free enough from results alone; cut them all to the minimum
	} else {
		for lo < hi { // largest cap that frees enough
			mid := (lo + hi + 1) / 2
			if freed(mid) >= need {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
	}
	capTok := lo
	if s.m.cfg.seed.TruncateTokens > 0 {
		capTok = min(capTok, s.m.cfg.seed.TruncateTokens)
	}
	before := p.Input
	n := 0
	for _, i := range idx {
		e := &s.entries[i]
		if e.tokens <= capTok+overhead {
			continue
		}
		off, err := s.offload(ctx, i, e)
		if err != nil {
			return err
		}
		e.off = &off
		bytesPerTok := float64(max(1, textBytes(&e.view))) / float64(max(1, e.tokens))
		keep := max(256, int(float64(capTok)*bytesPerTok))
		s.setView(i, snippetView(&e.orig, off, keep), viewTruncated)
		n++
	}
	if n > 0 {
		s.note(rep, Event{Step: StepTruncate, Reason: fmt.Sprintf("one huge turn: %d tokens over budget; tool results cut middle-out to ~%d tokens", need, capTok), Before: before, After: s.plan().Input, Messages: n})
	}
	return nil
}

// dropReasoning removes reasoning parts from live assistant messages other than the latest
// one (a signed thinking block cannot be shortened, only left out).
func (s *Session) dropReasoning(rep *Report) {
	lastAsst := -1
	for i := len(s.entries) - 1; i >= s.start; i-- {
		if s.entries[i].orig.Role == chat.RoleAssistant {
			lastAsst = i
			break
		}
	}
	before := s.plan().Input
	n := 0
	for i := s.start; i < len(s.entries); i++ {
		e := &s.entries[i]
		if i == lastAsst || e.orig.Role != chat.RoleAssistant {
			continue
		}
		has := slices.ContainsFunc(e.view.Content, func(p chat.Part) bool { return p.Type == chat.PartReasoning })
		if !has {
			continue
		}
		v := e.view
		v.Content = slices.DeleteFunc(slices.Clone(v.Content), func(p chat.Part) bool { return p.Type == chat.PartReasoning })
		if len(v.Content) == 0 && len(v.ToolCalls) == 0 {
			v.Content = []chat.Part{{Type: chat.PartText, Text: "[reasoning omitted]"}}
		}
		s.setView(i, v, viewNoReasoning)
		n++
	}
	if n > 0 {
		s.note(rep, Event{Step: StepTruncate, Reason: "older reasoning dropped", Before: before, After: s.plan().Input, Messages: n})
	}
}

// summarize folds history[start:cut] into the summary, cut = cutFn(): archive the evicted
// messages verbatim, summarize them incrementally from the previous summary, store the new
// version, and only then change the context. The session lock is released while the store and
// the summarizer work; if another call compacted meanwhile, the result is dropped (nothing is
// lost: the archive is idempotent and the history is untouched) and the cut is planned again
// from the new state, a bounded number of times.
func (s *Session) summarize(ctx context.Context, cutFn func() int, instruction, reason string, rep *Report) error {
	settled := func() bool { return instruction == "" && !s.overTrigger() && s.plan().Fits }
	for attempt := 0; attempt < 3; attempt++ {
		if s.bg != nil {
			if err := s.applyBackground(ctx, rep); err != nil {
				return err
			}
			if settled() {
				return nil
			}
		}
		cut := cutFn()
		if cut <= s.start {
			if s.plan().OverThreshold {
				s.note(rep, Event{Step: StepSkip, Reason: "summarize: no safe cut outside the reserved zone (one huge turn)"})
			}
			return nil
		}
		job, err := s.newJob(ctx, cut, instruction)
		if err != nil {
			return err
		}
		s.mu.Unlock()
		job.run(ctx, s.m)
		s.mu.Lock()
		applied, err := s.applyJob(ctx, job, reason, rep)
		if err != nil || applied || settled() {
			return err
		}
	}
	return nil
}

// job is one summary in the making.
type job struct {
	session         string
	from, cut, base int
	oldPinned       int // pinned before the job (-1: none)
	pinned          int // pinned after it (-1: none)
	prev            string
	runs            []archiveRange // contiguous runs of evicted positions, in order
	evicted         []chat.Message
	ranges          []archiveRange
	instruction     string
	target          int
	done            chan struct{}

	res summarize.Result
	err error
}

// newJob plans the eviction of history[start:cut]. The latest user message is never evicted
// while it is the latest: when the cut passes it, it stays pinned in the request. A message
// pinned earlier that is no longer the latest is evicted (summarized and archived) now.
// The messages it will archive are written first (flushLocked): the archive follows them.
func (s *Session) newJob(ctx context.Context, cut int, instruction string) (*job, error) {
	if err := s.flushLocked(ctx); err != nil {
		return nil, err
	}
	j := &job{session: s.id, from: s.start, cut: cut, instruction: instruction, target: s.summaryTarget(),
		ranges: slices.Clone(s.archives), done: make(chan struct{}), oldPinned: s.pinned, pinned: -1}
	if s.summary != nil {
		j.base, j.prev = s.summary.Version, s.summary.Text
	}
	switch {
	case s.lastUser >= s.start && s.lastUser < cut:
		j.pinned = s.lastUser
	case s.pinned >= 0 && s.pinned == s.lastUser:
		j.pinned = s.pinned
	}
	add := func(from, to int) {
		if to > from {
			j.runs = append(j.runs, archiveRange{From: from, To: to})
			for i := from; i < to; i++ {
				j.evicted = append(j.evicted, s.entries[i].orig)
			}
		}
	}
	if s.pinned >= 0 && j.pinned != s.pinned {
		add(s.pinned, s.pinned+1)
	}
	if j.pinned >= s.start {
		add(s.start, j.pinned)
		add(j.pinned+1, cut)
	} else {
		add(s.start, cut)
	}
	return j, nil
}

func (j *job) run(ctx context.Context, m *Manager) {
	defer close(j.done)
	for k := range j.runs {
		r := &j.runs[k]
		off := 0
		for _, q := range j.runs[:k] {
			off += q.To - q.From
		}
		loc, err := m.cfg.Store.Archive(ctx, j.session, r.From, j.evicted[off:off+r.To-r.From])
		if err != nil {
			j.err = m.storeErr("archive", err)
			return
		}
		r.Where = loc
	}
	first := j.from
	if len(j.runs) > 0 {
		first = j.runs[0].From
	}
	guide := archiveGuide(append(slices.Clone(j.ranges), j.runs...))
	req := summarize.Request{
		Previous: j.prev, Messages: j.evicted, First: first, Instruction: j.instruction,
		TargetTokens: j.target, ArchiveGuide: guide,
	}
	res, err := m.cfg.Summarizer.Summarize(ctx, req)
	if err == nil && strings.TrimSpace(res.Text) == "" {
		err = errors.New("summarizer returned an empty summary")
	}
	if err != nil {
		if ctx.Err() != nil {
			j.err = fmt.Errorf("ctxmgr: summarize: %w", err)
			return
		}
		// A failing summarizer must not stop the agent: the deterministic extractive
		// summarizer stands in, and an event says so. Its error text is never stored.
		fb, ferr := m.fallback.Summarize(ctx, req)
		if ferr != nil {
			j.err = fmt.Errorf("ctxmgr: summarize: %w (extractive fallback: %w)", err, ferr)
			return
		}
		fb.Fallback, fb.FallbackReason = true, err.Error()
		fb.Summarizer = summarize.FallbackName(fb.Summarizer)
		res = fb
	}
	j.res = res
}

// applyJob applies a finished job if the state it was planned on is still current, and
// reports whether it did.
func (s *Session) applyJob(ctx context.Context, j *job, reason string, rep *Report) (bool, error) {
	if j.err != nil {
		return false, j.err
	}
	cur := 0
	if s.summary != nil {
		cur = s.summary.Version
	}
	if s.start != j.from || cur != j.base || s.pinned != j.oldPinned {
		s.note(rep, Event{Step: StepSkip, Reason: "summary dropped: the session was compacted meanwhile"})
		return false, nil
	}
	before := s.plan().Input
	sum := store.Summary{Version: j.base + 1, Text: j.res.Text, From: 0, To: j.cut, Created: s.m.cfg.Now().UTC(), Summarizer: j.res.Summarizer}
	if err := s.m.cfg.Store.PutSummary(ctx, s.id, sum); err != nil {
		if errors.Is(err, store.ErrConflict) {
			s.note(rep, Event{Step: StepSkip, Reason: "summary dropped: another writer stored a newer version"})
			return false, nil
		}
		return false, s.m.storeErr("put summary", err)
	}
	s.archives = mergeRanges(append(s.archives, j.runs...))
	for _, r := range j.runs {
		for i := r.From; i < r.To; i++ {
			s.histTokens -= s.entries[i].tokens
		}
	}
	s.start, s.pinned = j.cut, j.pinned
	s.setSummary(&sum)
	rep.Compactions++
	rep.SummaryInputTokens += j.res.InputTokens
	rep.SummaryOutputTokens += j.res.OutputTokens
	if j.res.Fallback {
		s.note(rep, Event{Step: StepFallback, Reason: j.res.FallbackReason})
	}
	s.note(rep, Event{Step: StepSummarize, Reason: reason, Before: before, After: s.plan().Input, Messages: len(j.evicted)})
	return true, nil
}

func (s *Session) setSummary(sum *store.Summary) {
	s.summary = sum
	s.summaryMsg = chat.Message{}
	s.summaryTokens = 0
	if sum != nil && sum.Text != "" {
		s.summaryMsg = chat.TextMessage(chat.RoleUser, fmt.Sprintf("[ctxmgr: summary v%d of the %d earlier messages of this conversation]\n%s", sum.Version, sum.To, sum.Text))
		s.summaryMsg.Meta = map[string]string{"ctxmgr": "summary"}
		s.summaryTokens = s.m.cfg.Counter.Message(&s.summaryMsg)
	}
	s.epoch++
}

// startBackground begins a summary at the soft threshold.
func (s *Session) startBackground(ctx context.Context) error {
	if s.bg != nil {
		return nil
	}
	cut := s.keepCut()
	if cut <= s.start {
		return nil
	}
	j, err := s.newJob(ctx, cut, "")
	if err != nil {
		return err
	}
	m := s.m
	if !m.startWork() {
		return nil // closed: the summary is made in the foreground when it must be
	}
	s.bg = j
	go func() {
		defer m.wg.Done()
		j.run(m.ctx, m)
	}()
	return nil
}

// applyBackground waits for the background summary and applies it if the history it covered
// is still the oldest live part (version check); otherwise it is dropped.
func (s *Session) applyBackground(ctx context.Context, rep *Report) error {
	j := s.bg
	s.bg = nil
	s.mu.Unlock()
	select {
	case <-j.done:
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-j.done:
	default:
		s.bg = j // still running; the next call may use it
		return ctx.Err()
	}
	if j.err != nil {
		s.note(rep, Event{Step: StepSkip, Reason: "background summary failed: " + j.err.Error()})
		return nil
	}
	_, err := s.applyJob(ctx, j, "background summary (soft threshold)", rep)
	return err
}

// Recover handles a provider error. When it is a context overflow (provider.IsOverflowError),
// it settles on a smaller window for the session and returns a new request compacted to fit
// it; after Config.MaxRecoveries attempts without a new message it returns
// ErrRecoveryExhausted. Any other error is returned as is.
//
// The new window comes from what the provider said (provider.ErrorLimits): its maximum, and
// its count of the request, whose ratio to ours is how much more it counts. When it did not
// say both, or when they say the refused request should have fit, the window is made smaller
// than the request it refused: its input part by 10% on the first attempt, by half on later
// ones. The session keeps the smaller window from then on (the Store keeps
// it across restarts); thresholds, reserve and the summary size keep their ratios to it.
// The reply budget shrinks with it: send the returned Report.MaxOutput as the request's
// max_tokens, on the retry and on every later request (see Report.MaxOutput).
func (s *Session) Recover(ctx context.Context, providerErr error) (Prepared, error) {
	if !provider.IsOverflowError(providerErr) {
		return Prepared{}, providerErr
	}
	lim := provider.ErrorLimits(providerErr)
	s.mu.Lock()
	s.recoveries++
	n := s.recoveries
	if n > s.m.cfg.MaxRecoveries {
		s.mu.Unlock()
		return Prepared{}, fmt.Errorf("%w after %d attempts: %w", ErrRecoveryExhausted, n-1, providerErr)
	}
	w := s.window()
	refused := s.plan().Input + w.MaxOutput // the request the provider refused, by our count
	win := min(w.Window, refused)
	reason := fmt.Sprintf("provider overflow, attempt %d", n)
	if lim.Max > 0 {
		// The provider's maximum in our tokens: its input part scaled by how much more it
		// counts, when it says what it counted, with 2% to spare; the reply keeps the reserve
		// it will have in that window.
		q := 1.0
		if sent := s.plan().Input; lim.Input > 0 && sent > 0 {
			q = min(max(float64(lim.Input)/float64(sent), 1), 4)
		}
		r := s.replyReserve(lim.Max)
		win = min(win, int(float64(lim.Max-r)/q*0.98)+r)
		reason += fmt.Sprintf(": the provider's maximum is %d tokens", lim.Max)
		if lim.Input > 0 {
			reason += fmt.Sprintf(" and it counted %d input tokens where we count %d", lim.Input, s.plan().Input)
		}
	}
	if lim.Max == 0 || lim.Input == 0 || win >= refused {
		// Without both numbers, or when they say the refused request should have fit:
		// smaller than what was refused, by 10% on a first attempt (counts that differ a
		// little), by half after that (a window far smaller than configured).
		f := 0.9
		if n > 1 {
			f = 0.5
		}
		win = min(win, int(float64(refused)*f))
	}
	if win-s.replyReserve(win) <= 0 {
		s.mu.Unlock()
		return Prepared{}, fmt.Errorf("%w: %s; a window of %d tokens leaves no room for input: %w",
			ErrRecoveryExhausted, reason, win, providerErr)
	}
	s.windowLimit = win
	s.epoch++ // the new window is state to persist
	s.mu.Unlock()
	p, err := s.prepare(ctx, true)
	if err != nil {
		return p, err
	}
	ev := Event{Step: StepRecover, Reason: fmt.Sprintf("%s: window now %d tokens", reason, win),
		Before: p.Report.InputBefore, After: p.Report.InputAfter}
	p.Report.Steps = append(p.Report.Steps, ev)
	s.mu.Lock()
	s.m.emit(s, ev)
	s.mu.Unlock()
	s.deliver(ctx)
	return p, nil
}
