package tokens

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// referenceRanks parses a .tiktoken file into a map, the plain way.
func referenceRanks(t *testing.T, data []byte) map[string]uint32 {
	t.Helper()
	m := map[string]uint32{}
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		tok, rank, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			t.Fatalf("line %q", line)
		}
		b, err := base64.StdEncoding.DecodeString(string(tok))
		if err != nil {
			t.Fatal(err)
		}
		r, err := strconv.ParseUint(string(rank), 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		m[string(b)] = uint32(r)
	}
	return m
}

// TestRankTable: the table holds every token of both vocabularies at its rank, and nothing
// else: substrings and extensions of tokens and random bytes are found exactly when a map
// finds them.
func TestRankTable(t *testing.T) {
	for _, name := range Encodings() {
		t.Run(name, func(t *testing.T) {
			data, err := assets.Assets.ReadFile(name + ".tiktoken")
			if err != nil {
				t.Fatal(err)
			}
			want := referenceRanks(t, data)
			got, err := parseRanks(data)
			if err != nil {
				t.Fatal(err)
			}
			if got.len() != len(want) {
				t.Fatalf("%d tokens, want %d", got.len(), len(want))
			}
			keys := make([]string, 0, len(want))
			for k, r := range want {
				keys = append(keys, k)
				if g := got.rank(k); g != r {
					t.Fatalf("token %q: rank %d, want %d", k, g, r)
				}
			}
			for a := range 256 {
				for b := range 256 {
					r, ok := want[string([]byte{byte(a), byte(b)})]
					if !ok {
						r = noRank
					}
					if g := got.pair(byte(a), byte(b)); g != r {
						t.Fatalf("pair %q: rank %d, want %d", []byte{byte(a), byte(b)}, g, r)
					}
				}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			probes := 0
			check := func(s string) {
				probes++
				r, ok := want[s]
				if !ok {
					r = noRank
				}
				if g := got.rank(s); g != r {
					t.Fatalf("%q: rank %d, want %d", s, g, r)
				}
			}
			for range 200000 {
				k := keys[rng.IntN(len(keys))]
				switch rng.IntN(5) {
				case 4: // zero bytes appended: a slot holds the first 8 bytes zero-padded
					check(k + strings.Repeat("\x00", 1+rng.IntN(3)))
				case 0: // a substring
					i := rng.IntN(len(k))
					check(k[i : i+rng.IntN(len(k)-i)+1])
				case 1: // two tokens joined
					check(k + keys[rng.IntN(len(keys))])
				case 2: // one byte changed
					b := []byte(k)
					b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
					check(string(b))
				default: // random bytes
					b := make([]byte, 1+rng.IntN(6))
					for i := range b {
						b[i] = byte(rng.Uint32())
					}
					check(string(b))
				}
			}
			check(strings.Repeat("a", maxTokenLen+1))
			check("")
			if probes == 0 {
				t.Fatal("nothing probed")
			}
		})
	}
}

// TestParseRanksErrors: malformed vocabularies fail, and a token given twice keeps its last
// rank, as a map's assignment does.
func TestParseRanksErrors(t *testing.T) {
	for _, bad := range []string{"YQ==\n", "YQ== x\n", "YQ== -1\n", "YQ== 4294967295\n", "YQ== 99999999999\n", "!!! 1\n", " 1\n"} {
		if _, err := parseRanks([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	tab, err := parseRanks([]byte("YQ== 1\nYg== 2\nYQ== 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := tab.rank("a"); r != 3 || tab.len() != 2 {
		t.Fatalf("a: %d, len %d", r, tab.len())
	}
	if r := tab.rank("c"); r != noRank {
		t.Fatalf("c: %d", r)
	}
}

// TestAppendBase64: the hand-written decoder agrees with encoding/base64 on every length and
// padding, and rejects what is not padded standard base64.
func TestAppendBase64(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 1; n < 40; n++ {
		for range 200 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			enc := base64.StdEncoding.EncodeToString(b)
			got, err := appendBase64([]byte("x"), []byte(enc))
			if err != nil || string(got) != "x"+string(b) {
				t.Fatalf("%q: %q, %v; want %q", enc, got, err, b)
			}
		}
	}
	for _, bad := range []string{"", "YQ=", "YQ", "Y===", "YQ=a", "YQ==YQ==", "YQ-_", "YQ\n=", "====", "YQ==\x00"} {
		if got, err := appendBase64(nil, []byte(bad)); err == nil {
			_, lerr := base64.StdEncoding.DecodeString(bad)
			t.Errorf("%q: %q, no error (encoding/base64: %v)", bad, got, lerr)
		}
	}
}
