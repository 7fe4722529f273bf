package replay

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Long-run generator: realistic, deterministic coding-agent sessions for tests and tuning,
// made from a seed (never downloaded). The shared data never gets past 78K tokens, so it never
// asks the questions that long runs ask: the same file viewed again and again, tests re-run
// with mostly identical output, `git diff` and `ls` again, 5-30 KB outputs, 100K+ tokens.
//
// Two kinds of session:
//   - LongRunCoding: a task message, 50-150 tool calls in one of three tool dialects (Claude
//     Code's Read/Grep/Edit/Bash, SWE-agent's str_replace_based_edit_tool/bash, and the
//     OpenAI-style read_file/run_shell_command of QwenPaw-like agents): listings, greps, whole
//     file views (Read, cat), ranged views (offset/limit, sed -n, view_range), edits followed by
//     re-views, test re-runs, git diff. The assistant names what the latest outputs show (the
//     failing test, the error line, the identifiers of the code it reads) and, now and then,
//     something from an older output, as agents do.
//   - LongRunQuote: a Claude Code session that reads long documents in chunks with Read
//     {file_path, offset, limit}, one chunk after another, seldom naming what it read, and
//     then writes one answer quoting from every chunk.
//
// The seeds are split in two disjoint sets (see LongRunTuningSeeds and LongRunHeldOutSeeds):
// tune on one, claim on the other.

// Long-run kinds.
const (
	LongRunCoding = "coding"
	LongRunQuote  = "quote"
)

// LongRunTuningSeeds are the seeds strategies may be tuned on.
func LongRunTuningSeeds() []uint64 { return []uint64{1, 2, 3, 4, 5, 6, 7, 8} }

// LongRunHeldOutSeeds are the seeds results are claimed on; never tune on them.
func LongRunHeldOutSeeds() []uint64 {
	return []uint64{1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008}
}

// LongRuns generates one session of the given kind per seed, deterministically. set names the
// set the runs are totalled under.
func LongRuns(kind, set string, seeds []uint64) ([]Trajectory, error) {
	out := make([]Trajectory, 0, len(seeds))
	for _, seed := range seeds {
		var t Trajectory
		switch kind {
		case LongRunCoding:
			t = codingRun(seed)
		case LongRunQuote:
			t = quoteRun(seed)
		default:
			return nil, fmt.Errorf("replay: unknown long-run kind %q (known: %s, %s)", kind, LongRunCoding, LongRunQuote)
		}
		t.Set = set
		t.Name = fmt.Sprintf("%s/%s-%d", set, kind, seed)
		out = append(out, t)
	}
	return out, nil
}

var (
	lrVerbs = []string{"parse", "load", "build", "validate", "resolve", "encode", "decode", "fetch", "store", "render", "apply", "merge", "normalize", "collect", "dispatch", "compile"}
	lrNouns = []string{"config", "request", "handler", "cache", "token", "session", "schema", "field", "record", "queue", "worker", "client", "buffer", "header", "payload", "router", "index", "option"}
	lrDirs  = []string{"core", "api", "utils", "storage", "models", "cli", "net", "auth"}
)

// lrRepo is the synthetic repository a coding run works in.
type lrRepo struct {
	paths []string
	files map[string][]string
	// defs are the functions each file defines, in order.
	defs map[string][]string
}

func lrIdent(r *rand.Rand) string {
	return fmt.Sprintf("%s_%s_%d", lrVerbs[r.IntN(len(lrVerbs))], lrNouns[r.IntN(len(lrNouns))], r.IntN(100))
}

func lrCamel(r *rand.Rand) string {
	n := lrNouns[r.IntN(len(lrNouns))]
	v := lrVerbs[r.IntN(len(lrVerbs))]
	return strings.ToUpper(n[:1]) + n[1:] + strings.ToUpper(v[:1]) + v[1:] + "er"
}

