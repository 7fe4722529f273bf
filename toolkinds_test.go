package ctxmgr

import (
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

func TestClassify(t *testing.T) {
	tc := func(name, args string) chat.ToolCall { return chat.ToolCall{ID: "x", Name: name, Arguments: args} }
	cases := []struct {
		call     chat.ToolCall
		kind     actionKind
		key      string
		from, to int
	}{
		{tc("Read", `{"file_path":"/repo/a.py","offset":100,"limit":50}`), actRead, "/repo/a.py", 100, 149},
		{tc("Read", `{"file_path":"/repo/./a.py"}`), actRead, "/repo/a.py", 1, 0},
		{tc("read_file", `{"path":"a.py","start_line":"5","end_line":9}`), actRead, "a.py", 5, 9},
		{tc("str_replace_based_edit_tool", `{"command":"view","path":"/r/b.go","view_range":[10,-1]}`), actRead, "/r/b.go", 10, 0},
		{tc("str_replace_based_edit_tool", `{"command":"str_replace","path":"/r/b.go","old_str":"a","new_str":"b"}`), actOther, "", 0, 0},
		{tc("Bash", `{"command":"sed -n '20,40p' src/x.py"}`), actRead, "src/x.py", 20, 40},
		{tc("bash", `{"command":"cat  ./src/x.py"}`), actRead, "src/x.py", 1, 0},
		{tc("bash", `{"command":"head -n 30 x.py"}`), actRead, "x.py", 1, 30},
		{tc("bash", `{"command":"git   diff"}`), actCommand, "git diff", 0, 0},
		{tc("bash", `{"command":"cat a | grep b"}`), actCommand, "cat a | grep b", 0, 0},
		{tc("run_shell_command", `{"command":"python -m pytest tests/"}`), actCommand, "python -m pytest tests/", 0, 0},
		{tc("Grep", `{"path":"/r","pattern":"foo"}`), actSearch, `Grep {"path":"/r","pattern":"foo"}`, 0, 0},
		{tc("Read", `not json`), actOther, "", 0, 0},
	}
	for _, c := range cases {
		a := classify(c.call, nil)
		if a.kind != c.kind || c.kind != actOther && (a.key != c.key || a.from != c.from || a.to != c.to) {
			t.Errorf("classify(%s %s) = %+v; want kind %d key %q %d-%d", c.call.Name, c.call.Arguments, a, c.kind, c.key, c.from, c.to)
		}
	}
	// A declared tool.
	own := []ReadTool{{Name: "open_doc", PathArg: "doc", StartArg: "first", EndArg: "last"}}
	if a := classify(tc("open_doc", `{"doc":"d.md","first":3,"last":8}`), own); a.kind != actRead || a.key != "d.md" || a.from != 3 || a.to != 8 {
		t.Errorf("declared read tool: %+v", a)
	}
	if a := classify(tc("open_doc", `{"doc":"d.md"}`), nil); a.kind != actOther {
		t.Errorf("undeclared tool classified as %+v", a)
	}
}

func TestCoveredBy(t *testing.T) {
	r := func(from, to int) toolAction { return toolAction{kind: actRead, key: "f", from: from, to: to} }
	if !r(10, 20).coveredBy(r(1, 0)) || !r(10, 20).coveredBy(r(5, 25)) || !r(1, 0).coveredBy(r(1, 0)) {
		t.Error("covered ranges not covered")
	}
	if r(10, 20).coveredBy(r(15, 30)) || r(1, 0).coveredBy(r(1, 500)) || r(10, 20).coveredBy(toolAction{kind: actRead, key: "g", from: 1}) {
		t.Error("uncovered ranges covered")
	}
	c := toolAction{kind: actCommand, key: "git diff"}
	if !c.coveredBy(c) || c.coveredBy(toolAction{kind: actCommand, key: "ls"}) {
		t.Error("commands")
	}
}
