package tokens

import (
	"math"
	"unicode"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
)

// HeuristicOptions tunes the heuristic counter. Zero fields take the defaults below, which
// model a modern sub-word tokenizer (SentencePiece or byte-level BPE with a large vocabulary)
// on English text and code. The figures are not fitted to any one provider: a Calibrator
// learns the remaining per-model ratio from reported usage.
type HeuristicOptions struct {
	// Options chooses the image rule (ImagesAnthropic suits Claude) and the flat figures.
	Options

	// CharsPerToken is the divisor for words: a run of letters costs len/CharsPerToken tokens,
	// and at least one (short words are one token, long identifiers split). Default 4, the
	// usual figure for English.
	CharsPerToken float64
	// NonLatinLetterWeight is how many Latin letters a non-ASCII letter (Cyrillic, Greek,
	// Arabic, accented Latin, ...) weighs inside a word. Default 2: vocabularies hold fewer
	// and shorter pieces of those scripts.
	NonLatinLetterWeight float64
	// CJKTokensPerRune is the cost of a Han, Hangul, Hiragana or Katakana rune, or of CJK
	// punctuation. Default 1.
	CJKTokensPerRune float64
	// DigitTokens is the cost of a digit. Default 1: SentencePiece models (Gemini, Gemma,
	// Llama) split numbers into single digits; for BPE models that group three digits it
	// errs high.
	DigitTokens float64
	// PunctTokens is the cost of an ASCII punctuation or symbol character. Default 0.5:
	// common pairs ("()", "->", "\",", "==") are single tokens, so punctuation-dense text
	// (code, JSON) costs more per character than prose but less than one token a character.
	PunctTokens float64
	// NewlineTokens is the cost of a line break. Default 1.
	NewlineTokens float64
	// SpaceRunChars: a single space or tab is free (it merges into the next token); a run of
	// two or more costs max(1, length/SpaceRunChars) tokens, as vocabularies hold long runs
	// of spaces for indentation. Default 16.
	SpaceRunChars float64
	// OtherTokens is the cost of any other rune (emoji, symbols, control characters) and of
	// each byte of invalid UTF-8. Default 1.
	OtherTokens float64
}

// Default heuristic figures; see HeuristicOptions.
const (
	DefaultCharsPerToken        = 4
	DefaultNonLatinLetterWeight = 2
	DefaultCJKTokensPerRune     = 1
	DefaultDigitTokens          = 1
	DefaultPunctTokens          = 0.5
	DefaultNewlineTokens        = 1
	DefaultSpaceRunChars        = 16
	DefaultOtherTokens          = 1
)

func orDefault(v, d float64) float64 {
	if v > 0 && !math.IsInf(v, 0) {
		return v
	}
	return d
}

// NewHeuristic returns a counter for models whose tokenizer is not available (Anthropic,
// Gemini, open models behind other providers). It costs text by character classes (see
// HeuristicOptions) and frames messages, tools and requests exactly as the exact counters do.
// Wrap it in a Calibrator to learn each model's ratio from reported usage.
func NewHeuristic(opts HeuristicOptions) Counter {
	h := &heuristic{
		charsPerToken: orDefault(opts.CharsPerToken, DefaultCharsPerToken),
		nonLatin:      orDefault(opts.NonLatinLetterWeight, DefaultNonLatinLetterWeight),
		cjk:           orDefault(opts.CJKTokensPerRune, DefaultCJKTokensPerRune),
		digit:         orDefault(opts.DigitTokens, DefaultDigitTokens),
		punct:         orDefault(opts.PunctTokens, DefaultPunctTokens),
		newline:       orDefault(opts.NewlineTokens, DefaultNewlineTokens),
		spaceRun:      orDefault(opts.SpaceRunChars, DefaultSpaceRunChars),
		other:         orDefault(opts.OtherTokens, DefaultOtherTokens),
	}
	h.f = framer{text: h.Text, opts: opts.Options}
	return h
}

type heuristic struct {
	charsPerToken, nonLatin, cjk, digit, punct, newline, spaceRun, other float64
	f                                                                    framer
}

func (h *heuristic) Name() string                      { return "heuristic" }
func (h *heuristic) Message(m *chat.Message) int       { return h.f.message(m) }
func (h *heuristic) Tools(tools []chat.Tool) int       { return h.f.tools(tools) }
func (h *heuristic) Request(r *chat.Request) Breakdown { return request(h, r) }

// Text estimates the tokens of s: 0 for "", at least 1 otherwise.
func (h *heuristic) Text(s string) int {
	if s == "" {
		return 0
	}
	var t float64
	var word float64 // weighted letters of the current word
	spaces := 0      // length of the current run of spaces and tabs
	flushWord := func() {
		if word > 0 {
			t += math.Max(1, word/h.charsPerToken)
			word = 0
		}
	}
	flushSpaces := func() {
		if spaces >= 2 {
			t += math.Max(1, float64(spaces)/h.spaceRun)
		}
		spaces = 0
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
				flushSpaces()
				word++
				continue
			case c == ' ' || c == '\t':
				flushWord()
				spaces++
				continue
			}
			flushWord()
			flushSpaces()
			switch {
			case c >= '0' && c <= '9':
				t += h.digit
			case c == '\n':
				t += h.newline
			case c == '\r':
				if i >= len(s) || s[i] != '\n' { // "\r\n" is one line break
					t += h.newline
				}
			case c > ' ' && c < 0x7f:
				t += h.punct
			default: // other control characters
				t += h.other
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			flushWord()
			flushSpaces()
			t += h.other
		case isCJK(r):
			flushWord()
			flushSpaces()
			t += h.cjk
		case unicode.IsLetter(r) || unicode.IsMark(r):
			flushSpaces()
			word += h.nonLatin
		case unicode.IsSpace(r):
			flushWord()
			if r == '\u2028' || r == '\u2029' || r == '\u0085' {
				flushSpaces()
				t += h.newline
			} else {
				spaces++
			}
		case unicode.IsNumber(r):
			flushWord()
			flushSpaces()
			t += h.digit
		default:
			flushWord()
			flushSpaces()
			t += h.other
		}
	}
	flushWord()
	flushSpaces()
	return max(1, int(math.Ceil(t-1e-9))) // tolerate float noise: 100*0.7 is 70
}

// isCJK reports whether r is a Han, Hangul, Hiragana or Katakana rune, or CJK punctuation
// and full-width forms.
func isCJK(r rune) bool {
	switch {
	case r >= 0x3000 && r <= 0x303F, // CJK symbols and punctuation
		r >= 0xFF00 && r <= 0xFFEF: // half- and full-width forms
		return true
	}
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hangul, r) ||
		unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r)
}
