// Package encodecache keeps what the wire encoders rendered for a conversation's last
// request, so that the next request of the conversation is encoded only where it differs:
// the proxy's per-session encode cache. Package wire encodes through it and registers its
// encoders here when it is initialized (Register); AppendOpenAI, AppendAnthropic,
// AppendResponses and AppendGemini encode with a Cache.
package encodecache

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/ctxmgr/ctxmgr/chat"
)

// A Cache keeps what AppendOpenAI, AppendAnthropic, AppendResponses or AppendGemini rendered
// in its last call (OpenAI or Anthropic messages, the Responses input items of a message,
// Gemini contents), each under a 128-bit fingerprint of every field of the neutral messages
// it was made of
// (chat.Message.HashTo, hashed by two seeded maphash functions: tens of GB/s, against the
// JSON encoding it saves). A call finds what it can reuse in two ways:
//   - by position: a group of messages at the same positions as in the last call, each the
//     same value (chat.Message.Shares: the same arrays and maps; a proxy's messages are the
//     same values request after request, and are never modified in place), is the same
//     group; nothing is hashed, so a growing conversation costs what its new messages cost.
//     When the call's messages are the last call's array, continued (a caller that passes
//     the few messages it changes as substitutes, AppendAnthropic), the groups no
//     substitute touches are not even compared, nor their ends looked for;
//   - by content, for the rest: the breakpoints a proxy moves change a message or two per
//     request, and compaction shifts positions, yet a message the conversation still holds,
//     unchanged, is not encoded again.
//
// It keeps what the last call used, and by content at most as many older renderings again
// (see byKey), so it holds about one to two requests' messages. A Cache is safe for
// concurrent use; calls that overlap encode without it.
type Cache struct {
	mu     sync.Mutex
	format string // of the last call: another format starts the cache afresh
	s1, s2 maphash.Seed
	// msgs are the messages of the last call (the slice keeps their arrays alive, so
	// Shares cannot be fooled by memory reused for other messages), fps the fingerprints
	// it computed (zero: not computed), and groups what it rendered, in order.
	msgs   []chat.Message
	fps    [][2]uint64
	groups []cachedGroup
	// subs are the last call's substitutes (AppendAnthropic): its message at
	// position k was subs[k], not msgs[k]; keys lists their positions, in order.
	subs map[int]chat.Message
	keys []int
	// encoded and hashed count the groups the last call encoded and the messages it
	// fingerprinted: what it could not reuse (Stats).
	encoded, hashed int
	// spareFps and spareGroups are the arrays of the call before the last, which the next
	// call reuses (a long conversation's are tens of KB a call).
	spareFps    [][2]uint64
	spareGroups []cachedGroup
	// byKey finds renderings by content: every group of the last call, and a bounded number
	// of older ones (it is kept across calls and rebuilt from the last call's groups when it
	// has grown to twice their number, so a call adds only what it rendered anew).
	byKey map[[2]uint64][]byte
}

// cachedGroup is the rendering of msgs[i:j] under its fingerprint key.
type cachedGroup struct {
	i, j int
	key  [2]uint64
	b    []byte
}

// New returns an empty cache.
func New() *Cache {
	return &Cache{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
}

// Stats are what a Cache's last call did.
type Stats struct {
	// Groups is how many groups it rendered (and the next call may reuse).
	Groups int
	// Encoded and Hashed are what it could not reuse: the groups it encoded and the messages
	// it fingerprinted.
	Encoded, Hashed int
}

// Stats returns what the last call did.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Groups: len(c.groups), Encoded: c.encoded, Hashed: c.hashed}
}

// A Memo is one call's view of a Cache: what the last call left, and what this one renders.
// An encoder passes the groups of one message slice to it in order. A nil Memo encodes
// everything.
type Memo struct {
	c      *Cache
	added  []cachedGroup // groups this call found by content or encoded: to add to byKey
	f      fields
	msgs   []chat.Message
	fps    [][2]uint64
	groups []cachedGroup
	subs   map[int]chat.Message // this call's substitutes (see Memo.eff)
	keys   []int                // their positions, in order
	// continues: msgs is the last call's array, as long or longer, so its first
	// len(c.msgs) messages are the last call's (arrays are never modified).
	continues bool

	encoded, hashed int
}

