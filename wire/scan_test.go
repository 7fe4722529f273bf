package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzUnmarshal: on any valid JSON, the scanner's fast paths give exactly what
// encoding/json gives, value and error alike, for every target type they handle.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{
		`"plain"`, `"esc \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00"`, `"\ud83d"`, `"\udc00\ud800"`, `"\ud83d\u0041"`,
		`"\u0000\u001f"`, `"a\\"`, `"\\\""`, `null`, ` null `, `true`, `12.5e3`, `-0`,
		`{}`, `[]`, ` { } `, `[ ]`, `{"a":1,"b":"x","a":2}`, `{"k\"ey":[1,{"x":"]}"}],"n":null}`,
		`{"a\u00e9":"v","":{}}`, `[1, "two", {"three": [3]}, null, true, false, -1e-9]`,
		`["\"]", "\\", "}"]`, "{\"a\" :\t\"b\" ,\n\"c\"\r:[ ] }", `{"a":"\ud800"}`, "\"\xff\"", `[[[[]]]]`,
		`{"role":"tool","tool_call_id":"call_1","content":"line 1\nline 2\t\"quoted\""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		check := func(name string, fast, std any, errFast, errStd error) {
			t.Helper()
			if (errFast == nil) != (errStd == nil) {
				t.Fatalf("%s of %q: error %v, encoding/json %v", name, b, errFast, errStd)
			}
			if errFast != nil && errFast.Error() != errStd.Error() {
				t.Fatalf("%s of %q: error %q, encoding/json %q", name, b, errFast, errStd)
			}
			if !reflect.DeepEqual(fast, std) {
				t.Fatalf("%s of %q: %#v, encoding/json %#v", name, b, fast, std)
			}
		}
		{
			var a, b2 string
			ea, eb := unmarshal(b, &a), json.Unmarshal(b, &b2)
			check("string", a, b2, ea, eb)
		}
		{
			var a, b2 *string
			ea, eb := unmarshal(b, &a), json.Unmarshal(b, &b2)
			check("*string", a, b2, ea, eb)
		}
		{
			var a, b2 object
			ea, eb := unmarshal(b, &a), json.Unmarshal(b, &b2)
			check("object", a, b2, ea, eb)
		}
		{
			var a, b2 []json.RawMessage
			ea, eb := unmarshal(b, &a), json.Unmarshal(b, &b2)
			check("array", a, b2, ea, eb)
		}
	})
}

// TestUnmarshalCopies: values split from a body do not alias it, so a decoded message does
// not keep the whole request body alive.
func TestUnmarshalCopies(t *testing.T) {
	body := []byte(`{"a":{"b":"c"},"l":[{"x":1}]}`)
	var o object
	if err := unmarshal(body, &o); err != nil {
		t.Fatal(err)
	}
	var l []json.RawMessage
	if err := unmarshal(o["l"], &l); err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'X'
	}
	if string(o["a"]) != `{"b":"c"}` || string(l[0]) != `{"x":1}` {
		t.Fatalf("values alias the body: %s %s", o["a"], l[0])
	}
}
