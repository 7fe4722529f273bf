package wire

import (
	"encoding/binary"
	"hash/maphash"
	"sync"

	"github.com/ctxmgr/ctxmgr/chat"
)

// An EncodeCache keeps what EncodeAnthropicCached or EncodeResponsesCached rendered in its
// last call (Anthropic messages, the Responses input items of a message), each under a 128-bit
// fingerprint of every field of the neutral messages it was made of
// (chat.Message.HashTo, hashed by two seeded maphash functions: tens of GB/s, against the
// JSON encoding it saves). A call finds what it can reuse in two ways:
//   - by position: a group of messages at the same positions as in the last call, each the
//     same value (chat.Message.Shares: the same arrays and maps; a proxy's messages are the
//     same values request after request, and are never modified in place), is the same
//     group; nothing is hashed, so a growing conversation costs what its new messages cost;
//   - by content, for the rest: the breakpoints a proxy moves change a message or two per
//     request, and compaction shifts positions, yet a message the conversation still holds,
//     unchanged, is not encoded again.
//
// It keeps what the last call used, and by content at most as many older renderings again
// (see byKey), so it holds about one to two requests' messages. An EncodeCache is safe for concurrent use; calls that overlap encode without it.
type EncodeCache struct {
	mu     sync.Mutex
	format Format // of the last call: another format starts the cache afresh
	s1, s2 maphash.Seed
	// msgs are the messages of the last call (the slice keeps their arrays alive, so
	// Shares cannot be fooled by memory reused for other messages), fps the fingerprints
	// it computed (zero: not computed), and groups what it rendered, in order.
	msgs   []chat.Message
	fps    [][2]uint64
	groups []cachedGroup
	// encoded and hashed count the groups the last call encoded and the messages it
	// fingerprinted: what it could not reuse (tests read them).
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

// NewEncodeCache returns an empty cache.
func NewEncodeCache() *EncodeCache {
	return &EncodeCache{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
}

// encodeMemo is one call's view of the cache: what the last call left, and what this one
// renders. A nil memo encodes everything.
type encodeMemo struct {
	c      *EncodeCache
	added  []cachedGroup // groups this call found by content or encoded: to add to byKey
	f      fields
	msgs   []chat.Message
	fps    [][2]uint64
	groups []cachedGroup

	encoded, hashed int
}

func (c *EncodeCache) begin(f Format) *encodeMemo {
	if c == nil || !c.mu.TryLock() {
		return nil
	}
	if c.format != f {
		c.format, c.msgs, c.fps, c.groups, c.byKey = f, nil, nil, nil, nil
	}
	groups := c.spareGroups[:0]
	if cap(groups) < len(c.groups)+8 {
		groups = make([]cachedGroup, 0, (len(c.groups)+8)*5/4)
	}
	c.spareGroups = nil
	return &encodeMemo{c: c, groups: groups}
}

func (c *EncodeCache) end(m *encodeMemo) {
	if m == nil {
		return
	}
	if m.msgs != nil {
		c.spareFps, c.spareGroups = c.fps, c.groups
		c.msgs, c.fps, c.groups = m.msgs, m.fps, m.groups
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

// group returns the encoding of the Anthropic message (or Responses segment) made of
// msgs[i:j]: the one the last call made for the same messages, or what encode makes. A call
// passes the groups of one msgs slice in order.
func (m *encodeMemo) group(msgs []chat.Message, i, j int, encode func() ([]byte, error)) ([]byte, error) {
	if m == nil {
		return encode()
	}
	if m.msgs == nil {
		m.msgs, m.fps = msgs, m.c.spareFps[:0]
		m.c.spareFps = nil
		if cap(m.fps) < len(msgs) {
			m.fps = make([][2]uint64, len(msgs))
		}
		m.fps = m.fps[:len(msgs)]
		clear(m.fps) // zero: not computed
	}
	c := m.c
	if g := len(m.groups); g < len(c.groups) && c.groups[g].i == i && c.groups[g].j == j && j <= len(c.msgs) {
		same := true
		for k := i; k < j && same; k++ {
			same = msgs[k].Shares(&c.msgs[k])
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

// fingerprint returns the fingerprint of msgs[k]: the last call's for a message at the same
// position that shares its storage, computed otherwise. It uses m.f.buf past what the caller
// wrote, and leaves that as it was.
func (m *encodeMemo) fingerprint(msgs []chat.Message, k int) [2]uint64 {
	c := m.c
	if k < len(c.msgs) && k < len(c.fps) && c.fps[k] != ([2]uint64{}) && msgs[k].Shares(&c.msgs[k]) {
		m.fps[k] = c.fps[k]
		return m.fps[k]
	}
	if m.fps[k] == ([2]uint64{}) {
		n := len(m.f.buf)
		msgs[k].HashTo(&m.f)
		h := m.f.buf[n:]
		m.fps[k] = [2]uint64{maphash.Bytes(c.s1, h), maphash.Bytes(c.s2, h)}
		m.f.buf = m.f.buf[:n]
		m.hashed++
	}
	return m.fps[k]
}
