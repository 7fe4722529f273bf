package chat

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"reflect"
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
	for _, k := range sortedKeys(m.Meta, &w.keys) {
		w.str('k', k)
		w.str('v', m.Meta[k])
	}
	w.str('W', m.Wire)
	w.str('w', m.WireRole)
	w.num('S', int(m.Shape))
	w.flag('J', m.JoinPrev)
	w.extra(m.Extra)
}

// HashTools returns the SHA-256 of every field of the tools, in order, tagged and
// length-prefixed as Hash does for a message: the identity of a tool list, without encoding
// it to JSON first (an agent's tool list is tens of KB, and it is counted every request).
func HashTools(tools []Tool) Hash {
	h := sha256.New()
	w := hashWriter{h: h}
	w.num('L', len(tools))
	for i := range tools {
		t := &tools[i]
		w.str('n', t.Name)
		w.str('d', t.Description)
		w.raw('p', t.Parameters)
		w.extra(t.Extra)
		w.raw('r', t.Raw)
	}
	var out Hash
	h.Sum(out[:0])
	return out
}

type hashWriter struct {
	h    io.Writer
	buf  [9]byte
	keys []string // reused by sortedKeys
}

// sortedKeys returns m's keys in order, in *buf's array (a message's maps are small, and a
// hash runs for every message of every request: sorting must not allocate each time).
func sortedKeys[V any](m map[string]V, buf *[]string) []string {
	if len(m) == 0 {
		return nil
	}
	keys := (*buf)[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	*buf = keys
	return keys
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
	for _, k := range sortedKeys(m, &w.keys) {
		w.str('k', k)
		w.raw('v', m[k])
	}
}

// Shares reports whether m and o are one message by identity: their scalar fields are equal
// and their slices and maps are the same ones (the same arrays at the same lengths, the same
// maps), not merely equal ones. A message's arrays and maps are never modified once it is
// built (a changed message is a Clone, changed), so two messages that share them have the
// same content: a caller that kept an earlier request's messages recognizes the ones it
// already processed at the cost of a few comparisons instead of a hash of their content.
// Two messages with equal content built apart do not share; that only costs the caller the
// hash it wanted to avoid.
func (m *Message) Shares(o *Message) bool {
	return m.Role == o.Role && m.Name == o.Name && m.ToolCallID == o.ToolCallID && m.IsError == o.IsError &&
		m.Wire == o.Wire && m.WireRole == o.WireRole && m.Shape == o.Shape && m.JoinPrev == o.JoinPrev &&
		sameSlice(m.Content, o.Content) && sameSlice(m.ToolCalls, o.ToolCalls) &&
		sameMap(m.Meta, o.Meta) && sameMap(m.Extra, o.Extra)
}

func sameSlice[E any](a, b []E) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func sameMap[K comparable, V any](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