// eff returns the message at position k of this call: its substitute, or msgs[k].
func (m *Memo) eff(msgs []chat.Message, k int) *chat.Message {
	if len(m.subs) > 0 {
		if s, ok := m.subs[k]; ok {
			return &s
		}
	}
	return &msgs[k]
}

// SetSubs sets this call's substitutes: the message at each position that is a key of subs is
// encoded as its value instead. subs must not be modified until the next call.
func (m *Memo) SetSubs(subs map[int]chat.Message) {
	m.subs, m.keys = subs, nil
	for k := range subs {
		m.keys = append(m.keys, k)
	}
	slices.Sort(m.keys)
}

// GroupEnd returns the end of the group that begins with msgs[i] for this call's messages
// (its substitutes in place): endOf(n, at, i) for n messages, message k being at(k). Where
// msgs continues the last call's array, a group of the last call that ended before its last
// message, with no substitute in it or at its end, now or then, ends where it ended, and
// endOf is not called.
func (m *Memo) GroupEnd(msgs []chat.Message, i int, endOf func(n int, at func(int) *chat.Message, i int) int) int {
	plain := func(k int) *chat.Message { return &msgs[k] }
	if m == nil {
		return endOf(len(msgs), plain, i)
	}
	if m.msgs == nil {
		m.start(msgs)
	}
	c := m.c
	if g := len(m.groups); m.continues && g < len(c.groups) && c.groups[g].i == i {
		if j := c.groups[g].j; j < len(c.msgs) && !touches(m.keys, i, j+1) && !touches(c.keys, i, j+1) {
			return j
		}
	}
	if len(m.keys) == 0 {
		return endOf(len(msgs), plain, i)
	}
	return endOf(len(msgs), func(k int) *chat.Message { return m.eff(msgs, k) }, i)
}

// Effective returns msgs[i:j] as this call encodes them: with their substitutes, in a copy,
// when any has one.
func (m *Memo) Effective(msgs []chat.Message, i, j int) []chat.Message {
	if m == nil || !touches(m.keys, i, j) {
		return msgs[i:j]
	}
	out := slices.Clone(msgs[i:j])
	for k := range out {
		if s, ok := m.subs[i+k]; ok {
			out[k] = s
		}
	}
	return out
}

// touches reports whether a position of keys (in order; a request's few substitutes) is in
// [i, j).
func touches(keys []int, i, j int) bool {
	for _, k := range keys {
		if k >= j {
			return false
		}
		if k >= i {
			return true
		}
	}
	return false
}

// prevEff returns the message at position k of the last call (k < len(c.msgs)).
func (c *Cache) prevEff(k int) *chat.Message {
	if len(c.subs) > 0 {
		if s, ok := c.subs[k]; ok {
			return &s
		}
	}
	return &c.msgs[k]
}

// Begin starts a call encoding in format: it returns nil (encode everything) when c is nil or
// another call holds it. Each Begin is followed by End.
func (c *Cache) Begin(format string) *Memo {
	if c == nil || !c.mu.TryLock() {
		return nil
	}
	if c.format != format {
		c.format, c.msgs, c.fps, c.groups, c.byKey = format, nil, nil, nil, nil
	}
	groups := c.spareGroups[:0]
	if cap(groups) < len(c.groups)+8 {
		groups = make([]cachedGroup, 0, (len(c.groups)+8)*5/4)
	}
	c.spareGroups = nil
	return &Memo{c: c, groups: groups}
}

// End ends the call m began (Begin): what it rendered is what the next call finds.
func (c *Cache) End(m *Memo) {
	if m == nil {
		return
	}
	if m.msgs != nil {
		c.spareFps, c.spareGroups = c.fps, c.groups
		c.msgs, c.fps, c.groups, c.subs, c.keys = m.msgs, m.fps, m.groups, m.subs, m.keys
		if c.byKey == nil || len(c.byKey) > 2*len(m.groups)+64 {
			c.byKey = make(map[[2]uint64][]byte, len(m.groups)+len(m.groups)/2)
			m.added = m.groups
		}
		for _, g := range m.added {
			c.byKey[g.key] = g.b
		}
	}
	c.encoded, c.hashed = m.encoded, m.hashed
	c.mu.Unlock()
}

