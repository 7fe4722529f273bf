package ctxmgr

import (
	"context"
	"slices"

	"github.com/ctxmgr/ctxmgr/chat"
)

// economize makes the rewrites of old tool results that pay, as one batch: superseded
// results become references to the results that show them again, with Config.AgeOut results
// older than the RecentToolResults newest are cut to OldToolResultCap, and with
// Config.CostMaskKeep results older than that many newest are masked. Of every batch
// that could be made (all candidates from some position on: they share one cache miss), it
// makes the one the cost model (Config.Prices) expects to save most, or none when none pays.
func (s *Session) economize(ctx context.Context, rep *Report) error {
	cfg := &s.m.cfg
	aging := cfg.AgeOut && cfg.OldToolResultCap > 0
	if !cfg.Supersede && !aging {
		return nil
	}
	s.sup.scan(s)
	var cands []rewriteCandidate
	if cfg.Supersede {
		cands = s.supersedeCandidates()
	}
	if aging {
		cands = s.ageCandidates(cands)
	}
	if len(cands) == 0 {
		return nil
	}
	return s.applyBatch(ctx, cands, rep)
}

// applyBatch makes the batch of cands that pays best, if one does.
func (s *Session) applyBatch(ctx context.Context, cands []rewriteCandidate, rep *Report) error {
	cfg := &s.m.cfg
	slices.SortFunc(cands, func(a, b rewriteCandidate) int { return a.pos - b.pos })
	// tail[k] is the tokens from position cands[k].pos on that the previous call sent (a
	// cache would serve them), up to the latest assistant message: that message is the
	// previous call's reply, and it and what follows it are new, billed uncached whether
	// the batch is made or not, so they are no part of the miss it causes.
	sentEnd := s.start
	for i := len(s.entries) - 1; i >= s.start; i-- {
		if s.entries[i].orig.Role == chat.RoleAssistant {
			sentEnd = i
			break
		}
	}
	// A result of that tail still among the newest, due to age out on a coming call, is
	// missed twice if the batch is made now: now, and again when it ages out. What its own
	// age-out will remove is counted a second time, so that such a batch waits for it.
	isCand := make(map[int]bool, len(cands))
	for _, c := range cands {
		isCand[c.pos] = true
	}
	due := map[int]int{}
	if cfg.AgeOut && cfg.OldToolResultCap > 0 {
		for k := len(s.results) - 1; k >= 0 && len(s.results)-1-k < cfg.RecentToolResults; k-- {
			i := s.results[k]
			e := &s.entries[i]
			if i < s.start || i >= sentEnd || isCand[i] || e.exempt || e.size <= cfg.OldToolResultCap || (e.kind != viewOriginal && e.kind != viewOffloaded) {
				continue
			}
			due[i] = e.tokens - e.tokens*s.ageCap(i)/max(1, textBytes(&e.view))
		}
	}
	tails := make(map[int]int, len(cands))
	sum, k := 0, len(cands)-1
	for i := len(s.entries) - 1; i >= s.start && k >= 0; i-- {
		if i < sentEnd {
			sum += s.entries[i].tokens + due[i]
		}
		if i == cands[k].pos {
			tails[i] = sum
			k--
		}
	}
	tail := func(pos int) int { return tails[pos] }
	from, expected := cfg.Prices.bestBatch(cands, tail, s.assistants)
	if from == len(cands) {
		return nil
	}
	before := s.plan().Input
	var n [2]int
	var saved [2]int
	for _, c := range cands[from:] {
		j := c.pos
		e := &s.entries[j]
		off, err := s.offload(ctx, j, e)
		if err != nil {
			return err
		}
		e.off = &off
		if c.kind == viewMasked {
			s.setView(j, stubView(&e.orig, off, e.tokens), viewMasked)
			n[1]++
			saved[1] += c.save
		} else if c.kind == viewSuperseded {
			later := s.sup.by[j]
			s.setView(j, supersededView(&e.orig, off, e.tokens, s.sup.actions[j], later, s.entries[later].orig.ToolCallID), viewSuperseded)
			delete(s.sup.by, j)
			n[0]++
			saved[0] += c.save
		} else {
			s.setView(j, snippetViewKeeping(&e.orig, off, s.ageCap(j), s.sup.inPlay), viewRetruncated)
			n[1]++
			saved[1] += c.save
		}
	}
	// One event per kind of rewrite; the batch's expected saving is shared by tokens saved.
	after := s.plan().Input
	total := float64(max(1, saved[0]+saved[1]))
	if n[0] > 0 {
		s.note(rep, Event{Step: StepSupersede, Reason: "later tool results show these again; the batch's saving over the calls to come covers the cache miss",
			Before: before, After: before - saved[0]*(before-after)/max(1, saved[0]+saved[1]), Messages: n[0], ExpectedSaving: expected * float64(saved[0]) / total})
	}
	if n[1] > 0 {
		s.note(rep, Event{Step: StepRetrunc, Reason: "aged out: the batch's saving over the calls to come covers the cache miss",
			Before: before - saved[0]*(before-after)/max(1, saved[0]+saved[1]), After: after, Messages: n[1], ExpectedSaving: expected * float64(saved[1]) / total})
	}
	return nil
}

// origTokens estimates the tokens of a tool result's original from its view's, scaled by the
// bytes of each.
func origTokens(e *entry) int {
	if vb := textBytes(&e.view); vb > 0 && e.size > vb {
		return int(int64(e.tokens) * int64(e.size) / int64(vb))
	}
	return e.tokens
}
