// Package readtool defines ctxmgr_read, the tool through which a model reads back what context
// management moved out of its conversation. The proxy declares it and answers it; replay
// prices its definition in every managed request, as the proxy sends it.
package readtool

import (
	"encoding/json"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
)

// Name is the tool's name.
const Name = "ctxmgr_read"

// Tool is the tool's definition: {"ref": string, "from_line": int, "lines": int}.
var Tool = chat.Tool{
	Name: Name,
	Description: "Read back text moved out of this conversation: ref is tool_result/ID from a [ctxmgr: ...] " +
		"note, or \"messages A-B\" from the summary. Returns the lines and says how to go on.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"ref":{"type":"string"},` +
		`"from_line":{"type":"integer","description":"default 1"},"lines":{"type":"integer","description":"default 200"}},` +
		`"required":["ref"]}`),
}

// With returns tools with the read tool appended (a new slice).
func With(tools []chat.Tool) []chat.Tool {
	out := make([]chat.Tool, 0, len(tools)+1)
	out = append(out, tools...)
	return append(out, Tool)
}

// Needed reports whether a session has content the model can only read back through the tool:
// evicted (archived) messages or offloaded, masked or truncated results. The proxy declares
// the tool from then on.
func Needed(st ctxmgr.Stats) bool {
	return st.Evicted > 0 || len(st.Offloads) > 0 || st.Masked > 0 || st.Truncated > 0
}
