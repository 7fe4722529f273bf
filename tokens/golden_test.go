package tokens_test

import (
	"testing"

	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/tiktoken-go/tokenizer"
)

// TestGolden: the exact counters match every count of the golden file, for both encodings.
func TestGolden(t *testing.T) {
	t.Parallel()
	lines := loadGolden(t)
	for _, enc := range tokens.Encodings() {
		t.Run(enc, func(t *testing.T) {
			t.Parallel()
			c, err := tokens.ForEncoding(enc)
			if err != nil {
				t.Fatal(err)
			}
			matched := 0
			for i, g := range lines {
				got, want := c.Text(g.Text), g.want(enc)
				if got == want {
					matched++
					continue
				}
				t.Errorf("line %d (%s, %d bytes): got %d tokens, want %d", i+1, g.Source, len(g.Text), got, want)
			}
			t.Logf("tokens %s (pkoukk/tiktoken-go vocabulary and merges, ctxmgr pre-tokenizer): %d/%d golden lines match", enc, matched, len(lines))
		})
	}
}

// TestGoldenSecondCandidate measures github.com/tiktoken-go/tokenizer, the faster runner-up,
// against the same file. It logs its misses and does not fail on them.
func TestGoldenSecondCandidate(t *testing.T) {
	t.Parallel()
	lines := loadGolden(t)
	for _, enc := range []tokenizer.Encoding{tokenizer.O200kBase, tokenizer.Cl100kBase} {
		t.Run(string(enc), func(t *testing.T) {
			t.Parallel()
			codec, err := tokenizer.Get(enc)
			if err != nil {
				t.Fatal(err)
			}
			matched := 0
			for i, g := range lines {
				got, err := codec.Count(g.Text)
				want := g.want(string(enc))
				if err == nil && got == want {
					matched++
					continue
				}
				t.Logf("miss: line %d (%s, %d bytes): got %d (err %v), want %d", i+1, g.Source, len(g.Text), got, err, want)
			}
			t.Logf("tiktoken-go/tokenizer %s: %d/%d golden lines match, %d missed", enc, matched, len(lines), len(lines)-matched)
		})
	}
}

func secondCandidate(tb testing.TB, enc string) tokenizer.Codec {
	tb.Helper()
	codec, err := tokenizer.Get(tokenizer.Encoding(enc))
	if err != nil {
		tb.Fatal(err)
	}
	return codec
}
