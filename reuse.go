package ctxmgr

import (
	"math"
	"strings"

	"github.com/ctxmgr/ctxmgr/store"
)

// Reuse: how often this session's agent looks back at old tool results.
//
// A lossy rewrite (ageing a result out to a snippet, masking it to a stub) removes text the
// agent may use again; it then reads it back, paying the result's tokens uncached, or works
// without it. Whether an agent looks back depends on the agent and the task: one reads a
// document page after page and quotes from every page at the end, another runs a command,
// reads its verdict and never looks at the output again. So the chance is learned from the
// session itself, per kind of result (the tool and what its call does: a read, a page of a
// document read in order, a search, a command, anything else), from what the agent's own
// messages name.
//
// An event is an assistant message naming, for the first time in the conversation, a term
// (a path, an identifier, a number: see eachIdentifier) that an old tool result holds: one
// older than the RecentToolResults newest. On real coding runs the chance of an event falls
// with a result's age (its rank: how many results came after it), roughly as rank^-0.8, and
// is about twice as high for a result the agent has already used once. So the hazard of an
// old result i, the chance per call that the agent newly uses something of it, is modelled as
//
//	h(i) = c(kind) * (3/rank)^0.8 * (2 if i was used before, else 1)
//
// and the scale c of each kind of result is learned: every assistant message adds to the
// kind's exposure the model's weight (3/rank)^0.8 * used-factor of each old result of the kind,
// and one event per result it newly uses; then
//
//	c = (events + reusePriorWeight*prior) / (exposure + reusePriorWeight)
//
// with the prior of the kind's action (reusePrior): with no evidence the prior decides, and a
// session that shows its habit soon outweighs it. Two scales are kept per kind: for the whole
// result (what masking removes) and for its middle (what an age-out snippet removes: the
// terms the snippet's head and tail do not hold).
//
// Everything here is derived from the history alone (the original messages in order, not
// their views), so the same history gives the same estimates (invariant 5) and a session
// restored from the store rebuilds them exactly.

// reusePriorWeight is how many exposures (at rank 3, unused) the prior counts for.
const reusePriorWeight = 30

// reuseExact is how many of the newest old results the exposure weighs one by one; older ones
// are weighed as a group at the weight of rank reuseFar, so a call costs the same at any
// history length.
const (
	reuseExact = 64
	reuseFar   = 96
)

// reusePrior is the prior scale of a kind of result: the chance per call that the agent's
// next message newly uses a term of one old result of that kind, at rank 3, not used before.
// A page of a document read in order is the most likely to be quoted later, a command's
// output the least; a tool ctxmgr does not know gets a cautious middle value until the
// session shows how its results are used.
func reusePrior(kind actionKind, paged bool) (whole, middle float64) {
	switch {
	case paged:
		return 0.15, 0.12
	case kind == actRead:
		return 0.08, 0.05
	case kind == actSearch:
		return 0.05, 0.025
	case kind == actCommand:
		return 0.03, 0.012
	}
	return 0.06, 0.03
}

// reuseUsed is how much likelier a result the agent has used once is to be used again.
const reuseUsed = 2

// rankWeight is the model's decay of the hazard with rank, 1 at rank 3. Pages of a document
// read in order do not decay: an agent that pages through a document quotes from every page
// when it is done, the first as likely as the last.
func rankWeight(k reuseKind, rank int32) float64 {
	if k.paged {
		return 1
	}
	return math.Pow(3/float64(max(rank, 2)), 0.8)
}

// Bounds of the term index: results larger than reuseMinBytes are indexed, the first
// reuseScanBytes of each, and at most reuseMaxPostings postings in all (past that, new results
// are classified but not indexed: deterministic, like every bound here).
const (
	reuseMinBytes    = 1000
	reuseScanBytes   = 1 << 20
	reuseMaxPostings = 1 << 21
)

// reuseKind identifies a kind of result: the tool and its action.
type reuseKind struct {
	tool  string
	kind  actionKind
	paged bool // a page of a document read in order (supState.paged)
}

type reuseCounts struct {
	key           reuseKind
	exposure      float64
	whole, middle int
	prior         [2]float64 // whole, middle
	// far counts the old results beyond the reuseExact newest: unused and used.
	far [2]int
}

// posting says that result ord (its ordinal among tool results) holds a term; middle: only in
// the part an age-out snippet leaves out.
type posting struct {
	ord    int32
	middle bool
}

// reuseState is the per-session learning; it lives in supState and is fed by its scan.
type reuseState struct {
	kinds    map[reuseKind]*reuseCounts
	index    map[uint64][]posting
	postings int
	// results lists the indexed results in ordinal order.
	results []reuseResult
	nres    int32       // tool results scanned
	byPos   map[int]int // history position -> index in results
	farUpTo int         // results[:farUpTo] are in their kind's far group
	stamp   uint64      // assistant messages scanned
}

