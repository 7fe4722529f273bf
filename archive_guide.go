package ctxmgr

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The archive guide at the top of every summary says which evicted messages can be read back.
// It names them by position ("messages A-B", the ref ctxmgr_read takes), never by where the
// store keeps them: the same conversation reads the same under any store and any deployment,
// and the model never sees a path of the proxy's disk. It is part of the summary and counted
// inside the summary's target, so it must stay small however long the session runs: the
// ranges merged, and, past maxGuideRanges disjoint ranges, their span only.

// maxGuideRanges is how many disjoint ranges the guide lists before it gives the span only
// ("messages 0-900 (in part)").
const maxGuideRanges = 3

// mergeRanges returns ranges sorted by position with overlapping or contiguous ranges merged,
// wherever each is stored. The input is not modified.
func mergeRanges(ranges []archiveRange) []archiveRange {
	if len(ranges) == 0 {
		return nil
	}
	rs := slices.Clone(ranges)
	slices.SortStableFunc(rs, func(a, b archiveRange) int { return cmp.Compare(a.From, b.From) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.From <= last.To {
			last.To = max(last.To, r.To)
			continue
		}
		out = append(out, r)
	}
	return out
}

func writeRange(b *strings.Builder, from, to int) {
	b.WriteString(strconv.Itoa(from))
	b.WriteByte('-')
	b.WriteString(strconv.Itoa(to - 1))
}

// guideHeader opens every guide.
const guideHeader = "Earlier messages are archived verbatim (positions count from 0); read them back by range, ref \"messages A-B\":\n"

// archiveGuide tells the agent which raw evicted messages it can read back: the merged
// ranges, or their span when there are more than maxGuideRanges.
func archiveGuide(ranges []archiveRange) string {
	merged := mergeRanges(ranges)
	if len(merged) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(guideHeader)
	b.WriteString("- messages ")
	if len(merged) > maxGuideRanges {
		fmt.Fprintf(&b, "%d-%d (in part)", merged[0].From, merged[len(merged)-1].To-1)
	} else {
		for i, r := range merged {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRange(&b, r.From, r.To)
		}
	}
	b.WriteByte('\n')
	return b.String()
}
