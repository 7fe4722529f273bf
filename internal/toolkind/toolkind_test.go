package toolkind

import (
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

func TestClassify(t *testing.T) {
	tc := func(name, args string) chat.ToolCall { return chat.ToolCall{ID: "x", Name: name, Arguments: args} }
	cases := []struct {
		call     chat.ToolCall
		kind     Kind
		key      string
		from, to int
	}{
		{tc("Read", `{"file_path":"/repo/a.py","offset":100,"limit":50}`), Read, "/repo/a.py", 100, 149},
		{tc("Read", `{"file_path":"/repo/./a.py"}`), Read, "/repo/a.py", 1, 0},
		{tc("read_file", `{"path":"a.py","start_line":"5","end_line":9}`), Read, "a.py", 5, 9},
		{tc("str_replace_based_edit_tool", `{"command":"view","path":"/r/b.go","view_range":[10,-1]}`), Read, "/r/b.go", 10, 0},
		{tc("str_replace_based_edit_tool", `{"command":"str_replace","path":"/r/b.go","old_str":"a","new_str":"b"}`), Other, "", 0, 0},
		{tc("Bash", `{"command":"sed -n '20,40p' src/x.py"}`), Read, "src/x.py", 20, 40},
		{tc("bash", `{"command":"cat  ./src/x.py"}`), Read, "src/x.py", 1, 0},
		{tc("bash", `{"command":"head -n 30 x.py"}`), Read, "x.py", 1, 30},
		{tc("bash", `{"command":"git   diff"}`), Command, "git diff", 0, 0},
		{tc("bash", `{"command":"cat a | grep b"}`), Command, "cat a | grep b", 0, 0},
		{tc("run_shell_command", `{"command":"python -m pytest tests/"}`), Command, "python -m pytest tests/", 0, 0},
		{tc("Grep", `{"path":"/r","pattern":"foo"}`), Search, `Grep {"path":"/r","pattern":"foo"}`, 0, 0},
		{tc("Read", `not json`), Other, "", 0, 0},
	}
	for _, c := range cases {
		a := Classify(c.call, nil)
		if a.Kind != c.kind || c.kind != Other && (a.Key != c.key || a.From != c.from || a.To != c.to) {
			t.Errorf("Classify(%s %s) = %+v; want kind %d key %q %d-%d", c.call.Name, c.call.Arguments, a, c.kind, c.key, c.from, c.to)
		}
	}
	// A declared tool.
	own := []ReadTool{{Name: "open_doc", PathArg: "doc", StartArg: "first", EndArg: "last"}}
	if a := Classify(tc("open_doc", `{"doc":"d.md","first":3,"last":8}`), own); a.Kind != Read || a.Key != "d.md" || a.From != 3 || a.To != 8 {
		t.Errorf("declared read tool: %+v", a)
	}
	if a := Classify(tc("open_doc", `{"doc":"d.md"}`), nil); a.Kind != Other {
		t.Errorf("undeclared tool classified as %+v", a)
	}
}
