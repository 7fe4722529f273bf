package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// validCases are inputs json.Valid accepts and rejects, around each rule validJSON follows.
var validCases = []string{
	``, ` `, `null`, ` null `, `nul`, `nulls`, `true`, `tru`, `truex`, `false`, `fals`, `[true,false,null]`,
	`0`, `-0`, `-`, `01`, `-01`, `1.`, `1.5`, `.5`, `1e`, `1e5`, `1E+5`, `1e-5`, `1e+`, `-1.5e-9`, `1.5.5`,
	`12345678901234567890`, `0x1`, `+1`, `1 2`, `[1,]`, `[,1]`, `[1 2]`, `[]`, `[ ]`, `[[]]`, `[`, `]`,
	`{}`, `{ }`, `{"a":1}`, `{"a" : 1 , "b":[]}`, `{"a":1,}`, `{,"a":1}`, `{"a"}`, `{"a":}`, `{"a" 1}`,
	`{1:1}`, `{"a":1]`, `[1}`, `{"a":{"b":{"c":[]}}}`, `{}}`, `[]]`, `{} {}`, "\t{\n\"a\"\r:\"b\"}\n",
	`""`, `"`, `"abc`, `"abc"`, `"a\"b"`, `"a\\"`, `"a\\\"`, `"\/\b\f\n\r\t"`, `"\x"`, `"\'"`, `"\u00e9"`,
	`"\u00E9"`, `"\u00g9"`, `"\u00e"`, `"\u"`, `"\ud83d\ude00"`, `"\ud83d"`, "\"tab\there\"", "\"nl\nhere\"",
	"\"\x00\"", "\"\x1f\"", "\"\x7f\"", "\"\xff\xfe\"", "\"caf\xc3\xa9\"", `"12345678\"12345678"`,
	`"1234567\\"`, `"12345678901234567890123456789012"`, "\"1234567\x01\"", `"abcdefgh\u0041bcdefgh"`,
	`["a","b",{"c":"d\"e"}]`, "\v1", "1\v", "\u00a01", "[1]\x00",
	`{"role":"tool","tool_call_id":"call_1","content":"line 1\nline 2\t\"quoted\" \\ end"}`,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
	strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
	strings.Repeat("[", 70) + strings.Repeat("]", 70),
	strings.Repeat("[", 70) + strings.Repeat("]", 69),
}

func TestValidJSON(t *testing.T) {
	for _, c := range validCases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.60q) = %v, json.Valid %v", c, got, want)
		}
	}
	// A control character or a quote at each position of the 8 bytes read at once.
	for n := 0; n < 20; n++ {
		for _, c := range []byte{0, 0x1f, '"', '\\', 0x20, 0x7f, 0x80, 0xff} {
			s := append(append([]byte(`"`), bytes.Repeat([]byte{'a'}, n)...), c, 'b', 'c', '"')
			if got, want := validJSON(s), json.Valid(s); got != want {
				t.Errorf("validJSON(%q) = %v, json.Valid %v", s, got, want)
			}
		}
	}
}

// FuzzValidJSON: validJSON reports what json.Valid reports, on any input.
func FuzzValidJSON(f *testing.F) {
	for _, c := range validCases {
		if len(c) < 1000 {
			f.Add([]byte(c))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", b, got, want)
		}
	})
}

// BenchmarkValidJSON compares validJSON with json.Valid on a tool message, as every new
// message of a request is validated, and on the 100K-token body of BenchmarkDecode, as a
// session's first request is.
func BenchmarkValidJSON(b *testing.B) {
	var out strings.Builder
	for i := 0; i < 30; i++ {
		out.WriteString("pkg/mod7/file.go:12: func Handler(ctx context.Context) error { return \"nil\" } // ok\n")
	}
	msg, _ := json.Marshal(map[string]any{"role": "tool", "tool_call_id": "call_1", "content": out.String()})
	for _, c := range []struct {
		name string
		body []byte
	}{{"message", msg}, {"body", benchBody(130)}} {
		for _, v := range []struct {
			name  string
			valid func([]byte) bool
		}{{"validJSON", validJSON}, {"json.Valid", json.Valid}} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				b.SetBytes(int64(len(c.body)))
				for b.Loop() {
					if !v.valid(c.body) {
						b.Fatal("invalid")
					}
				}
			})
		}
	}
}
