package ctxmgr

import (
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/toolkind"
)

// ReadTool declares a tool whose calls read a file (Config.ReadTools). Line numbers are 1-based.
type ReadTool struct {
	// Name is the tool's name; PathArg the argument holding the file's path.
	Name    string
	PathArg string
	// OffsetArg and LimitArg, when set, hold the first line and the number of lines (Claude
	// Code's Read: offset, limit).
	OffsetArg, LimitArg string
	// StartArg and EndArg, when set, hold the first and the last line (start_line, end_line).
	StartArg, EndArg string
	// RangeArg, when set, holds [first, last] (SWE-agent's view_range; last -1: to the end).
	RangeArg string
	// CommandArg and Command, when set, restrict the declaration to calls whose CommandArg
	// argument is Command (str_replace_based_edit_tool with command "view").
	CommandArg, Command string
}

// actionKind says what a tool call does, as far as context management cares (toolkind.Kind).
type actionKind = toolkind.Kind

const (
	actOther   = toolkind.Other
	actRead    = toolkind.Read    // reads a file (or a range of it)
	actSearch  = toolkind.Search  // searches or lists: its result is what the pattern matches now
	actCommand = toolkind.Command // runs a shell command (a test run, git diff, ls)
)

// toolAction is what one call shows: for a read, the file and the lines (from, to: 1-based,
// inclusive; to 0 means to the end); for others, a key under which a later call shows the same
// thing again.
type toolAction struct {
	tool     string // the tool's name
	kind     actionKind
	key      string
	from, to int
}

// ranged reports whether a read asked for a line range rather than the whole file.
func (a toolAction) ranged() bool { return a.kind == actRead && (a.from > 1 || a.to > 0) }

// coveredBy reports whether a later action b shows everything a showed.
func (a toolAction) coveredBy(b toolAction) bool {
	if a.kind != b.kind || a.key != b.key || a.kind == actOther {
		return false
	}
	if a.kind != actRead {
		return true
	}
	if b.from <= 1 && b.to == 0 {
		return true
	}
	return a.to > 0 && b.from <= a.from && (b.to == 0 || b.to >= a.to)
}

// requested reports whether the agent asked for this result explicitly and narrowly: a file
// read (a range, or a whole file by name) or a search with a pattern.
func (a toolAction) requested() bool { return a.kind == actRead || a.kind == actSearch }

// classify says what a call does (toolkind.Classify). extra are declarations of the library
// user (Config.ReadTools), tried before the built-in ones.
func classify(tc chat.ToolCall, decl []toolkind.ReadTool) toolAction {
	a := toolkind.Classify(tc, decl)
	return toolAction{kind: a.Kind, key: a.Key, from: a.From, to: a.To}
}
