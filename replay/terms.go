package replay

import (
	"index/suffixarray"
	"slices"
	"sort"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/terms"
)

// SalientTerms returns the salient terms of a text, each once, in order of first appearance:
// the maximal runs of [A-Za-z0-9_./:-] with trailing '.', ',' and ':' trimmed, 4 bytes long or
// more, that contain '_', '/', '.', a digit, or an upper-case letter right after a lower-case
// one (camelCase). These are the identifiers, paths, numbers and dotted names an agent
// refers back to.
func SalientTerms(s string) []string {
	var out []string
	var seen map[string]bool
	terms.Each(s, func(t string) {
		if seen == nil {
			seen = make(map[string]bool)
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	})
	return out
}

// searchText is the text of a message that reference recall looks in and for: its text and
// reasoning parts, verbatim blocks, and each tool call's name and arguments, one per line.
// Salient terms never contain a newline, so a term found in the joined text is found in one
// of its pieces.
func searchText(m *chat.Message) string {
	var b strings.Builder
	for _, p := range m.Content {
		switch p.Type {
		case chat.PartText, chat.PartReasoning:
			b.WriteString(p.Text)
		case chat.PartOther:
			b.WriteString(p.Text)
			b.Write(p.Raw)
		case chat.PartFile:
			if p.File != nil {
				b.WriteString(p.File.Data)
			}
		}
		b.WriteByte('\n')
	}
	for _, tc := range m.ToolCalls {
		b.WriteString(tc.Name)
		b.WriteByte('\n')
		b.WriteString(tc.Arguments)
		b.WriteByte('\n')
	}
	return b.String()
}

// termText is what the salient terms of a recorded assistant message are taken from: its
// content and its tool calls' arguments.
func termText(m *chat.Message) string {
	var b strings.Builder
	for _, p := range m.Content {
		if p.Type == chat.PartText || p.Type == chat.PartReasoning {
			b.WriteString(p.Text)
			b.WriteByte('\n')
		}
	}
	for _, tc := range m.ToolCalls {
		b.WriteString(tc.Arguments)
		b.WriteByte('\n')
	}
	return b.String()
}

// refTerm is one term of a call's reference set R: a salient term of the recorded assistant
// message that occurs in earlier messages, at the history positions in occ (ascending).
type refTerm struct {
	term string
	occ  []int
}

// references computes, for every assistant message of the history, its reference set R: the
// salient terms of the message that occur (as substrings) in an earlier message of the history
// (the system prompt is not part of the history). The result is indexed like msgs; entries of
// other messages are nil.
func references(msgs []chat.Message) [][]refTerm {
	texts := make([]string, len(msgs))
	starts := make([]int, len(msgs))
	var all strings.Builder
	for i := range msgs {
		texts[i] = searchText(&msgs[i])
		starts[i] = all.Len()
		all.WriteString(texts[i])
		all.WriteByte('\n')
	}
	joined := all.String()
	var index *suffixarray.Index
	occCache := map[string][]int{}
	occurrences := func(term string) []int {
		if o, ok := occCache[term]; ok {
			return o
		}
		if index == nil {
			index = suffixarray.New([]byte(joined))
		}
		offs := index.Lookup([]byte(term), -1)
		var o []int
		for _, off := range offs {
			// The message whose text holds offset off.
			k := sort.SearchInts(starts, off+1) - 1
			o = append(o, k)
		}
		slices.Sort(o)
		o = slices.Compact(o)
		occCache[term] = o
		return o
	}
	out := make([][]refTerm, len(msgs))
	for t := range msgs {
		if msgs[t].Role != chat.RoleAssistant {
			continue
		}
		for _, term := range SalientTerms(termText(&msgs[t])) {
			o := occurrences(term)
			n := sort.SearchInts(o, t) // occurrences before t
			if n > 0 {
				out[t] = append(out[t], refTerm{term: term, occ: o[:n:n]})
			}
		}
	}
	return out
}
