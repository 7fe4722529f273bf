package ctxmgr

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// Superseding: when a later tool result shows again what an earlier one showed (the same file
// or a range of it read again, the same command run again: a test re-run, git diff, ls; the
// same search; an identical result of any other tool), the earlier copy is replaced by a
// short reference to the later one. The agent can still see everything the earlier copy
// showed, in its newer form, so this costs no recall; the earlier text stays in the store
// under the reference. A rewrite of history already sent is a prompt-cache miss for what
// follows it, so superseded results are replaced in batches, when the batch pays under the
// cost model (Prices.Expected).

// supState is what superseding knows of a session, built incrementally from its entries.
type supState struct {
	scanned  int                   // entries[:scanned] are classified
	asst     int                   // assistant messages among them
	reads    int                   // Session.readBacks[:reads] are counted
	readPos  []int                 // scratch: the positions read back at one call
	calls    map[string]toolAction // actions of calls whose results have not come yet
	actions  map[int]toolAction    // tool result position -> what it shows
	byKey    map[string][]int      // key -> positions of results no later one covers yet
	by       map[int]int           // position -> the later position that shows it again
	changed  map[int]float64       // position -> the share of its text its later copy no longer holds (a file edited, an output changed)
	terms    map[string]bool       // identifiers in play (snippet_terms.go)
	lastRead map[string]int        // file -> position of its latest read
	nextRead map[int]int           // read position -> position of the next read of its file
	reuse    reuseState            // how often the agent looks back (reuse.go)
	newTerms []string              // scratch: an assistant message's terms not yet in play
	isNew    map[string]bool       // scratch: newTerms as a set
}

// scan classifies the entries appended since the last scan and records which earlier
// results they supersede.
func (st *supState) scan(s *Session) {
	if st.calls == nil {
		st.calls, st.actions, st.byKey, st.by = map[string]toolAction{}, map[int]toolAction{}, map[string][]int{}, map[int]int{}
	}
	extra := s.m.cfg.ReadTools
	for i := st.scanned; i < len(s.entries); i++ {
		m := &s.entries[i].orig
		if m.Role == chat.RoleAssistant {
			// What the agent names for the first time: the events of reuse learning.
			st.newTerms = st.newTerms[:0]
			clear(st.isNew)
			for _, tc := range m.ToolCalls {
				st.collectNew(tc.Arguments)
			}
			for _, p := range m.Content {
				if p.Type == chat.PartText {
					st.collectNew(p.Text)
				}
			}
			reading := len(m.ToolCalls) > 0
			for _, tc := range m.ToolCalls {
				reading = reading && st.paged(classify(tc, extra))
			}
			st.readPos = st.readPos[:0]
			for ; st.reads < len(s.readBacks) && s.readBacks[st.reads].Call <= st.asst; st.reads++ {
				st.readPos = append(st.readPos, s.readBacks[st.reads].Pos)
			}
			st.asst++
			st.reuse.onAssistant(st.newTerms, st.readPos, s.m.cfg.RecentToolResults, reading)
		}
		for _, tc := range m.ToolCalls {
			a := classify(tc, extra)
			a.tool = tc.Name
			st.calls[tc.ID] = a
			st.addTerms(tc.Arguments)
		}
		if m.Role == chat.RoleUser || m.Role == chat.RoleAssistant {
			for _, p := range m.Content {
				if p.Type == chat.PartText {
					st.addTerms(p.Text)
				}
			}
		}
		if m.Role != chat.RoleTool {
			continue
		}
		a, ok := st.calls[m.ToolCallID]
		if !ok {
			continue
		}
		delete(st.calls, m.ToolCallID)
		if capBytes := s.m.cfg.OldToolResultCap; capBytes > 0 {
			st.reuse.onResult(i, fullText(m), a, st.paged(a), capBytes*2/3, capBytes/3)
		}
		if a.kind == actOther {
			// Another tool's result is superseded only by the very same result again.
			h := fnv.New64a()
			h.Write([]byte(fullText(m)))
			a.key = fmt.Sprintf("%s#%x", a.key, h.Sum64())
		}
		st.actions[i] = a
		if a.kind == actRead {
			if st.lastRead == nil {
				st.lastRead, st.nextRead = map[string]int{}, map[int]int{}
			}
			if prev, ok := st.lastRead[a.key]; ok {
				st.nextRead[prev] = i
			}
			st.lastRead[a.key] = i
		}
		kept := st.byKey[a.key][:0]
		for _, j := range st.byKey[a.key] {
			if st.actions[j].coveredBy(a) {
				st.by[j] = i
				// Lossless only when the later copy shows the earlier text again: a file
				// edited in between, or a command whose output changed, leaves the earlier
				// text nowhere else in the request.
				if gone := goneShare(fullText(&s.entries[j].orig), fullText(m)); gone > 0 {
					if st.changed == nil {
						st.changed = map[int]float64{}
					}
					st.changed[j] = gone
				} else {
					delete(st.changed, j)
				}
			} else {
				kept = append(kept, j)
			}
		}
		st.byKey[a.key] = append(kept, i)
	}
	st.scanned = len(s.entries)
}

