package proxy

import (
	"bytes"
	"encoding/json"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
	"github.com/ctxmgr/ctxmgr/wire"
)

// Anthropic prompt-cache breakpoints (cache_control) across a rewrite.
//
// A breakpoint is a transport hint, not content: it says "cache the prefix up to here" for
// this one request, and the API refuses more than four in a request. Clients such as Claude
// Code move a breakpoint to their newest message on every call, so a stored copy of a message
// must not keep the breakpoint it had when it was the newest: the proxy stores messages
// without cache_control (stripBreakpoints, at ingestion), and every forwarded request carries
// exactly the breakpoints of the client's own request, placed by this rule:
//
//   - system and tools carry the client's own breakpoints, untouched (the proxy forwards the
//     client's system and tool definitions, its ctxmgr_read tool added last without one);
//   - a breakpoint on a message the request still shows (verbatim or as a masked or capped
//     view) stays on that message's last block;
//   - a breakpoint on a message the proxy evicted moves to where the prefix that stays stable
//     now ends: the summary message (else the pinned task), so the calls after a compaction
//     are cached from the new prefix on;
//   - two breakpoints that land on one message become one, so a forwarded request never
//     carries more breakpoints than the client's, and never more than the API's four.

// maxBreakpoints is the Anthropic API's limit of cache_control blocks per request.
const maxBreakpoints = 4

const cacheControl = "cache_control"

// breakpoint is a cache_control value the client put on the message at history position pos.
type breakpoint struct {
	pos   int
	value json.RawMessage
}

// messageBreakpoints lists the breakpoints of a client's messages, in order: those of known
// (the breakpoints of an earlier request whose first from messages are msgs[:from]) before
// from, then those found in msgs[from:]. The result never shares known's array.
func messageBreakpoints(msgs []chat.Message, from int, known []breakpoint) []breakpoint {
	var out []breakpoint
	for _, bp := range known {
		if bp.pos < from {
			out = append(out, bp)
		}
	}
	for i := from; i < len(msgs); i++ {
		if v := breakpointOf(&msgs[i]); v != nil {
			out = append(out, breakpoint{pos: i, value: v})
		}
	}
	return out
}

// setupBreakpoints counts the breakpoints on system blocks and tool definitions.
func setupBreakpoints(system []chat.Message, tools []chat.Tool) int {
	n := 0
	for i := range system {
		for j := range system[i].Content {
			if partBreakpoint(&system[i].Content[j]) != nil {
				n++
			}
		}
	}
	for i := range tools {
		if tools[i].Extra[cacheControl] != nil || rawField(tools[i].Raw, cacheControl) != nil {
			n++
		}
	}
	return n
}

// breakpointOf returns the (last) cache_control value found on a message's blocks, or nil.
func breakpointOf(m *chat.Message) json.RawMessage {
	var v json.RawMessage
	if b := m.Extra["block."]; b != nil {
		if x := rawField(b, cacheControl); x != nil {
			v = x
		}
	}
	for i := range m.Content {
		if x := partBreakpoint(&m.Content[i]); x != nil {
			v = x
		}
	}
	for i := range m.ToolCalls {
		if x := m.ToolCalls[i].Extra[cacheControl]; x != nil {
			v = x
		}
	}
	return v
}

func partBreakpoint(p *chat.Part) json.RawMessage {
	if v := p.Extra[cacheControl]; v != nil {
		return v
	}
	if p.Type == chat.PartOther {
		return rawField(p.Raw, cacheControl)
	}
	return nil
}

