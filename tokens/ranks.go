package tokens

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"unsafe"
)

// rankTable maps the bytes of a vocabulary's tokens to their merge ranks. It replaces a
// map[string]uint32 because building that map was most of loading an encoding (200,000
// inserts, each a cache miss in a table of megabytes). The table is built once and only read
// after, so it can be a flat open-addressed array over one buffer of every token's bytes,
// filled in the order of its slots (parseRanks). BenchmarkEncoderLoad, three rounds
// alternating on a 2-core VM: 87-89 ms with the map, 39-41 with this table.
//
// Lookups (bpeCount, for every piece not yet in the piece cache) cost what a map's do: one
// hash of the key (maphash, the runtime's), then slots compared by a 16-bit tag and the
// length before the bytes. The table is kept at most half full, so a key that is not a token
// (most of the pairs bpeCount tries) is known after about two slots.
type rankTable struct {
	all   string   // every token's bytes, concatenated
	pairs []uint32 // the rank of every two-byte token, indexed by its bytes; noRank elsewhere
	slots []rankSlot
	mask  uint64
	seed  maphash.Seed
	n     int
}

// rankSlot is one entry: the token all[off:off+n] has rank rank. n is 0 in an empty slot (no
// token is empty).
type rankSlot struct {
	off  uint32
	n    uint16
	tag  uint16 // the hash's top 16 bits: most slots of other keys are passed on it alone
	rank uint32
}

// maxTokenLen bounds a token's length (rankSlot.n); tiktoken's longest are 128 bytes.
const maxTokenLen = math.MaxUint16

// get returns the rank of token s.
func (t *rankTable) get(s string) (uint32, bool) {
	h := maphash.String(t.seed, s)
	tag := uint16(h >> 48)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.n == 0 {
			return 0, false
		}
		if sl.tag == tag && int(sl.n) == len(s) && t.all[sl.off:sl.off+uint32(sl.n)] == s {
			return sl.rank, true
		}
	}
}

// pair returns the rank of the two bytes a, b as one token, or noRank. bpeCount starts by
// ranking every adjacent pair of a piece's bytes (one lookup per byte, before any merge),
// and a 256 KB array indexed by the two bytes answers them without a hash or a likely miss
// in the table's megabytes.
func (t *rankTable) pair(a, b byte) uint32 { return t.pairs[int(a)<<8|int(b)] }

// len returns the number of tokens.
func (t *rankTable) len() int { return t.n }

// insert puts slot, the token all[slot.off:][:slot.n] whose hash is h, in the table; a token
// given twice keeps its last rank, as a map's assignment would.
func (t *rankTable) insert(h uint64, slot rankSlot) {
	s := t.all[slot.off : slot.off+uint32(slot.n)]
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.n == 0 {
			*sl = slot
			t.n++
			return
		}
		if sl.tag == slot.tag && sl.n == slot.n && t.all[sl.off:sl.off+uint32(sl.n)] == s {
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
	seed := maphash.MakeSeed()
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
		buf = append(buf, make([]byte, base64.StdEncoding.DecodedLen(sp))...)
		n, err := base64.StdEncoding.Decode(buf[from:], line[:sp])
		if err != nil {
			return nil, fmt.Errorf("vocabulary token %q: %w", line[:sp], err)
		}
		buf = buf[:from+n]
		if n == 0 || n > maxTokenLen {
			return nil, fmt.Errorf("vocabulary token %q: %d bytes (1 to %d)", line[:sp], n, maxTokenLen)
		}
		if len(buf) > math.MaxUint32 {
			return nil, fmt.Errorf("vocabulary of more than %d bytes", uint32(math.MaxUint32))
		}
		rank, err := parseRank(line[sp+1:])
		if err != nil {
			return nil, fmt.Errorf("vocabulary rank %q: %w", line[sp+1:], err)
		}
		h := maphash.Bytes(seed, buf[from:])
		recs = append(recs, rec{h, rankSlot{off: uint32(from), n: uint16(n), tag: uint16(h >> 48), rank: rank}})
	}
	// buf is never written again: the table's string shares its bytes.
	t := &rankTable{all: unsafe.String(unsafe.SliceData(buf), len(buf)), seed: seed}
	// At most half full: the smallest power of two of at least two slots a token.
	size := uint64(1) << bits.Len64(uint64(max(2*len(recs)-1, 1)))
	t.slots, t.mask = make([]rankSlot, size), size-1
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
		if r.slot.n == 2 {
			t.pairs[int(buf[r.slot.off])<<8|int(buf[r.slot.off+1])] = r.slot.rank
		}
	}
	return t, nil
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