type reuseResult struct {
	ord  int32
	kind *reuseCounts
	used bool
	seen uint64 // the stamp of the last message that counted it (one event per message)
	mid  uint64 // the same, for middle events
}

// onResult records tool result i (its text, its action) in scan order.
func (r *reuseState) onResult(i int, text string, a toolAction, paged bool, headBytes, tailBytes int) {
	ord := r.nres
	r.nres++
	if len(text) <= reuseMinBytes {
		return
	}
	if r.kinds == nil {
		r.kinds, r.index, r.byPos = map[reuseKind]*reuseCounts{}, map[uint64][]posting{}, map[int]int{}
	}
	k := reuseKind{tool: a.tool, kind: a.kind, paged: paged}
	c := r.kinds[k]
	if c == nil {
		w, m := reusePrior(a.kind, paged)
		c = &reuseCounts{key: k, prior: [2]float64{w, m}}
		r.kinds[k] = c
	}
	r.byPos[i] = len(r.results)
	r.results = append(r.results, reuseResult{ord: ord, kind: c})
	if r.postings < reuseMaxPostings {
		r.indexText(ord, text, headBytes, tailBytes)
	}
}

// indexText adds the terms of a result to the index; a term found only outside the first
// headBytes and the last tailBytes is marked middle.
func (r *reuseState) indexText(ord int32, text string, headBytes, tailBytes int) {
	if len(text) > reuseScanBytes {
		text = text[:reuseScanBytes]
	}
	mid := map[uint64]bool{}
	var order []uint64 // first appearance: the postings bound cuts the same terms every time
	off := 0
	for _, line := range splitKeep(text) {
		inMiddle := off >= headBytes && off+len(line) <= len(text)-tailBytes
		off += len(line)
		eachIdentifier(line, func(t string) {
			h := termHash(t)
			if m, ok := mid[h]; ok {
				mid[h] = m && inMiddle
				return
			}
			mid[h] = inMiddle
			order = append(order, h)
		})
	}
	for _, h := range order {
		if r.postings >= reuseMaxPostings {
			return
		}
		r.index[h] = append(r.index[h], posting{ord: ord, middle: mid[h]})
		r.postings++
	}
}

// termHash is the 64-bit FNV-1a hash of a term.
func termHash(t string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(t); i++ {
		h ^= uint64(t[i])
		h *= 1099511628211
	}
	return h
}

// splitKeep splits s into lines, each with its newline.
func splitKeep(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		if i < len(s) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// onAssistant records an assistant message whose terms not yet in play are newTerms: for
// each old result (older than the recent newest), its weight as exposure, and an event for
// each old result holding one of newTerms.
//
// While the agent is paging through documents (reading is true: the message's calls all read
// a page, see supState.paged), pages of documents gain no exposure: an agent gathering pages has no reason to use
// them yet, so its silence says nothing about whether it will.
func (r *reuseState) onAssistant(newTerms []string, readBack []int, recent int, reading bool) {
	if r.kinds == nil {
		return
	}
	r.stamp++
	limit := r.nres - 1 - int32(recent) // ordinals up to this are old
	// Results leaving the exactly weighed window join their kind's far group.
	far := limit - reuseExact
	for r.farUpTo < len(r.results) && r.results[r.farUpTo].ord <= far {
		res := &r.results[r.farUpTo]
		res.kind.far[b2i(res.used)]++
		r.farUpTo++
	}
	for k := len(r.results) - 1; k >= r.farUpTo; k-- {
		res := &r.results[k]
		if res.ord > limit {
			continue
		}
		if reading && res.kind.key.paged {
			continue
		}
		w := rankWeight(res.kind.key, r.nres-1-res.ord)
		if res.used {
			w *= reuseUsed
		}
		res.kind.exposure += w
	}
	for _, c := range r.kinds {
		if reading && c.key.paged {
			continue
		}
		c.exposure += rankWeight(c.key, reuseFar) * (float64(c.far[0]) + reuseUsed*float64(c.far[1]))
	}
	for _, i := range readBack {
		k, ok := r.byPos[i]
		if !ok || r.results[k].ord > limit {
			continue
		}
		res := &r.results[k]
		if res.seen != r.stamp {
			res.seen = r.stamp
			res.kind.whole++
			r.markUsed(res, far)
		}
		if res.mid != r.stamp {
			res.mid = r.stamp
			res.kind.middle++
		}
	}
	for _, t := range newTerms {
		for _, p := range r.index[termHash(t)] {
			if p.ord > limit {
				continue
			}
			res := &r.results[r.find(p.ord)]
			if res.seen != r.stamp {
				res.seen = r.stamp
				res.kind.whole++
				r.markUsed(res, far)
			}
			if p.middle && res.mid != r.stamp {
				res.mid = r.stamp
				res.kind.middle++
			}
		}
	}
}

// markUsed marks res as used once (far: the ordinals up to which results are in their kind's
// far group).
func (r *reuseState) markUsed(res *reuseResult, far int32) {
	if res.used {
		return
	}
	res.used = true
	if res.ord <= far {
		res.kind.far[0]--
		res.kind.far[1]++
	}
}

// NoteReadBack records that the model read back the stored tool result that key names (an
// Offloaded's Key or its Ref), for the cost model's learning of whether this session's agent
// looks back (reuse.go): a read-back is a use of that result, counted with the assistant
// message of the call that made it, as if that message had named a term of it. It reports
// whether key names a stored result of the session. The note is written to the Store with the
// session's state by the next Prepare, so a session restored from the Store learns the same.
func (s *Session) NoteReadBack(key string) bool {
	key = strings.TrimPrefix(key, store.RefPrefix)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.entries) - 1; i >= 0; i-- {
		if off := s.entries[i].off; off != nil && off.Key == key {
			s.readBacks = append(s.readBacks, readBack{Call: s.assistants, Pos: i})
			return true
		}
	}
	return false
}

