package tokens_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
	"github.com/tiktoken-go/tokenizer"
)

// goldenCorpus is the golden texts concatenated (683 kB of prose, code, tool output, CJK...).
func goldenCorpus(b *testing.B) string {
	var sb strings.Builder
	for _, g := range loadGolden(b) {
		sb.WriteString(g.Text)
	}
	return sb.String()
}

// BenchmarkEncode compares the exact BPE libraries on the same input, in the same run:
// github.com/pkoukk/tiktoken-go (the one the package uses), github.com/tiktoken-go/tokenizer
// (the faster runner-up, which misses 6 of the 898 golden counts), the package's exact
// counter (pkoukk plus the long-run guard) and the heuristic.
func BenchmarkEncode(b *testing.B) {
	input := goldenCorpus(b)
	counter := mustEncoding(b, tokens.O200kBase)
	// The library's vocabulary from its embedded copy: its default loader downloads it.
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	pk, err := tiktoken.GetEncoding("o200k_base")
	if err != nil {
		b.Fatal(err)
	}
	tk := secondCandidate(b, "o200k_base")
	heur := tokens.NewHeuristic(tokens.HeuristicOptions{})
	want := counter.Text(input)
	b.Run("pkoukk-o200k", func(b *testing.B) {
		b.SetBytes(int64(len(input)))
		for b.Loop() {
			if n := len(pk.EncodeOrdinary(input)); n != want {
				b.Fatalf("%d tokens, want %d", n, want)
			}
		}
	})
	b.Run("tiktoken-go-tokenizer-o200k", func(b *testing.B) {
		b.SetBytes(int64(len(input)))
		for b.Loop() {
			if _, err := tk.Count(input); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tokens-o200k", func(b *testing.B) {
		b.SetBytes(int64(len(input)))
		for b.Loop() {
			counter.Text(input)
		}
	})
	b.Run("heuristic", func(b *testing.B) {
		b.SetBytes(int64(len(input)))
		for b.Loop() {
			heur.Text(input)
		}
	})
	var _ tokenizer.Codec = tk
}

// sharedRuns is the project's larger set of mini-swe-agent runs (42), beside the repository
// root; the README's benchmark figures were measured on it.
var sharedRuns = filepath.Join("..", "..", "shared", "data", "trajectories", "mini-swe-agent")

// benchRuns returns the mini-swe-agent runs a benchmark builds its input from: the 42 runs of
// ../shared/data when they are there (the README's figures are on them), else the 12 of the
// embedded sample. It logs which.
func benchRuns(b *testing.B) []trajRun {
	if _, err := os.Stat(sharedRuns); err == nil {
		runs := parseTrajectories(b, os.DirFS(sharedRuns), ".")
		b.Logf("input from the %d mini-swe-agent runs of %s", len(runs), sharedRuns)
		return runs
	}
	runs := loadTrajectories(b)
	b.Logf("input from the %d mini-swe-agent runs of the embedded sample (%s not found: figures not comparable with the README's)", len(runs), sharedRuns)
	return runs
}

// benchSession builds a deterministic 2,000-message session of about 200,000 o200k_base
// tokens from mini-swe-agent runs (benchRuns): their user and assistant messages in file
// order, each cut to at most 660 bytes (at a rune boundary).
func benchSession(b *testing.B) []chat.Message {
	runs := benchRuns(b)
	const n, maxBytes = 2000, 660
	msgs := make([]chat.Message, 0, n)
	for len(msgs) < n {
		for ri := range runs {
			for _, m := range runs[ri].Messages {
				if m.Role == chat.RoleSystem || len(msgs) == n {
					continue
				}
				text := m.Text()
				if len(text) > maxBytes {
					cut := maxBytes
					for cut > 0 && !utf8.RuneStart(text[cut]) {
						cut--
					}
					text = text[:cut]
				}
				// A sequence number keeps messages distinct should the data repeat.
				msgs = append(msgs, chat.TextMessage(m.Role, fmt.Sprintf("%s\n[%d]", text, len(msgs))))
			}
		}
	}
	return msgs
}

// BenchmarkSessionRecount: counting a 2,000-message, ~200,000-token session that has one new
// message, from scratch versus through NewCache with the session already counted.
func BenchmarkSessionRecount(b *testing.B) {
	exact := mustEncoding(b, tokens.O200kBase)
	msgs := benchSession(b)
	sys := []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a helpful assistant that can interact with a computer shell.")}
	total := exact.Request(&chat.Request{System: sys, Messages: msgs}).Total
	b.Logf("session: %d messages, %d o200k_base tokens", len(msgs), total)
	newMessage := func(i int) chat.Message {
		return chat.TextMessage(chat.RoleUser, fmt.Sprintf("<returncode>0</returncode>\n<output>\ntest_separability.py::test_nested_compound_model PASSED [%d]\n</output>", i))
	}
	b.Run("full-recount", func(b *testing.B) {
		i := 0
		for b.Loop() {
			r := &chat.Request{System: sys, Messages: append(msgs[:len(msgs):len(msgs)], newMessage(i))}
			exact.Request(r)
			i++
		}
	})
	b.Run("cached-one-new", func(b *testing.B) {
		cache := tokens.NewCache(exact, 1<<20)
		cache.Request(&chat.Request{System: sys, Messages: msgs})
		i := 0
		for b.Loop() {
			r := &chat.Request{System: sys, Messages: append(msgs[:len(msgs):len(msgs)], newMessage(i))}
			cache.Request(r)
			i++
		}
	})
	b.Run("cached-one-new-prehashed", func(b *testing.B) {
		// A caller that keeps each message's hash (the stores key rows by it) skips hashing.
		cache := tokens.NewCache(exact, 1<<20).(*tokens.Cache)
		hashes := make([]chat.Hash, len(msgs))
		for j := range msgs {
			hashes[j] = msgs[j].Hash()
			cache.MessageHash(hashes[j], &msgs[j])
		}
		i := 0
		for b.Loop() {
			n := 0
			for j := range msgs {
				n += cache.MessageHash(hashes[j], &msgs[j])
			}
			m := newMessage(i)
			n += cache.Message(&m)
			i++
		}
	})
}
