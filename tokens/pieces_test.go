package tokens

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// TestPieceCacheGrowsAndResets: counts put are got back exactly, across the table's growth
// and its reset at the largest size, and a piece never put is a miss.
func TestPieceCacheGrowsAndResets(t *testing.T) {
	var c pieceCache
	c.init()
	piece := func(i int) string { return fmt.Sprintf("p%d-%s", i, "abcdefghijklmnopqrstuvwxyz"[:i%26]) }
	const n = pieceSlotsMax/2 + 1000 // enough to grow to the largest size, fill it and start over
	for i := 0; i < n; i++ {
		p := piece(i)
		if len(p) > maxCachedPiece {
			p = p[:maxCachedPiece]
		}
		c.put(p, i%33)
		if got, ok := c.get(p); !ok || got != i%33 {
			t.Fatalf("piece %d %q: got %d, %v right after putting %d", i, p, got, ok, i%33)
		}
	}
	if got := len(c.tab.Load().slots); got != pieceSlotsMax {
		t.Fatalf("table of %d slots after %d pieces, want the largest, %d", got, n, pieceSlotsMax)
	}
	if used := c.tab.Load().used; used >= n {
		t.Fatalf("%d pieces held after %d put: the table was never emptied at its largest size", used, n)
	}
	// The pieces put since the last reset are all there, with their counts; one that differs
	// from a held one only in its last byte, or in its length, is not.
	held := 0
	for i := 0; i < n; i++ {
		p := piece(i)
		if len(p) > maxCachedPiece {
			p = p[:maxCachedPiece]
		}
		if got, ok := c.get(p); ok {
			held++
			if got != i%33 {
				t.Fatalf("piece %q: count %d, want %d", p, got, i%33)
			}
		}
	}
	if held != c.tab.Load().used {
		t.Fatalf("%d pieces found, the table holds %d", held, c.tab.Load().used)
	}
	for _, p := range []string{"p1-b", "p1-", "p1-a\x00", "", "never put"} {
		if n, ok := c.get(p); ok {
			t.Fatalf("%q: found with count %d, never put", p, n)
		}
	}
}

// TestPieceCacheConcurrent: counters on many goroutines share one cache while it grows and
// resets; every count equals the byte-pair merge's (run with -race: readers take no lock).
func TestPieceCacheConcurrent(t *testing.T) {
	enc, err := encoders[O200kBase]()
	if err != nil {
		t.Fatal(err)
	}
	e := &encoding{ranks: enc.ranks, split: splitO200k}
	e.pieces.init()
	words := make([]string, 20000)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range words {
		b := make([]byte, 1+r.IntN(20))
		for j := range b {
			b[j] = "abcdefghijklmnopqrstuvwxyz0123456789_"[r.IntN(37)]
		}
		words[i] = " " + string(b)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20000; i++ {
				w := words[(i*7+g*1231)%len(words)]
				if got, want := e.piece(w), e.bpeCount(w); got != want {
					t.Errorf("%q: %d tokens, the merge gives %d", w, got, want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// TestPieceHashSpreads: pieces alike in all but a few bytes (numbers, paths, the same word at
// every length, bytes anywhere in the four key words) land in a half-full table with probe
// runs as short as a random hash gives (linear probing at load 1/2: 1.5 slots a lookup on
// average). A hash that ignored a key word would pile them up (leaving out the last two
// words, it fails).
func TestPieceHashSpreads(t *testing.T) {
	var c pieceCache
	c.init()
	var pieces []string
	seen := map[string]bool{}
	add := func(p string) {
		if len(p) <= maxCachedPiece && !seen[p] {
			seen[p] = true
			pieces = append(pieces, p)
		}
	}
	for i := 0; len(pieces) < pieceSlotsMax/2-1; i++ {
		add(fmt.Sprint(i % 1000))
		add(fmt.Sprintf(" %x", i))
		add(fmt.Sprintf("pkg/mod%d/file%d.go", i%97, i))
		add(strings.Repeat("a", i%33))
		add(fmt.Sprintf("%031d", i))
		add(strings.Repeat(" ", 24) + fmt.Sprintf("%08x", i))
	}
	pieces = pieces[:pieceSlotsMax/2-1]
	for i, p := range pieces {
		c.put(p, i%7)
	}
	tab := c.tab.Load()
	if len(tab.slots) != pieceSlotsMax {
		t.Fatalf("%d slots, want %d", len(tab.slots), pieceSlotsMax)
	}
	mask := uint64(len(tab.slots) - 1)
	total := 0
	for _, p := range pieces {
		var k pieceKey
		k.pack(p)
		h := c.hash(&k, len(p))
		m, s := tab.find(h, p, &k)
		if m == 0 {
			t.Fatalf("piece %q not found", p)
		}
		at := uint64((uintptr(unsafe.Pointer(s)) - uintptr(unsafe.Pointer(&tab.slots[0]))) / unsafe.Sizeof(*s))
		total += int((at-h&mask)&mask) + 1
	}
	if mean := float64(total) / float64(len(pieces)); mean > 2 {
		t.Fatalf("%.2f slots probed a lookup on average, want about 1.5", mean)
	}
}

// TestPackPiece: every length packs as the bytes copied into a zeroed key would; a wrong
// key would make two pieces one.
func TestPackPiece(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= maxCachedPiece; n++ {
		for range 50 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			var pad [maxCachedPiece]byte
			copy(pad[:], b)
			var want pieceKey
			for w := range want {
				want[w] = binary.LittleEndian.Uint64(pad[w*8:])
			}
			got := pieceKey{1, 2, 3, 4}
			if got.pack(string(b)); got != want {
				t.Fatalf("pack(%x) = %x, want %x", b, got, want)
			}
		}
	}
}
