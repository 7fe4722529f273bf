package summarize

// The summary document: its sections as lists of items, parsing a previous summary back into
// items, rendering, and fitting the rendered text into a token target.

import (
	"sort"
	"strconv"
	"strings"
)

// part is a list of items the document renders: the sections, with Progress split in three.
type part int

const (
	pGoal part = iota
	pConstraints
	pDone
	pInProgress
	pBlocked
	pDecisions
	pNext
	numParts
)

// partGroup maps a part to its section.
var partGroup = [numParts]group{gGoal, gConstraints, gProgress, gProgress, gProgress, gDecisions, gNext}

// partCaps bound the items of each part whatever the target.
var partCaps = [numParts]int{4, 12, 20, 5, 8, 12, 5}

// entCaps bound the critical-context entities of each kind.
var entCaps = [numEntKinds]int{40, 40, 8, 20, 8, 12}

// Title is the line that starts the summary proper, after the archive guide.
const Title = "# Conversation summary"

// Progress subsection headings.
const (
	hDone       = "### Done"
	hInProgress = "### In Progress"
	hBlocked    = "### Blocked"
)

const omittedNote = "(omitted per instruction)"

// maxItemBytes bounds a line read back from a previous summary: above every item this package
// writes (goals are cut at 400 bytes plus a label), so that a summary reads back unchanged.
const maxItemBytes = 600

// item is one bullet.
type item struct {
	text string // one line, without the "- " marker
	key  string // dedupe key
	prio int    // higher is kept longer
	seq  int    // chronological order; items of the previous summary are negative
}

// entity is one critical-context entry.
type entity struct {
	name  string
	kind  entKind
	score int // weighted mentions (x100) plus recency
	last  int // newest message position that mentioned it; -1 for the previous summary only
}

// doc is a summary before rendering.
type doc struct {
	guide       string
	instruction string
	covFrom     int
	covTo       int
	hasCov      bool
	parts       [numParts][]item
	ents        []entity // ranked, best first
	omitted     [numGroups]bool
}

// itemKey normalizes text for deduplication: lowercase, single spaces, without message
// references "(#12)" and repeat counts, without trailing punctuation.
func itemKey(text string) string {
	k := strings.ToLower(oneLine(text, 400))
	if i := strings.Index(k, " → "); i > 0 {
		k = k[:i] // progress entries: the call is the key, the outcome is not
	}
	if i := strings.Index(k, " (#"); i > 0 {
		k = k[:i]
	}
	return strings.TrimRight(k, " .;:")
}

// ---- rendering -------------------------------------------------------------------------------

func (d *doc) render() string {
	var b strings.Builder
	if d.guide != "" {
		b.WriteString(strings.TrimRight(d.guide, "\n"))
		b.WriteString("\n\n")
	}
	b.WriteString(Title)
	b.WriteByte('\n')
	if d.hasCov {
		b.WriteString("Covers messages ")
		b.WriteString(strconv.Itoa(d.covFrom))
		b.WriteByte('-')
		b.WriteString(strconv.Itoa(d.covTo))
		b.WriteString(".\n")
	}
	if d.instruction != "" {
		b.WriteString("\n## Instruction\n")
		b.WriteString(d.instruction)
		b.WriteByte('\n')
	}
	writeItems := func(items []item) {
		for _, it := range items {
			b.WriteString("- ")
			b.WriteString(it.text)
			b.WriteByte('\n')
		}
	}
	for g := range numGroups {
		b.WriteByte('\n')
		b.WriteString(Headings[g])
		b.WriteByte('\n')
		if d.omitted[g] {
			b.WriteString(omittedNote)
			b.WriteByte('\n')
			continue
		}
		switch g {
		case gGoal:
			writeItems(d.parts[pGoal])
		case gConstraints:
			writeItems(d.parts[pConstraints])
		case gProgress:
			b.WriteString(hDone + "\n")
			writeItems(d.parts[pDone])
			b.WriteString(hInProgress + "\n")
			writeItems(d.parts[pInProgress])
			b.WriteString(hBlocked + "\n")
			writeItems(d.parts[pBlocked])
		case gDecisions:
			writeItems(d.parts[pDecisions])
		case gNext:
			writeItems(d.parts[pNext])
		case gContext:
			d.renderEntities(&b)
		}
	}
	return b.String()
}

