package tokens

import (
	"unicode"
	"unicode/utf8"
)

// Pre-tokenization: before byte-pair merging, tiktoken splits text into pieces with one
// regular expression per encoding, and merges never cross a piece boundary. The library does
// this with a backtracking regexp engine over a []rune copy of the text, which is almost all of
// its encoding time (about 97% in profiles). The splitters below produce exactly the same
// pieces by hand; TestSplitMatchesRegexp and FuzzSplit compare them with the library's own
// pattern, compiled by the same engine, on arbitrary text.
//
// o200k_base:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// cl100k_base:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
//	|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Each alternative is matched the way a backtracking engine does: leftmost alternative first,
// greedy quantifiers giving back characters until the rest matches.

// splitter calls fn with each piece of valid UTF-8 text s, in order; the pieces concatenate
// to s.
type splitter func(s string, fn func(piece string))

// Character classes, computed once per rune.
const (
	clsLetter  = 1 << iota // \p{L}
	clsNumber              // \p{N}
	clsSpace               // \s
	clsUpper               // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clsLower               // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	clsNewline             // \r or \n
)

// asciiClass holds the classes of the ASCII characters.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = classOf(r)
	}
	return t
}()

func classOf(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= clsLetter
	}
	if unicode.IsNumber(r) {
		c |= clsNumber
	}
	if isRegexSpace(r) {
		c |= clsSpace
	}
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clsUpper
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clsLower
	}
	if r == '\r' || r == '\n' {
		c |= clsNewline
	}
	return c
}

// isRegexSpace is \s as the library's regexp engine (github.com/dlclark/regexp2, .NET
// syntax) defines it: the Unicode separators plus \t, \n, \v, \f, \r and U+0085.
func isRegexSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', 0x85:
		return true
	}
	return r > 0x7f && unicode.Is(unicode.Z, r) || r == ' '
}

// classAt returns the classes of the rune at s[i] (0 past the end) and its size.
func classAt(s string, i int) (uint8, int) {
	if i < len(s) && s[i] < utf8.RuneSelf {
		return asciiClass[s[i]], 1
	}
	return classOfRune(s, i)
}

// classOfRune is classAt decoding the rune.
func classOfRune(s string, i int) (uint8, int) {
	if i >= len(s) {
		return 0, 0
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOf(r), n
}

// runOf returns the end of the run of runes from i that all have one of the classes in want.
func runOf(s string, i int, want uint8) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf { // classAt, inlined for ASCII
			if asciiClass[b]&want == 0 {
				break
			}
			i++
			continue
		}
		c, n := classOfRune(s, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// contraction returns the length of a (?i:'s|'t|'re|'ve|'m|'ll|'d) match at s[i], or 0.
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return 0
	}
	return contractionAt(s, i)
}

// contractionAt is contraction at an apostrophe.
func contractionAt(s string, i int) int {
	lower := func(j int) rune {
		if j >= len(s) {
			return -1
		}
		r, _ := utf8.DecodeRuneInString(s[j:])
		return unicode.ToLower(r)
	}
	switch lower(i + 1) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return 3
		}
	}
	return 0
}

// prefixLen is the size of a [^\r\n\p{L}\p{N}] rune at s[i], or 0.
func prefixLen(s string, i int) int {
	c, n := classAt(s, i)
	if n == 0 || c&(clsLetter|clsNumber|clsNewline) != 0 {
		return 0
	}
	return n
}

// spaceAlternatives matches \s*[\r\n]+|\s+(?!\S)|\s+ at s[i], a space.
func spaceAlternatives(s string, i int) int {
	end := runOf(s, i, clsSpace)
	// \s*[\r\n]+: up to just after the last newline of the run.
	lastNL := -1
	for j := i; j < end; j++ {
		if s[j] == '\r' || s[j] == '\n' {
			lastNL = j
		}
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S): the whole run at the end of the text, else all but its last rune.
	if end == len(s) {
		return end
	}
	_, last := utf8.DecodeLastRuneInString(s[:end])
	if end-last > i {
		return end - last
	}
	return end // \s+
}

