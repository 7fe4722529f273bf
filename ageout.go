package ctxmgr

// Age-out (Config.AgeOut): a tool result older than the RecentToolResults newest is cut to a
// snippet of OldToolResultCap (PagedPastCap for a page the agent has read past), or, with
// Config.CostMaskKeep, masked to a stub once that many newer results follow it, when the
// cost model says the rewrite pays. The candidates join the superseding ones in one batch
// (economize.go).

// ageCandidates adds to cands (superseding candidates, which take precedence) the tool results
// older than the RecentToolResults newest whose view is larger than OldToolResultCap.
func (s *Session) ageCandidates(cands []rewriteCandidate) []rewriteCandidate {
	cfg := &s.m.cfg
	taken := make(map[int]bool, len(cands))
	for _, c := range cands {
		taken[c.pos] = true
	}
	keep := s.unsettled[:0]
	defer func() { s.unsettled = keep }()
	for _, k := range s.unsettled {
		i := s.results[k]
		e := &s.entries[i]
		if i < s.start || !s.mayShrink(e) {
			continue // evicted, or its view can no longer shrink: settled for good
		}
		keep = append(keep, k)
		r := len(s.results) - 1 - k // how many newer results there are
		if a, ok := s.sup.actions[i]; ok && a.ranged() && s.sup.lastRead[a.key] > i {
			// A range of a file that a later read of the same file follows: the agent has
			// paged past it (and quoted what it needed: its messages stay verbatim). It
			// ages out like an older result, while its tail is still short.
			r = max(r, cfg.RecentToolResults)
		}
		if taken[i] || i == s.pinned || r < cfg.RecentToolResults {
			continue
		}
		if c, ok := s.ageOption(i, e, r); ok {
			cands = append(cands, c)
		}
	}
	return cands
}

// ageOption returns the lossy rewrite of old tool result i (r newer results follow it) that
// is worth most per call, if one is worth anything: cutting it to its age-out cap (a snippet:
// head, tail and the lines holding identifiers in play) or, with Config.CostMaskKeep and r at
// least that, masking it to a stub. Each is worth the tokens it saves at the cached price,
// less the expected cost of reading back what it removes (Prices.readBackRisk with the
// session's learned hazard for that kind of result: the middle's for a snippet, the whole
// result's for a stub).
func (s *Session) ageOption(i int, e *entry, r int) (rewriteCandidate, bool) {
	cfg := &s.m.cfg
	p := cfg.Prices
	whole, middle := s.sup.reuse.outlook(i, s.sup.actions[i], RemainingCalls(s.assistants))
	ctxTokens := s.sysTokens + s.toolTokens + s.histTokens
	orig := origTokens(e)
	best, bestVal := rewriteCandidate{}, 0.0
	if e.size > cfg.OldToolResultCap && (e.kind == viewOriginal || e.kind == viewOffloaded) {
		keep := e.tokens * s.ageCap(i) / max(1, textBytes(&e.view))
		if save := e.tokens - keep; save > 0 {
			c := rewriteCandidate{pos: i, save: save, held: middle.held, risk: p.readBackRisk(middle.chance, orig, ctxTokens), kind: viewRetruncated}
			if v := float64(c.save)*p.Cached*c.held - c.risk; v > bestVal {
				best, bestVal = c, v
			}
		}
	}
	if cfg.CostMaskKeep > 0 && r >= cfg.CostMaskKeep && (e.kind == viewOriginal || e.kind == viewOffloaded || e.kind == viewRetruncated) {
		const stubTokens = 60
		if save := e.tokens - stubTokens; save >= stubTokens {
			chance := whole.chance
			if e.kind == viewRetruncated {
				chance = max(0, whole.chance-middle.chance) // the snippet's own risk is taken already
			}
			c := rewriteCandidate{pos: i, save: save, held: whole.held, risk: p.readBackRisk(chance, orig, ctxTokens), kind: viewMasked}
			if v := float64(c.save)*p.Cached*c.held - c.risk; v > bestVal {
				best, bestVal = c, v
			}
		}
	}
	return best, bestVal > 0
}

// mayShrink reports whether a tool result's view may still become an age-out or masking
// candidate: ageCandidates' conditions that do not depend on its rank. A view changes only
// to a smaller kind, so a result that fails them fails them forever. (A page read past is
// cut to PagedPastCap, but only one larger than OldToolResultCap: the saving on a smaller one
// does not pay for the cache miss of what follows it.)
func (s *Session) mayShrink(e *entry) bool {
	cfg := &s.m.cfg
	if e.exempt {
		return false
	}
	const stubTokens = 60
	maskable := cfg.CostMaskKeep > 0 && e.tokens-stubTokens >= stubTokens &&
		(e.kind == viewOriginal || e.kind == viewOffloaded || e.kind == viewRetruncated)
	cuttable := e.size > cfg.OldToolResultCap && (e.kind == viewOriginal || e.kind == viewOffloaded)
	return maskable || cuttable
}

// ageCap is the size tool result i (larger than OldToolResultCap) ages out to:
// Config.PagedPastCap for a page the agent has read past, in order (the next read of its file
// begins where it ended), else OldToolResultCap.
func (s *Session) ageCap(i int) int {
	cfg := &s.m.cfg
	if cfg.PagedPastCap <= 0 {
		return cfg.OldToolResultCap
	}
	a, ok := s.sup.actions[i]
	if !ok || !a.ranged() || a.to <= 0 {
		return cfg.OldToolResultCap
	}
	if next, ok := s.sup.nextRead[i]; ok && s.sup.actions[next].from == a.to+1 {
		return cfg.PagedPastCap
	}
	return cfg.OldToolResultCap
}
