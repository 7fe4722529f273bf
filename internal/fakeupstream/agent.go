package fakeupstream

// The agent script: the fake plays a model that drives a real agent (Claude Code, Codex CLI, an
// SDK's tool loop) through a fixed number of tool-using steps, with tool calls that the agent
// accepts and executes, and then answers with a final text.
//
// A conversation enters the script with a user text holding the marker
//
//	[e2e-agent steps=N dir=/absolute/dir]
//
// (N from 1 to 1000). Step k (1..N) calls one of the offered tools on the file
// DIR/step-k-of-N.txt, which the test creates beforehand:
//   - a shell tool (Claude Code's Bash {"command": "..."}, Codex's shell {"command": ["bash",
//     "-lc", "..."]} or exec_command {"cmd": "..."}, or any tool whose schema has a "command" or
//     "cmd" property, string or array of strings) runs `cat FILE`;
//   - a read tool (a tool whose schema has a "file_path" property, such as Claude Code's Read,
//     or a "path" property on a tool whose name says "read") reads FILE; on even steps when
//     both kinds are offered.
//
// Other required properties of the chosen tool's schema are filled with neutral values (a
// string "e2e", 0, false), so the arguments validate against the schema.
//
// The state is kept in the conversation itself, not in the fake: the step and the step count
// are read back from the file name in the arguments of the newest assistant tool call, so a
// history compacted by the proxy (which keeps the newest turn) continues the script; when a
// user text (a summary standing for the whole history) is newer than any such call, from the
// newest step file it names. After
// step N's result the fake answers "e2e-agent done: N steps." and the script ends.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

var (
	agentMarker = regexp.MustCompile(`\[e2e-agent steps=(\d+) dir=(/[^\]\s]*)\]`)
	agentStep   = regexp.MustCompile(`(/[^"'\s\\]*)/step-(\d+)-of-(\d+)\.txt`)
)

// AgentDone is the start of the final answer of an agent script.
const AgentDone = "e2e-agent done: "

// agentTool is a tool of the request that the script can call.
type agentTool struct {
	name string
	// arg is the property that takes the command or the path; array: it takes an argv.
	arg   string
	array bool
	shell bool
	// fill holds the other required properties with neutral values.
	fill map[string]any
}

// agentScript decides the reply of a request that is inside an agent script; ok is false
// when the request is not (the fake's ordinary rules apply).
func (s *Server) agentScript(req *chat.Request) (reply, bool) {
	msgs := req.Messages
	if len(msgs) == 0 {
		return reply{}, false
	}
	// The newest of: a user text with a marker (the script starts), an assistant tool call on
	// a step file (the script goes on), a final answer of the script (it is over).
	marker, stepAt := -1, -1
	var dir string
	var step, steps int
scan:
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		switch m.Role {
		case chat.RoleUser:
			text := allText(m)
			// A summary that stands for the history before it (a compaction the client
			// asked for) names the step files done, and may quote the marker: the script
			// goes on after the newest step.
			for _, g := range agentStep.FindAllStringSubmatch(text, -1) {
				if k, _ := strconv.Atoi(g[2]); k > step {
					stepAt, dir, step = i, g[1], k
					steps, _ = strconv.Atoi(g[3])
				}
			}
			if stepAt >= 0 {
				break scan
			}
			if g := agentMarker.FindStringSubmatch(text); g != nil {
				marker = i
				steps, _ = strconv.Atoi(g[1])
				dir = g[2]
				break scan
			}
		case chat.RoleAssistant:
			for _, tc := range m.ToolCalls {
				if g := agentStep.FindStringSubmatch(tc.Arguments); g != nil {
					stepAt = i
					dir = g[1]
					step, _ = strconv.Atoi(g[2])
					steps, _ = strconv.Atoi(g[3])
					break scan
				}
			}
			if len(m.ToolCalls) == 0 && strings.HasPrefix(m.Text(), AgentDone) {
				return reply{}, false
			}
		}
	}
	if marker < 0 && stepAt < 0 || steps < 1 || steps > 1000 {
		return reply{}, false
	}
	last := &msgs[len(msgs)-1]
	if stepAt >= 0 {
		// Continue only once the newest step's results came back.
		if last.Role == chat.RoleAssistant {
			return reply{}, false
		}
		if step >= steps {
			return reply{kind: "text", text: fmt.Sprintf("%s%d steps.", AgentDone, steps)}, true
		}
	} else {
		step = 0
	}
	next := step + 1
	tool, ok := pickAgentTool(req.Tools, next)
	if !ok {
		return reply{}, false // a side request without the agent's tools
	}
	file := fmt.Sprintf("%s/step-%d-of-%d.txt", dir, next, steps)
	args := map[string]any{}
	for k, v := range tool.fill {
		args[k] = v
	}
	switch {
	case !tool.shell:
		args[tool.arg] = file
	case tool.array:
		args[tool.arg] = []string{"bash", "-lc", "cat " + file}
	default:
		args[tool.arg] = "cat " + file
	}
	b, err := json.Marshal(args)
	if err != nil {
		return reply{kind: "text", text: "e2e-agent: " + err.Error()}, true
	}
	return reply{kind: "tool_call", text: fmt.Sprintf("Step %d of %d.", next, steps),
		calls: []call{{id: s.id("call"), name: tool.name, args: string(b)}}}, true
}

