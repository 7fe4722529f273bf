package wire

import (
	"bytes"
	"encoding/json"
	"sort"
	"sync/atomic"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Decoding what is new.
//
// An agent resends its whole history on every call and adds a message or two; a proxy that
// decodes every body whole spends what the history costs, on every call. A Layout remembers
// where the messages of a decoded body lie, and DecodeNext decodes a later body of the same
// conversation only where it differs from that one: the bytes the two bodies share at their
// start (the top-level fields before the messages and the first messages) and at their end
// (the rest of the top-level object after the messages array) are the same JSON, so their
// decoding is reused, and only the messages in between are validated and decoded. When the
// end differs (Codex CLI's client_metadata changes on every request), the fields after the
// messages are decoded on their own, as the body with an empty messages array (topFields),
// and the shared messages are still reused. The result
// is exactly what Decode gives (FuzzDecodeNext checks it on arbitrary edits of valid bodies);
// whenever the shape does not allow reuse, DecodeNext decodes the body whole.

// Layout is a decoded body and where its messages lie in it. It is immutable: share it
// freely, and never modify the Request it holds (DecodeNext's results share its messages).
type Layout struct {
	format Format
	body   []byte
	req    *chat.Request
	// open and close are the offsets of the messages array's brackets (the input array's,
	// for Responses); ends[i] is the offset just past wire message i, and count[i] the number
	// of neutral messages (system messages of an OpenAI or Responses body included) that wire
	// messages 0..i decoded to. closed[i] (Responses only) says that no assistant turn is open
	// after input item i, so decoding may resume there.
	open, close int
	ends        []int
	count       []int
	closed      []bool
	// reused is how many of req.Messages were taken from the layout this one was decoded
	// from (DecodeNext), 0 for a whole decode; dropped is how many of that layout's wire
	// messages were not.
	reused, dropped int
	// extended is set by the one DecodeNext that continues this layout's request exactly
	// (every message kept, new ones after): that call appends to the arrays of req.Messages,
	// ends and count in place (nothing reads past their lengths), so a growing conversation
	// costs what its new messages cost; any other continuation copies, but the one a caller
	// gives this layout up to (DecodeNextOwned), which may overwrite the messages from
	// base on, and the wire messages' ends and counts from ebase on.
	extended atomic.Bool
	// base: the first base messages of req.Messages's array may be read by other layouts
	// (this one's ancestors, which it extended in place); the rest is this layout's own.
	// ebase is the same for the arrays ends, count and closed (counted in wire messages).
	base, ebase int
}

// Reused returns how many leading messages of the request were taken as they were from the
// previous layout's request (0 when the body was decoded whole).
func (l *Layout) Reused() int { return l.reused }

// Request returns the decoded request. It must not be modified.
func (l *Layout) Request() *chat.Request { return l.req }

// Dropped returns how many of the previous layout's wire messages (as sent: an Anthropic
// message may decode to several) the body did not keep: 0 when it continued every one, 1
// when the last changed (Claude Code moves its cache_control breakpoint off it). It is 0 for
// a body decoded whole (see Reused).
func (l *Layout) Dropped() int { return l.dropped }

// Body returns the body the layout describes.
func (l *Layout) Body() []byte { return l.body }

// EndsLike reports whether body ends as the layout's body does after its messages array (the
// top-level fields that follow it). DecodeNext reuses the decoding of those fields only for
// such a body (it decodes them anew otherwise), and a caller choosing among layouts prefers
// these: another conversation of the same agent, whose system prompt or tools follow its
// messages, ends otherwise.
func (l *Layout) EndsLike(body []byte) bool {
	return bytes.HasSuffix(bytes.TrimSpace(body), l.body[l.close:])
}

// Size is the memory the layout keeps alive, roughly: its body.
func (l *Layout) Size() int { return len(l.body) }

// DecodeLayout decodes a body in format f, as Decode does, and returns its layout (OpenAI,
// Anthropic and Responses bodies; bare message arrays and a string input have none).
func DecodeLayout(f Format, body []byte) (*chat.Request, *Layout, error) {
	body = bytes.TrimSpace(body)
	var counts []int
	var lay *itemsLayout
	var req *chat.Request
	var err error
	switch f {
	case Anthropic:
		req, err = decodeAnthropic(body, &counts)
	case OpenAI:
		req, err = DecodeOpenAI(body)
		if err == nil {
			for i := range len(req.System) + len(req.Messages) {
				counts = append(counts, i+1)
			}
		}
	case Responses:
		lay = &itemsLayout{}
		req, err = decodeResponses(body, lay)
		counts = lay.counts
	case Gemini:
		lay = &itemsLayout{}
		req, err = decodeGemini(body, lay)
		counts = lay.counts
	default:
		req, err = Decode(f, body)
		return req, nil, err
	}
	if err != nil || len(body) == 0 || body[0] != '{' {
		return req, nil, err
	}
	open, close, ok := arrayMember(body, messagesKey(f))
	if !ok {
		return req, nil, nil
	}
	l := &Layout{format: f, body: body, req: req, open: open, close: close, count: counts}
	if lay != nil {
		l.closed = lay.closed
	}
	arr := body[open : close+1]
	ok = scanMembers(arr, '[', ']', func(i int) (int, bool) {
		e, ok := valueEnd(arr, i)
		if ok {
			l.ends = append(l.ends, open+e)
		}
		return e, ok
	})
	if !ok || len(l.ends) != len(l.count) {
		return req, nil, nil
	}
	return req, l, nil
}

// messagesKey is the member holding the history in format f's bodies.
func messagesKey(f Format) string {
	switch f {
	case Responses:
		return "input"
	case Gemini:
		return "contents"
	}
	return "messages"
}

// arrayMember finds the member key of a valid top-level JSON object, an array, and returns
// the offsets of its brackets.
func arrayMember(body []byte, key string) (open, close int, ok bool) {
	open, close = -1, -1
	seen := false
	walked := scanMembers(body, '{', '}', func(i int) (int, bool) {
		if body[i] != '"' {
			return 0, false
		}
		ke, ok := stringEnd(body, i)
		if !ok {
			return 0, false
		}
		k, ok := unquote(body[i:ke])
		if !ok {
			return 0, false
		}
		if i = skipSpace(body, ke); i >= len(body) || body[i] != ':' {
			return 0, false
		}
		i = skipSpace(body, i+1)
		ve, ok := valueEnd(body, i)
		if ok && k == key {
			if seen || body[i] != '[' {
				return 0, false // a repeated key or not an array: no layout
			}
			seen, open, close = true, i, ve-1
		}
		return ve, ok
	})
	return open, close, walked && seen
}

// DecodeNext decodes body, a later body of the conversation prev describes, reusing prev's
// decoding of what the two share. prev may be nil. The result equals Decode's; its messages
// share memory with prev's request (never modify either).
func DecodeNext(f Format, body []byte, prev *Layout) (*chat.Request, *Layout, error) {
	return DecodeNextOwned(f, body, prev, nil)
}

// DecodeNextOwned is DecodeNext for a caller that may give prev up. Once the body is known
// to keep reused of prev's messages and to drop dropped of its wire messages (Layout.Reused
// and Dropped of the result), and before any message is decoded, own is called (at most
// once, never for a body decoded whole). If it returns true, the caller guarantees that
// nothing reads prev, nor its request, ever again (a cache replacing prev with the result,
// no one else holding either), and the messages of prev's request that the body changed are
// overwritten in place rather than every kept message copied (and so are the offsets and
// counts of its wire messages): Claude Code moves its cache_control breakpoint off the
// previous last message on every request, which made every request copy the whole decoded
// history. Messages other layouts may still read (those prev shares with the layout it
// extended) are never overwritten. A nil own gives nothing up (DecodeNext).
func DecodeNextOwned(f Format, body []byte, prev *Layout, own func(reused, dropped int) bool) (*chat.Request, *Layout, error) {
	return DecodeNextShared(f, body, prev, 0, own)
}

// DecodeNextShared is DecodeNextOwned for a caller that has already compared the first
// shared bytes of body with prev.Body() and found them equal (a proxy compares a body with
// the one it expects to continue while the body arrives): the comparison resumes there
// instead of starting over, which at a megabyte of history is the largest cost left of a
// decode. shared beyond either body's length, or with body starting with white space (which
// Body does not keep), is ignored. A shared that overstates what the caller compared breaks
// the result's equality with Decode's.
func DecodeNextShared(f Format, body []byte, prev *Layout, shared int, own func(reused, dropped int) bool) (*chat.Request, *Layout, error) {
	if prev == nil || prev.format != f || (f != OpenAI && f != Anthropic && f != Responses && f != Gemini) {
		return DecodeLayout(f, body)
	}
	trimmed := bytes.TrimSpace(body)
	if shared < 0 || shared > min(len(trimmed), len(prev.body)) || len(trimmed) > 0 && &trimmed[0] != &body[0] {
		shared = 0
	}
	req, l, ok := decodeNext(f, trimmed, prev, shared, own)
	if !ok {
		return DecodeLayout(f, body)
	}
	return req, l, nil
}

func decodeNext(f Format, body []byte, prev *Layout, shared int, own func(reused, dropped int) bool) (*chat.Request, *Layout, bool) {
	pb := prev.body
	common := shared + SharedPrefix(body[shared:], pb[shared:])
	if common <= prev.open {
		return nil, nil, false
	}
	// k: the wire messages wholly inside the shared prefix.
	k := sort.SearchInts(prev.ends, common+1)
	if f == Responses || f == Gemini {
		// Resume only where no assistant turn is open: a later item (a function call after
		// a message) may join the turn before it, a function response answer a model turn.
		for k > 0 && !prev.closed[k-1] {
			k--
		}
	}
	cut := prev.open + 1
	kept := 0
	if k > 0 {
		cut, kept = prev.ends[k-1], prev.count[k-1]
	}
	nsys := 0
	switch f {
	case OpenAI:
		nsys = len(prev.req.System)
		if kept < nsys {
			return nil, nil, false // the leading system messages changed: decode whole
		}
	case Responses:
		// The leading system and developer items (the instructions field aside) are the
		// request's System after the instructions; at least one message after them must be
		// kept, so that no new item can join them.
		nsys = len(prev.req.System)
		if nsys > 0 && prev.req.System[0].Extra[markInstructions] != nil {
			nsys--
		}
		if kept <= nsys {
			return nil, nil, false
		}
	}
	// The new wire messages: [","] value ("," value)* from cut to the closing bracket.
	var raws [][]byte
	var ends []int
	i := skipSpace(body, cut)
	if k > 0 && i < len(body) && body[i] != ']' {
		if body[i] != ',' {
			return nil, nil, false
		}
		if i = skipSpace(body, i+1); i >= len(body) || body[i] == ']' {
			return nil, nil, false
		}
	}
	for i < len(body) && body[i] != ']' {
		e, ok := valueEnd(body, i)
		if !ok || !validJSON(body[i:e]) {
			return nil, nil, false
		}
		raws = append(raws, body[i:e])
		ends = append(ends, e)
		if i = skipSpace(body, e); i < len(body) && body[i] == ',' {
			if i = skipSpace(body, i+1); i >= len(body) || body[i] == ']' {
				return nil, nil, false
			}
		} else if i < len(body) && body[i] != ']' {
			return nil, nil, false
		}
	}
	if i >= len(body) {
		return nil, nil, false
	}
	closeAt := i
	out := *prev.req
	if !bytes.Equal(body[closeAt:], pb[prev.close:]) {
		// The fields after the messages changed (Codex CLI's client_metadata does on every
		// request): they are decoded from the body without its messages, and the messages
		// are reused as before.
		top, ok := topFields(f, body, prev.open, closeAt)
		if !ok {
			return nil, nil, false
		}
		out = *top
		out.System = append(top.System[:len(top.System):len(top.System)], prev.req.System[len(prev.req.System)-nsys:]...)
	}
	var msgs []chat.Message
	l := &Layout{format: f, body: body, req: &out, open: prev.open, close: closeAt, reused: kept - nsys, dropped: len(prev.ends) - k}
	reused := kept - nsys
	switch {
	case k == len(prev.ends) && reused == len(prev.req.Messages) && prev.extended.CompareAndSwap(false, true):
		msgs, l.ends, l.count, l.closed = prev.req.Messages, append(prev.ends, ends...), prev.count, prev.closed
		l.base, l.ebase = reused, k // prev reads them on
	case own != nil && reused >= prev.base && reused < len(prev.req.Messages) && k >= prev.ebase && own(reused, l.dropped) && prev.extended.CompareAndSwap(false, true):
		// prev is given up: its messages from reused on, and its wire messages' ends and
		// counts from k on, are overwritten (append writes over them); those before
		// prev.base and prev.ebase are its ancestors', never written.
		msgs, l.base = prev.req.Messages[:reused], prev.base
		l.ends, l.count, l.ebase = append(prev.ends[:k], ends...), prev.count[:k], prev.ebase
		if f == Responses || f == Gemini {
			l.closed = prev.closed[:k]
		}
	default:
		msgs = make([]chat.Message, reused, reused+len(raws)+1)
		copy(msgs, prev.req.Messages[:reused])
	}
	if l.ends == nil {
		l.ends, l.count = append(prev.ends[:k:k], ends...), append(prev.count[:k:k], make([]int, 0, len(raws))...)
		if f == Responses || f == Gemini {
			l.closed = append(prev.closed[:k:k], make([]bool, 0, len(raws))...)
		}
	}
	if f == Responses || f == Gemini {
		items := make([]json.RawMessage, len(raws))
		for j, raw := range raws {
			items[j] = raw
		}
		lay := &itemsLayout{}
		var ms []chat.Message
		var err error
		if f == Gemini {
			ms, err = decodeGeminiContents(items, k, lay)
		} else {
			ms, err = decodeResponsesItems(items, k, lay)
		}
		if err != nil || len(lay.counts) != len(raws) {
			return nil, nil, false // the whole decode reports it, located
		}
		msgs = append(msgs, ms...)
		for j := range lay.counts {
			l.count = append(l.count, kept+lay.counts[j])
			l.closed = append(l.closed, lay.closed[j])
		}
		out.Messages = msgs
		return &out, l, true
	}
	names := &toolNames{prior: msgs}
	n := kept
	for j, raw := range raws {
		idx := k + j
		if f == OpenAI {
			m, err := decodeOpenAIMessage(idx, raw)
			if err != nil {
				return nil, nil, false // the whole decode reports it, located
			}
			if m.Role == chat.RoleSystem && n == nsys {
				return nil, nil, false // would join the leading system messages
			}
			msgs = append(msgs, m)
			n++
		} else {
			ms, err := decodeAnthropicMessage(idx, raw, names)
			if err != nil {
				return nil, nil, false
			}
			msgs = append(msgs, ms...)
			n += len(ms)
		}
		l.count = append(l.count, n)
	}
	if len(msgs) == 0 && f == Anthropic {
		msgs = nil // as decodeAnthropic gives a body without messages (FuzzDecodeNext)
	}
	out.Messages = msgs
	return &out, l, true
}

// topFields decodes the top-level fields of body in format f, whose messages array spans
// open..close (its brackets), as the body with an empty array in its place: a request with
// no messages (nor system messages from the array). It declines (false) a body whose
// messages key is repeated (Decode would take the last one) or that does not decode so.
func topFields(f Format, body []byte, open, close int) (*chat.Request, bool) {
	shell := make([]byte, 0, open+2+len(body)-close-1)
	shell = append(shell, body[:open]...)
	shell = append(shell, '[', ']')
	shell = append(shell, body[close+1:]...)
	if _, _, ok := arrayMember(shell, messagesKey(f)); !ok {
		return nil, false
	}
	r, err := Decode(f, shell)
	if err != nil || len(r.Messages) != 0 {
		return nil, false
	}
	if f == Responses && len(r.System) > 0 && r.System[len(r.System)-1].Extra[markInstructions] == nil {
		return nil, false
	}
	if f == OpenAI && len(r.System) > 0 {
		return nil, false
	}
	return r, true
}

// SharedPrefix returns the length of the longest common prefix of a and b.
func SharedPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	// Compare in chunks, large ones first (bytes.Equal is vectorized, and its per-call cost
	// dominates with small chunks over a 400 KB body), then the chunk that differs in small
	// ones, then byte by byte.
	i := 0
	for _, chunk := range [...]int{16 << 10, 256} {
		for i+chunk <= n && bytes.Equal(a[i:i+chunk], b[i:i+chunk]) {
			i += chunk
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}