// lrCodeLines makes n lines of Python-like code defining functions of a few classes.
func lrCodeLines(r *rand.Rand, n int) ([]string, []string) {
	var lines, defs []string
	for len(lines) < n {
		cls := lrCamel(r)
		lines = append(lines, fmt.Sprintf("class %s(Base%s):", cls, lrCamel(r)), fmt.Sprintf("    \"\"\"%s keeps the %s of one %s.\"\"\"", cls, lrNouns[r.IntN(len(lrNouns))], lrNouns[r.IntN(len(lrNouns))]), "")
		for k := 0; k < 3+r.IntN(5) && len(lines) < n; k++ {
			fn := lrIdent(r)
			defs = append(defs, fn)
			arg := lrNouns[r.IntN(len(lrNouns))]
			lines = append(lines, fmt.Sprintf("    def %s(self, %s, strict=False):", fn, arg))
			for b := 0; b < 3+r.IntN(9); b++ {
				switch r.IntN(5) {
				case 0:
					lines = append(lines, fmt.Sprintf("        value_%d = %s.get(%q, DEFAULT_%s)", b, arg, lrNouns[r.IntN(len(lrNouns))], strings.ToUpper(lrNouns[r.IntN(len(lrNouns))])))
				case 1:
					lines = append(lines, fmt.Sprintf("        if not self.%s(%s):", lrIdent(r), arg), fmt.Sprintf("            raise %sError(\"invalid %s\")", lrCamel(r), arg))
				case 2:
					lines = append(lines, fmt.Sprintf("        # %s the %s before the %s is used", lrVerbs[r.IntN(len(lrVerbs))], lrNouns[r.IntN(len(lrNouns))], lrNouns[r.IntN(len(lrNouns))]))
				case 3:
					lines = append(lines, fmt.Sprintf("        self._%s = %s(%s, timeout=%d)", lrNouns[r.IntN(len(lrNouns))], lrIdent(r), arg, r.IntN(120)))
				default:
					lines = append(lines, fmt.Sprintf("        for item in self.%s_list:", lrNouns[r.IntN(len(lrNouns))]), fmt.Sprintf("            item.%s(%s)", lrIdent(r), arg))
				}
			}
			lines = append(lines, fmt.Sprintf("        return self.%s(%s)", lrIdent(r), arg), "")
		}
	}
	return lines[:n], defs
}

func newRepo(r *rand.Rand) *lrRepo {
	repo := &lrRepo{files: map[string][]string{}, defs: map[string][]string{}}
	nf := 10 + r.IntN(8)
	for i := 0; i < nf; i++ {
		p := fmt.Sprintf("src/%s/%s_%s.py", lrDirs[r.IntN(len(lrDirs))], lrNouns[r.IntN(len(lrNouns))], lrVerbs[r.IntN(len(lrVerbs))])
		if _, dup := repo.files[p]; dup {
			continue
		}
		// 5-30 KB whole: 100-600 lines of about 50 bytes.
		lines, defs := lrCodeLines(r, 100+r.IntN(500))
		repo.paths = append(repo.paths, p)
		repo.files[p], repo.defs[p] = lines, defs
	}
	slices.Sort(repo.paths)
	return repo
}

// numbered renders lines[from:to] with cat -n style numbers (1-based).
func numbered(lines []string, from, to int) string {
	var b strings.Builder
	for i := from; i < to && i < len(lines); i++ {
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, lines[i])
	}
	return b.String()
}

func plain(lines []string, from, to int) string {
	var b strings.Builder
	for i := from; i < to && i < len(lines); i++ {
		b.WriteString(lines[i])
		b.WriteByte('\n')
	}
	return b.String()
}

// dialect is one agent's tool set: how it lists, greps, views, edits and runs.
type dialect struct {
	name   string
	system string
	tools  []chat.Tool
}