// punctuation matches ` ?[^\s\p{L}\p{N}]+` followed by runes of class tail, at s[i]; 0 when
// it does not match.
func punctuation(s string, i int, tail func(r rune) bool) int {
	j := i
	if s[j] == ' ' {
		if c, _ := classAt(s, j+1); c&(clsSpace|clsLetter|clsNumber) == 0 && j+1 < len(s) {
			j++
		}
	}
	start := j
	for j < len(s) {
		c, n := classAt(s, j)
		if c&(clsSpace|clsLetter|clsNumber) != 0 {
			break
		}
		j += n
	}
	if j == start {
		return 0
	}
	for j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		if !tail(r) {
			break
		}
		j += n
	}
	return j
}

func digits(s string, i int) int {
	j := i
	for k := 0; k < 3 && j < len(s); k++ {
		c, n := classAt(s, j)
		if c&clsNumber == 0 {
			break
		}
		j += n
	}
	return j
}

// splitO200k is the o200k_base splitter.
func splitO200k(s string, fn func(string)) {
	for i := 0; i < len(s); {
		end := o200kPiece(s, i)
		fn(s[i:end])
		i = end
	}
}

func o200kPiece(s string, i int) int {
	if end, ok := o200kASCII(s, i); ok {
		return end
	}
	// The engine tries alternative 1 with the optional prefix, then without, then
	// alternative 2 likewise (a mark can be the prefix or part of the letters).
	p := prefixLen(s, i)
	for _, start := range [2]int{i + p, i} {
		if end := o200kAlt1(s, start); end > 0 {
			return end + contraction(s, end)
		}
		if p == 0 {
			break
		}
	}
	for _, start := range [2]int{i + p, i} {
		if upEnd := runOf(s, start, clsUpper); upEnd > start { // [UP]+[LO]*
			end := runOf(s, upEnd, clsLower)
			return end + contraction(s, end)
		}
		if p == 0 {
			break
		}
	}
	return otherPiece(s, i, func(r rune) bool { return r == '\r' || r == '\n' || r == '/' })
}

// o200kASCII is o200kPiece where the piece is decided by ASCII bytes alone: the same
// alternatives in the same order, each class a table lookup. It reports false as soon as it
// would have to classify a byte that is not ASCII (a letter, number or space may go on
// there), and o200kPiece then takes the general path from the start. An agent's tool
// output is mostly ASCII, and calling classAt for each of its bytes was a third of
// counting it.
func o200kASCII(s string, i int) (int, bool) {
	c := s[i]
	if c >= utf8.RuneSelf {
		return 0, false
	}
	cls := asciiClass[c]
	// [^\r\n\p{L}\p{N}]?[UP]*[LO]+ and [^\r\n\p{L}\p{N}]?[UP]+[LO]*: in ASCII no rune is both,
	// so the longest UP run then the LO run after it; retrying without the prefix cannot
	// match, the prefix being no letter.
	start := i
	if cls&(clsLetter|clsNumber|clsNewline) == 0 {
		start = i + 1
	}
	j := start
	for j < len(s) && s[j] < utf8.RuneSelf && asciiClass[s[j]]&clsUpper != 0 {
		j++
	}
	for j < len(s) && s[j] < utf8.RuneSelf && asciiClass[s[j]]&clsLower != 0 {
		j++
	}
	if j < len(s) && s[j] >= utf8.RuneSelf {
		return 0, false
	}
	if j > start {
		return j + contraction(s, j), true
	}
	return otherASCII(s, i, true)
}

// cl100kASCII is o200kASCII for cl100k_base: a contraction, then
// [^\r\n\p{L}\p{N}]?\p{L}+, then the alternatives both patterns end with.
func cl100kASCII(s string, i int) (int, bool) {
	c := s[i]
	if c >= utf8.RuneSelf {
		return 0, false
	}
	if c == '\'' {
		if n := contractionAt(s, i); n > 0 {
			return i + n, true
		}
	}
	start := i
	if asciiClass[c]&(clsLetter|clsNumber|clsNewline) == 0 {
		start = i + 1
	}
	j := start
	for j < len(s) && s[j] < utf8.RuneSelf && asciiClass[s[j]]&clsLetter != 0 {
		j++
	}
	if j < len(s) && s[j] >= utf8.RuneSelf {
		return 0, false
	}
	if j > start {
		return j, true
	}
	return otherASCII(s, i, false)
}

