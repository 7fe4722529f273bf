package ctxmgr

import (
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/snippet"
	"github.com/ctxmgr/ctxmgr/store"
)

// The views that replace tool results in context, rendered by package internal/snippet. Each
// keeps the reference an agent needs to read the full result back.

// snippetView replaces a tool result by its head and tail within capBytes, the notable lines
// of the omitted middle (errors, failures, tracebacks: what an agent most often needs from a
// long output), and a reference to the full text.
func snippetView(orig *chat.Message, off store.Offloaded, capBytes int) chat.Message {
	return snippet.Cut(orig, off, capBytes, nil)
}

// snippetViewKeeping is snippetView that also keeps, among the notable lines of the omitted
// middle, the lines for which inPlay is true (lines holding identifiers the conversation uses;
// see snippet_terms.go). The notable share of the budget grows from 15% to 25% when inPlay is set.
func snippetViewKeeping(orig *chat.Message, off store.Offloaded, capBytes int, inPlay func(string) bool) chat.Message {
	return snippet.Cut(orig, off, capBytes, inPlay)
}

// stubView replaces a tool result by a one-line stub.
func stubView(orig *chat.Message, off store.Offloaded, tokens int) chat.Message {
	return snippet.Stub(orig, off, tokens)
}

// withText returns a copy of m whose content is one text part; everything else (ids, name,
// error flag, wire details) is kept.
func withText(m *chat.Message, text string) chat.Message { return snippet.WithText(m, text) }
