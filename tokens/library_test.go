package tokens

import (
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// The library the counters were proven against: github.com/pkoukk/tiktoken-go, with the same
// embedded vocabularies (its loader is a package-level setting, installed once, offline).
var libraries = map[string]func() (*tiktoken.Tiktoken, error){
	O200kBase:  sync.OnceValues(func() (*tiktoken.Tiktoken, error) { return libraryLoad(O200kBase) }),
	CL100kBase: sync.OnceValues(func() (*tiktoken.Tiktoken, error) { return libraryLoad(CL100kBase) }),
}

var installOfflineLoader = sync.OnceFunc(func() { tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader()) })

func libraryLoad(name string) (*tiktoken.Tiktoken, error) {
	installOfflineLoader()
	return tiktoken.GetEncoding(name)
}

func library(tb testing.TB, name string) *tiktoken.Tiktoken {
	tb.Helper()
	tk, err := libraries[name]()
	if err != nil {
		tb.Fatal(err)
	}
	return tk
}

// FuzzCountLibrary: our pre-tokenizer and byte-pair merge count arbitrary text exactly as the
// library's own encoder does, in both encodings (inputs short enough that no long run is
// sliced: the slicing is a documented inexactness, tested in TestLongRuns).
func FuzzCountLibrary(f *testing.F) {
	for _, s := range splitCases {
		f.Add(s)
	}
	f.Add("func main() {\n\tfmt.Println(\"héllo, 世界\") // 123456 tokens\n}\n")
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > maxPieceBytes || !utf8.ValidString(s) {
			return
		}
		for _, name := range Encodings() {
			enc, err := encoders[name]()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := enc.count(s), len(library(t, name).EncodeOrdinary(s)); got != want {
				t.Fatalf("%s: %q counts %d, the library %d", name, s, got, want)
			}
		}
	})
}

// BenchmarkEncoderLoad is the time from nothing to an encoding ready to count, ours against
// the library's, each built afresh every iteration (what the first count in a process costs).
func BenchmarkEncoderLoad(b *testing.B) {
	b.Run("ours-o200k", func(b *testing.B) {
		for b.Loop() {
			if _, err := loadEncoding(O200kBase, splitO200k); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library-o200k", func(b *testing.B) {
		installOfflineLoader()
		for b.Loop() {
			// GetEncoding caches its result: build the encoder the way it does, afresh.
			t0 := time.Now()
			enc, err := tiktoken.NewCoreBPE(mustRanks(b), map[string]int{}, `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`)
			if err != nil || enc == nil {
				b.Fatal(err)
			}
			_ = t0
		}
	})
}

func mustRanks(b *testing.B) map[string]int {
	m, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe("o200k_base.tiktoken")
	if err != nil {
		b.Fatal(err)
	}
	return m
}
