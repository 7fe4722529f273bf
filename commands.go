package ctxmgr

import (
	"context"
	"fmt"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// CompactResult reports a manual compaction (/compact).
type CompactResult struct {
	// Messages is how many messages were folded into the summary.
	Messages int
	// TokensBefore and TokensAfter are the request's input tokens around the compaction.
	TokensBefore, TokensAfter int
	// Summary is the new summary and SummaryVersion its version (empty and 0 when there was
	// nothing to compact).
	Summary        string
	SummaryVersion int
}

// Compact is the manual /compact [instruction]: it folds all of the history but the reserved
// zone (the config's keep rules) into the summary, following the optional instruction
// ("keep only decisions"). It compacts even under the threshold.
func (s *Session) Compact(ctx context.Context, instruction string) (CompactResult, error) {
	return s.compact(ctx, instruction, false)
}

// CompactAll is Compact without a reserved zone: the whole history goes into the summary.
func (s *Session) CompactAll(ctx context.Context, instruction string) (CompactResult, error) {
	return s.compact(ctx, instruction, true)
}

func (s *Session) compact(ctx context.Context, instruction string, all bool) (CompactResult, error) {
	defer s.deliver(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.pending(); err != nil {
		return CompactResult{}, err
	}
	if s.broken != nil {
		return CompactResult{}, s.broken
	}
	rep := &Report{}
	from := s.start
	before := s.plan().Input
	cutFn := s.keepCut
	if all {
		cutFn = func() int { return len(s.entries) }
	}
	if s.bg != nil {
		s.bg = nil // a manual compaction supersedes a background summary
	}
	if err := s.summarize(ctx, cutFn, instruction, "manual /compact", rep); err != nil {
		return CompactResult{}, err
	}
	if err := s.persistState(ctx); err != nil {
		return CompactResult{}, err
	}
	res := CompactResult{TokensBefore: before, TokensAfter: s.plan().Input}
	if n := len(rep.Steps); n > 0 && rep.Steps[n-1].Step == StepSummarize {
		res.Messages = rep.Steps[n-1].Messages
	}
	if s.start > from && s.summary != nil {
		res.Summary, res.SummaryVersion = s.summary.Text, s.summary.Version
		s.m.emit(s, Event{Step: StepCompact, Reason: "manual", Before: before, After: res.TokensAfter, Messages: res.Messages})
	}
	return res, nil
}

// Stats backs /context: what the session holds and how full the window is.
type Stats struct {
	// Session is the session's ID.
	Session string `json:"session"`
	// Messages counts the live (not evicted) messages by role; Total every message ever
	// appended; Evicted those folded into the summary (history[:Evicted]).
	Messages map[chat.Role]int `json:"messages"`
	Total    int               `json:"total"`
	Evicted  int               `json:"evicted"`
	// Masked, Offloaded and Truncated count live tool results in each state; Superseded
	// those replaced by a reference to a later result that shows them again.
	Masked     int `json:"masked"`
	Offloaded  int `json:"offloaded"`
	Truncated  int `json:"truncated"`
	Superseded int `json:"superseded"`
	// ReadBacks counts the stored results the model read back (Session.NoteReadBack).
	ReadBacks int `json:"read_backs,omitempty"`
	// Regions are the tokens per region of the next request as the history stands (before
	// the next Prepare runs); Input their sum.
	Regions budget.Regions `json:"regions"`
	Input   int            `json:"input"`
	// Window and MaxOutput are the window in force and the reply budget reserved in it, as in
	// Report: the configured ones, or the smaller ones Recover settled on.
	Window    int `json:"window"`
	MaxOutput int `json:"max_output"`
	// UsePercent is input / window * 100: what the next request uses of the window (the
	// MaxOutput reserved for the reply is not used yet, so it does not count).
	UsePercent float64 `json:"use_percent"`
	// SummaryVersion is the version of the summary in force (0: none).
	SummaryVersion int `json:"summary_version"`
	// Archives says where evicted messages are, one "messages A-B: WHERE" line per archived
	// range; Offloads where every offloaded tool result is, evicted ones included.
	Archives []string          `json:"archives,omitempty"`
	Offloads []store.Offloaded `json:"offloads,omitempty"`
}

// Stats returns the session's statistics.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.plan()
	st := Stats{Session: s.id, Messages: map[chat.Role]int{}, Total: len(s.entries), Evicted: s.start,
		ReadBacks: len(s.readBacks), Regions: s.regions(), Input: p.Input, Window: p.Window, MaxOutput: p.MaxOutput}
	st.UsePercent = float64(p.Input) * 100 / float64(max(1, p.Window))
	for i := s.start; i < len(s.entries); i++ {
		e := &s.entries[i]
		st.Messages[e.orig.Role]++
		switch e.kind {
		case viewMasked:
			st.Masked++
		case viewSuperseded:
			st.Superseded++
		case viewOffloaded, viewRetruncated:
			st.Offloaded++
		case viewTruncated:
			st.Truncated++
		}
	}
	for i := range s.entries {
		if off := s.entries[i].off; off != nil {
			st.Offloads = append(st.Offloads, *off)
		}
	}
	for _, r := range s.archives {
		st.Archives = append(st.Archives, fmt.Sprintf("messages %d-%d: %s", r.From, r.To-1, r.Where))
	}
	if s.summary != nil {
		st.SummaryVersion = s.summary.Version
	}
	return st
}

// Clear backs /context clear: every live message is archived and the context starts empty
// (system prompt and tools stay). Nothing is deleted: the history, the archive and every
// summary version remain in the Store; a new, empty summary version records the clear.
func (s *Session) Clear(ctx context.Context) error {
	defer s.deliver(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.pending(); err != nil {
		return err
	}
	if err := s.flushLocked(ctx); err != nil {
		return err
	}
	from, to := s.start, len(s.entries)
	before := s.plan().Input
	runs := [][2]int{{from, to}}
	if s.pinned >= 0 {
		runs = append([][2]int{{s.pinned, s.pinned + 1}}, runs...)
	}
	for _, r := range runs {
		if r[1] <= r[0] {
			continue
		}
		evicted := make([]chat.Message, r[1]-r[0])
		for i := range evicted {
			evicted[i] = s.entries[r[0]+i].orig
		}
		loc, err := s.m.cfg.Store.Archive(ctx, s.id, r[0], evicted)
		if err != nil {
			return s.m.storeErr("archive", err)
		}
		s.archives = mergeRanges(append(s.archives, archiveRange{From: r[0], To: r[1], Where: loc}))
	}
	v := 1
	if s.summary != nil {
		v = s.summary.Version + 1
	}
	sum := store.Summary{Version: v, From: 0, To: to, Created: s.m.cfg.Now().UTC(), Summarizer: "clear"}
	if err := s.m.cfg.Store.PutSummary(ctx, s.id, sum); err != nil {
		return s.m.storeErr("put summary", err)
	}
	s.bg = nil
	s.start, s.histTokens, s.pinned = to, 0, -1
	s.setSummary(&sum)
	if err := s.persistState(ctx); err != nil {
		return err
	}
	s.m.emit(s, Event{Step: StepClear, Reason: "/context clear", Before: before, After: s.plan().Input, Messages: to - from})
	return nil
}
