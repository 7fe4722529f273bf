package tokens

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go-loader/assets"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Encoding names.
const (
	O200kBase  = "o200k_base"
	CL100kBase = "cl100k_base"
)

// The exact counters use the vocabularies (token bytes and merge ranks) that
// github.com/pkoukk/tiktoken-go-loader embeds, so nothing is ever downloaded, with our own
// pre-tokenizer (pretok.go) and our own byte-pair merge (bpeCount), which is tiktoken's
// algorithm: FuzzCountLibrary checks it against github.com/pkoukk/tiktoken-go on arbitrary
// text, and the golden test against an independent implementation. The library itself is
// only used by the tests: building its encoder takes hundreds of milliseconds (decoder maps,
// regular expressions, sorted tables counting never uses), where parsing the ranks takes
// tens (BenchmarkEncoderLoad; figures in docs/benchmarks.md).

// One encoding value per encoding, built on first use and shared by every counter of that
// encoding: the rank table is read-only, and the piece cache is a cache of a pure function,
// safe for concurrent use, so sharing it only saves memory and warms it faster.
var encoders = map[string]func() (*encoding, error){
	O200kBase:  sync.OnceValues(func() (*encoding, error) { return loadEncoding(O200kBase, splitO200k) }),
	CL100kBase: sync.OnceValues(func() (*encoding, error) { return loadEncoding(CL100kBase, splitCL100k) }),
}

// encoding is an exact BPE encoding: the merge ranks of its vocabulary, our pre-tokenizer for
// its pattern, and a cache of piece counts.
type encoding struct {
	ranks  *rankTable
	split  splitter
	pieces pieceCache
}

func loadEncoding(name string, split splitter) (*encoding, error) {
	data, err := assets.Assets.ReadFile(name + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("tokens: loading %s: %w", name, err)
	}
	ranks, err := parseRanks(data)
	if err != nil {
		return nil, fmt.Errorf("tokens: loading %s: %w", name, err)
	}
	e := &encoding{ranks: ranks, split: split}
	e.pieces.init()
	return e, nil
}

// noRank is the rank of a byte sequence that is not a token.
const noRank = math.MaxUint32

// bpeCount returns the number of tokens tiktoken's byte-pair merge makes of one pre-tokenized
// piece: the pair of adjacent parts with the lowest rank is merged first (the leftmost of
// equal ranks), until no adjacent pair is a token.
func (e *encoding) bpeCount(p string) int {
	if len(p) <= 1 {
		return len(p)
	}
	if e.ranks.rank(p) != noRank {
		return 1
	}
	type part struct {
		start int
		rank  uint32
	}
	var stack [64]part
	parts := stack[:0]
	minRank, minAt := uint32(noRank), -1
	for i := 0; i < len(p)-1; i++ {
		r := e.ranks.pair(p[i], p[i+1])
		if r < minRank {
			minRank, minAt = r, i
		}
		parts = append(parts, part{i, r})
	}
	parts = append(parts, part{len(p) - 1, noRank}, part{len(p), noRank})
	// pairRank is the rank of parts i and i+1 merged with i+2 (what merging at i+1 leaves).
	pairRank := func(i int) uint32 {
		if i+3 < len(parts) {
			return e.ranks.rank(p[parts[i].start:parts[i+3].start])
		}
		return noRank
	}
	for minRank != noRank {
		i := minAt
		if i > 0 {
			parts[i-1].rank = pairRank(i - 1)
		}
		parts[i].rank = pairRank(i)
		parts = append(parts[:i+1], parts[i+2:]...)
		minRank, minAt = noRank, -1
		for j := 0; j < len(parts)-1; j++ {
			if parts[j].rank < minRank {
				minRank, minAt = parts[j].rank, j
			}
		}
	}
	return len(parts) - 1
}

// piece returns the token count of one pre-tokenized piece. Byte-pair merges never cross
// piece boundaries, and a piece alone pre-tokenizes as itself (FuzzSplit checks it), so the
// count of the piece alone is its count in context.
//
// A piece of one or two bytes (a third of the golden texts' pieces) is counted without the
// cache: every byte is a token, and two bytes are one token exactly when the pair table says
// so (bpeCount would find the same).
func (e *encoding) piece(p string) int {
	switch {
	case len(p) <= 1:
		return len(p)
	case len(p) == 2:
		if e.ranks.pair(p[0], p[1]) != noRank {
			return 1
		}
		return 2
	case len(p) > maxCachedPiece:
		return e.bpeCount(p)
	}
	if n, ok := e.pieces.get(p); ok {
		return n
	}
	n := e.bpeCount(p)
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

// asciiRunClass is runClass of each ASCII character.
var asciiRunClass = func() (t [utf8.RuneSelf]uint8) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = runClass(r)
	}
	return t
}()

// cutLongRuns calls fn with consecutive slices of s whose concatenation is s: s whole unless it
// has a run of one class longer than limit bytes, in which case such runs are cut every limit
// bytes (at rune boundaries). It returns the number of cuts.
func cutLongRuns(s string, limit int, fn func(string)) int {
	if len(s) <= limit || !mayHaveLongRun(s, limit) {
		fn(s)
		return 0
	}
	return cutRuns(s, limit, fn)
}

// cutRuns is cutLongRuns scanning every rune.
func cutRuns(s string, limit int, fn func(string)) int {
	cuts := 0
	start := 0    // start of the current slice
	runStart := 0 // start of the current run, or of its part after the last cut
	var cls uint8
	for i := 0; i < len(s); {
		c, size := runClassAt(s, i)
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

// runClassAt is runClass of the rune at s[i], and its size.
func runClassAt(s string, i int) (uint8, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiRunClass[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return runClass(r), n
}

// mayHaveLongRun reports whether s may have a run that cutLongRuns cuts: false only when it
// has none. Such a run spans limit+1 bytes of one class (numbers excepted), so it covers two
// consecutive multiples of limit/2 and every rune between them; only where the runes at two
// such points share a class is the stretch between them looked at, and in text that is
// mostly a few runes. Scanning every rune of every text was a fifth of warm counting.
func mayHaveLongRun(s string, limit int) bool {
	step := max(limit/2, 1)
	prev := uint8(0)
	for m := 0; m < len(s); m += step {
		at := m
		for at > 0 && !utf8.RuneStart(s[at]) {
			at--
		}
		c, _ := runClassAt(s, at)
		if c == prev && c != classNumber && m >= step && sameClass(s, m-step, m, c) {
			return true
		}
		prev = c
	}
	return false
}

// sameClass reports whether every rune of s from the one holding byte i to the one holding
// byte j has class c.
func sameClass(s string, i, j int, c uint8) bool {
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	for i <= j && i < len(s) {
		ci, n := runClassAt(s, i)
		if ci != c {
			return false
		}
		i += n
	}
	return true
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
