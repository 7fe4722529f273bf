package ctxmgr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/summarize"
)

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
