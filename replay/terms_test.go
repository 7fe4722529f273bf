package replay

import (
	"reflect"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

func TestSalientTerms(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"see src/main.go:12.", []string{"src/main.go:12"}},
		{"the fooBar value", []string{"fooBar"}},
		{"HTTP Django ABCdef", nil},    // no lower-case letter before an upper-case one
		{"abcDef", []string{"abcDef"}}, // camelCase
		{"ab_c a_b", []string{"ab_c"}}, // a_b is 3 bytes
		{"e.g. end. ....", nil},        // trimmed below 4 bytes
		{"1234 v1 2024-05-20", []string{"1234", "2024-05-20"}},
		{"foo-bar foo-bar2", []string{"foo-bar2"}}, // '-' alone does not make a term salient
		{"at https://x.org/a, then", []string{"https://x.org/a"}},
		{"path/to/file.py: and x.py.,", []string{"path/to/file.py", "x.py"}},
		{`C:\Users\me`, nil}, // backslash ends runs: "C:", "Users"
		{"call get_user_details(user_id)", []string{"get_user_details", "user_id"}},
		{"foo_bar and foo_bar again", []string{"foo_bar"}},
		{"naïve_var", []string{"ve_var"}}, // non-ASCII ends a run
		{"trailing colons::", nil},
		{"Error: ValueError at models.py:10:", []string{"ValueError", "models.py:10"}},
		{"ratio 0.75.", []string{"0.75"}},
		{"--flag --no-cache", nil},
		{"--max-output=4096", []string{"4096"}}, // '=' ends a run; "--max-output" has no salient byte
	}
	for _, tc := range tests {
		got := SalientTerms(tc.in)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SalientTerms(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestReferences(t *testing.T) {
	call := func(id, args string) chat.Message {
		return chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "read_file", Arguments: args}}}
	}
	msgs := []chat.Message{
		chat.TextMessage(chat.RoleUser, "Fix the bug in src/app.py; the config is config.yaml"),
		call("c1", `{"path":"src/app.py"}`),
		chat.ToolResult("c1", "read_file", "def handle_request(): raise KeyError('user_id')", false),
		chat.TextMessage(chat.RoleAssistant, "handle_request in src/app.py raises for user_id; newThing.go is unrelated; read_file again"),
		chat.TextMessage(chat.RoleUser, "ok"),
	}
	refs := references(msgs)
	got := map[int]map[string][]int{}
	for i, rs := range refs {
		for _, r := range rs {
			if got[i] == nil {
				got[i] = map[string][]int{}
			}
			got[i][r.term] = r.occ
		}
	}
	want := map[int]map[string][]int{
		1: {"src/app.py": {0}},
		// newThing.go never occurred before; read_file occurred as a tool call name (message 1)
		// and a tool result name is not part of the text.
		3: {"handle_request": {2}, "src/app.py": {0, 1}, "user_id": {2}, "read_file": {1}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("references = %v, want %v", got, want)
	}
}

func TestCachedPrefix(t *testing.T) {
	prev := &measured{fps: []fp{1, 2, 3}, toks: []int{500, 300, 400}, prefix: 200}
	tests := []struct {
		name string
		prev *measured
		cur  measured
		want int
	}{
		{"first call", nil, measured{fps: []fp{1}, toks: []int{5000}, prefix: 200}, 0},
		{"append-only", prev, measured{fps: []fp{1, 2, 3, 4, 5}, toks: []int{500, 300, 400, 50, 60}, prefix: 200}, 1400},
		{"changed third message", prev, measured{fps: []fp{1, 2, 9, 4}, toks: []int{500, 300, 10, 20}, prefix: 300}, 1100},
		{"below 1024", prev, measured{fps: []fp{1, 2, 9}, toks: []int{500, 300, 10}, prefix: 200}, 0},
		{"new summary first", prev, measured{fps: []fp{7, 2, 3}, toks: []int{900, 300, 400}, prefix: 2000}, 2000},
		{"exactly 1024", prev, measured{fps: []fp{1, 2}, toks: []int{500, 300}, prefix: 224}, 1024},
	}
	for _, tc := range tests {
		if got := cachedPrefix(tc.prev, &tc.cur); got != tc.want {
			t.Errorf("%s: cachedPrefix = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	a := chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: "ab"}}, ToolCalls: []chat.ToolCall{{ID: "1", Name: "f", Arguments: "{}"}}}
	b := a.Clone()
	if fingerprint(&a) != fingerprint(&b) {
		t.Fatal("equal messages differ")
	}
	variants := []func(m *chat.Message){
		func(m *chat.Message) { m.Content[0].Text = "a" },
		func(m *chat.Message) { m.Content = append(m.Content, chat.Part{Type: chat.PartText, Text: ""}) },
		func(m *chat.Message) { m.ToolCalls[0].Arguments = `{"x":1}` },
		func(m *chat.Message) { m.ToolCalls[0].ID = "2" },
		func(m *chat.Message) { m.Role = chat.RoleUser },
		func(m *chat.Message) { m.IsError = true },
		func(m *chat.Message) { m.Name = "n" },
		func(m *chat.Message) { m.Content[0].Text, m.ToolCalls[0].Name = "a", "bf" }, // boundaries are length-prefixed
	}
	for i, v := range variants {
		c := a.Clone()
		v(&c)
		if fingerprint(&c) == fingerprint(&a) {
			t.Errorf("variant %d: same fingerprint", i)
		}
	}
}
