// Package toolkind says what a tool call does, as far as context management cares, from its
// tool name and arguments: it reads a file (which lines), searches, runs a shell command, or
// something else, and under which key a later call shows the same thing again.
package toolkind

import (
	"encoding/json"
	"path"
	"strconv"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Kind says what a tool call does.
type Kind uint8

const (
	Other   Kind = iota
	Read         // reads a file (or a range of it)
	Search       // searches or lists: its result is what the pattern matches now
	Command      // runs a shell command (a test run, git diff, ls)
)

// Action is what one call shows: for a read, the file (Key) and the lines (From, To: 1-based,
// inclusive; To 0 means to the end); for others, a Key under which a later call shows the same
// thing again.
type Action struct {
	Kind     Kind
	Key      string
	From, To int
}

// ReadTool declares a tool whose calls read a file. Line numbers are 1-based. It has the
// fields of ctxmgr.ReadTool, which converts to it.
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

// Classify says what a call does, from its tool name and arguments: a file read by a declared
// tool (extra, tried first) or a built-in one (the file-reading tools of common agents), a
// file read or another command run by a shell tool, a search, or another call, keyed by its
// tool and its arguments in canonical form.
func Classify(tc chat.ToolCall, extra []ReadTool) Action {
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
		return Action{Kind: Search, Key: tc.Name + " " + canonicalArgs(tc.Arguments)}
	}
	return Action{Kind: Other, Key: tc.Name + " " + canonicalArgs(tc.Arguments)}
}

func (rt *ReadTool) match(name string, args map[string]json.RawMessage) (Action, bool) {
	if rt.Name != name || args == nil {
		return Action{}, false
	}
	if rt.CommandArg != "" && argString(args, rt.CommandArg) != rt.Command {
		return Action{}, false
	}
	p := argString(args, rt.PathArg)
	if p == "" {
		return Action{}, false
	}
	a := Action{Kind: Read, Key: cleanPath(p), From: 1}
	if off, ok := argInt(args, rt.OffsetArg); ok && off > 0 {
		a.From = off
	}
	if lim, ok := argInt(args, rt.LimitArg); ok && lim > 0 {
		a.To = a.From + lim - 1
	}
	if s, ok := argInt(args, rt.StartArg); ok && s > 0 {
		a.From = s
	}
	if e, ok := argInt(args, rt.EndArg); ok && e > 0 {
		a.To = e
	}
	if rt.RangeArg != "" {
		var r []int
		if raw, ok := args[rt.RangeArg]; ok && json.Unmarshal(raw, &r) == nil && len(r) == 2 {
			a.From = max(1, r[0])
			if r[1] > 0 {
				a.To = r[1]
			}
		}
	}
	if a.To > 0 && a.To < a.From {
		a.To = a.From
	}
	return a, true
}

// classifyShell recognises the file reads of a shell command line (cat FILE, nl FILE,
// sed -n 'A,Bp' FILE, head -n N FILE); any other command is keyed by its normalized text, so
// that the same command run again (a test run, git diff, ls) is known as such.
func classifyShell(cmd string) Action {
	f := strings.Fields(cmd)
	norm := strings.Join(f, " ")
	if strings.ContainsAny(norm, "|;&><`$") {
		return Action{Kind: Command, Key: norm}
	}
	switch {
	case len(f) == 2 && f[0] == "cat", len(f) == 3 && f[0] == "nl" && f[1] == "-ba":
		return Action{Kind: Read, Key: cleanPath(f[len(f)-1]), From: 1}
	case len(f) == 4 && f[0] == "sed" && f[1] == "-n":
		rg := strings.Trim(f[2], `'"`)
		if a, b, ok := strings.Cut(strings.TrimSuffix(rg, "p"), ","); ok && strings.HasSuffix(rg, "p") {
			from, e1 := strconv.Atoi(a)
			to, e2 := strconv.Atoi(b)
			if e1 == nil && e2 == nil && from > 0 && to >= from {
				return Action{Kind: Read, Key: cleanPath(f[3]), From: from, To: to}
			}
		}
	case len(f) == 4 && f[0] == "head" && f[1] == "-n":
		if n, err := strconv.Atoi(f[2]); err == nil && n > 0 {
			return Action{Kind: Read, Key: cleanPath(f[3]), From: 1, To: n}
		}
	}
	return Action{Kind: Command, Key: norm}
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
