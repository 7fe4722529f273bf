package tokens

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The library's pre-tokenization patterns (github.com/pkoukk/tiktoken-go encoding.go),
// compiled by the engine the library uses: the reference the splitters must reproduce.
var refPatterns = map[string]string{
	O200kBase: strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|"),
	CL100kBase: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
}

var splitters = map[string]splitter{O200kBase: splitO200k, CL100kBase: splitCL100k}

// refSplit splits s as the library does: regexp2 over runes, pieces cut from the runes.
func refSplit(t testing.TB, re *regexp2.Regexp, s string) []string {
	runes := []rune(s)
	var out []string
	m, err := re.FindStringMatch(s)
	for m != nil && err == nil {
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
		m, err = re.FindNextMatch(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func checkSplit(t testing.TB, name string, re *regexp2.Regexp, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		if r := replaceInvalid(s); r != string([]rune(s)) {
			t.Fatalf("replaceInvalid(%q) = %q, want %q", s, r, string([]rune(s)))
		}
		s = replaceInvalid(s) // as Text does
	}
	want := refSplit(t, re, s)
	var got []string
	splitters[name](s, func(p string) { got = append(got, p) })
	if strings.Join(want, "") != s {
		// The engine skipped text no alternative matches: impossible for these patterns.
		t.Fatalf("%s: the reference split of %q loses text: %q", name, s, want)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %q splits into %q, want %q", name, s, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %q splits into %q, want %q", name, s, got, want)
		}
		// A piece alone is one piece: what lets the counter count pieces apart.
		if alone := refSplit(t, re, got[i]); len(alone) != 1 {
			t.Fatalf("%s: piece %q of %q splits alone into %q", name, got[i], s, alone)
		}
	}
}

func compileRef(t testing.TB) map[string]*regexp2.Regexp {
	out := map[string]*regexp2.Regexp{}
	for name, pat := range refPatterns {
		re, err := regexp2.Compile(pat, regexp2.None)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = re
	}
	return out
}

var splitCases = []string{
	"", "hello", "Hello world", "HELLO World's", "I'm here, you're there; they'll've.", "DON'T", "it'S", "'s",
	"x'sy", "camelCaseWord", "XMLHttpRequest", "iPhone", "ÉCOLE école", "straße", "ǅemal", "ʰʲ", "ab\u0301c", "\u0301abc",
	" \u0301A", "(\u0301Ab", "\u0301\u0301", "Ⅻ", "12345678", "١٢٣٤", "3.14159", "a1b2", "  ", "   x", "\t\tx", "x   ",
	"\n", "\r\n\r\n", "  \n  \n  x", " \n", "a\n\nb", "foo  bar", "foo \u00a0bar", "\u00a0\u00a0x", "\u2028x", "\u0085x", "\u200bx",
	"\u3000x", "\v\fx", "!!!", " !!!\n\n", "a/b//c", " //\n/", "path/to/file.go:12:3", "<div class=\"x\">", "--flag=value",
	"你好，世界", "こんにちは世界", "한국어 텍스트", "emoji 🌍👩‍💻 ok", "🌍🌍", " 🌍", "$ git commit -m 'fix: x'", "tab\tsep\tcols",
	"line1\r\nline2\rline3", "___init___", "a'", "a'b", "'LL", "'Ve", "'RE", "Ǆ", "ᾈᾉ", "ǅǅa", "Aǅ", "aǅ", "ǅ",
	"\x00\x01\x7f", "\ufeffBOM", "ﬁle", "ᴬᴮ", "x\u0345y", "Ⓐⓑ", "①②", "½¼", "x²", "०१२",
	"ab\xffcd", "\xe2\x82", "\xf0\x9f\x98", "x\xc0\xafy", "\xff\xfe\xfd",
}

func TestSplitMatchesRegexp(t *testing.T) {
	refs := compileRef(t)
	for name, re := range refs {
		for _, s := range splitCases {
			checkSplit(t, name, re, s)
		}
		for _, g := range loadGoldenTexts(t) {
			checkSplit(t, name, re, g)
		}
	}
}

// FuzzSplit: on arbitrary text the splitters give the library's pieces.
func FuzzSplit(f *testing.F) {
	for _, s := range splitCases {
		f.Add(s)
	}
	refs := compileRef(f)
	f.Fuzz(func(t *testing.T, s string) {
		for name, re := range refs {
			checkSplit(t, name, re, s)
		}
	})
}

