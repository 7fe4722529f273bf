package chat

import (
	"crypto/sha256"
	"encoding/json"
	"reflect"
	"testing"
)

// TestHashCoversEveryField changes each field of a message, at every depth (parts, images,
// files, tool calls, maps), one at a time, and checks the hash changes. A field added to the
// model without being hashed fails here: two messages that differ in it would share a cached
// token count.
func TestHashCoversEveryField(t *testing.T) {
	base := func() Message {
		return Message{Role: RoleAssistant, Name: "n", ToolCallID: "id", Meta: map[string]string{"a": "b"}, Wire: "openai",
			WireRole: "developer", Shape: ShapeParts, Extra: map[string]json.RawMessage{"k": json.RawMessage(`1`)},
			Content: []Part{{Type: PartText, Text: "t", Signature: "s", Redacted: "r", Raw: json.RawMessage(`{}`),
				Image: &Image{URL: "u", MediaType: "m", Data: "d", Detail: "low", Width: 1, Height: 2},
				File:  &FileRef{ID: "i", Name: "n", URL: "u", MediaType: "m", Data: "d"},
				Extra: map[string]json.RawMessage{"k": json.RawMessage(`1`)}}},
			ToolCalls: []ToolCall{{ID: "c", Name: "f", Arguments: "{}", Extra: map[string]json.RawMessage{"k": json.RawMessage(`1`)}}}}
	}
	ref := base()
	want := ref.Hash()
	fields := 0
	// paths lists every field reachable from Message (-1: the first element of a slice).
	var paths [][]int
	var walk func(t reflect.Type, path []int)
	walk = func(typ reflect.Type, path []int) {
		for i := range typ.NumField() {
			p := append(append([]int(nil), path...), i)
			ft := typ.Field(i).Type
			switch {
			case ft.Kind() == reflect.Struct:
				walk(ft, p)
			case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct:
				paths = append(paths, p) // the pointer itself (nil vs set)
				walk(ft.Elem(), p)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				paths = append(paths, p) // the length
				walk(ft.Elem(), append(p, -1))
			default:
				paths = append(paths, p)
			}
		}
	}
	walk(reflect.TypeOf(Message{}), nil)
	for _, path := range paths {
		m := base()
		v := reflect.ValueOf(&m).Elem()
		name := ""
		for i, idx := range path {
			if idx == -1 {
				v = v.Index(0)
				continue
			}
			if v.Kind() == reflect.Pointer {
				v = v.Elem()
			}
			name += "." + v.Type().Field(idx).Name
			v = v.Field(idx)
			if i == len(path)-1 {
				change(t, name, v)
			}
		}
		fields++
		if m.Hash() == want {
			t.Errorf("changing %s does not change the hash", name)
		}
	}
	if fields < 30 {
		t.Fatalf("only %d fields visited", fields)
	}
	// Different splits of the same bytes across fields hash differently.
	a := Message{Role: RoleUser, Content: []Part{{Type: PartText, Text: "ab"}, {Type: PartText, Text: "c"}}}
	b := Message{Role: RoleUser, Content: []Part{{Type: PartText, Text: "a"}, {Type: PartText, Text: "bc"}}}
	if a.Hash() == b.Hash() {
		t.Error("field boundaries are not part of the hash")
	}
	// Map order never matters.
	x := Message{Extra: map[string]json.RawMessage{"a": json.RawMessage(`1`), "b": json.RawMessage(`2`), "c": json.RawMessage(`3`)}}
	for range 20 {
		y := Message{Extra: map[string]json.RawMessage{"c": json.RawMessage(`3`), "b": json.RawMessage(`2`), "a": json.RawMessage(`1`)}}
		if x.Hash() != y.Hash() {
			t.Fatal("map order changes the hash")
		}
	}
}

// change sets v to a different value of its kind.
func change(t *testing.T, name string, v reflect.Value) {
	t.Helper()
	if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
		v.SetBytes([]byte(`[]`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int:
		v.SetInt(v.Int() + 1)
	case reflect.Uint8:
		v.SetUint(v.Uint() + 1)
	case reflect.Pointer, reflect.Slice:
		v.SetZero() // nil image, file, content or tool calls
	case reflect.Map:
		if v.Type().Elem().Kind() == reflect.String {
			v.Set(reflect.ValueOf(map[string]string{"a": "c"}))
		} else {
			v.Set(reflect.ValueOf(map[string]json.RawMessage{"k": json.RawMessage(`2`)}))
		}
	default:
		t.Fatalf("%s: no way to change a %s", name, v.Type())
	}
}

func BenchmarkHash(b *testing.B) {
	out := make([]byte, 0, 64<<10)
	for i := 0; len(out) < 60<<10; i++ {
		out = append(out, "pkg/mod/file.go:12:\tfunc Handler(ctx context.Context) error { return nil } // \"ok\" <tag>\n"...)
	}
	m := Message{Role: RoleTool, ToolCallID: "call_1", Content: []Part{{Type: PartText, Text: string(out)}}}
	b.Run("fields", func(b *testing.B) {
		b.SetBytes(int64(len(out)))
		for b.Loop() {
			_ = m.Hash()
		}
	})
	// The obvious alternative, for comparison: SHA-256 of the message's JSON encoding.
	b.Run("json", func(b *testing.B) {
		b.SetBytes(int64(len(out)))
		for b.Loop() {
			j, _ := json.Marshal(&m)
			_ = sha256.Sum256(j)
		}
	})
}

func TestShares(t *testing.T) {
	m := TextMessage(RoleUser, "hello")
	m.Extra = map[string]json.RawMessage{"k": json.RawMessage(`1`)}
	cp := m // a copy of the value shares its storage
	if !m.Shares(&cp) {
		t.Fatal("a copy of a message does not share it")
	}
	if cl := m.Clone(); m.Shares(&cl) {
		t.Fatal("a clone shares its original's storage")
	}
	other := cp
	other.IsError = true
	if m.Shares(&other) {
		t.Fatal("a changed scalar field still shares")
	}
	other = cp
	other.Extra = map[string]json.RawMessage{"k": json.RawMessage(`1`)}
	if m.Shares(&other) {
		t.Fatal("an equal but distinct map shares")
	}
	a, b := TextMessage(RoleUser, ""), TextMessage(RoleUser, "")
	a.Content, b.Content = nil, []Part{}
	if !a.Shares(&b) {
		t.Fatal("two empty contents do not share (their hashes are equal)")
	}
}

func TestHashTools(t *testing.T) {
	a := []Tool{{Name: "read", Parameters: json.RawMessage(`{"type":"object"}`)}, {Name: "bash", Description: "runs"}}
	b := []Tool{{Name: "read", Parameters: json.RawMessage(`{"type":"object"}`)}, {Name: "bash", Description: "runs"}}
	if HashTools(a) != HashTools(b) {
		t.Fatal("equal tool lists hash differently")
	}
	for _, c := range [][]Tool{
		a[:1],
		{{Name: "read", Parameters: json.RawMessage(`{"type":"array"}`)}, a[1]},
		{a[0], {Name: "bash", Description: "runs!"}},
		{a[1], a[0]},
		{a[0], {Name: "bash", Description: "runs", Extra: map[string]json.RawMessage{"strict": json.RawMessage(`true`)}}},
		{{Name: "rea", Description: "d"}, a[1]},
	} {
		if HashTools(c) == HashTools(a) {
			t.Fatalf("%+v hashes like %+v", c, a)
		}
	}
	m := TextMessage(RoleUser, "")
	if HashTools(nil) == m.Hash() {
		t.Fatal("an empty tool list hashes like a message")
	}
}
