package wire

import (
	"hash/maphash"
	"sync"

	"github.com/ctxmgr/ctxmgr/chat"
)

// An AnthropicCache keeps the Anthropic messages EncodeAnthropicCached rendered in its last
// call, each by a 128-bit fingerprint of every field of the neutral messages it was made of
// (chat.Message.HashTo, hashed by two seeded maphash functions: tens of GB/s, against the
// JSON encoding it saves). The cache is by content, not by position: the breakpoints a proxy
// moves change a message or two per request, and compaction shifts positions, yet a message
// the conversation still holds, unchanged, is not encoded again. It keeps only what the last
// call used, so it holds about one request's messages.
//
// An AnthropicCache is safe for concurrent use; calls that overlap encode without it.
type AnthropicCache struct {
	mu     sync.Mutex
	s1, s2 maphash.Seed
	last   map[[2]uint64][]byte
}

// NewAnthropicCache returns an empty cache.
func NewAnthropicCache() *AnthropicCache {
	return &AnthropicCache{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
}

// anthropicMemo is one call's view of the cache: what the last call left, and what this one
// uses. A nil memo encodes everything.
type anthropicMemo struct {
	c    *AnthropicCache
	last map[[2]uint64][]byte
	used map[[2]uint64][]byte
	f    fields
}

func (c *AnthropicCache) begin() *anthropicMemo {
	if c == nil || !c.mu.TryLock() {
		return nil
	}
	return &anthropicMemo{c: c, last: c.last, used: make(map[[2]uint64][]byte, len(c.last)+8)}
}

func (c *AnthropicCache) end(m *anthropicMemo) {
	if m == nil {
		return
	}
	c.last = m.used
	c.mu.Unlock()
}

// fields collects what chat.Message.HashTo writes, to hash it in one pass per seed (the
// writes are many and small: hashing each as it comes cost several times more).
type fields struct{ buf []byte }

func (f *fields) Write(p []byte) (int, error) {
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// group returns the encoding of the Anthropic message of the neutral messages msgs: the one
// the last call made for the same messages, or what encode makes.
func (m *anthropicMemo) group(msgs []chat.Message, encode func() ([]byte, error)) ([]byte, error) {
	if m == nil {
		return encode()
	}
	m.f.buf = m.f.buf[:0]
	for i := range msgs {
		m.f.buf = append(m.f.buf, 0xff) // a message boundary, which no field writes
		msgs[i].HashTo(&m.f)
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
