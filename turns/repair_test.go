package turns

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

func TestRepair(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		changes []string // "index:kind:id"
	}{
		{"empty", "", "", nil},
		{"valid dialog", "s u a u a", "s u a u a", nil},
		{"only assistant messages", "a a a", "a a a", nil},
		{"valid, starts with an assistant tool call", "a(x) t(x) u a", "a(x) t(x) u a", nil},
		{"valid, chained calls", "u a(x) t(x) a(y) t(y) a", "u a(x) t(x) a(y) t(y) a", nil},
		{"valid, parallel calls out of order", "u a(x,y,z) t(z) t(x) t(y) a", "u a(x,y,z) t(z) t(x) t(y) a", nil},
		{"orphan result", "u t(x) a", "u a", []string{"1:drop-orphan-result:x"}},
		{"orphan at start", "t(x) u a", "u a", []string{"0:drop-orphan-result:x"}},
		{"missing result", "u a(x) u", "u a(x) t!(x) u", []string{"1:insert-missing-result:x"}},
		{"pending tail is answered synthetically", "u a(x,y) t(y)", "u a(x,y) t(y) t!(x)", []string{"1:insert-missing-result:x"}},
		{"result after a user message is moved", "u a(x) u t(x) a", "u a(x) t(x) u a", []string{"3:move-result:x"}},
		{"result after a system message is moved", "u a(x) s t(x)", "u a(x) t(x) s", []string{"3:move-result:x"}},
		{"results in a later assistant's run", "u a(x) a(y) t(x) t(y)", "u a(x) t(x) a(y) t(y)", []string{"3:move-result:x"}},
		{"moved results follow in-run ones", "u a(x,y,z) t(z) u t(y) t(x)", "u a(x,y,z) t(z) t(x) t(y) u",
			[]string{"4:move-result:y", "5:move-result:x"}},
		{"duplicate result", "u a(x) t(x) t(x) a", "u a(x) t(x) a", []string{"3:drop-duplicate-result:x"}},
		{"duplicate result later", "u a(x) t(x) u t(x)", "u a(x) t(x) u", []string{"4:drop-duplicate-result:x"}},
		{"reused call id across turns", "u a(x) t(x) u a(x) t(x)", "u a(x) t(x) u a(x) t(x)",
			nil},
		{"reused call id, fresh id skips ids in use", "a(x,x) t(x) t(x) a(x_2) t(x_2)", "a(x,x_3) t(x) t(x_3) a(x_2) t(x_2)",
			[]string{"0:rename-call-id:x_3", "2:rename-result-id:x_3"}},
		{"duplicate ids in one message", "u a(x,x) t(x) t(x)", "u a(x,x_2) t(x) t(x_2)",
			[]string{"1:rename-call-id:x_2", "3:rename-result-id:x_2"}},
		{"reused id, results swapped", "u a(x) a(x) t(x) t(x)", "u a(x) t(x) a(x_2) t(x_2)",
			[]string{"2:rename-call-id:x_2", "3:rename-result-id:x_2", "4:move-result:x"}},
		{"empty call id", "u a(_) t(_)", "u a(call_2) t(call_2)",
			[]string{"1:rename-call-id:call_2", "2:rename-result-id:call_2"}},
		{"empty call id without result", "u a(_) u", "u a(call_2) t!(call_2) u",
			[]string{"1:rename-call-id:call_2", "1:insert-missing-result:call_2"}},
		{"result before its call", "u t(x) a(x) a", "u a(x) t!(x) a",
			[]string{"1:drop-orphan-result:x", "2:insert-missing-result:x"}},
		{"tool call on a user message", "u(x) t(x) a", "u a",
			[]string{"0:drop-tool-call:x", "1:drop-orphan-result:x"}},
		{"everything at once", "t(q) u a(x,y) t(y) t(y) u(z) a(x) t(x) t(x)",
			"u a(x,y) t(y) t(x) u a(x_2) t(x_2)",
			[]string{"0:drop-orphan-result:q", "4:drop-duplicate-result:y", "5:drop-tool-call:z",
				"6:rename-call-id:x_2", "7:rename-result-id:x_2", "8:move-result:x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := hist(tt.in)
			before := cloneAll(in)
			out, changes := Repair(in)
			if got := notation(out); got != tt.want {
				t.Fatalf("Repair(%q) = %q, want %q", tt.in, got, tt.want)
			}
			var got []string
			for _, c := range changes {
				got = append(got, fmt.Sprintf("%d:%s:%s", c.Index, c.Kind, c.ToolCallID))
			}
			if !sameSet(got, tt.changes) {
				t.Fatalf("changes\n got %q\nwant %q", got, tt.changes)
			}
			for i := 1; i < len(changes); i++ {
				if changes[i].Index < changes[i-1].Index {
					t.Fatalf("changes not ordered by index: %v", changes)
				}
			}
			if !reflect.DeepEqual(in, before) {
				t.Fatal("input modified")
			}
			if err := Validate(out, ValidateOptions{}); err != nil {
				t.Fatalf("output invalid: %v", err)
			}
			if err := chat.Validate(out); err != nil {
				t.Fatalf("output rejected by chat.Validate: %v", err)
			}
			if len(changes) == 0 && !reflect.DeepEqual(out, in) {
				t.Fatal("no changes reported but output differs")
			}
			again, more := Repair(out)
			if len(more) != 0 || !reflect.DeepEqual(again, out) {
				t.Fatalf("not idempotent: %v", more)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestRepairSyntheticResult(t *testing.T) {
	in := hist("u a(x)")
	in[1].ToolCalls[0].Name = "read_file"
	out, changes := Repair(in)
	if len(out) != 3 || len(changes) != 1 {
		t.Fatalf("got %s, %v", notation(out), changes)
	}
	s := out[2]
	if s.Role != chat.RoleTool || s.ToolCallID != "x" || s.Name != "read_file" || !s.IsError ||
		s.Text() != MissingResultText || s.Meta[MetaSynthetic] != MetaSyntheticMissingResult {
		t.Fatalf("synthetic result %+v", s)
	}
	if c := changes[0]; c.Kind != InsertMissingResult || c.Index != 1 || c.Dropped() || !strings.Contains(c.String(), "insert-missing-result") {
		t.Fatalf("change %v", c)
	}
}

func TestRepairDoesNotAliasInput(t *testing.T) {
	in := hist("u a(x,x) t(x) t(x)")
	out, _ := Repair(in)
	out[1].ToolCalls[1].ID = "changed"
	if in[1].ToolCalls[1].ID != "x" {
		t.Fatal("renamed call shares ToolCalls with the input")
	}
	valid := hist("u a(x) t(x)")
	got, _ := Repair(valid)
	_ = append(got[:1], chat.TextMessage(chat.RoleUser, "overwrite"))
	if valid[1].Role != chat.RoleAssistant {
		t.Fatal("output shares its backing array with the input")
	}
}

func TestRepairToolMessageWithCalls(t *testing.T) {
	in := hist("u a(x) t(x) a")
	in[2].ToolCalls = []chat.ToolCall{{ID: "y", Name: "fn"}}
	out, changes := Repair(in)
	if notation(out) != "u a(x) t(x) a" || len(out[2].ToolCalls) != 0 {
		t.Fatalf("got %s", notation(out))
	}
	if len(changes) != 1 || changes[0].Kind != DropToolCall || changes[0].Index != 2 || changes[0].ToolCallID != "y" {
		t.Fatalf("changes %v", changes)
	}
	if len(in[2].ToolCalls) != 1 {
		t.Fatal("input modified")
	}
}

func TestRepairAnthropicJoin(t *testing.T) {
	// Anthropic user message [tool_result y, tool_result x] one turn late: both move back; the
	// second moved one joins the first so that the wire encoder keeps them in one user message.
	in := hist("u a(x,y) u t(y) t(x)")
	for i := range in {
		in[i].Wire = "anthropic"
	}
	in[4].JoinPrev = true
	in[3].JoinPrev = false
	out, _ := Repair(in)
	if notation(out) != "u a(x,y) t(x) t(y) u" {
		t.Fatalf("got %s", notation(out))
	}
	if !out[3].JoinPrev {
		t.Fatal("second result does not join the first")
	}
	if in[3].JoinPrev {
		t.Fatal("input modified")
	}
}

func TestChangeKindString(t *testing.T) {
	for k := DropOrphanResult; k <= DropToolCall; k++ {
		if s := k.String(); strings.HasPrefix(s, "ChangeKind(") {
			t.Errorf("kind %d has no name", k)
		}
	}
	if s := ChangeKind(99).String(); s != "ChangeKind(99)" {
		t.Errorf("got %q", s)
	}
}