// loadGoldenTexts returns the texts of the golden file (../testdata/golden).
func loadGoldenTexts(tb testing.TB) []string {
	tb.Helper()
	path := filepath.Join("..", "testdata", "golden", "token-counts.jsonl")
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var g struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(line, &g); err != nil {
			tb.Fatal(err)
		}
		out = append(out, g.Text)
	}
	return out
}

// BenchmarkCountCold counts the golden corpus with an empty piece cache on every iteration:
// the speed on text never seen before (BenchmarkEncode measures the warm cache).
func BenchmarkCountCold(b *testing.B) {
	input := strings.Join(loadGoldenTexts(b), "")
	enc, err := encoders[O200kBase]()
	if err != nil {
		b.Fatal(err)
	}
	want := len(library(b, O200kBase).EncodeOrdinary(input))
	b.SetBytes(int64(len(input)))
	for b.Loop() {
		e := &encoding{ranks: enc.ranks, split: splitO200k}
		e.pieces.init()
		if n := e.count(input); n != want {
			b.Fatalf("%d tokens, want %d", n, want)
		}
	}
}

// TestCountsMatchLibrary: on the split cases, invalid UTF-8 included, Text gives exactly the
// library's count.
func TestCountsMatchLibrary(t *testing.T) {
	for _, name := range Encodings() {
		c, err := ForEncoding(name)
		if err != nil {
			t.Fatal(err)
		}
		lib := library(t, name)
		for _, s := range splitCases {
			if got, want := c.Text(s), len(lib.EncodeOrdinary(s)); got != want {
				t.Errorf("%s: Text(%q) = %d, the library counts %d", name, s, got, want)
			}
		}
	}
}

// FuzzLongRuns: mayHaveLongRun never says no where cutRuns cuts, at any limit, so that
// cutLongRuns cuts exactly where scanning every rune does. The text is built from runs of
// runes of each class (ASCII and not, numbers too) whose lengths the input chooses.
func FuzzLongRuns(f *testing.F) {
	f.Add([]byte{9, 0, 40, 1, 3, 2}, uint8(8))
	f.Add([]byte{200, 7, 13, 8, 255, 1}, uint8(16))
	f.Add([]byte{17, 9, 17, 10, 17, 11}, uint8(1))
	f.Add([]byte{63, 4, 33, 5, 65, 6}, uint8(32))
	f.Add([]byte{1, 5, 9, 0}, uint8(7))        // a run of 9 from byte 1, limit 8: one sample in it at a step of 8
	f.Add([]byte{1, 1, 2, 6, 9, 7}, uint8(15)) // the same in two- and three-byte runes
	runes := []string{"a", "Z", "1", " ", "\n", ".", "é", "中", "٣", "\u00a0", "\u3000", "\t", "ß", "🙂"}
	f.Fuzz(func(t *testing.T, spec []byte, lim uint8) {
		limit := int(lim%64) + 1
		var sb strings.Builder
		for i := 0; i+1 < len(spec); i += 2 {
			sb.WriteString(strings.Repeat(runes[int(spec[i+1])%len(runes)], int(spec[i])))
		}
		s := sb.String()
		var whole, quick []string
		cuts := cutRuns(s, limit, func(p string) { whole = append(whole, p) })
		cutLongRuns(s, limit, func(p string) { quick = append(quick, p) })
		if cuts > 0 && !mayHaveLongRun(s, limit) {
			t.Fatalf("limit %d: %d cuts in %q, but mayHaveLongRun says none", limit, cuts, s)
		}
		if len(s) > limit && !slices.Equal(whole, quick) {
			t.Fatalf("limit %d: cutLongRuns gives %q, cutRuns %q", limit, quick, whole)
		}
	})
}

// TestSplitMostlyASCII: strings drawn from the characters where o200kASCII decides or hands
// over (each ASCII class, the apostrophe of contractions, '/', and a few non-ASCII letters,
// marks, numbers and spaces next to them) split as the library's pattern splits them.
func TestSplitMostlyASCII(t *testing.T) {
	refs := compileRef(t)
	alphabet := []string{"a", "z", "A", "Q", "0", "7", "1234", "'s", "'LL", " ", " ", "\t", "\n", "\r", "\v", "\f", ".", "(", "'", "s", "t", "l", "/",
		"é", "É", "\u0301", "٣", "\u00a0", "\u3000", "中", "ſ", "\u212a"}
	r := rand.New(rand.NewPCG(3, 4))
	n := 4000
	if testing.Short() {
		n = 500
	}
	for range n {
		var sb strings.Builder
		for k := r.IntN(24) + 1; k > 0; k-- {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		for name, re := range refs {
			checkSplit(t, name, re, sb.String())
		}
	}
}
