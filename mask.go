package ctxmgr

import (
	"context"
	"slices"
)

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
