package ctxmgr

import (
	"fmt"
	"hash/fnv"
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
	extra := s.m.readTools
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
