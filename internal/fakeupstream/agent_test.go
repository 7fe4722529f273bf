package fakeupstream

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

func agentTools(t *testing.T, specs ...string) []chat.Tool {
	t.Helper()
	var out []chat.Tool
	for _, s := range specs {
		name, schema, _ := strings.Cut(s, "=")
		if !json.Valid([]byte(schema)) {
			t.Fatalf("bad schema %s", schema)
		}
		out = append(out, chat.Tool{Name: name, Parameters: json.RawMessage(schema)})
	}
	return out
}

func userText(s string) chat.Message {
	return chat.Message{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartText, Text: s}}}
}

// TestAgentScript plays a whole script with Claude Code's Bash and Read tools, through a
// history that loses its first message midway (as a compacted one does).
func TestAgentScript(t *testing.T) {
	s := New(Options{})
	tools := agentTools(t,
		`Task={"type":"object","properties":{"prompt":{"type":"string"}},"required":["prompt"]}`,
		`Bash={"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number"}},"required":["command"]}`,
		`Read={"type":"object","properties":{"file_path":{"type":"string"},"limit":{"type":"number"}},"required":["file_path"]}`)
	msgs := []chat.Message{userText("<system-reminder>x</system-reminder>"), userText("go [e2e-agent steps=3 dir=/tmp/d] now")}
	var got []string
	for i := 0; i < 4; i++ {
		rep, ok := s.agentScript(&chat.Request{Tools: tools, Messages: msgs})
		if !ok {
			t.Fatalf("step %d: not in the script", i+1)
		}
		if rep.kind == "text" {
			got = append(got, rep.text)
			break
		}
		c := rep.calls[0]
		got = append(got, c.name+" "+c.args)
		msgs = append(msgs, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: c.id, Name: c.name, Arguments: c.args}}},
			chat.Message{Role: chat.RoleTool, ToolCallID: c.id, Content: []chat.Part{{Type: chat.PartText, Text: "output"}}})
		msgs = msgs[1:] // the oldest message goes, as in a compaction
	}
	want := []string{
		`Bash {"command":"cat /tmp/d/step-1-of-3.txt"}`,
		`Read {"file_path":"/tmp/d/step-2-of-3.txt"}`,
		`Bash {"command":"cat /tmp/d/step-3-of-3.txt"}`,
		"e2e-agent done: 3 steps.",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("script:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// After the final answer, a new user text is outside the script.
	msgs = append(msgs, chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: want[3]}}}, userText("thanks"))
	if _, ok := s.agentScript(&chat.Request{Tools: tools, Messages: msgs}); ok {
		t.Fatal("the script went on after its final answer")
	}
}

// TestAgentScriptSchemas: Codex's argv shell, a command tool with other required fields, a
// request without usable tools (a side request), and no marker.
func TestAgentScriptSchemas(t *testing.T) {
	s := New(Options{})
	start := []chat.Message{userText("[e2e-agent steps=2 dir=/w]"), {Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "c1", Name: "x", Arguments: `{"cmd":"cat /w/step-1-of-2.txt"}`}}},
		{Role: chat.RoleTool, ToolCallID: "c1", Content: []chat.Part{{Type: chat.PartText, Text: "1"}}}}
	cases := []struct {
		name  string
		tools []chat.Tool
		want  string // "" : not in the script
	}{
		{"codex shell", agentTools(t, `update_plan={"type":"object","properties":{"plan":{"type":"array"}},"required":["plan"]}`,
			`shell={"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},"workdir":{"type":"string"}},"required":["command"]}`),
			`shell {"command":["bash","-lc","cat /w/step-2-of-2.txt"]}`},
		{"codex exec_command beside view_image", agentTools(t, `view_image={"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`, `exec_command={"type":"object","properties":{"cmd":{"type":"string"},"yield_time_ms":{"type":"integer"},"login":{"type":["boolean","null"]}},"required":["cmd","yield_time_ms"]}`),
			`exec_command {"cmd":"cat /w/step-2-of-2.txt","yield_time_ms":0}`},
		{"no usable tool", agentTools(t, `Task={"type":"object","properties":{"prompt":{"type":"string"}}}`), ""},
		{"no tools", nil, ""},
	}
	for _, c := range cases {
		rep, ok := s.agentScript(&chat.Request{Tools: c.tools, Messages: start})
		got := ""
		if ok {
			got = rep.calls[0].name + " " + rep.calls[0].args
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	if _, ok := s.agentScript(&chat.Request{Tools: cases[0].tools, Messages: []chat.Message{userText("hello")}}); ok {
		t.Error("a text without the marker entered the script")
	}
}
