package ctxmgr

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/snippet"
	"github.com/ctxmgr/ctxmgr/store"
)

// Offloading: the full text of a tool result goes to the Store under a key of its history
// position, and a shorter view (snippet.go) takes its place in context. At ingestion, a result
// above its cap is offloaded as it is appended; the later steps offload what they rewrite.

// ingest makes *e the entry of message m, to be taken into the history at position pos, as
// appendLocked and LoadSession both do for every message, in order. A message other than a
// tool result is counted here, once (its view is itself). A tool result gets its size and
// whether its tool is exempt, and, above its ingestion cap (ingestCap), its full text is
// offloaded and a snippet becomes its view; account counts it on its final view. *own is the
// session's ownTokens before m and gets m's share (see roomBytes); batch holds the messages
// appended with m, before it (callOf). The entry keeps m: the caller passes a copy of a
// message it does not own.
func (s *Session) ingest(ctx context.Context, pos int, e *entry, m chat.Message, batch []chat.Message, own *int) error {
	cfg := &s.m.cfg
	*e = entry{orig: m, view: m}
	if m.Role != chat.RoleTool {
		e.tokens = cfg.Counter.Message(&e.orig)
		*own += e.tokens
		return nil
	}
	e.size = textBytes(&e.orig)
	e.exempt = slices.Contains(cfg.ExemptTools, e.orig.Name)
	capB := s.ingestCap(e, batch, *own)
	*own += stubTokens
	if capB > 0 && e.size > capB {
		off, err := s.offload(ctx, pos, e)
		if err != nil {
			return err
		}
		e.off = &off
		e.view = snippetView(&e.orig, off, capB)
		e.kind = viewOffloaded
	}
	return nil
}

// ingestCap is the ingestion cap in bytes for a tool result (0: none): Config.ToolResultCap,
// or, when its call read a file or searched, as the agent asked (classify), up to
// Config.RequestedReadCap as far as it fits (roomBytes). batch holds the messages appended
// with it, before it; own is ownTokens before it.
func (s *Session) ingestCap(e *entry, batch []chat.Message, own int) int {
	cfg := &s.m.cfg
	if cfg.DisableOffload || cfg.ToolResultCap <= 0 || e.exempt {
		return 0
	}
	c := cfg.ToolResultCap
	if cfg.RequestedReadCap > c && e.size > c {
		if tc, ok := s.callOf(e.orig.ToolCallID, batch); ok && classify(tc, s.m.readTools).requested() {
			c = max(c, min(cfg.RequestedReadCap, s.roomBytes(e, own)))
		}
	}
	return c
}

// callOf returns the call a tool result answers: among batch (messages being appended, before
// the result) or in the history.
func (s *Session) callOf(id string, batch []chat.Message) (chat.ToolCall, bool) {
	for k := len(batch) - 1; k >= 0; k-- {
		for _, tc := range batch[k].ToolCalls {
			if tc.ID == id {
				return tc, true
			}
		}
	}
	if i, ok := s.open[id]; ok && i < len(s.entries) {
		for _, tc := range s.entries[i].orig.ToolCalls {
			if tc.ID == id {
				return tc, true
			}
		}
	}
	return chat.ToolCall{}, false
}

// roomBytes is how much of a requested read fits under the compaction threshold beside the
// conversation's own messages: the history the configured window allows at its threshold
// (no summary), less own (the whole history before the result, every tool result counted
// as a mask stub), in bytes at the result's own bytes per token, measured on its first
// 16 KB. Compaction masks tool results before it summarizes (Config.MaskBeforeSummary), so a
// read that fits this room can stay whole without a summary evicting what the assistant said
// and quoted. It depends on the history and the configuration only, so a restored session
// caps the same results the same way.
func (s *Session) roomBytes(e *entry, own int) int {
	p := budget.Breakdown(s.m.cfg.Budget, budget.Regions{System: s.sysTokens, Tools: s.toolTokens})
	room := p.ThresholdHistory - own
	if room <= 0 {
		return 0
	}
	text := fullText(&e.orig)
	if len(text) > 16<<10 {
		text = strings.ToValidUTF8(text[:16<<10], "")
	}
	tok := max(1, s.m.cfg.Counter.Text(text))
	return int(min(int64(room)*int64(len(text))/int64(tok), 1<<40))
}

// stubTokens is about what a masked tool result costs in context.
const stubTokens = 60

// offload writes the full text of a tool result to the store under a key unique to its
// history position (tool call ids can repeat across turns).
func (s *Session) offload(ctx context.Context, index int, e *entry) (store.Offloaded, error) {
	if e.off != nil {
		return *e.off, nil
	}
	if err := s.flushLocked(ctx); err != nil {
		return store.Offloaded{}, err
	}
	cfg := &s.m.cfg
	var expires time.Time
	if cfg.OffloadRetention > 0 {
		expires = cfg.Now().Add(cfg.OffloadRetention)
	}
	off, err := cfg.Store.Offload(ctx, s.id, offloadKey(index, e.orig.ToolCallID), fullText(&e.orig), expires)
	if err != nil {
		return off, s.m.storeErr("offload", err)
	}
	return off, nil
}

// offloadKey is a store-safe key for the result at history position index.
func offloadKey(index int, callID string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%06d", index)
	if callID != "" {
		b.WriteByte('-')
		for i := 0; i < len(callID) && b.Len() < 120; i++ {
			c := callID[i]
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
				b.WriteByte(c)
			} else {
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// OffloadedText is the text ctxmgr writes to the Store when it offloads a tool result: the one
// text part itself, or the parts joined by newlines (images and files as placeholders). Tools
// that check a store against a history (replay's lost count) compare with it.
func OffloadedText(m *chat.Message) string { return snippet.Text(m) }

// fullText is the text of a message's parts as stored when offloaded (snippet.Text).
func fullText(m *chat.Message) string { return snippet.Text(m) }