// fields collects what chat.Message.HashTo writes, to hash it in one pass per seed (the
// writes are many and small: hashing each as it comes cost several times more).
type fields struct{ buf []byte }

func (f *fields) Write(p []byte) (int, error) {
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// Group returns the encoding of the group (an OpenAI or Anthropic message, a Responses
// segment, a Gemini content) made of msgs[i:j]: the one the last call made for the same
// messages, or what encode makes. A call passes the groups of one msgs slice in order.
func (m *Memo) Group(msgs []chat.Message, i, j int, encode func() ([]byte, error)) ([]byte, error) {
	if m == nil {
		return encode()
	}
	if m.msgs == nil {
		m.start(msgs)
	}
	c := m.c
	if g := len(m.groups); g < len(c.groups) && c.groups[g].i == i && c.groups[g].j == j && j <= len(c.msgs) {
		// The same array, where no substitute is or was: the same messages.
		same := m.continues && !touches(m.keys, i, j) && !touches(c.keys, i, j)
		if !same {
			same = true
			for k := i; k < j && same; k++ {
				same = m.eff(msgs, k).Shares(c.prevEff(k))
			}
		}
		if same {
			cg := c.groups[g]
			copy(m.fps[i:j], c.fps[i:j])
			m.groups = append(m.groups, cg)
			return cg.b, nil
		}
	}
	m.f.buf = m.f.buf[:0]
	for k := i; k < j; k++ {
		fp := m.fingerprint(msgs, k)
		m.f.buf = binary.LittleEndian.AppendUint64(m.f.buf, fp[0])
		m.f.buf = binary.LittleEndian.AppendUint64(m.f.buf, fp[1])
	}
	key := [2]uint64{maphash.Bytes(c.s1, m.f.buf), maphash.Bytes(c.s2, m.f.buf)}
	b, ok := c.byKey[key]
	if !ok {
		var err error
		if b, err = encode(); err != nil {
			return nil, err
		}
		m.encoded++
	}
	g := cachedGroup{i: i, j: j, key: key, b: b}
	m.groups = append(m.groups, g)
	m.added = append(m.added, g)
	return b, nil
}

// start begins the call's view of msgs, the slice every group of the call is in.
func (m *Memo) start(msgs []chat.Message) {
	m.msgs, m.fps = msgs, m.c.spareFps[:0]
	m.c.spareFps = nil
	if cap(m.fps) < len(msgs) {
		m.fps = make([][2]uint64, len(msgs))
	}
	m.fps = m.fps[:len(msgs)]
	clear(m.fps) // zero: not computed
	m.continues = len(m.c.msgs) > 0 && len(msgs) >= len(m.c.msgs) && &msgs[0] == &m.c.msgs[0]
}

// fingerprint returns the fingerprint of msgs[k]: the last call's for a message at the same
// position that shares its storage, computed otherwise. It uses m.f.buf past what the caller
// wrote, and leaves that as it was.
func (m *Memo) fingerprint(msgs []chat.Message, k int) [2]uint64 {
	c := m.c
	if k < len(c.msgs) && k < len(c.fps) && c.fps[k] != ([2]uint64{}) && m.eff(msgs, k).Shares(c.prevEff(k)) {
		m.fps[k] = c.fps[k]
		return m.fps[k]
	}
	if m.fps[k] == ([2]uint64{}) {
		n := len(m.f.buf)
		m.eff(msgs, k).HashTo(&m.f)
		h := m.f.buf[n:]
		m.fps[k] = [2]uint64{maphash.Bytes(c.s1, h), maphash.Bytes(c.s2, h)}
		m.f.buf = m.f.buf[:n]
		m.hashed++
	}
	return m.fps[k]
}

// Substituted returns msgs with the message at each position that is a key of subs replaced
// by its value (positions outside msgs are ignored): msgs itself when subs is empty, else a
// copy. It is what AppendAnthropic encodes.
func Substituted(msgs []chat.Message, subs map[int]chat.Message) []chat.Message {
	if len(subs) == 0 {
		return msgs
	}
	out := slices.Clone(msgs)
	for k, m := range subs {
		if k >= 0 && k < len(out) {
			out[k] = m
		}
	}
	return out
}