// readBack is one NoteReadBack: the result at history position Pos, read back by the call made
// after Call assistant messages.
type readBack struct {
	Call int `json:"call"`
	Pos  int `json:"pos"`
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// find returns the index in results of ordinal ord (results are in ordinal order).
func (r *reuseState) find(ord int32) int {
	lo, hi := 0, len(r.results)
	for lo < hi {
		m := (lo + hi) / 2
		if r.results[m].ord < ord {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// hazard returns the estimated chance per call that the agent newly uses what masking
// (whole) or an age-out snippet (middle) removes from old tool result i of action a.
func (r *reuseState) hazard(i int, a toolAction) (whole, middle float64) {
	k, ok := r.byPos[i]
	if !ok {
		return reusePrior(a.kind, false)
	}
	res := &r.results[k]
	c := res.kind
	n := c.exposure + reusePriorWeight
	w := rankWeight(c.key, r.nres-1-res.ord)
	if res.used {
		w *= reuseUsed
	}
	return w * (float64(c.whole) + reusePriorWeight*c.prior[0]) / n, w * (float64(c.middle) + reusePriorWeight*c.prior[1]) / n
}

// outlook is what the cost model expects of removing part of an old tool result over the calls
// to come: chance, the chance that the agent newly uses what was removed within them, and held,
// the expected number of them before it does (all of them if it never does). The agent reads
// the part back once, at its first use; from then on it is in front of it again, so the
// rewrite saves for held calls and costs one read-back with chance chance.
type outlook struct{ chance, held float64 }

// outlook returns the outlooks of masking (whole) and of an age-out snippet (middle) for old
// tool result i of action a over the next remaining calls. The hazard h of hazard() holds at
// the result's current rank; as later results arrive its rank grows, one a call, and the
// hazard decays with it (rankWeight), so the cumulated hazard after t calls is h*G(t), with
// G(t) = rank^0.8 * ((rank+t)^0.2 - rank^0.2) / 0.2 (the integral of (rank/(rank+u))^0.8), or
// h*t for a page of a document read in order. Survival is exp(-h*G(t)): chance is 1 minus its
// value at remaining, held its integral over [0, remaining], exact for a constant hazard and
// otherwise by Simpson's rule on segments that double in length ([0,1], [1,2], [2,4], ...),
// since survival falls fastest at first.
func (r *reuseState) outlook(i int, a toolAction, remaining float64) (whole, middle outlook) {
	hw, hm := r.hazard(i, a)
	k, ok := r.byPos[i]
	if !ok || r.results[k].kind.key.paged {
		of := func(h float64) outlook {
			if h <= 0 {
				return outlook{held: remaining}
			}
			c := 1 - math.Exp(-h*remaining)
			return outlook{chance: c, held: c / h}
		}
		return of(hw), of(hm)
	}
	rank := float64(max(r.nres-1-r.results[k].ord, 2))
	c, r0 := math.Pow(rank, 0.8)/0.2, math.Pow(rank, 0.2)
	G := func(t float64) float64 { return c * (math.Pow(rank+t, 0.2) - r0) }
	var heldW, heldM float64
	sw, sm := 1.0, 1.0 // survival at lo: G(0) = 0
	for lo, hi := 0.0, min(1, remaining); lo < remaining; lo, hi = hi, min(2*hi, remaining) {
		g1, g2 := G((lo+hi)/2), G(hi)
		mw, mm, ew, em := math.Exp(-hw*g1), math.Exp(-hm*g1), math.Exp(-hw*g2), math.Exp(-hm*g2)
		heldW += (hi - lo) / 6 * (sw + 4*mw + ew)
		heldM += (hi - lo) / 6 * (sm + 4*mm + em)
		sw, sm = ew, em
	}
	return outlook{chance: 1 - sw, held: heldW}, outlook{chance: 1 - sm, held: heldM}
}
