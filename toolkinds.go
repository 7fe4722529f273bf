package ctxmgr

import (
	"encoding/json"
	"path"
	"strconv"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
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

// builtinReadTools are the file-reading tools of common agents.
var builtinReadTools = []ReadTool{
	{Name: "Read", PathArg: "file_path", OffsetArg: "offset", LimitArg: "limit"},
	{Name: "read_file", PathArg: "file_path", OffsetArg: "offset", LimitArg: "limit", StartArg: "start_line", EndArg: "end_line"},
	{Name: "read_file", PathArg: "path", OffsetArg: "offset", LimitArg: "limit", StartArg: "start_line", EndArg: "end_line"},
	{Name: "view", PathArg: "path", RangeArg: "view_range"},
	{Name: "view_file", PathArg: "path", RangeArg: "view_range", StartArg: "start_line", EndArg: "end_line"},
	{Name: "str_replace_based_edit_tool", PathArg: "path", RangeArg: "view_range", CommandArg: "command", Command: "view"},
	{Name: "str_replace_editor", PathArg: "path", RangeArg: "view_range", CommandArg: "command", Command: "view"},
}

// shellTools are tool names whose "command" (or "cmd") argument is a shell command line.
var shellTools = map[string]bool{"Bash": true, "bash": true, "shell": true, "run_shell_command": true, "execute_shell_command": true,
	"execute_bash": true, "run_command": true, "terminal": true, "exec": true, "exec_command": true, "shell_exec": true}

// searchTools are tool names whose calls search (their arguments are the pattern and scope).
var searchTools = map[string]bool{"Grep": true, "Glob": true, "grep": true, "search": true, "search_files": true, "grep_search": true, "find_files": true, "LS": true, "list_dir": true, "list_directory": true}

// actionKind says what a tool call does, as far as context management cares.
type actionKind uint8

const (
	actOther   actionKind = iota
	actRead               // reads a file (or a range of it)
	actSearch             // searches or lists: its result is what the pattern matches now
	actCommand            // runs a shell command (a test run, git diff, ls)
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

// covers reports whether a later action b shows everything a showed.
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

// classify says what a call does, from its tool name and arguments. extra are declarations
// of the library user (Config.ReadTools), tried first.
func classify(tc chat.ToolCall, extra []ReadTool) toolAction {
	var args map[string]json.RawMessage
	if json.Unmarshal([]byte(tc.Arguments), &args) != nil {
		args = nil
	}
	for _, list := range [][]ReadTool{extra, builtinReadTools} {
		for i := range list {
			if a, ok := list[i].match(tc.Name, args); ok {
				return a
			}
		}
	}
	if shellTools[tc.Name] {
		cmd := argString(args, "command")
		if cmd == "" {
			cmd = argString(args, "cmd")
		}
		if cmd != "" {
			return classifyShell(cmd)
		}
	}
	if searchTools[tc.Name] {
		return toolAction{kind: actSearch, key: tc.Name + " " + canonicalArgs(tc.Arguments)}
	}
	return toolAction{kind: actOther, key: tc.Name + " " + canonicalArgs(tc.Arguments)}
}

func (rt *ReadTool) match(name string, args map[string]json.RawMessage) (toolAction, bool) {
	if rt.Name != name || args == nil {
		return toolAction{}, false
	}
	if rt.CommandArg != "" && argString(args, rt.CommandArg) != rt.Command {
		return toolAction{}, false
	}
	p := argString(args, rt.PathArg)
	if p == "" {
		return toolAction{}, false
	}
	a := toolAction{kind: actRead, key: cleanPath(p), from: 1}
	if off, ok := argInt(args, rt.OffsetArg); ok && off > 0 {
		a.from = off
	}
	if lim, ok := argInt(args, rt.LimitArg); ok && lim > 0 {
		a.to = a.from + lim - 1
	}
	if s, ok := argInt(args, rt.StartArg); ok && s > 0 {
		a.from = s
	}
	if e, ok := argInt(args, rt.EndArg); ok && e > 0 {
		a.to = e
	}
	if rt.RangeArg != "" {
		var r []int
		if raw, ok := args[rt.RangeArg]; ok && json.Unmarshal(raw, &r) == nil && len(r) == 2 {
			a.from = max(1, r[0])
			if r[1] > 0 {
				a.to = r[1]
			}
		}
	}
	if a.to > 0 && a.to < a.from {
		a.to = a.from
	}
	return a, true
}

// classifyShell recognises the file reads of a shell command line (cat FILE, nl FILE,
// sed -n 'A,Bp' FILE, head -n N FILE); any other command is keyed by its normalized text, so
// that the same command run again (a test run, git diff, ls) is known as such.
func classifyShell(cmd string) toolAction {
	f := strings.Fields(cmd)
	norm := strings.Join(f, " ")
	if strings.ContainsAny(norm, "|;&><`$") {
		return toolAction{kind: actCommand, key: norm}
	}
	switch {
	case len(f) == 2 && f[0] == "cat", len(f) == 3 && f[0] == "nl" && f[1] == "-ba":
		return toolAction{kind: actRead, key: cleanPath(f[len(f)-1]), from: 1}
	case len(f) == 4 && f[0] == "sed" && f[1] == "-n":
		rg := strings.Trim(f[2], `'"`)
		if a, b, ok := strings.Cut(strings.TrimSuffix(rg, "p"), ","); ok && strings.HasSuffix(rg, "p") {
			from, e1 := strconv.Atoi(a)
			to, e2 := strconv.Atoi(b)
			if e1 == nil && e2 == nil && from > 0 && to >= from {
				return toolAction{kind: actRead, key: cleanPath(f[3]), from: from, to: to}
			}
		}
	case len(f) == 4 && f[0] == "head" && f[1] == "-n":
		if n, err := strconv.Atoi(f[2]); err == nil && n > 0 {
			return toolAction{kind: actRead, key: cleanPath(f[3]), from: 1, to: n}
		}
	}
	return toolAction{kind: actCommand, key: norm}
}

// cleanPath normalizes a path so that "./a/b.py", "a//b.py" and "a/b.py" are one file. An
// absolute and a relative spelling stay different (the working directory is unknown).
func cleanPath(p string) string { return path.Clean(strings.TrimSpace(p)) }

func argString(args map[string]json.RawMessage, k string) string {
	if k == "" || args == nil {
		return ""
	}
	var s string
	if json.Unmarshal(args[k], &s) == nil {
		return s
	}
	return ""
}

func argInt(args map[string]json.RawMessage, k string) (int, bool) {
	if k == "" || args == nil {
		return 0, false
	}
	raw, ok := args[k]
	if !ok {
		return 0, false
	}
	var n float64
	if json.Unmarshal(raw, &n) == nil {
		return int(n), true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			return v, true
		}
	}
	return 0, false
}

// canonicalArgs is the arguments with keys sorted and spacing removed (encoding/json sorts map
// keys), or the text as is when it is not a JSON object.
func canonicalArgs(s string) string {
	var v map[string]any
	if json.Unmarshal([]byte(s), &v) != nil {
		return strings.TrimSpace(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return strings.TrimSpace(s)
	}
	return string(b)
}
