package ctxmgr

import "context"

// maskBeforeSummary runs when the request is still over the compaction trigger after the
// threshold rewrite (Config.MaskBeforeSummary): it masks every tool result but the
// RecentToolResults newest, in one batch, so that the conversation's own messages (the task,
// what the assistant said and quoted) stay verbatim rather than being folded into a summary.
// Masking loses nothing (the results stay in the store under their references) and costs no
// LLM call. If the request is still over the trigger, every result but the newest is masked
// (the one the assistant is answering); the summary runs after that only if the request is
// still over the trigger.
func (s *Session) maskBeforeSummary(ctx context.Context, rep *Report) error {
	if err := s.maskAllBut(ctx, s.m.cfg.RecentToolResults, rep); err != nil {
		return err
	}
	if s.m.cfg.RecentToolResults > 1 && s.overTrigger() {
		return s.maskAllBut(ctx, 1, rep)
	}
	return nil
}

// maskAllBut masks, in one batch, every live tool result but the keep newest.
func (s *Session) maskAllBut(ctx context.Context, keep int, rep *Report) error {
	cfg := &s.m.cfg
	const stubTokens = 60
	var picked []int
	rank := 0
	for k := len(s.results) - 1; k >= 0; k-- {
		i := s.results[k]
		if i < s.start {
			break
		}
		r := rank
		rank++
		e := &s.entries[i]
		if r < keep || e.exempt || i == s.pinned || e.tokens < 2*stubTokens ||
			(e.kind != viewOriginal && e.kind != viewOffloaded && e.kind != viewRetruncated) {
			continue
		}
		picked = append(picked, i)
	}
	if len(picked) == 0 {
		return nil
	}
	before := s.plan().Input
	first := picked[len(picked)-1]
	for _, i := range picked {
		e := &s.entries[i]
		off, err := s.offload(ctx, i, e)
		if err != nil {
			return err
		}
		e.off = &off
		s.setView(i, stubView(&e.orig, off, e.tokens), viewMasked)
	}
	after := s.plan().Input
	tail := 0
	for i := first; i < len(s.entries); i++ {
		tail += s.entries[i].tokens
	}
	s.note(rep, Event{Step: StepMask, Reason: "still over the compaction threshold: mask before summarizing", Before: before, After: after,
		Messages: len(picked), ExpectedSaving: cfg.Prices.Expected(before-after, tail, s.assistants)})
	return nil
}