// allText joins every text part of m.
func allText(m *chat.Message) string {
	var b strings.Builder
	for _, p := range m.Content {
		if p.Type == chat.PartText {
			b.WriteString(p.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Tool names preferred, in order, when several tools fit.
var (
	shellNames = []string{"Bash", "shell", "exec_command", "shell_command", "bash", "run_command"}
	readNames  = []string{"Read", "read_file", "read"}
)

// pickAgentTool chooses the tool of step n: a read tool on even steps when one is offered,
// else a shell tool, else a read tool.
func pickAgentTool(tools []Tool, n int) (agentTool, bool) {
	var shells, reads []agentTool
	for _, t := range tools {
		if t.Raw != nil || t.Name == "ctxmgr_read" {
			continue
		}
		if at, ok := classifyTool(t); ok {
			if at.shell {
				shells = append(shells, at)
			} else {
				reads = append(reads, at)
			}
		}
	}
	shell, hasShell := preferred(shells, shellNames)
	read, hasRead := preferred(reads, readNames)
	switch {
	case hasRead && (n%2 == 0 || !hasShell):
		return read, true
	case hasShell:
		return shell, true
	}
	return agentTool{}, false
}

// Tool is chat.Tool; the alias keeps the signatures short.
type Tool = chat.Tool

func preferred(ts []agentTool, names []string) (agentTool, bool) {
	for _, n := range names {
		for _, t := range ts {
			if t.name == n {
				return t, true
			}
		}
	}
	if len(ts) > 0 {
		return ts[0], true
	}
	return agentTool{}, false
}

type schemaProp struct {
	Type  any `json:"type"`
	Items *struct {
		Type any `json:"type"`
	} `json:"items"`
}

// classifyTool says whether t takes a command (shell) or a path (read), from its JSON schema.
func classifyTool(t chat.Tool) (agentTool, bool) {
	var schema struct {
		Properties map[string]schemaProp `json:"properties"`
		Required   []string              `json:"required"`
	}
	if len(t.Parameters) == 0 || json.Unmarshal(t.Parameters, &schema) != nil {
		return agentTool{}, false
	}
	at := agentTool{name: t.Name}
	for _, k := range []string{"command", "cmd"} {
		if p, ok := schema.Properties[k]; ok {
			switch {
			case hasType(p.Type, "string"):
				at.arg, at.shell = k, true
			case hasType(p.Type, "array") && p.Items != nil && hasType(p.Items.Type, "string"):
				at.arg, at.shell, at.array = k, true, true
			}
			if at.arg != "" {
				break
			}
		}
	}
	if at.arg == "" {
		// A read tool: "file_path", or "path" on a tool named for reading (not Codex's
		// view_image, which takes a path too).
		for _, k := range []string{"file_path", "path"} {
			if p, ok := schema.Properties[k]; ok && hasType(p.Type, "string") &&
				(k == "file_path" || strings.Contains(strings.ToLower(t.Name), "read")) {
				at.arg = k
				break
			}
		}
	}
	if at.arg == "" {
		return agentTool{}, false
	}
	at.fill = map[string]any{}
	for _, k := range schema.Required {
		if k == at.arg {
			continue
		}
		p := schema.Properties[k]
		switch {
		case hasType(p.Type, "string"):
			at.fill[k] = "e2e"
		case hasType(p.Type, "integer"), hasType(p.Type, "number"):
			at.fill[k] = 0
		case hasType(p.Type, "boolean"):
			at.fill[k] = false
		case hasType(p.Type, "array"):
			at.fill[k] = []any{}
		case hasType(p.Type, "null"):
			at.fill[k] = nil
		default:
			return agentTool{}, false // a required property the script cannot fill
		}
	}
	return at, true
}

// hasType reports whether a JSON schema "type" (a string or a list) includes want.
func hasType(t any, want string) bool {
	switch v := t.(type) {
	case string:
		return v == want
	case []any:
		for _, x := range v {
			if x == want {
				return true
			}
		}
	}
	return false
}
