package replay

import (
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Recoverable recall: a reference term the request does not hold may still be within the
// agent's reach, through a reference the request shows: a tool result whose view was replaced
// (offloaded, aged out, masked, superseded) names where its full text is stored, and the
// summary's archive guide names where evicted messages are archived verbatim. Reading it back
// costs one ctxmgr_read round trip: the message's tokens, billed once as uncached input.

// recoverable returns how many of the missed reference terms (indices into refs) are readable
// through a reference the request shows, and the tokens of the distinct messages an agent
// would read back for them (the smallest message holding each term).
func recoverable(d *trajData, refs []refTerm, missed []int, msgs []chat.Message, v view, evicted int) (int, int) {
	if !v.mapped || len(missed) == 0 {
		return 0, 0
	}
	off := 0
	if v.pinned >= 0 {
		off = 1
	}
	hasSummary := len(msgs) > off && msgs[off].Meta["ctxmgr"] == "summary"
	if hasSummary {
		off++
	}
	referenced := func(j int) bool {
		if j < evicted {
			return hasSummary && j != v.pinned
		}
		k := j - evicted + off
		return k < len(msgs) && !v.verbatim[j] && strings.Contains(msgs[k].Text(), "[ctxmgr: ")
	}
	n := 0
	read := map[int]bool{}
	for _, i := range missed {
		best := -1
		for _, j := range refs[i].occ {
			if j < len(v.verbatim) && referenced(j) && (best < 0 || d.toks[j] < d.toks[best]) {
				best = j
			}
		}
		if best >= 0 {
			n++
			read[best] = true
		}
	}
	tokens := 0
	for j := range read {
		tokens += d.toks[j]
	}
	return n, tokens
}
