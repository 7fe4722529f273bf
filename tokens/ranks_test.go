package tokens

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"strconv"
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
				if g, ok := got.get(k); !ok || g != r {
					t.Fatalf("token %q: rank %d, %v; want %d", k, g, ok, r)
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
				g, gok := got.get(s)
				if ok != gok || g != r {
					t.Fatalf("%q: got %d, %v; want %d, %v", s, g, gok, r, ok)
				}
			}
			for range 200000 {
				k := keys[rng.IntN(len(keys))]
				switch rng.IntN(4) {
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
	if r, ok := tab.get("a"); !ok || r != 3 || tab.len() != 2 {
		t.Fatalf("a: %d, %v, len %d", r, ok, tab.len())
	}
	if _, ok := tab.get("c"); ok {
		t.Fatal("c found")
	}
}
