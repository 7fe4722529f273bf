package ctxmgr

import (
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

// classify hands the declared tools (Config.ReadTools, converted once by New) to
// toolkind.Classify, before the built-in ones, and keeps what it says.
func TestClassify(t *testing.T) {
	tc := func(name, args string) chat.ToolCall { return chat.ToolCall{ID: "x", Name: name, Arguments: args} }
	m, _ := testManager(t, Config{ReadTools: []ReadTool{{Name: "open_doc", PathArg: "doc", StartArg: "first", EndArg: "last"},
		{Name: "Read", PathArg: "doc"}}})
	own := m.readTools
	if a := classify(tc("open_doc", `{"doc":"d.md","first":3,"last":8}`), own); a.kind != actRead || a.key != "d.md" || a.from != 3 || a.to != 8 {
		t.Errorf("declared read tool: %+v", a)
	}
	if a := classify(tc("open_doc", `{"doc":"d.md"}`), nil); a.kind != actOther {
		t.Errorf("undeclared tool classified as %+v", a)
	}
	if a := classify(tc("Read", `{"doc":"d.md","file_path":"e.md"}`), own); a.kind != actRead || a.key != "d.md" {
		t.Errorf("a declared tool is not tried first: %+v", a)
	}
	if a := classify(tc("Read", `{"file_path":"/repo/a.py","offset":100,"limit":50}`), own); a.kind != actRead || a.key != "/repo/a.py" || a.from != 100 || a.to != 149 {
		t.Errorf("built-in read tool: %+v", a)
	}
	if a := classify(tc("bash", `{"command":"git   diff"}`), nil); a.kind != actCommand || a.key != "git diff" {
		t.Errorf("shell command: %+v", a)
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