// paged reports whether a is a page of a document read in order: a ranged read that starts
// at the first line, or where the latest read of the same file ended.
func (st *supState) paged(a toolAction) bool {
	if !a.ranged() {
		return false
	}
	if a.from <= 1 {
		return a.to > 0
	}
	prev, ok := st.lastRead[a.key]
	return ok && st.actions[prev].to > 0 && a.from == st.actions[prev].to+1
}

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

// goneShare is the share of earlier's bytes in lines that later does not hold, line numbers
// and indentation aside (a file read again after an edit numbers its lines anew): 0 when later
// shows everything earlier did.
func goneShare(earlier, later string) float64 {
	if strings.Contains(later, strings.TrimSpace(earlier)) {
		return 0
	}
	norm := func(l string) string { return strings.TrimSpace(strings.TrimLeft(l, " \t0123456789|:")) }
	have := make(map[string]bool)
	for l := range strings.Lines(later) {
		have[norm(l)] = true
	}
	gone, total := 0, 0
	for l := range strings.Lines(earlier) {
		total += len(l)
		if !have[norm(l)] {
			gone += len(l)
		}
	}
	if total == 0 {
		return 0
	}
	return float64(gone) / float64(total)
}

// origTokens estimates the tokens of a tool result's original from its view's, scaled by the
// bytes of each.
func origTokens(e *entry) int {
	if vb := textBytes(&e.view); vb > 0 && e.size > vb {
		return int(int64(e.tokens) * int64(e.size) / int64(vb))
	}
	return e.tokens
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

// supersedeCandidates returns the tool results a later one shows again, whole.
func (s *Session) supersedeCandidates() []rewriteCandidate {
	s.sup.scan(s)
	var cands []rewriteCandidate
	for j, later := range s.sup.by {
		if j < s.start || j == s.pinned {
			delete(s.sup.by, j) // evicted: summarized and archived already
			continue
		}
		e, le := &s.entries[j], &s.entries[later]
		if e.exempt || e.kind == viewSuperseded || e.kind == viewMasked || e.kind == viewTruncated {
			delete(s.sup.by, j)
			continue
		}
		const refTokens = 70 // the reference line
		save := e.tokens - refTokens
		if save <= 0 {
			delete(s.sup.by, j) // already smaller than a reference: it never pays (views only shrink)
			continue
		}
		if le.kind != viewOriginal {
			continue // the later copy is not shown whole: the earlier one stays
		}
		c := rewriteCandidate{pos: j, save: save, kind: viewSuperseded}
		if gone := s.sup.changed[j]; gone > 0 {
			// What the later copy no longer shows may be needed: priced as a stub's loss of
			// that share of the result.
			rem := RemainingCalls(s.assistants)
			whole, _ := s.sup.reuse.outlook(j, s.sup.actions[j], rem)
			c.risk = gone * s.m.cfg.Prices.readBackRisk(whole.chance, origTokens(e), s.sysTokens+s.toolTokens+s.histTokens)
			if float64(save)*s.m.cfg.Prices.Cached*rem <= c.risk {
				continue
			}
		}
		cands = append(cands, c)
	}
	return cands
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

// supersededView replaces a tool result by a reference to the later result that shows it
// again, and to its own full text in the store.
func supersededView(orig *chat.Message, off store.Offloaded, tokens int, a toolAction, later int, laterCall string) chat.Message {
	what := "the same result"
	switch a.kind {
	case actRead:
		what = "a later read of " + a.key
		if a.ranged() {
			what = fmt.Sprintf("a later read of %s covering these lines", a.key)
		}
	case actCommand:
		what = "the same command run again"
	case actSearch:
		what = "the same search run again"
	}
	errNote := ""
	if orig.IsError {
		errNote = " (it reported an error)"
	}
	return withText(orig, fmt.Sprintf("[ctxmgr: superseded by the result of call %s at message %d: %s shows this again, in its newer form. This earlier result%s (%d tokens, %d lines) is stored in full: %s]",
		laterCall, later, what, errNote, tokens, off.Lines, off.Ref()))
}
