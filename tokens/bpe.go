package tokens

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding names.
const (
	O200kBase  = "o200k_base"
	CL100kBase = "cl100k_base"
)

// The exact counters use github.com/pkoukk/tiktoken-go with the vocabularies embedded by
// github.com/pkoukk/tiktoken-go-loader. That library keeps its vocabulary loader in a
// package-level variable; installOfflineLoader sets it once, the first time one of our
// constructors runs, so that nothing is ever downloaded. (A program that sets another loader
// itself after that would change it for us too; nothing in ctxmgr does.)
var installOfflineLoader = sync.OnceFunc(func() {
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
})

// One encoding value per encoding, built on first use (about 0.3 s and some tens of MB each)
// and shared by every counter of that encoding: the library's encoder is read-only and safe
// for concurrent use, and the piece cache is a cache of a pure function, safe for concurrent
// use, so sharing it only saves memory and warms it faster.
var encoders = map[string]func() (*encoding, error){
	O200kBase:  sync.OnceValues(func() (*encoding, error) { return loadEncoding(O200kBase, splitO200k) }),
	CL100kBase: sync.OnceValues(func() (*encoding, error) { return loadEncoding(CL100kBase, splitCL100k) }),
}

// encoding is an exact BPE encoding: the library's encoder (vocabulary and merges), our
// pre-tokenizer for its pattern, and a cache of piece counts.
type encoding struct {
	tk     *tiktoken.Tiktoken
	split  splitter
	pieces pieceCache
}

func loadEncoding(name string, split splitter) (*encoding, error) {
	installOfflineLoader()
	tk, err := tiktoken.GetEncoding(name)
	if err != nil {
		return nil, fmt.Errorf("tokens: loading %s: %w", name, err)
	}
	e := &encoding{tk: tk, split: split}
	e.pieces.init()
	return e, nil
}

// piece returns the token count of one pre-tokenized piece. Byte-pair merges never cross
// piece boundaries, and a piece alone pre-tokenizes as itself (FuzzSplit checks it), so the
// library's count of the piece alone is its count in context.
func (e *encoding) piece(p string) int {
	if len(p) > maxCachedPiece {
		return len(e.tk.EncodeOrdinary(p))
	}
	if n, ok := e.pieces.get(p); ok {
		return n
	}
	n := len(e.tk.EncodeOrdinary(p))
	e.pieces.put(p, n)
	return n
}

// count returns the token count of valid UTF-8 text.
func (e *encoding) count(s string) int {
	n := 0
	e.split(s, func(p string) { n += e.piece(p) })
	return n
}

// maxCachedPiece: longer pieces are rare and seldom repeat; they are counted every time.
const maxCachedPiece = 32

// pieceCache maps pieces to token counts. It is sharded to keep concurrent counters apart
// and bounded: a shard that fills up is emptied (text repeats its words, so the common ones
// are back at once).
type pieceCache struct {
	seed   maphash.Seed
	shards [pieceShards]struct {
		mu sync.RWMutex
		m  map[string]int32
	}
}

const (
	pieceShards     = 16
	pieceShardLimit = 1 << 12 // 64K pieces in all, a few MB
)

func (c *pieceCache) init() {
	c.seed = maphash.MakeSeed()
	for i := range c.shards {
		c.shards[i].m = make(map[string]int32, 256)
	}
}

func (c *pieceCache) get(p string) (int, bool) {
	sh := &c.shards[maphash.String(c.seed, p)%pieceShards]
	sh.mu.RLock()
	n, ok := sh.m[p]
	sh.mu.RUnlock()
	return int(n), ok
}

func (c *pieceCache) put(p string, n int) {
	sh := &c.shards[maphash.String(c.seed, p)%pieceShards]
	sh.mu.Lock()
	if len(sh.m) >= pieceShardLimit {
		clear(sh.m)
	}
	sh.m[strings.Clone(p)] = int32(n) // p may be a slice of a large text: do not pin it
	sh.mu.Unlock()
}

// Encodings lists the encodings ForEncoding accepts.
func Encodings() []string { return []string{O200kBase, CL100kBase} }

// ForEncoding returns the exact counter of an OpenAI encoding ("o200k_base" or "cl100k_base")
// with the default Options. Other names fail with ErrUnknownEncoding.
func ForEncoding(name string) (Counter, error) {
	return ForEncodingOptions(name, Options{})
}

