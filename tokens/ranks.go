package tokens

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"unsafe"
)

// rankTable maps the bytes of a vocabulary's tokens to their merge ranks. It replaces a
// map[string]uint32 because building that map was most of loading an encoding (200,000
// inserts, each a cache miss in a table of megabytes). The table is built once and only read
// after, so it can be a flat open-addressed array over one buffer of every token's bytes,
// filled in the order of its slots (parseRanks), so that building it walks memory once
// (BenchmarkEncoderLoad).
//
// Lookups (bpeCount, for every piece not yet in the piece cache) are what counting text
// never seen before waits on: the table is megabytes, so the first slot a lookup reads is a
// cache miss. A slot holds its token's first 8 bytes, so a token of at most 8 bytes (nine
// lookups in ten that find one, on the golden texts) is compared in that one slot, where
// comparing it in the shared buffer was a second miss. The table is kept at most half full,
// so a key that is not a token (a third of the lookups) is known after about two slots.
type rankTable struct {
	all   string   // every token's bytes, concatenated
	pairs []uint32 // the rank of every two-byte token, indexed by its bytes; noRank elsewhere
	slots []rankSlot
	mask  uint64
	seed  [4]uint64 // random per table: which keys collide cannot be chosen
	n     int
}

// rankSlot is one entry, 16 bytes: the token of at&0xFF bytes at all[at>>8:] has rank rank.
// at is 0 in an empty slot (no token is empty).
type rankSlot struct {
	head uint64 // the token's first 8 bytes, little-endian, zero-padded (loadHead)
	at   uint32
	rank uint32
}

// The limits rankSlot.at sets: tiktoken's longest tokens are 128 bytes, and its largest
// vocabulary (o200k_base) is 1.4 MB of token bytes.
const (
	maxTokenLen   = 0xFF
	maxVocabBytes = 1 << 24
)

// loadHead is the first 8 bytes of s (all of them when fewer), little-endian, zero-padded.
func loadHead(s string) uint64 {
	if len(s) >= 8 {
		return load64(s)
	}
	return loadShort(s)
}

// hash is the hash of s, whose head is head: wyhash's multiply-and-fold over its words and
// its length, one fold for a key of at most 8 bytes.
func (t *rankTable) hash(head uint64, s string) uint64 {
	h := fold(head^t.seed[0], uint64(len(s))^t.seed[1])
	if len(s) <= 8 {
		return h
	}
	for s = s[8:]; len(s) >= 8; s = s[8:] {
		h = fold(h^load64(s), t.seed[2])
	}
	return fold(h^loadShort(s), t.seed[3])
}

// rank returns the rank of token s, noRank if s is not a token.
func (t *rankTable) rank(s string) uint32 {
	if len(s) == 0 || len(s) > maxTokenLen {
		return noRank
	}
	head := loadHead(s)
	n := uint32(len(s))
	for i := t.hash(head, s) & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.at&0xFF == n && sl.head == head && (n <= 8 || t.all[sl.at>>8+8:sl.at>>8+n] == s[8:]) {
			runtime.KeepAlive(t) // the slots may be mapped memory its cleanup releases
			return sl.rank
		}
		if sl.at == 0 {
			runtime.KeepAlive(t)
			return noRank
		}
	}
}

// hugePage is the size of the pages newSlots asks for: x86-64's and arm64's usual
// transparent huge page.
const hugePage = 2 << 20

// newSlots returns n empty slots for t. A table of megabytes goes in memory backed by huge
// pages where the system has them (mapHuge): every lookup reads a slot at random, and in 4 KB
// pages most of those reads would also miss the TLB (BenchmarkCountCold). The mapping is released
// when t is unreachable (rank keeps t reachable until it has read its last slot).
func (t *rankTable) newSlots(n int) []rankSlot {
	size := n * int(unsafe.Sizeof(rankSlot{}))
	if size >= hugePage {
		if mem, mapping := mapHuge(size); mem != nil {
			runtime.AddCleanup(t, unmap, mapping)
			return unsafe.Slice((*rankSlot)(unsafe.Pointer(unsafe.SliceData(mem))), n)
		}
	}
	return make([]rankSlot, n)
}

// pair returns the rank of the two bytes a, b as one token, or noRank. bpeCount starts by
// ranking every adjacent pair of a piece's bytes (one lookup per byte, before any merge),
// and a 256 KB array indexed by the two bytes answers them without a hash or a likely miss
// in the table's megabytes.
func (t *rankTable) pair(a, b byte) uint32 { return t.pairs[int(a)<<8|int(b)] }

// len returns the number of tokens.
func (t *rankTable) len() int { return t.n }

// insert puts slot, whose hash is h, in the table; a token given twice keeps its last rank,
// as a map's assignment would.
func (t *rankTable) insert(h uint64, slot rankSlot) {
	n := slot.at & 0xFF
	tail := t.all[slot.at>>8+min(n, 8) : slot.at>>8+n]
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.at == 0 {
			*sl = slot
			t.n++
			return
		}
		if sl.at&0xFF == n && sl.head == slot.head && t.all[sl.at>>8+min(n, 8):sl.at>>8+n] == tail {
			sl.rank = slot.rank
			return
		}
	}
}

