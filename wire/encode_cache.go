package wire

import (
	"encoding/binary"
	"hash/maphash"
	"sync"

	"github.com/ctxmgr/ctxmgr/chat"
)

// An EncodeCache keeps what EncodeAnthropicCached or EncodeResponsesCached rendered in its
// last call (Anthropic messages, the Responses input items of a message), each by a 128-bit
// fingerprint of every field of the neutral messages it was made of
// (chat.Message.HashTo, hashed by two seeded maphash functions: tens of GB/s, against the
// JSON encoding it saves). The cache is by content, not by position: the breakpoints a proxy
// moves change a message or two per request, and compaction shifts positions, yet a message
// the conversation still holds, unchanged, is not encoded again. It keeps only what the last
// call used, so it holds about one request's messages.
//
// An EncodeCache is safe for concurrent use; calls that overlap encode without it.
type EncodeCache struct {
	mu     sync.Mutex
	format Format // of the last call: another format starts the cache afresh
	s1, s2 maphash.Seed
	last   map[[2]uint64][]byte
	// msgs are the messages of the last call and fps their fingerprints (the slice keeps
	// their arrays alive, so Shares cannot be fooled by memory reused for other messages).
	msgs []chat.Message
	fps  [][2]uint64
}

// NewEncodeCache returns an empty cache.
func NewEncodeCache() *EncodeCache {
	return &EncodeCache{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
}

// encodeMemo is one call's view of the cache: what the last call left, and what this one
// uses. A nil memo encodes everything.
type encodeMemo struct {
	c    *EncodeCache
	last map[[2]uint64][]byte
	used map[[2]uint64][]byte
	f    fields
	msgs []chat.Message
	fps  [][2]uint64
}

func (c *EncodeCache) begin(f Format) *encodeMemo {
	if c == nil || !c.mu.TryLock() {
		return nil
	}
	if c.format != f {
		c.format, c.last, c.msgs, c.fps = f, nil, nil, nil
	}
	return &encodeMemo{c: c, last: c.last, used: make(map[[2]uint64][]byte, len(c.last)+8)}
}

func (c *EncodeCache) end(m *encodeMemo) {
	if m == nil {
		return
	}
	c.last = m.used
	if m.fps != nil {
		c.msgs, c.fps = m.msgs, m.fps
	}
	c.mu.Unlock()
}

// fields collects what chat.Message.HashTo writes, to hash it in one pass per seed (the
// writes are many and small: hashing each as it comes cost several times more).
type fields struct{ buf []byte }

func (f *fields) Write(p []byte) (int, error) {
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// group returns the encoding of the Anthropic message made of msgs[i:j]: the one the last
// call made for the same messages, or what encode makes.
func (m *encodeMemo) group(msgs []chat.Message, i, j int, encode func() ([]byte, error)) ([]byte, error) {
	if m == nil {
		return encode()
	}
	if m.fps == nil {
		m.fingerprints(msgs)
	}
	m.f.buf = m.f.buf[:0]
	for _, fp := range m.fps[i:j] {
		m.f.buf = binary.LittleEndian.AppendUint64(m.f.buf, fp[0])
		m.f.buf = binary.LittleEndian.AppendUint64(m.f.buf, fp[1])
	}
	k := [2]uint64{maphash.Bytes(m.c.s1, m.f.buf), maphash.Bytes(m.c.s2, m.f.buf)}
	if b, ok := m.last[k]; ok {
		m.used[k] = b
		return b, nil
	}
	b, err := encode()
	if err == nil {
		m.used[k] = b
	}
	return b, err
}

// fingerprints sets m.fps to the fingerprint of each of msgs: taken from the last call for a
// message at the same position that shares its storage (chat.Message.Shares: the proxy's
// messages are the same values request after request, so a growing conversation hashes only
// its new messages), computed otherwise.
func (m *encodeMemo) fingerprints(msgs []chat.Message) {
	m.fps = make([][2]uint64, len(msgs))
	prev, prevFP := m.c.msgs, m.c.fps
	for i := range msgs {
		if i < len(prev) && i < len(prevFP) && msgs[i].Shares(&prev[i]) {
			m.fps[i] = prevFP[i]
			continue
		}
		m.f.buf = m.f.buf[:0]
		msgs[i].HashTo(&m.f)
		m.fps[i] = [2]uint64{maphash.Bytes(m.c.s1, m.f.buf), maphash.Bytes(m.c.s2, m.f.buf)}
	}
	m.msgs = msgs
}