// ForEncodingOptions is ForEncoding with Options (the image rule).
func ForEncodingOptions(name string, opts Options) (Counter, error) {
	load, ok := encoders[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownEncoding, name, strings.Join(Encodings(), ", "))
	}
	enc, err := load()
	if err != nil {
		return nil, err
	}
	c := &bpeCounter{name: name, enc: enc}
	c.f = framer{text: c.Text, opts: opts}
	return c, nil
}

// ForModel returns the exact counter of an OpenAI model's encoding (see EncodingForModel) with
// the default Options. Models without a known encoding fail with ErrUnknownModel.
func ForModel(model string) (Counter, error) {
	return ForModelOptions(model, Options{})
}

// ForModelOptions is ForModel with Options (the image rule).
func ForModelOptions(model string, opts Options) (Counter, error) {
	enc, ok := EncodingForModel(model)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, model)
	}
	return ForEncodingOptions(enc, opts)
}

// bpeCounter is the exact counter of one encoding.
type bpeCounter struct {
	name string
	enc  *encoding
	f    framer
}

func (c *bpeCounter) Name() string                      { return c.name }
func (c *bpeCounter) Message(m *chat.Message) int       { return c.f.message(m) }
func (c *bpeCounter) Tools(tools []chat.Tool) int       { return c.f.tools(tools) }
func (c *bpeCounter) Request(r *chat.Request) Breakdown { return request(c, r) }

// Text returns the exact token count of s. Special-token strings are ordinary text.
func (c *bpeCounter) Text(s string) int {
	if s == "" {
		return 0
	}
	if !utf8.ValidString(s) {
		s = replaceInvalid(s)
	}
	n := 0
	// A long run is cut into equal slices: count a slice like the one before it once (the
	// count is a function of the slice's text alone), so 20 MB of one character costs one
	// slice, not 40 000 quadratic encodings of the same 512 bytes.
	var last string
	lastN := 0
	cutLongRuns(s, maxPieceBytes, func(seg string) {
		if len(seg) == len(last) && seg == last {
			n += lastN
			return
		}
		last, lastN = seg, c.enc.count(seg)
		n += lastN
	})
	return n
}

// maxPieceBytes bounds the length of a run of one character class that is handed to the
// encoder whole. BPE merging as the library implements it is quadratic in the length of a
// pre-tokenized piece (30 000 bytes of "ab" take 4 s, a megabyte would take over an hour), and
// a piece is at most one such run plus a few bytes, so longer runs are cut into slices of this
// size and the slices are counted apart: a megabyte of the worst cases then takes about half a
// second, against a third of a second for a megabyte of ordinary text. Natural text has no
// such runs (the golden file has none, its longest is far shorter); base64 blobs of zeros,
// separator lines and space padding do. A cut only prevents merges across it, so the sliced
// count errs high, by at most about a token a slice (under 1%; exact for runs of spaces,
// newlines, "=" or CJK): the tests check letters, punctuation, spaces, newlines, CJK and
// random letters against an independent heap-based BPE.
const maxPieceBytes = 512

const classNumber = 2

// runClass is the character class that pre-tokenization never splits within a run.
func runClass(r rune) uint8 {
	switch {
	case r < utf8.RuneSelf:
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			return 1
		case r >= '0' && r <= '9':
			return classNumber
		case r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f':
			return 3
		}
		return 4
	case unicode.IsLetter(r) || unicode.IsMark(r):
		return 1
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return 3
	}
	return 4
}

// cutLongRuns calls fn with consecutive slices of s whose concatenation is s: s whole unless it
// has a run of one class longer than limit bytes, in which case such runs are cut every limit
// bytes (at rune boundaries). It returns the number of cuts.
func cutLongRuns(s string, limit int, fn func(string)) int {
	if len(s) <= limit {
		fn(s)
		return 0
	}
	cuts := 0
	start := 0    // start of the current slice
	runStart := 0 // start of the current run, or of its part after the last cut
	var cls uint8
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		c := runClass(r)
		if c != cls || c == classNumber {
			// Numbers are pre-tokenized in groups of at most three digits: never cut.
			cls, runStart = c, i
		} else if i-runStart >= limit {
			fn(s[start:i])
			cuts++
			start, runStart = i, i
		}
		i += size
	}
	fn(s[start:])
	return cuts
}

// replaceInvalid replaces each byte of s that is not part of valid UTF-8 by U+FFFD, as the
// library does (it converts the text to runes), without a rune slice four times the size of
// s.
func replaceInvalid(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