// entOrder is the order in which entity kinds are rendered.
var entOrder = []entKind{entFile, entIdent, entID, entURL, entError, entOther}

func (d *doc) renderEntities(b *strings.Builder) {
	for _, k := range entOrder {
		first := true
		for _, e := range d.ents {
			if e.kind != k {
				continue
			}
			switch k {
			case entError:
				b.WriteString("- Error: ")
				b.WriteString(e.name)
				b.WriteByte('\n')
			case entOther:
				b.WriteString("- ")
				b.WriteString(e.name)
				b.WriteByte('\n')
			default:
				if first {
					b.WriteString("- ")
					b.WriteString(entLabels[k])
					b.WriteString(": ")
				} else {
					b.WriteString(", ")
				}
				b.WriteByte('`')
				b.WriteString(e.name)
				b.WriteByte('`')
			}
			first = false
		}
		if !first && k != entError && k != entOther {
			b.WriteByte('\n')
		}
	}
}

// sortItems orders items chronologically for rendering.
func sortItems(items []item) {
	sort.SliceStable(items, func(i, j int) bool { return items[i].seq < items[j].seq })
}

// ---- parsing a previous summary --------------------------------------------------------------

// Priorities of items carried over from the previous summary (new items rank by what they are;
// see extractive.go).
const (
	prioPrevGoalFirst = 95
	prioPrevGoal      = 80
	prioPrevConstr    = 25
	prioPrevDone      = 30
	prioPrevInProg    = 40
	prioPrevBlocked   = 60
	prioPrevDecision  = 50
	prioPrevNext      = 35
	scorePrev         = 400 // an entity remembered by the previous summary counts as four mentions
)

var prevPrio = [numParts]int{prioPrevGoalFirst, prioPrevConstr, prioPrevDone, prioPrevInProg, prioPrevBlocked, prioPrevDecision, prioPrevNext}

// headingTarget maps a heading's normalized name to where its items go: a part, or -1 for
// Critical Context, -2 for the Instruction note (dropped), -3 for Progress (Done unless a
// subsection says otherwise), -4 for the title, -5 for unknown headings.
func headingTarget(name string) int {
	switch name {
	case "goal", "goals", "objective", "task":
		return int(pGoal)
	case "constraints & preferences", "constraints and preferences", "constraints", "preferences":
		return int(pConstraints)
	case "progress":
		return -3
	case "done", "completed":
		return int(pDone)
	case "in progress", "in-progress", "ongoing":
		return int(pInProgress)
	case "blocked", "blockers":
		return int(pBlocked)
	case "key decisions", "decisions":
		return int(pDecisions)
	case "next steps", "next":
		return int(pNext)
	case "critical context", "context":
		return -1
	case "instruction":
		return -2
	case "conversation summary":
		return -4
	}
	return -5
}

// headingName returns the normalized name of a heading line ("## Goal", "**Done:**",
// "### In Progress") and whether the line is one.
func headingName(line string) (string, bool) {
	t := strings.TrimSpace(line)
	md := strings.HasPrefix(t, "#")
	bold := strings.HasPrefix(t, "**") && strings.HasSuffix(strings.TrimRight(t, ":"), "**") && len(t) > 4
	if !md && !bold {
		return "", false
	}
	t = strings.TrimLeft(t, "#")
	t = strings.TrimSpace(strings.Trim(strings.TrimSpace(t), "*:"))
	t = strings.TrimSpace(strings.TrimRight(t, ":"))
	return strings.ToLower(t), t != ""
}