// parseRanks reads a .tiktoken file: one "<base64 token> <rank>" a line. The tokens are
// decoded into one buffer, which the table's slots index.
func parseRanks(data []byte) (*rankTable, error) {
	// rec is a token's slot with the hash it was read with.
	type rec struct {
		h    uint64
		slot rankSlot
	}
	recs := make([]rec, 0, bytes.Count(data, []byte{'\n'})+1)
	buf := make([]byte, 0, len(data)*3/4)
	t := &rankTable{}
	for i := range t.seed {
		t.seed[i] = rand.Uint64()
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) == 0 {
			continue
		}
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("malformed vocabulary line %q", line)
		}
		from := len(buf)
		var err error
		buf, err = appendBase64(buf, line[:sp])
		if err != nil {
			return nil, fmt.Errorf("vocabulary token %q: %w", line[:sp], err)
		}
		n := len(buf) - from
		if n == 0 || n > maxTokenLen {
			return nil, fmt.Errorf("vocabulary token %q: %d bytes (1 to %d)", line[:sp], n, maxTokenLen)
		}
		if from >= maxVocabBytes {
			return nil, fmt.Errorf("vocabulary of more than %d bytes", maxVocabBytes)
		}
		rank, err := parseRank(line[sp+1:])
		if err != nil {
			return nil, fmt.Errorf("vocabulary rank %q: %w", line[sp+1:], err)
		}
		tok := unsafe.String(unsafe.SliceData(buf[from:]), n) // a view, while buf still grows
		head := loadHead(tok)
		recs = append(recs, rec{t.hash(head, tok), rankSlot{head: head, at: uint32(from)<<8 | uint32(n), rank: rank}})
	}
	// buf is never written again: the table's string shares its bytes.
	t.all = unsafe.String(unsafe.SliceData(buf), len(buf))
	// At most half full: the smallest power of two of at least two slots a token.
	size := uint64(1) << bits.Len64(uint64(max(2*len(recs)-1, 1)))
	t.slots, t.mask = t.newSlots(int(size)), size-1
	// The tokens go in in the order of their first slots (a counting sort on the slot's top
	// bits), so that the inserts walk the table from its start to its end: inserted in file
	// order, each insert was a cache miss, and building the table took most of loading.
	// A token given twice stays in file order (the sort is stable), so its last rank wins.
	const bucketBits = 12
	shift := max(bits.Len64(t.mask)-bucketBits, 0)
	var starts [1<<bucketBits + 1]int32
	for i := range recs {
		starts[(recs[i].h&t.mask)>>shift+1]++
	}
	for b := 1; b < len(starts); b++ {
		starts[b] += starts[b-1]
	}
	sorted := make([]rec, len(recs))
	for _, r := range recs {
		b := (r.h & t.mask) >> shift
		sorted[starts[b]] = r
		starts[b]++
	}
	for i := range sorted {
		t.insert(sorted[i].h, sorted[i].slot)
	}
	t.pairs = make([]uint32, 1<<16)
	for i := range t.pairs {
		t.pairs[i] = noRank
	}
	for _, r := range recs { // in file order: a pair given twice keeps its last rank
		if r.slot.at&0xFF == 2 {
			t.pairs[r.slot.head&0xFF<<8|r.slot.head>>8] = r.slot.rank
		}
	}
	return t, nil
}

// base64Bits maps each character of the standard base64 alphabet to its 6 bits, and every
// other byte to 0xFF.
var base64Bits = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	for i, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") {
		t[c] = byte(i)
	}
	return t
}()

var errBase64 = errors.New("not padded standard base64")

// appendBase64 appends what src, padded standard base64, encodes to dst. It is what
// base64.StdEncoding.Decode does for a .tiktoken token, by hand because the library's
// per-call overhead on 200,000 tokens of a few bytes is a large part of loading a vocabulary
// (BenchmarkEncoderLoad); TestRankTable checks every token against it.
func appendBase64(dst, src []byte) ([]byte, error) {
	if len(src) == 0 || len(src)%4 != 0 {
		return dst, errBase64
	}
	for len(src) > 0 {
		pad := 0
		if len(src) == 4 {
			switch {
			case src[2] == '=' && src[3] == '=':
				pad = 2
			case src[3] == '=':
				pad = 1
			}
		}
		a, b, c, d := base64Bits[src[0]], base64Bits[src[1]], base64Bits[src[2]], base64Bits[src[3]]
		switch pad {
		case 2:
			c, d = 0, 0
		case 1:
			d = 0
		}
		if (a|b|c|d)&0xC0 != 0 {
			return dst, errBase64
		}
		dst = append(dst, a<<2|b>>4, b<<4|c>>2, c<<6|d)
		dst = dst[:len(dst)-pad]
		src = src[4:]
	}
	return dst, nil
}

var errRank = errors.New("not a rank: decimal digits, below 2^32 - 1")

// parseRank parses a rank: decimal digits, at most noRank-1 (noRank marks a pair that is not
// a token).
func parseRank(b []byte) (uint32, error) {
	if len(b) == 0 || len(b) > 10 {
		return 0, errRank
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errRank
		}
		v = v*10 + uint64(c-'0')
	}
	if v >= noRank {
		return 0, errRank
	}
	return uint32(v), nil
}