// rawField returns the value of a top-level field of a JSON object, or nil.
func rawField(raw json.RawMessage, key string) json.RawMessage {
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	if !bytes.Contains(raw, []byte(key)) && !bytes.Contains(raw, []byte(`\u`)) {
		// Not there (a key spelled with \u escapes is the one other way to write it): no
		// need to parse the object, which runs for every block of every request.
		return nil
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(raw, &o) != nil {
		return nil
	}
	return o[key]
}

// withoutRawField returns raw without a top-level field (raw itself when it has none).
func withoutRawField(raw json.RawMessage, key string) json.RawMessage {
	var o map[string]json.RawMessage
	if json.Unmarshal(raw, &o) != nil || o[key] == nil {
		return raw
	}
	delete(o, key)
	b, err := json.Marshal(o)
	if err != nil {
		return raw
	}
	return b
}

// stripBreakpoints returns m without any cache_control (m itself when it has none).
func stripBreakpoints(m chat.Message) chat.Message {
	if breakpointOf(&m) == nil {
		return m
	}
	m = m.Clone()
	if b := m.Extra["block."]; b != nil {
		b = withoutRawField(b, cacheControl)
		if string(b) == "{}" {
			delete(m.Extra, "block.")
		} else {
			m.Extra["block."] = b
		}
	}
	for i := range m.Content {
		p := &m.Content[i]
		delete(p.Extra, cacheControl)
		if p.Type == chat.PartOther {
			p.Raw = withoutRawField(p.Raw, cacheControl)
		}
	}
	for i := range m.ToolCalls {
		delete(m.ToolCalls[i].Extra, cacheControl)
	}
	return m
}

// withBreakpoint returns a copy of m with cache_control v on its last block that can carry
// one, and whether it found such a block (thinking blocks and empty text cannot).
func withBreakpoint(m chat.Message, v json.RawMessage) (chat.Message, bool) {
	if m.Wire != "" && m.Wire != string(wire.Anthropic) {
		return m, false
	}
	m = m.Clone()
	m.Wire = string(wire.Anthropic)
	if m.Role == chat.RoleTool {
		o := map[string]json.RawMessage{}
		if b := m.Extra["block."]; b != nil {
			if json.Unmarshal(b, &o) != nil {
				return m, false
			}
		}
		o[cacheControl] = v
		b, err := json.Marshal(o)
		if err != nil {
			return m, false
		}
		if m.Extra == nil {
			m.Extra = map[string]json.RawMessage{}
		}
		m.Extra["block."] = b
		return m, true
	}
	if n := len(m.ToolCalls); n > 0 {
		tc := &m.ToolCalls[n-1]
		if tc.Extra == nil {
			tc.Extra = map[string]json.RawMessage{}
		}
		tc.Extra[cacheControl] = v
		return m, true
	}
	for i := len(m.Content) - 1; i >= 0; i-- {
		p := &m.Content[i]
		switch {
		case p.Type == chat.PartText && p.Text != "", p.Type == chat.PartImage:
		case p.Type == chat.PartOther && len(p.Raw) > 0 && p.Raw[0] == '{':
			var o map[string]json.RawMessage
			if json.Unmarshal(p.Raw, &o) != nil {
				continue
			}
			o[cacheControl] = v
			b, err := json.Marshal(o)
			if err != nil {
				continue
			}
			p.Raw = b
			m.Shape = chat.ShapeParts
			return m, true
		default:
			continue
		}
		if p.Extra == nil {
			p.Extra = map[string]json.RawMessage{}
		}
		p.Extra[cacheControl] = v
		m.Shape = chat.ShapeParts // a string content cannot carry a breakpoint
		return m, true
	}
	return m, false
}

// placeBreakpoints rewrites the messages of a prepared request so that they carry the
// client's message breakpoints bps by the rule above, and nothing else. room is how many
// message breakpoints the request may carry (the API's four less those on system and tools).
// The prepared request's slice is not modified: a copy is returned when anything changes.
func placeBreakpoints(msgs []chat.Message, rep ctxmgr.Report, bps []breakpoint, room int) []chat.Message {
	subs, _ := placeBreakpointsKnown(msgs, rep, bps, room, nil)
	return encodecache.Substituted(msgs, subs)
}

// placeBreakpointsKnown is placeBreakpoints for a caller that encodes the substitutes
// itself (encodecache.AppendAnthropic), so that the prepared slice, which the next
// request's continues, is never copied: it returns the messages that change, by position,
// nil when none does. The caller also remembers the messages of its last call that carried
// no breakpoint: clean (by position) lists them, and a message that is the same value as its
// clean counterpart (chat.Message.Shares) is not searched again (the search parses block
// JSON, for every message of every request). When none of msgs carries a breakpoint, it
// returns msgs as the next call's clean list.
func placeBreakpointsKnown(msgs []chat.Message, rep ctxmgr.Report, bps []breakpoint, room int, clean []chat.Message) (map[int]chat.Message, []chat.Message) {
	// Where each request message comes from: [pinned] [summary] history[Evicted:].
	offset, summaryAt, pinnedAt := 0, -1, -1
	if rep.Pinned >= 0 && len(msgs) > 0 {
		pinnedAt, offset = 0, 1
	}
	if offset < len(msgs) && msgs[offset].Meta["ctxmgr"] == "summary" {
		summaryAt = offset
		offset++
	}
	want := map[int]json.RawMessage{}
	var order []int
	for _, bp := range bps {
		at := -1
		switch {
		case bp.pos == rep.Pinned && pinnedAt >= 0:
			at = pinnedAt
		case bp.pos >= rep.Evicted:
			at = offset + bp.pos - rep.Evicted
		case summaryAt >= 0:
			at = summaryAt
		default:
			at = pinnedAt
		}
		if at < 0 || at >= len(msgs) {
			continue
		}
		if _, dup := want[at]; !dup {
			order = append(order, at)
		}
		want[at] = bp.value
	}
	// Over the limit: keep the latest ones, which cover the longest prefixes.
	for len(order) > max(room, 0) {
		delete(want, order[0])
		order = order[1:]
	}
	var subs map[int]chat.Message
	change := func(i int, m chat.Message) {
		if subs == nil {
			subs = make(map[int]chat.Message, len(want)+1)
		}
		subs[i] = m
	}
	// A request that continues the last one's slice (Prepare extends its slice while
	// nothing already sent changes, and never modifies what it returned) holds the clean
	// messages themselves in its first len(clean): only the breakpoints wanted there, and
	// what follows, are looked at. Otherwise every message is, each against its clean
	// counterpart.
	known := 0
	if len(clean) > 0 && len(msgs) >= len(clean) && &msgs[0] == &clean[0] {
		known = len(clean)
	}
	anyHas := false
	visit := func(i int) {
		v, ok := want[i]
		has := false
		if i >= known && (i >= len(clean) || !msgs[i].Shares(&clean[i])) {
			has = breakpointOf(&msgs[i]) != nil
			anyHas = anyHas || has
		}
		if !ok && !has {
			return
		}
		m := stripBreakpoints(msgs[i])
		if ok {
			if mm, placed := withBreakpoint(m, v); placed {
				m = mm
			}
		}
		change(i, m)
	}
	for _, i := range order {
		if i < known {
			visit(i)
		}
	}
	for i := known; i < len(msgs); i++ {
		visit(i)
	}
	var nextClean []chat.Message
	if !anyHas {
		nextClean = msgs
	}
	return subs, nextClean
}