// parsePrevious reads a previous summary back into d: items of every section (with their
// previous-summary priority), critical-context entities, and the coverage line. Unknown
// sections and unstructured text become critical-context lines; the archive guide and the
// instruction note are dropped (each summary carries the current ones).
func parsePrevious(d *doc, prev string) {
	if strings.TrimSpace(prev) == "" {
		return
	}
	prev = validUTF8(prev)
	target := -6 // before any heading
	sawSection := false
	seq := -1_000_000
	var loose []string
	lines := strings.Split(prev, "\n")
	if len(lines) > 5000 {
		lines = lines[:5000]
	}
	entIdx := map[string]int{}
	addEnt := func(name string, k entKind) {
		name = oneLine(name, maxItemBytes)
		if name == "" {
			return
		}
		key := string(rune('0'+k)) + name
		if _, ok := entIdx[key]; ok {
			return
		}
		entIdx[key] = len(d.ents)
		d.ents = append(d.ents, entity{name: name, kind: k, score: scorePrev - len(d.ents), last: -1})
	}
	for _, line := range lines {
		if name, ok := headingName(line); ok {
			t := headingTarget(name)
			if t == -4 {
				continue
			}
			if t == -5 && target == -6 && !sawSection {
				continue // a heading of the archive guide
			}
			target = t
			sawSection = sawSection || t >= -3 || t == -1
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" || t == omittedNote || isNoneText(t) {
			continue
		}
		if strings.HasPrefix(t, "Covers messages ") {
			var a, b int
			if parseRange(strings.TrimPrefix(t, "Covers messages "), &a, &b) {
				d.covFrom, d.covTo, d.hasCov = a, b, true
			}
			continue
		}
		text := oneLine(trimListMarker(t), maxItemBytes)
		if text == "" {
			continue
		}
		seq++
		switch {
		case target == -6:
			// Preamble: the previous archive guide, or an unstructured summary.
			loose = append(loose, text)
		case target == -2:
			// The old instruction note.
		case target == -1 || target == -5:
			parseContextLine(text, addEnt)
		case target == -3:
			d.addPrev(pDone, text, seq)
		default:
			d.addPrev(part(target), text, seq)
		}
	}
	if !sawSection {
		// Not a structured summary: keep its lines as context and its entities.
		for i, l := range loose {
			if i >= entCaps[entOther] {
				break
			}
			addEnt(l, entOther)
		}
		forEachToken(prev[:min(len(prev), 1<<16)], func(tok string) {
			if name, k, ok := classify(tok, false); ok {
				addEnt(name, k)
			}
		})
	}
}

func (d *doc) addPrev(p part, text string, seq int) {
	prio := prevPrio[p]
	if p == pGoal && len(d.parts[pGoal]) > 0 {
		prio = prioPrevGoal - len(d.parts[pGoal])
	}
	d.parts[p] = append(d.parts[p], item{text: text, key: itemKey(text), prio: prio, seq: seq})
}

// parseContextLine reads one Critical Context bullet: "Files: `a`, `b`" lists, "Error: ..."
// lines, or any other line kept verbatim.
func parseContextLine(text string, add func(string, entKind)) {
	for _, k := range []entKind{entFile, entIdent, entID, entURL} {
		label := entLabels[k] + ":"
		if strings.HasPrefix(text, label) {
			rest := text[len(label):]
			n := 0
			for {
				i := strings.IndexByte(rest, '`')
				if i < 0 {
					break
				}
				j := strings.IndexByte(rest[i+1:], '`')
				if j < 0 {
					break
				}
				if name := rest[i+1 : i+1+j]; name != "" {
					add(name, k)
					n++
				}
				rest = rest[i+1+j+1:]
			}
			if n > 0 {
				return
			}
		}
	}
	if strings.HasPrefix(text, "Error:") {
		add(strings.TrimSpace(text[len("Error:"):]), entError)
		return
	}
	add(text, entOther)
}

// isNoneText reports whether a line says only "none" ("- None.", "(none)", "n/a"): what models
// write under an empty section.
func isNoneText(t string) bool {
	t = strings.ToLower(strings.Trim(t, "()-*_. "))
	return t == "none" || t == "n/a" || t == "none yet" || t == "nothing"
}

