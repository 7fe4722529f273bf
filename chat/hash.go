package chat

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"unsafe"
)

// Hash is a content hash of a message: equal messages have equal hashes. Token counts are
// cached by it.
type Hash [32]byte

// Hash returns the SHA-256 of every field of the message, each tagged and length-prefixed so
// that no two different messages write the same bytes; map entries are written in key order.
// It hashes the fields directly rather than a JSON encoding because it runs for every message
// of every request: encoding a 100K-token history to JSON first cost several times the hash.
// Raw JSON values are hashed as bytes, so two spellings of the same JSON hash differently,
// which only costs a cache miss.
func (m *Message) Hash() Hash {
	h := sha256.New()
	w := hashWriter{h: h}
	m.writeFields(&w)
	var out Hash
	h.Sum(out[:0])
	return out
}

// HashTo writes every field of the message to h as Hash does (tagged, length-prefixed, map
// entries in key order), for a caller that wants another hash function: a fast
// non-cryptographic one to recognize messages it has already processed, say.
func (m *Message) HashTo(h io.Writer) {
	w := hashWriter{h: h}
	m.writeFields(&w)
}

func (m *Message) writeFields(w *hashWriter) {
	w.str('R', string(m.Role))
	w.str('N', m.Name)
	w.num('C', len(m.Content))
	for i := range m.Content {
		p := &m.Content[i]
		w.str('y', string(p.Type))
		w.str('t', p.Text)
		if im := p.Image; im != nil {
			w.num('I', 1)
			w.str('u', im.URL)
			w.str('m', im.MediaType)
			w.str('d', im.Data)
			w.str('D', im.Detail)
			w.num('w', im.Width)
			w.num('h', im.Height)
		}
		if f := p.File; f != nil {
			w.num('F', 1)
			w.str('i', f.ID)
			w.str('n', f.Name)
			w.str('u', f.URL)
			w.str('m', f.MediaType)
			w.str('d', f.Data)
		}
		w.str('s', p.Signature)
		w.str('r', p.Redacted)
		w.raw('o', p.Raw)
		w.extra(p.Extra)
	}
	w.num('K', len(m.ToolCalls))
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		w.str('i', tc.ID)
		w.str('n', tc.Name)
		w.str('a', tc.Arguments)
		w.extra(tc.Extra)
	}
	w.str('T', m.ToolCallID)
	w.flag('E', m.IsError)
	w.num('M', len(m.Meta))
	if len(m.Meta) == 1 { // the common case, without sorting (which allocates)
		for k, v := range m.Meta {
			w.str('k', k)
			w.str('v', v)
		}
	} else {
		for _, k := range slices.Sorted(maps.Keys(m.Meta)) {
			w.str('k', k)
			w.str('v', m.Meta[k])
		}
	}
	w.str('W', m.Wire)
	w.str('w', m.WireRole)
	w.num('S', int(m.Shape))
	w.flag('J', m.JoinPrev)
	w.extra(m.Extra)
}

type hashWriter struct {
	h   io.Writer
	buf [9]byte
}

func (w *hashWriter) num(tag byte, n int) {
	w.buf[0] = tag
	binary.LittleEndian.PutUint64(w.buf[1:], uint64(n))
	w.h.Write(w.buf[:])
}

func (w *hashWriter) flag(tag byte, b bool) {
	n := 0
	if b {
		n = 1
	}
	w.num(tag, n)
}

func (w *hashWriter) str(tag byte, s string) {
	w.num(tag, len(s))
	// The hash neither keeps nor changes what it is given, so the string's bytes are
	// written without a copy (tool results can be megabytes).
	w.h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
}

func (w *hashWriter) raw(tag byte, b []byte) {
	w.num(tag, len(b))
	w.h.Write(b)
}

func (w *hashWriter) extra(m map[string]json.RawMessage) {
	w.num('X', len(m))
	if len(m) == 1 {
		for k, v := range m {
			w.str('k', k)
			w.raw('v', v)
		}
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		w.str('k', k)
		w.raw('v', m[k])
	}
}
