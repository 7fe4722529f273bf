package tokens

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// pieceCache maps pre-tokenized pieces of at most maxCachedPiece bytes to their token counts,
// for counters on any number of goroutines. Counting text whose words were seen before is
// mostly looking its pieces up here: in the proxy's handler on real agent runs, half of
// counting a new tool output was the lookup, when it was a map behind sync.RWMutex shards
// (two atomic adds, two hashes and a key behind a pointer per piece, on cache lines the
// request's megabyte of body had evicted).
//
// So it is an open-addressing table whose slots hold their key inline, each slot written
// once. Writers take mu, fill an empty slot's key words, then its meta word; a reader that
// loads a filled meta word sees the key words stored before it (sync/atomic orders them), so
// readers take no lock, and a filled slot never changes. A table half full is replaced by
// one twice as large, its pieces copied, up to pieceSlotsMax; at that size the new table
// starts empty (text repeats its words: the common ones are back at once). A reader still
// holding the old table reads it safely: nothing writes it again.
type pieceCache struct {
	seed [6]uint64 // random per cache: which pieces collide cannot be chosen (hash)
	tab  atomic.Pointer[pieceTable]
	mu   sync.Mutex // serializes writers
}

const (
	pieceSlotsMin = 1 << 12
	pieceSlotsMax = 1 << 17 // 64K pieces at most (half full), 5 MB
)

type pieceTable struct {
	slots []pieceSlot // a power of two
	used  int         // filled slots; under pieceCache.mu
}

// pieceSlot is one entry: meta is 0 while empty, else the hash's upper 32 bits, the count
// (bits 8-31), a filled bit (7) and the piece's length (bits 0-6); key holds the piece's
// bytes, little-endian, zero-padded.
type pieceSlot struct {
	meta atomic.Uint64
	key  [maxCachedPiece / 8]atomic.Uint64
}

const (
	pieceFilled    = 1 << 7
	pieceCountMask = 0xFFFFFF << 8
)

// pieceKey is a piece as its slot stores it.
type pieceKey [maxCachedPiece / 8]uint64

// pack sets k to the key of p (at most maxCachedPiece bytes): its bytes little-endian in
// words, zero-padded. In place: a key returned by value was copied in 16-byte moves from
// the 8-byte stores that made it, which the processor cannot forward (a fifth of warm
// counting stalled there).
func (k *pieceKey) pack(p string) {
	*k = pieceKey{}
	w := 0
	for len(p) >= 8 {
		k[w] = load64(p)
		p = p[8:]
		w++
	}
	if len(p) > 0 {
		k[w] = loadShort(p)
	}
}

// loadShort is p, of fewer than 8 bytes, little-endian in a word, zero-padded.
func loadShort(p string) uint64 {
	if n := len(p); n >= 4 { // two loads that overlap: the bytes they share are the same
		return load32(p) | load32(p[n-4:])<<(8*(n-4))
	} else if n > 0 {
		return uint64(p[0]) | uint64(p[n/2])<<(8*(n/2)) | uint64(p[n-1])<<(8*(n-1))
	}
	return 0
}

// load64 is the first 8 bytes of p, little-endian (one load).
func load64(p string) uint64 {
	_ = p[7]
	return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
		uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
}

// load32 is the first 4 bytes of p, little-endian (one load).
func load32(p string) uint64 {
	_ = p[3]
	return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24
}

// piece is the key of a piece of n bytes, as a string again.
func (k *pieceKey) piece(n int) string {
	var b [maxCachedPiece]byte
	for i := range k {
		binary.LittleEndian.PutUint64(b[i*8:], k[i])
	}
	return string(b[:n])
}

func (c *pieceCache) init() {
	for i := range c.seed {
		c.seed[i] = rand.Uint64()
	}
	c.tab.Store(&pieceTable{slots: make([]pieceSlot, pieceSlotsMin)})
}

// find returns the slot of p in t: its meta word if filled, else 0 and the empty slot where
// p would go. The table always has an empty slot (it is replaced when half full).
func (t *pieceTable) find(h uint64, p string, k *pieceKey) (uint64, *pieceSlot) {
	mask := uint64(len(t.slots) - 1)
	want := h&^0xFFFFFFFF | pieceFilled | uint64(len(p))
	words := (len(p) + 7) / 8
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		m := s.meta.Load()
		if m == 0 {
			return 0, s
		}
		if m&^pieceCountMask != want {
			continue
		}
		same := true
		for w := 0; w < words; w++ {
			if s.key[w].Load() != k[w] {
				same = false
				break
			}
		}
		if same {
			return m, s
		}
	}
}

// hash is the hash of a piece of n bytes packed in k: wyhash's multiply-and-fold over the
// key words, which a lookup packs anyway, and the length, with the cache's random seeds; one
// fold for a piece of at most 8 bytes. It costs less than hashing the bytes again
// (maphash.String), which would be a noticeable part of counting. TestPieceHashSpreads checks
// that it spreads look-alike pieces.
func (c *pieceCache) hash(k *pieceKey, n int) uint64 {
	if n <= 8 { // most pieces: their other words are 0
		return fold(k[0]^c.seed[0], c.seed[1]^uint64(n))
	}
	a := fold(k[0]^c.seed[0], k[1]^c.seed[1])
	b := fold(k[2]^c.seed[2], k[3]^c.seed[3]^uint64(n))
	return fold(a^c.seed[4], b^c.seed[5])
}

func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func (c *pieceCache) get(p string) (int, bool) {
	var k pieceKey
	k.pack(p)
	h := c.hash(&k, len(p))
	m, _ := c.tab.Load().find(h, p, &k)
	return int(m & pieceCountMask >> 8), m != 0
}

func (c *pieceCache) put(p string, n int) {
	var k pieceKey
	k.pack(p)
	h := c.hash(&k, len(p))
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tab.Load()
	m, s := t.find(h, p, &k)
	if m != 0 {
		return
	}
	if (t.used+1)*2 <= len(t.slots) {
		t.fill(s, h, len(p), n, &k)
		return
	}
	nt := c.next(t)
	_, s = nt.find(h, p, &k)
	nt.fill(s, h, len(p), n, &k)
	c.tab.Store(nt) // after its slots: a reader that loads it sees them
}

// fill writes an empty slot: the key words first, then the meta word that publishes them.
func (t *pieceTable) fill(s *pieceSlot, h uint64, size, n int, k *pieceKey) {
	for w := range k {
		s.key[w].Store(k[w])
	}
	s.meta.Store(h&^0xFFFFFFFF | uint64(n)<<8&pieceCountMask | pieceFilled | uint64(size))
	t.used++
}

// next is the table that replaces t when a piece would fill it past half: twice as large with t's pieces,
// or empty at the largest size. Called with c.mu held.
func (c *pieceCache) next(t *pieceTable) *pieceTable {
	if len(t.slots) >= pieceSlotsMax {
		return &pieceTable{slots: make([]pieceSlot, len(t.slots))}
	}
	nt := &pieceTable{slots: make([]pieceSlot, 2*len(t.slots))}
	for i := range t.slots {
		m := t.slots[i].meta.Load()
		if m == 0 {
			continue
		}
		var k pieceKey
		for w := range k {
			k[w] = t.slots[i].key[w].Load()
		}
		size := int(m & 0x7F)
		h := c.hash(&k, size)
		_, s := nt.find(h, k.piece(size), &k)
		nt.fill(s, h, size, int(m&pieceCountMask>>8), &k)
	}
	return nt
}