// parseRange reads "A-B." into a and b.
func parseRange(s string, a, b *int) bool {
	s = strings.TrimRight(strings.TrimSpace(s), ".")
	x, y, ok := strings.Cut(s, "-")
	if !ok {
		return false
	}
	var err1, err2 error
	*a, err1 = strconv.Atoi(strings.TrimSpace(x))
	*b, err2 = strconv.Atoi(strings.TrimSpace(y))
	return err1 == nil && err2 == nil && *a >= 0 && *b >= *a
}

// ---- fitting ---------------------------------------------------------------------------------

// groupShare is each section's share of the item budget before unused budget is passed on.
var groupShare = [numGroups]int{15, 11, 22, 13, 8, 31}

// cand is a candidate for the budget: an item of a part, or an entity.
type cand struct {
	part part // numParts for entities
	idx  int
	cost int
	prio int
	seq  int
	kind entKind // entities only
	text string  // a shortened text that replaces the item's, when set
}

// fit chooses the items and entities of d that fit target tokens (target <= 0: only the
// per-section caps apply) and returns the rendered summary. Sections are given shares of the
// budget, with what a section does not need passed on to the others; within a section the
// least important items, and among equals the oldest, are dropped first. The result is
// measured with the counter and shrunk until it fits; only the skeleton (guide, title,
// instruction note, headings) can exceed a target too small to hold it.
func fit(d *doc, target int, c TokenCounter) string {
	// Caps first.
	for p := range numParts {
		d.parts[p] = topItems(d.parts[p], partCaps[p])
	}
	d.ents = capEntities(d.ents)
	full := *d
	if target <= 0 {
		for p := range numParts {
			sortItems(d.parts[p])
		}
		return d.render()
	}
	skel := full
	skel.parts = [numParts][]item{}
	skel.ents = nil
	overhead := safeCount(c, skel.render())
	labelCost := safeCount(c, "- Identifiers: \n")

	// Candidates with their costs.
	var cands [numGroups][]cand
	for p := range numParts {
		for i, it := range full.parts[p] {
			cost := safeCount(c, "- "+it.text+"\n")
			g := partGroup[p]
			cands[g] = append(cands[g], cand{part: p, idx: i, cost: cost, prio: it.prio, seq: it.seq})
		}
	}
	for i, e := range full.ents {
		var cost int
		switch e.kind {
		case entError:
			cost = safeCount(c, "- Error: "+e.name+"\n")
		case entOther:
			cost = safeCount(c, "- "+e.name+"\n")
		default:
			cost = safeCount(c, "`"+e.name+"`, ")
		}
		// Entities are already ranked: earlier is more important.
		cands[gContext] = append(cands[gContext], cand{part: numParts, idx: i, cost: cost, prio: -i, kind: e.kind})
	}
	for g := range numGroups {
		sort.SliceStable(cands[g], func(i, j int) bool {
			a, b := cands[g][i], cands[g][j]
			if a.prio != b.prio {
				return a.prio > b.prio
			}
			return a.seq > b.seq
		})
	}

	budget := target - overhead
	// A budget above what everything costs changes nothing (and must not overflow below).
	all := 4 * labelCost
	for g := range numGroups {
		for _, cd := range cands[g] {
			all += cd.cost
		}
	}
	budget = min(budget, all)
	var out string
	for round := 0; round < 12; round++ {
		sel := choose(&cands, budget, labelCost, func(cd cand, room int) (cand, bool) {
			// The most important item of a section that does not fit is shortened to fit
			// rather than dropped (a long goal under a small target).
			if cd.part == numParts || room < 12 {
				return cd, false
			}
			t := full.parts[cd.part][cd.idx].text
			for n := len(t) * (room - 2) / max(cd.cost, 1); n >= 24; n = n * 3 / 4 {
				short := clip(t, n)
				if cost := safeCount(c, "- "+short+"\n"); cost <= room {
					cd.text, cd.cost = short, cost
					return cd, true
				}
			}
			return cd, false
		})
		trial := full
		trial.parts = [numParts][]item{}
		trial.ents = nil
		var entIdx []int
		for g := range numGroups {
			for _, cd := range sel[g] {
				if cd.part == numParts {
					entIdx = append(entIdx, cd.idx)
				} else {
					it := full.parts[cd.part][cd.idx]
					if cd.text != "" {
						it.text = cd.text
					}
					trial.parts[cd.part] = append(trial.parts[cd.part], it)
				}
			}
		}
		for p := range numParts {
			sortItems(trial.parts[p])
		}
		sort.Ints(entIdx)
		for _, i := range entIdx {
			trial.ents = append(trial.ents, full.ents[i])
		}
		out = trial.render()
		n := safeCount(c, out)
		if n <= target || budget <= 0 {
			*d = trial
			if n > target {
				// Only the skeleton is left and it does not fit: nothing more can go.
				out = skel.render()
				*d = skel
			}
			return out
		}
		budget -= n - target + 1 + budget/20
	}
	*d = skel
	return skel.render()
}

