package replay

import (
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"slices"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// fp is a fingerprint of a message: everything a provider sees of it (role, name, content
// parts, tool calls, tool call id, error flag, wire extras). Equal messages have equal
// fingerprints; different ones differ but for a 2^-64 chance. It is much cheaper than
// chat.Message.Hash (no JSON encoding, no SHA-256), which matters because every prepared
// request is measured message by message.
type fp uint64

var fpSeed = maphash.MakeSeed()

func fingerprint(m *chat.Message) fp {
	var h maphash.Hash
	h.SetSeed(fpSeed)
	str := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.WriteString(s)
	}
	num := func(v int) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	extras := func(ex map[string]json.RawMessage) {
		num(len(ex))
		if len(ex) == 0 {
			return
		}
		keys := make([]string, 0, len(ex))
		for k := range ex {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			str(k)
			str(string(ex[k]))
		}
	}
	role := m.WireRole
	if role == "" {
		role = string(m.Role)
	}
	str(role)
	str(m.Name)
	num(len(m.Content))
	for i := range m.Content {
		p := &m.Content[i]
		str(string(p.Type))
		str(p.Text)
		str(p.Signature)
		str(p.Redacted)
		str(string(p.Raw))
		if p.Image != nil {
			im := p.Image
			str(im.URL)
			str(im.MediaType)
			str(im.Data)
			str(im.Detail)
			num(im.Width)
			num(im.Height)
		} else {
			num(-1)
		}
		if p.File != nil {
			f := p.File
			str(f.ID)
			str(f.Name)
			str(f.URL)
			str(f.MediaType)
			str(f.Data)
		} else {
			num(-1)
		}
		extras(p.Extra)
	}
	num(len(m.ToolCalls))
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		str(tc.ID)
		str(tc.Name)
		str(tc.Arguments)
		extras(tc.Extra)
	}
	str(m.ToolCallID)
	if m.IsError {
		num(1)
	} else {
		num(0)
	}
	extras(m.Extra)
	return fp(h.Sum64())
}

// meter measures prepared requests with the measuring counter, remembering the count of every
// message it has seen by fingerprint. One meter serves one replay of one trajectory under one
// strategy (it is not safe for concurrent use); base holds the counts of the trajectory's
// original messages, shared read-only by the meters of all strategies.
type meter struct {
	c     tokens.Counter
	base  map[fp]int
	local map[fp]int
}

func newMeter(c tokens.Counter, base map[fp]int) *meter {
	return &meter{c: c, base: base, local: make(map[fp]int)}
}

// message returns the tokens of m, whose fingerprint is f.
func (mt *meter) message(f fp, m *chat.Message) int {
	if n, ok := mt.base[f]; ok {
		return n
	}
	if n, ok := mt.local[f]; ok {
		return n
	}
	n := mt.c.Message(m)
	mt.local[f] = n
	return n
}

// measured is a prepared request as the replay measures it.
type measured struct {
	fps    []fp  // fingerprint of each message
	toks   []int // tokens of each message
	prefix int   // tokens before the first message: system prompt and tool definitions
	total  int   // prefix + messages + reply priming
	// readTool: the tool definitions include ctxmgr_read. A request whose tools differ from
	// the previous one's shares no prefix with it.
	readTool bool
}

// measure measures the messages of a request whose system prompt and tools cost prefix tokens.
func (mt *meter) measure(msgs []chat.Message, prefix int) measured {
	r := measured{fps: make([]fp, len(msgs)), toks: make([]int, len(msgs)), prefix: prefix}
	r.total = prefix + tokens.ReplyPriming
	for i := range msgs {
		r.fps[i] = fingerprint(&msgs[i])
		r.toks[i] = mt.message(r.fps[i], &msgs[i])
		r.total += r.toks[i]
	}
	return r
}

// MinCachedPrefix is the shortest prefix, in tokens, a provider's prompt cache serves
// (Anthropic and OpenAI both start at 1024).
const MinCachedPrefix = 1024

// cachedPrefix returns the tokens of cur that a prompt cache would serve after prev was
// sent: the longest common prefix of the two requests, in tokens, when it is at least
// MinCachedPrefix long, else 0. The prefix is computed message by message: the system prompt
// and tool definitions (the same throughout a run) and then the leading messages that are
// identical in both requests. A provider caches at token granularity, so a message that
// changed only at its end would still share its first tokens: the figure is a slightly
// conservative (low) estimate of the token-level common prefix.
func cachedPrefix(prev *measured, cur *measured) int {
	if prev == nil || prev.readTool != cur.readTool {
		return 0
	}
	n := cur.prefix
	for i := 0; i < len(prev.fps) && i < len(cur.fps) && prev.fps[i] == cur.fps[i]; i++ {
		n += cur.toks[i]
	}
	if n < MinCachedPrefix {
		return 0
	}
	return n
}

// roundTrip returns m after one encoding/json round trip: what a Store gives back.
func roundTrip(m chat.Message) chat.Message {
	b, err := json.Marshal(m)
	if err != nil {
		return m
	}
	var out chat.Message
	if json.Unmarshal(b, &out) != nil {
		return m
	}
	return out
}
