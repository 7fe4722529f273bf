package ctxmgr

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// The archive guide at the top of every summary says where the evicted messages can be read
// back. It is part of the summary and counted inside the summary's target, so it must stay
// small however long the session runs: one line per archive location (not one per
// compaction), contiguous ranges merged, and, when even that is too long (a file store
// archives into one file per day), the oldest locations folded into a single line.

// maxGuideRanges is how many disjoint ranges one location's line lists before it gives the
// span only ("messages 0-900 (in part)").
const maxGuideRanges = 3

// mergeRanges returns ranges sorted by position with overlapping or contiguous ranges of the
// same location merged. The input is not modified.
func mergeRanges(ranges []archiveRange) []archiveRange {
	if len(ranges) == 0 {
		return nil
	}
	rs := slices.Clone(ranges)
	slices.SortStableFunc(rs, func(a, b archiveRange) int { return cmp.Compare(a.From, b.From) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.Where == last.Where && r.From <= last.To {
			last.To = max(last.To, r.To)
			continue
		}
		out = append(out, r)
	}
	return out
}

// guideLine is one location of the guide and the merged ranges archived there.
type guideLine struct {
	where  store.Location
	ranges []archiveRange // sorted, disjoint
}

func (g guideLine) span() (from, to int) { return g.ranges[0].From, g.ranges[len(g.ranges)-1].To }

func (g guideLine) render(b *strings.Builder) {
	b.WriteString("- messages ")
	if len(g.ranges) > maxGuideRanges {
		from, to := g.span()
		fmt.Fprintf(b, "%d-%d (in part)", from, to-1)
	} else {
		for i, r := range g.ranges {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRange(b, r.From, r.To)
		}
	}
	b.WriteString(": ")
	b.WriteString(string(g.where))
	b.WriteByte('\n')
}

func writeRange(b *strings.Builder, from, to int) {
	b.WriteString(strconv.Itoa(from))
	b.WriteByte('-')
	b.WriteString(strconv.Itoa(to - 1))
}

// guideHeader opens every guide.
const guideHeader = "Earlier messages are archived verbatim (positions count from 0):\n"

// archiveGuide tells the agent where the raw evicted messages are: one line per location, in
// the order of the first position each holds. When the guide would cost more than maxTokens
// (by c; maxTokens <= 0: no limit), the oldest locations are folded into one line naming the
// first and the last of them, until it fits or only that line and the newest location remain.
func archiveGuide(ranges []archiveRange, maxTokens int, c tokens.Counter) string {
	lines := guideLines(mergeRanges(ranges))
	if len(lines) == 0 {
		return ""
	}
	render := func(folded int) string {
		var b strings.Builder
		b.WriteString(guideHeader)
		rest := lines
		if folded > 1 {
			old := lines[:folded]
			from, to := old[0].span()
			for _, g := range old {
				f, t := g.span()
				from, to = min(from, f), max(to, t)
			}
			b.WriteString("- messages ")
			writeRange(&b, from, to)
			fmt.Fprintf(&b, " (in part): %d locations, %s to %s\n", folded, old[0].where, old[folded-1].where)
			rest = lines[folded:]
		}
		for _, g := range rest {
			g.render(&b)
		}
		return b.String()
	}
	out := render(0)
	if maxTokens <= 0 || c == nil {
		return out
	}
	for folded := 2; folded < len(lines) && c.Text(out) > maxTokens; folded++ {
		out = render(folded)
	}
	return out
}

// guideLines groups merged ranges by location, locations ordered by their first position.
func guideLines(merged []archiveRange) []guideLine {
	var lines []guideLine
	idx := map[store.Location]int{}
	for _, r := range merged {
		i, ok := idx[r.Where]
		if !ok {
			i = len(lines)
			idx[r.Where] = i
			lines = append(lines, guideLine{where: r.Where})
		}
		lines[i].ranges = append(lines[i].ranges, r)
	}
	return lines
}

// guideBudget is the most of a summary target the guide may take.
func guideBudget(target int) int { return max(32, target/4) }