// otherASCII is otherPiece for ASCII, after the letter alternatives failed at s[i] (which
// is ASCII): \p{N}{1,3}| ?[^\s\p{L}\p{N}]+<tail>*|\s*[\r\n]+|\s+(?!\S)|\s+, the tail
// [\r\n/] when slash, else [\r\n]. Like o200kASCII it reports false where a byte that is
// not ASCII would decide.
func otherASCII(s string, i int, slash bool) (int, bool) {
	const nonWord = clsSpace | clsLetter | clsNumber
	c := s[i]
	cls := asciiClass[c]
	switch {
	case cls&clsNumber != 0: // \p{N}{1,3}
		j := i + 1
		for n := 1; n < 3 && j < len(s); n++ {
			if s[j] >= utf8.RuneSelf {
				return 0, false
			}
			if asciiClass[s[j]]&clsNumber == 0 {
				break
			}
			j++
		}
		return j, true
	case cls&clsSpace == 0 || c == ' ' && i+1 < len(s) && s[i+1] < utf8.RuneSelf && asciiClass[s[i+1]]&nonWord == 0:
		// ` ?[^\s\p{L}\p{N}]+<tail>*` (where the byte after a space or tab is not ASCII, the
		// caller has handed over: its letter loop stopped there)
		j := i + 1 // the space, or the first of the run
		for j < len(s) && s[j] < utf8.RuneSelf && asciiClass[s[j]]&nonWord == 0 {
			j++
		}
		if j < len(s) && s[j] >= utf8.RuneSelf {
			return 0, false
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n' || slash && s[j] == '/') {
			j++
		}
		return j, true
	}
	// \s*[\r\n]+|\s+(?!\S)|\s+
	lastNL := -1
	j := i
	for ; j < len(s) && s[j] < utf8.RuneSelf && asciiClass[s[j]]&clsSpace != 0; j++ {
		if s[j] == '\r' || s[j] == '\n' {
			lastNL = j
		}
	}
	if j < len(s) && s[j] >= utf8.RuneSelf {
		return 0, false
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1, true
	case j == len(s) || j-1 == i:
		return j, true
	}
	return j - 1, true
}

// otherPiece matches the alternatives both patterns end with, at s[i]:
// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+<tail>*|\s*[\r\n]+|\s+(?!\S)|\s+
func otherPiece(s string, i int, tail func(r rune) bool) int {
	c, n := classAt(s, i)
	if c&clsNumber != 0 {
		return digits(s, i)
	}
	if end := punctuation(s, i, tail); end > 0 {
		return end
	}
	if c&clsSpace != 0 {
		return spaceAlternatives(s, i)
	}
	return i + n // not reached: every rune belongs to some alternative
}

// o200kAlt1 matches [UP]*[LO]+ at start and returns its end, or 0: the longest UP run, then
// an LO run, giving back UP runes until one of them is LO.
func o200kAlt1(s string, start int) int {
	upEnd := runOf(s, start, clsUpper)
	if c, _ := classAt(s, upEnd); c&clsLower != 0 {
		return runOf(s, upEnd, clsLower)
	}
	for j := upEnd; j > start; {
		_, n := utf8.DecodeLastRuneInString(s[start:j])
		j -= n
		if c, _ := classAt(s, j); c&clsLower != 0 {
			return j + n // the runes after it are not LO: the LO run is this rune
		}
	}
	return 0
}

// splitCL100k is the cl100k_base splitter.
func splitCL100k(s string, fn func(string)) {
	for i := 0; i < len(s); {
		end := cl100kPiece(s, i)
		fn(s[i:end])
		i = end
	}
}

func cl100kPiece(s string, i int) int {
	if end, ok := cl100kASCII(s, i); ok {
		return end
	}
	if n := contraction(s, i); n > 0 {
		return i + n
	}
	for _, p := range [2]int{prefixLen(s, i), 0} {
		if end := runOf(s, i+p, clsLetter); end > i+p {
			return end
		}
		if p == 0 {
			break
		}
	}
	return otherPiece(s, i, func(r rune) bool { return r == '\r' || r == '\n' })
}