// choose distributes budget over the sections (water-filling over groupShare) and picks each
// section's candidates in order of importance.
func choose(cands *[numGroups][]cand, budget, labelCost int, shrink func(cand, int) (cand, bool)) [numGroups][]cand {
	var sel [numGroups][]cand
	if budget <= 0 {
		return sel
	}
	var demand [numGroups]int
	for g := range numGroups {
		for _, cd := range cands[g] {
			demand[g] += cd.cost
		}
		if g == gContext && len(cands[g]) > 0 {
			demand[g] += 4 * labelCost
		}
	}
	var alloc [numGroups]int
	open := [numGroups]bool{}
	for g := range numGroups {
		open[g] = demand[g] > 0
	}
	left := budget
	for iter := 0; iter < int(numGroups)+1 && left > 0; iter++ {
		shares := 0
		for g := range numGroups {
			if open[g] {
				shares += groupShare[g]
			}
		}
		if shares == 0 {
			break
		}
		progressed := false
		pool := left
		for g := range numGroups {
			if !open[g] {
				continue
			}
			fair := pool * groupShare[g] / shares
			need := demand[g] - alloc[g]
			if need <= fair {
				alloc[g] += need
				left -= need
				open[g] = false
				progressed = true
			}
		}
		if !progressed {
			for g := range numGroups {
				if open[g] {
					fair := pool * groupShare[g] / shares
					alloc[g] += fair
					left -= fair
				}
			}
			break
		}
	}
	for g := range numGroups {
		room := alloc[g]
		var labeled [numEntKinds]bool
		for _, cd := range cands[g] {
			cost := cd.cost
			isList := cd.part == numParts && cd.kind != entError && cd.kind != entOther
			if isList && !labeled[cd.kind] {
				cost += labelCost // a list's first entry pays for its label
			}
			if cost > room && len(sel[g]) == 0 && !isList {
				if short, ok := shrink(cd, room); ok {
					cd, cost = short, short.cost
				}
			}
			if cost <= room {
				room -= cost
				sel[g] = append(sel[g], cd)
				if isList {
					labeled[cd.kind] = true
				}
			}
		}
	}
	return sel
}

// topItems keeps the n most important items (ties: the newest), deduplicated by key.
func topItems(items []item, n int) []item {
	seen := map[string]bool{}
	var uniq []item
	// Newest first so that a newer item with the same key wins.
	order := make([]item, len(items))
	copy(order, items)
	sort.SliceStable(order, func(i, j int) bool { return order[i].seq > order[j].seq })
	for _, it := range order {
		if it.text == "" || seen[it.key] {
			continue
		}
		seen[it.key] = true
		uniq = append(uniq, it)
	}
	sort.SliceStable(uniq, func(i, j int) bool {
		if uniq[i].prio != uniq[j].prio {
			return uniq[i].prio > uniq[j].prio
		}
		return uniq[i].seq > uniq[j].seq
	})
	if len(uniq) > n {
		uniq = uniq[:n]
	}
	return uniq
}

// capEntities keeps at most entCaps of each kind, in rank order.
func capEntities(ents []entity) []entity {
	var n [numEntKinds]int
	out := ents[:0:0]
	for _, e := range ents {
		if n[e.kind] >= entCaps[e.kind] {
			continue
		}
		n[e.kind]++
		out = append(out, e)
	}
	return out
}