func jsonArgs(kv ...any) string {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func objTool(name, desc string, props ...string) chat.Tool {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i, p := range props {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:{\"type\":\"string\"}", p)
	}
	b.WriteString("}}")
	return chat.Tool{Name: name, Description: desc, Parameters: []byte(b.String())}
}

var dialects = []dialect{
	{name: "claude-code", system: "You are Claude Code, an interactive CLI coding agent. Use the Read, Grep, Edit and Bash tools.",
		tools: []chat.Tool{objTool("Read", "Read a file", "file_path", "offset", "limit"), objTool("Grep", "Search file contents", "pattern", "path"),
			objTool("Edit", "Replace a string in a file", "file_path", "old_string", "new_string"), objTool("Bash", "Run a shell command", "command")}},
	{name: "swe-agent", system: "You are an autonomous programmer working in /repo with a file editor and a shell.",
		tools: []chat.Tool{objTool("str_replace_based_edit_tool", "View and edit files", "command", "path", "view_range", "old_str", "new_str"), objTool("bash", "Run a command", "command")}},
	{name: "openai", system: "You are a helpful coding assistant. Read files with read_file and run commands with run_shell_command.",
		tools: []chat.Tool{objTool("read_file", "Read a file, optionally a line range", "path", "start_line", "end_line"), objTool("run_shell_command", "Run a shell command", "command"),
			objTool("edit_file", "Replace text in a file", "path", "old_text", "new_text")}},
}

// codingState is a coding run in the making.
type codingState struct {
	r       *rand.Rand
	d       dialect
	repo    *lrRepo
	t       *Trajectory
	call    int
	failing []string // failing test names
	errLine string   // where the current failure points
	target  string   // the file being fixed
	edits   []string // diff hunks so far
	seen    []string // identifiers of older outputs the agent may come back to
	tests   []string
	// pendingNote is what the agent says about the latest output, carried into its next call.
	pendingNote string
	lastEdit    int // line of the latest edit (-1: none)
}

func (c *codingState) id() string {
	c.call++
	return fmt.Sprintf("toolu_%d_%03d", c.r.Uint32()%100000, c.call)
}

// step appends one assistant call and its result.
func (c *codingState) step(thought, tool, args, result string) {
	id := c.id()
	c.t.Messages = append(c.t.Messages, chat.Message{Role: chat.RoleAssistant,
		Content:   []chat.Part{{Type: chat.PartText, Text: thought}},
		ToolCalls: []chat.ToolCall{{ID: id, Name: tool, Arguments: args}}})
	c.t.Messages = append(c.t.Messages, chat.ToolResult(id, tool, result, false))
}

// pick returns k identifiers found in text (its salient lines), for the next thought.
func pickIdents(r *rand.Rand, text string, k int) []string {
	var ids []string
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, "def "); i >= 0 {
			if j := strings.IndexByte(l[i+4:], '('); j > 0 {
				ids = append(ids, l[i+4:i+4+j])
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var out []string
	for n := 0; n < k; n++ {
		out = append(out, ids[r.IntN(len(ids))])
	}
	return out
}

func (c *codingState) remember(ids ...string) {
	c.seen = append(c.seen, ids...)
	if len(c.seen) > 40 {
		c.seen = c.seen[len(c.seen)-40:]
	}
}

// older returns an identifier from an older output, or "".
func (c *codingState) older() string {
	if len(c.seen) < 8 || c.r.IntN(4) != 0 {
		return ""
	}
	return c.seen[c.r.IntN(len(c.seen)-4)]
}

func (c *codingState) viewWhole(p string) {
	lines := c.repo.files[p]
	var tool, args, out string
	switch c.d.name {
	case "claude-code":
		tool, args, out = "Read", jsonArgs("file_path", "/repo/"+p), numbered(lines, 0, len(lines))
	case "swe-agent":
		if c.r.IntN(2) == 0 {
			tool, args, out = "str_replace_based_edit_tool", jsonArgs("command", "view", "path", "/repo/"+p), "Here's the result of running `cat -n` on /repo/"+p+":\n"+numbered(lines, 0, len(lines))
		} else {
			tool, args, out = "bash", jsonArgs("command", "cat "+p), plain(lines, 0, len(lines))
		}
	default:
		tool, args, out = "read_file", jsonArgs("path", p), numbered(lines, 0, len(lines))
	}
	ids := pickIdents(c.r, out, 3)
	th := c.thought(fmt.Sprintf("Let me read %s to see how %s is implemented.", p, c.errLine))
	if o := c.older(); o != "" {
		th += fmt.Sprintf(" It may relate to %s seen earlier.", o)
	}
	c.step(th, tool, args, out)
	c.remember(ids...)
	c.note(fmt.Sprintf("In %s, %s calls %s; %s looks relevant.", p, ids[0], ids[1], ids[2]))
}

// note records what the agent says about the latest output: it goes into the text of its next
// call, as agents comment on a result before acting on it.
func (c *codingState) note(s string) { c.pendingNote = s }

func (c *codingState) thought(s string) string {
	if c.pendingNote != "" {
		s = c.pendingNote + " " + s
		c.pendingNote = ""
	}
	return s
}

func (c *codingState) viewRange(p string, from, n int) {
	lines := c.repo.files[p]
	from = min(from, max(0, len(lines)-n))
	to := min(len(lines), from+n)
	var tool, args, out string
	switch c.d.name {
	case "claude-code":
		if c.r.IntN(3) == 0 {
			tool, args, out = "Bash", jsonArgs("command", fmt.Sprintf("sed -n '%d,%dp' %s", from+1, to, p)), plain(lines, from, to)
		} else {
			tool, args, out = "Read", jsonArgs("file_path", "/repo/"+p, "offset", from+1, "limit", to-from), numbered(lines, from, to)
		}
	case "swe-agent":
		tool, args, out = "str_replace_based_edit_tool", jsonArgs("command", "view", "path", "/repo/"+p, "view_range", []int{from + 1, to}), "Here's the result of running `cat -n` on /repo/"+p+":\n"+numbered(lines, from, to)
	default:
		if c.r.IntN(3) == 0 {
			tool, args, out = "run_shell_command", jsonArgs("command", fmt.Sprintf("sed -n '%d,%dp' %s", from+1, to, p)), plain(lines, from, to)
		} else {
			tool, args, out = "read_file", jsonArgs("path", p, "start_line", from+1, "end_line", to), numbered(lines, from, to)
		}
	}
	ids := pickIdents(c.r, out, 2)
	c.step(c.thought(fmt.Sprintf("Viewing %s lines %d-%d.", p, from+1, to)), tool, args, out)
	if len(ids) == 2 {
		c.remember(ids...)
		c.note(fmt.Sprintf("Lines %d-%d of %s define %s and %s.", from+1, to, p, ids[0], ids[1]))
	}
}

func (c *codingState) shell(cmd, out string) {
	tool := map[string]string{"claude-code": "Bash", "swe-agent": "bash", "openai": "run_shell_command"}[c.d.name]
	c.step(c.thought(fmt.Sprintf("Running `%s`.", cmd)), tool, jsonArgs("command", cmd), out)
}

func (c *codingState) ls() {
	var b strings.Builder
	for _, p := range c.repo.paths {
		fmt.Fprintf(&b, "-rw-r--r-- 1 dev dev %6d Mar  3 10:%02d %s\n", len(plain(c.repo.files[p], 0, 1<<30)), len(p)%60, p)
	}
	c.shell("ls -la src/*/", b.String())
}

func (c *codingState) grep(ident string) {
	var b strings.Builder
	for _, p := range c.repo.paths {
		for i, l := range c.repo.files[p] {
			if strings.Contains(l, ident) {
				fmt.Fprintf(&b, "%s:%d:%s\n", p, i+1, l)
			}
		}
	}
	out := b.String()
	if out == "" {
		out = "(no matches)\n"
	}
	switch c.d.name {
	case "claude-code":
		c.step(c.thought(fmt.Sprintf("Searching for %s.", ident)), "Grep", jsonArgs("pattern", ident, "path", "/repo/src"), out)
	default:
		c.shell("grep -rn "+ident+" src/", out)
	}
}

func (c *codingState) runTests() {
	var b strings.Builder
	fmt.Fprintf(&b, "============================= test session starts ==============================\nplatform linux -- Python 3.11.4, pytest-7.4.0\ncollected %d items\n\n", len(c.tests))
	for _, tn := range c.tests {
		status := "PASSED"
		if slices.Contains(c.failing, tn) {
			status = "FAILED"
		}
		fmt.Fprintf(&b, "tests/test_%s.py::%s %s\n", strings.SplitN(tn, "_", 3)[1], tn, status)
	}
	for _, tn := range c.failing {
		fmt.Fprintf(&b, "\n___________________________ %s ___________________________\n    def %s():\n>       assert result == expected\nE       AssertionError: %s returned None\n\n%s: AssertionError\n", tn, tn, c.errLine, c.errLine)
	}
	fmt.Fprintf(&b, "\n======================== %d failed, %d passed in 4.21s =========================\n", len(c.failing), len(c.tests)-len(c.failing))
	c.shell("python -m pytest tests/ -v", b.String())
	if len(c.failing) > 0 {
		c.note(fmt.Sprintf("%s still fails at %s.", c.failing[0], c.errLine))
	} else {
		c.note("All tests pass now.")
	}
}

func (c *codingState) edit() {
	p := c.target
	lines := c.repo.files[p]
	i := c.r.IntN(len(lines))
	old := lines[i]
	nw := fmt.Sprintf("        %s = self.%s(strict=True)  # fix", lrIdent(c.r), lrIdent(c.r))
	lines = slices.Clone(lines)
	lines[i] = nw
	c.repo.files[p] = lines
	c.edits = append(c.edits, fmt.Sprintf("diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n@@ -%d,3 +%d,3 @@\n %s\n-%s\n+%s\n %s\n", p, p, p, p, i, i, lines[max(0, i-1)], old, nw, lines[min(len(lines)-1, i+1)]))
	th := c.thought(fmt.Sprintf("I will change line %d of %s.", i+1, p))
	switch c.d.name {
	case "claude-code":
		c.step(th, "Edit", jsonArgs("file_path", "/repo/"+p, "old_string", strings.TrimSpace(old), "new_string", strings.TrimSpace(nw)), "The file /repo/"+p+" has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n"+numbered(lines, max(0, i-4), i+5))
	case "swe-agent":
		c.step(th, "str_replace_based_edit_tool", jsonArgs("command", "str_replace", "path", "/repo/"+p, "old_str", strings.TrimSpace(old), "new_str", strings.TrimSpace(nw)), "The file /repo/"+p+" has been edited. Here's the result of running `cat -n` on a snippet of /repo/"+p+":\n"+numbered(lines, max(0, i-4), i+5)+"Review the changes and make sure they are as expected.")
	default:
		c.step(th, "edit_file", jsonArgs("path", p, "old_text", strings.TrimSpace(old), "new_text", strings.TrimSpace(nw)), "Edited "+p+": 1 replacement.")
	}
	c.lastEdit = i
}

func (c *codingState) diff() {
	c.shell("git diff", strings.Join(c.edits, ""))
}

func codingRun(seed uint64) Trajectory {
	r := rand.New(rand.NewPCG(seed, 0x10a9))
	d := dialects[seed%uint64(len(dialects))]
	repo := newRepo(r)
	t := Trajectory{System: []chat.Message{chat.TextMessage(chat.RoleSystem, d.system)}, Tools: d.tools}
	c := &codingState{r: r, d: d, repo: repo, t: &t, lastEdit: -1}
	c.target = repo.paths[r.IntN(len(repo.paths))]
	defs := repo.defs[c.target]
	fn := defs[r.IntN(len(defs))]
	for k := 0; k < 150+r.IntN(250); k++ {
		c.tests = append(c.tests, "test_"+lrNouns[r.IntN(len(lrNouns))]+"_"+lrIdent(r))
	}
	c.failing = []string{c.tests[r.IntN(len(c.tests))], c.tests[r.IntN(len(c.tests))]}
	c.errLine = fmt.Sprintf("%s:%d in %s", c.target, 1+r.IntN(len(repo.files[c.target])), fn)
	t.Messages = append(t.Messages, chat.TextMessage(chat.RoleUser, fmt.Sprintf(
		"The test %s fails since the last release: %s raises AssertionError. Find the cause in %s and fix it without breaking the other tests.", c.failing[0], fn, c.target)))
	calls := 50 + r.IntN(101)
	c.ls()
	c.runTests()
	c.grep(fn)
	for c.call < calls {
		switch x := r.IntN(100); {
		case x < 8:
			c.ls()
		case x < 18:
			c.grep(c.seenOr(fn))
		case x < 30:
			// Whole files: the target most often, else another one.
			p := c.target
			if r.IntN(3) == 0 {
				p = repo.paths[r.IntN(len(repo.paths))]
			}
			c.viewWhole(p)
		case x < 60:
			p := c.target
			if r.IntN(4) == 0 {
				p = repo.paths[r.IntN(len(repo.paths))]
			}
			from := r.IntN(len(repo.files[p]))
			if c.lastEdit >= 0 && p == c.target && r.IntN(2) == 0 {
				from = max(0, c.lastEdit-20)
			}
			c.viewRange(p, from, 30+r.IntN(170))
		case x < 72:
			c.edit()
			if r.IntN(2) == 0 {
				c.viewRange(c.target, max(0, c.lastEdit-15), 40)
			}
		case x < 88:
			c.runTests()
			if len(c.failing) > 0 && r.IntN(3) == 0 {
				// A fix took: the failure moves on.
				c.failing = c.failing[1:]
				if len(c.failing) == 0 && c.call < calls*2/3 {
					c.failing = []string{c.tests[r.IntN(len(c.tests))]}
				}
				defs := repo.defs[c.target]
				c.errLine = fmt.Sprintf("%s:%d in %s", c.target, 1+r.IntN(len(repo.files[c.target])), defs[r.IntN(len(defs))])
			}
		default:
			c.diff()
		}
	}
	c.diff()
	t.Messages = append(t.Messages, chat.TextMessage(chat.RoleAssistant, c.thought(fmt.Sprintf("Done: %s is fixed in %s; %d edits, see the diff above.", c.failing0(), c.target, len(c.edits)))))
	return t
}

func (c *codingState) seenOr(def string) string {
	if len(c.seen) > 0 && c.r.IntN(2) == 0 {
		return c.seen[c.r.IntN(len(c.seen))]
	}
	return def
}

func (c *codingState) failing0() string {
	if len(c.failing) > 0 {
		return c.failing[0]
	}
	return "the failing test"
}

// quoteRun is a Claude Code session that reads long documents in chunks and quotes them.
func quoteRun(seed uint64) Trajectory {
	r := rand.New(rand.NewPCG(seed, 0x9007e))
	d := dialects[0]
	t := Trajectory{System: []chat.Message{chat.TextMessage(chat.RoleSystem, d.system)}, Tools: d.tools}
	ndocs := 1 + r.IntN(2)
	type doc struct {
		path  string
		lines []string
	}
	var docs []doc
	for k := 0; k < ndocs; k++ {
		var lines []string
		n := 500 + r.IntN(1000)
		for len(lines) < n {
			sec := fmt.Sprintf("## %d.%d %s %s", len(lines)/100+1, r.IntN(9)+1, strings.ToUpper(lrNouns[r.IntN(len(lrNouns))][:1])+lrNouns[r.IntN(len(lrNouns))][1:], lrVerbs[r.IntN(len(lrVerbs))])
			lines = append(lines, sec, "")
			for p := 0; p < 4+r.IntN(12); p++ {
				lines = append(lines, fmt.Sprintf("The %s_%s option (default %d) controls how %s.%s handles %s; see RFC-%d section %d.%d.",
					lrNouns[r.IntN(len(lrNouns))], lrNouns[r.IntN(len(lrNouns))], r.IntN(1000), lrCamel(r), lrIdent(r), lrNouns[r.IntN(len(lrNouns))], 1000+r.IntN(8000), r.IntN(20), r.IntN(20)))
			}
			lines = append(lines, "")
		}
		docs = append(docs, doc{path: fmt.Sprintf("/home/user/docs/%s_%s_spec.md", lrNouns[r.IntN(len(lrNouns))], lrVerbs[r.IntN(len(lrVerbs))]), lines: lines})
	}
	var names []string
	for _, d := range docs {
		names = append(names, d.path)
	}
	t.Messages = append(t.Messages, chat.TextMessage(chat.RoleUser, fmt.Sprintf("Read %s in full and quote, for every section, the exact option names and defaults it documents. Then list all the RFC references.", strings.Join(names, " and "))))
	type chunk struct{ quotes []string }
	var chunks []chunk
	call := 0
	for _, dc := range docs {
		step := 120 + r.IntN(180) // 120-300 lines a chunk: 12-30 KB
		for off := 0; off < len(dc.lines); off += step {
			call++
			id := fmt.Sprintf("toolu_q%d_%03d", seed, call)
			// As real agents do, it reads on without quoting and quotes from every chunk in
			// its final answer; now and then it names a term of the chunk it just read.
			th := fmt.Sprintf("Reading %s from line %d.", dc.path, off+1)
			if len(chunks) > 0 && r.IntN(4) == 0 {
				th = "Noted " + chunks[len(chunks)-1].quotes[0] + ". " + th
			}
			t.Messages = append(t.Messages, chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: th}},
				ToolCalls: []chat.ToolCall{{ID: id, Name: "Read", Arguments: jsonArgs("file_path", dc.path, "offset", off+1, "limit", step)}}})
			out := numbered(dc.lines, off, off+step)
			t.Messages = append(t.Messages, chat.ToolResult(id, "Read", out, false))
			var qs []string
			for q := 0; q < 4; q++ {
				l := dc.lines[off+r.IntN(min(step, len(dc.lines)-off))]
				if f := strings.Fields(l); len(f) > 6 && strings.HasPrefix(l, "The ") {
					qs = append(qs, fmt.Sprintf("\"%s %s %s\" (%s)", f[1], f[2], f[3], f[7]))
				}
			}
			if len(qs) == 0 {
				qs = []string{fmt.Sprintf("line %d", off+1)}
			}
			chunks = append(chunks, chunk{quotes: qs})
		}
	}
	var fin strings.Builder
	fin.WriteString("Here are the quotes:\n")
	for _, ch := range chunks {
		fin.WriteString("- " + strings.Join(ch.quotes, "; ") + "\n")
	}
	t.Messages = append(t.Messages, chat.TextMessage(chat.RoleAssistant, fin.String()))
	return t
}
