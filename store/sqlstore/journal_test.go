package sqlstore

import (
	"bytes"
	"fmt"
	"testing"
)

func testRecords() []jrec {
	return []jrec{
		{seq: 1, session: "a", at: 0, t: 1700000000000000000, hashes: [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)}, bodies: [][]byte{[]byte(`{"role":"user"}`), []byte(`{"role":"assistant","content":"x"}`)}},
		{seq: 2, session: "b-session", at: 7, t: -5, hashes: [][]byte{bytes.Repeat([]byte{3}, 32)}, bodies: [][]byte{bytes.Repeat([]byte("z"), 300)}},
		{seq: 9, session: "a", at: 2, t: 0, hashes: [][]byte{{}}, bodies: [][]byte{{}}},
	}
}

func encodeAll(recs []jrec) []byte {
	var b []byte
	for i := range recs {
		b = appendRecord(b, &recs[i])
	}
	return b
}

func sameRecords(a, b []jrec) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// TestRecordsCut: a journal read at any length gives back exactly the records wholly
// within it.
func TestRecordsCut(t *testing.T) {
	recs := testRecords()
	data := encodeAll(recs)
	ends := []int{}
	for i := range recs {
		ends = append(ends, len(encodeAll(recs[:i+1])))
	}
	for cut := 0; cut <= len(data); cut++ {
		whole := 0
		for whole < len(ends) && ends[whole] <= cut {
			whole++
		}
		if got := decodeRecords(data[:cut]); !sameRecords(got, recs[:whole]) {
			t.Fatalf("cut at %d of %d: %d records, want %d", cut, len(data), len(got), whole)
		}
	}
}

// FuzzDecodeRecords: any bytes decode without panicking to records that encode back to a
// prefix of those bytes (a record is taken only whole and checked).
func FuzzDecodeRecords(f *testing.F) {
	data := encodeAll(testRecords())
	f.Add(data)
	f.Add(data[:len(data)-1])
	f.Add(data[:9])
	f.Add([]byte{})
	flipped := bytes.Clone(data)
	flipped[12] ^= 1
	f.Add(flipped)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs := decodeRecords(b)
		if enc := encodeAll(recs); !bytes.HasPrefix(b, enc) {
			t.Fatalf("%d records decoded that do not encode to a prefix of the input", len(recs))
		}
	})
}
