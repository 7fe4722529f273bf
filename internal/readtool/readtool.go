// Package readtool defines ctxmgr_read, the tool through which a model reads back what context
// management moved out of its conversation. The proxy declares it and answers it; replay
// prices its definition in every managed request, as the proxy sends it.
package readtool

import (
	"encoding/json"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Name is the tool's name.
const Name = "ctxmgr_read"

// Tool is the tool's definition: {"ref": string, "from_line": int}, as small as it can be,
// since every request of a conversation with tools carries it. The proxy also takes "lines"
// (default 200); every answer says how to go on.
var Tool = chat.Tool{
	Name:        Name,
	Description: "Read the text a [ctxmgr] note names by its ref.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"ref":{"type":"string"},"from_line":{"type":"integer"}},"required":["ref"]}`),
}

// With returns tools with the read tool appended (a new slice).
func With(tools []chat.Tool) []chat.Tool {
	out := make([]chat.Tool, 0, len(tools)+1)
	out = append(out, tools...)
	return append(out, Tool)
}

// Declared reports whether a conversation whose client declares tools gets the read tool: when
// the client declares tools of its own (an agent, whose tool results context management may
// move out), the tool is declared from the first request managed, and never added or removed
// later, so the tool list, the head of every cached prefix, stays the same for the whole
// conversation; a conversation without tools never gets it.
func Declared(tools []chat.Tool) bool {
	for _, t := range tools {
		if t.Name != Name {
			return true
		}
	}
	return false
}
