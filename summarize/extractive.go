package summarize

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// ExtractiveOptions configures the extractive summarizer.
type ExtractiveOptions struct {
	// Counter measures the summary against Request.TargetTokens. Default: ByteCounter.
	Counter TokenCounter
	// ScanBytes bounds the work per message: the first ScanBytes and the last ScanBytes/4
	// bytes of each message are scanned, whatever its size. Default 32768.
	ScanBytes int
	// TranscriptCap bounds the transcript of the prompt an LLM would have been sent, which
	// Result.InputTokens counts. Default DefaultTranscriptCap.
	TranscriptCap int
}

// NewExtractive returns the extractive summarizer: deterministic, no LLM, the default.
//
// It fills the sections of Headings from the messages themselves and merges them into the
// previous summary (parsed back into items: older items are kept, new ones added, duplicates
// dropped, and the least important, then the oldest, trimmed first when over the target):
//
//   - Goal: the first user request (the contents of a <pr_description>/<task>/<issue> tag
//     when there is one) and the latest one when a later request changes direction.
//   - Constraints & Preferences: user sentences with must, don't, never, always, should,
//     prefer, only, without, keep, avoid, make sure, ...
//   - Progress: every tool call (and every fenced shell command of a text-only agent such as
//     mini-swe-agent) with its key argument and outcome: exit codes (<returncode>N</returncode>,
//     "exit code N", "Exit status N"), the telling error line (a traceback's last line, lines
//     with Error, error:, FAILED, panic:, fatal:). Failures are Blocked unless the same call
//     later succeeded; calls without a result are In Progress.
//   - Key Decisions: assistant sentences with "I will", "decided", "instead", "because",
//     "the fix is", ...
//   - Next Steps: the plan of the last assistant message and the pending calls.
//   - Critical Context: file paths, identifiers (snake_case, CamelCase, dotted.names), URLs,
//     ids and error messages, most mentioned (assistant and user mentions weigh more than tool
//     output) and most recent first.
//
// The summary starts with Request.ArchiveGuide verbatim, then "# Conversation summary", a
// "Covers messages A-B." line, the instruction note, and the sections; it fits
// Request.TargetTokens by the counter (unless the guide and headings alone do not). Simple
// instructions are obeyed: "keep only decisions" keeps Key Decisions and Critical Context;
// "no next steps" empties that section; "shorter"/"brief" halves the target; words and
// names in the instruction rank matching items first.
//
// Work is linear in the input and bounded per message (see ScanBytes), so a 50 MB tool result
// costs what its first and last kilobytes cost.
func NewExtractive(opts ExtractiveOptions) Summarizer {
	if opts.Counter == nil {
		opts.Counter = ByteCounter{}
	}
	if opts.ScanBytes <= 0 {
		opts.ScanBytes = 32768
	}
	if opts.TranscriptCap <= 0 {
		opts.TranscriptCap = DefaultTranscriptCap
	}
	return &extractive{opts: opts}
}

type extractive struct{ opts ExtractiveOptions }

// Summarize implements Summarizer. It fails only when ctx is already done.
func (e *extractive) Summarize(ctx context.Context, req Request) (res Result, err error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	defer func() {
		if r := recover(); r != nil {
			res, err = Result{}, fmt.Errorf("summarize: extractive: internal error: %v", r)
		}
	}()
	sp := parseInstruction(req.Instruction)
	text := e.summarize(&req, &sp)
	system, user := buildPrompt(req, &sp, e.opts.TranscriptCap)
	return Result{
		Text:         text,
		InputTokens:  safeCount(e.opts.Counter, system) + safeCount(e.opts.Counter, user),
		OutputTokens: safeCount(e.opts.Counter, text),
		Summarizer:   "extractive",
	}, nil
}

func (e *extractive) summarize(req *Request, sp *instrSpec) string {
	d := &doc{instruction: sp.raw}
	if strings.TrimSpace(req.ArchiveGuide) != "" {
		d.guide = validUTF8(req.ArchiveGuide)
	}
	parsePrevious(d, req.Previous)
	a := analyze(req.Messages, req.First, e.opts.ScanBytes)
	a.merge(d, sp)
	if n := len(req.Messages); n > 0 {
		last := req.First + n - 1
		if d.hasCov {
			d.covFrom = min(d.covFrom, req.First)
			d.covTo = max(d.covTo, last)
		} else {
			d.covFrom, d.covTo, d.hasCov = req.First, last, req.First >= 0
		}
	}
	for g := range numGroups {
		if !sp.included(g) {
			d.omitted[g] = true
		}
	}
	for p := range numParts {
		if d.omitted[partGroup[p]] {
			d.parts[p] = nil
		} else if len(sp.terms) > 0 {
			for i := range d.parts[p] {
				if sp.boost(d.parts[p][i].text) {
					d.parts[p][i].prio += 20
				}
			}
		}
	}
	if d.omitted[gContext] {
		d.ents = nil
	}
	target := req.TargetTokens
	if sp.shorter {
		if target > 0 {
			target = max(1, target/2)
		} else {
			target = 1000
		}
	}
	return fit(d, target, e.opts.Counter)
}

// ---- analysis of the messages ----------------------------------------------------------------

type outcome struct {
	pos     int
	code    int
	hasCode bool
	failed  bool
	errLine string
}

type call struct {
	name, arg string
	pos       int
	res       *outcome
}

// key renders a call for Progress: "`name` `key argument`" (backticks inside made quotes).
func (c *call) key() string {
	name := strings.ReplaceAll(c.name, "`", "'")
	if c.arg == "" {
		return "`" + name + "`"
	}
	return "`" + name + "` `" + strings.ReplaceAll(c.arg, "`", "'") + "`"
}

type request struct {
	pos  int
	text string
}

type entAcc struct {
	name   string
	kind   entKind
	weight int
	last   int
}

type analysis struct {
	first, n    int
	requests    []request
	constraints []item
	decisions   []item
	calls       []*call
	byID        map[string]*call
	// lastThought is the last assistant text; lastActs whether that message acted.
	lastThought    string
	lastThoughtPos int
	endsWithReply  bool
	ents           map[string]*entAcc
}

var (
	// Keyword sets, matched against lowercased sentences (shouted: the original case).
	constraintKW = newKeywords("must", "mustn't", "never", "always", "should", "shouldn't", "prefer", "preferably", "only", "without", "keep", "avoid", "make sure", "ensure", "cannot", "can't", "required", "no need", "don't", "do not", "must not", "should not", "not allowed")
	strongConstr = newKeywords("must", "mustn't", "never", "always", "only", "cannot", "can't", "don't", "do not", "must not", "not allowed")
	decisionKW   = newKeywords("decided", "decide to", "decision", "instead", "the fix is", "the fix will", "the solution is", "root cause", "the issue is", "the problem is", "because", "chose", "choose to", "going with", "switch to", "switched to", "rather than", "i will", "i'll", "i am going to", "i'm going to", "we will", "we'll", "let's")
	strongDecide = newKeywords("decided", "decide to", "decision", "instead", "the fix is", "the fix will", "the solution is", "root cause", "the issue is", "the problem is", "because", "chose", "choose to", "going with", "switch to", "switched to", "rather than")
	shouted      = newKeywords("MUST", "NEVER", "DO NOT", "DON'T", "ALWAYS", "ONLY", "IMPORTANT", "CRITICAL")
	planKW       = newKeywords("next", "then", "i will", "i'll", "i need to", "need to", "plan", "going to", "let me", "let's", "will", "todo", "remaining", "after that", "finally")
)

// keywords matches whole words and multi-word phrases (plain regexps with many alternatives
// were the summarizer's main cost).
type keywords struct {
	words   map[string]bool
	phrases []string
}

func newKeywords(list ...string) keywords {
	k := keywords{words: map[string]bool{}}
	for _, w := range list {
		if strings.ContainsRune(w, ' ') {
			k.phrases = append(k.phrases, w)
		} else {
			k.words[w] = true
		}
	}
	return k
}

// MatchString reports whether s contains one of the words (delimited by non-letters other
// than the apostrophe) or phrases.
func (k keywords) MatchString(s string) bool {
	for _, p := range k.phrases {
		for off := 0; off < len(s); {
			i := strings.Index(s[off:], p)
			if i < 0 {
				break
			}
			i += off
			if (i == 0 || !isWordByte(s[i-1])) && (i+len(p) == len(s) || !isWordByte(s[i+len(p)])) {
				return true
			}
			off = i + 1
		}
	}
	start := -1
	for i := 0; i <= len(s); i++ {
		if i < len(s) && isWordByte(s[i]) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			if k.words[s[start:i]] {
				return true
			}
			start = -1
		}
	}
	return false
}

func isWordByte(c byte) bool { return isLower(c) || isUpper(c) || c == '\'' }

// lower lowercases s for keyword matching, with typographic apostrophes made plain.
func lower(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "’", "'")
}

var (
	modifyRe = regexp.MustCompile(`(?i)(sed -i|>|\btee\b|\bpatch\b|\bgit (apply|commit)|\bpip install\b|\bpytest\b|\btest|\bpython\b|\bgo (test|build)\b|\bmake\b|\bnpm (test|run)\b|\bwrite|\bedit|\bcreate|\bapply|\bupdate|\bdelete|\bcancel|\bbook)`)
)

// harnessFeedback are the starts of user messages that an agent harness (not the user) sends
// when the model's action was malformed; they are neither requests nor command outputs.
var harnessFeedback = []string{
	"Please always provide EXACTLY ONE action",
	"Please format your action",
	"Format error",
}

func analyze(msgs []chat.Message, first, scan int) *analysis {
	a := &analysis{first: first, n: len(msgs), byID: map[string]*call{}, ents: map[string]*entAcc{}}
	var textActs []*call // fenced shell commands of the previous assistant message, awaiting output
	for i := range msgs {
		m := &msgs[i]
		pos := first + i
		w := textWindow(m.Content, scan, scan/4)
		switch m.Role {
		case chat.RoleUser:
			head := strings.TrimSpace(firstBytes(w.head, 256))
			switch {
			case strings.Contains(firstBytes(head, 64), "<returncode>") || strings.HasPrefix(head, "<output>") || strings.HasPrefix(head, "Observation:"):
				o := analyzeOutcome(w, false, pos)
				for _, c := range textActs {
					oc := o
					c.res = &oc
				}
				textActs = nil
				a.entities(w, 1, pos, false)
				if o.failed && o.errLine != "" {
					a.addEnt(o.errLine, entError, 3, pos)
				}
			case hasAnyPrefix(head, harnessFeedback):
				// The actions were not executed.
				a.dropCalls(textActs)
				textActs = nil
			default:
				a.dropCalls(textActs)
				textActs = nil
				a.userRequest(w, pos)
			}
		case chat.RoleAssistant:
			a.dropCalls(textActs)
			textActs = nil
			all := w.all()
			acted := false
			for j := range m.ToolCalls {
				if j >= 64 {
					break
				}
				tc := &m.ToolCalls[j]
				name := oneLine(tc.Name, 64)
				if name == "" {
					name = "tool"
				}
				c := &call{name: name, arg: keyArg(tc.Arguments), pos: pos}
				a.calls = append(a.calls, c)
				if tc.ID != "" {
					a.byID[tc.ID] = c
				}
				acted = true
				args := tc.Arguments
				if len(args) > scan {
					args = args[:scan]
				}
				a.entitiesText(validUTF8(args), 3, pos, true)
			}
			if len(m.ToolCalls) == 0 {
				for _, cmd := range shellBlocks(all, 8) {
					c := &call{name: "bash", arg: commandKey(cmd), pos: pos}
					a.calls = append(a.calls, c)
					textActs = append(textActs, c)
					acted = true
				}
			}
			a.entities(w, 3, pos, true)
			if strings.TrimSpace(all) != "" {
				a.lastThought, a.lastThoughtPos = all, pos
				a.assistantDecisions(all, pos)
			}
			a.endsWithReply = !acted && strings.TrimSpace(all) != ""
		case chat.RoleTool:
			o := analyzeOutcome(w, m.IsError, pos)
			c := a.byID[m.ToolCallID]
			if c == nil || c.res != nil {
				name := oneLine(m.Name, 64)
				if name == "" {
					name = "tool"
				}
				c = &call{name: name, arg: "", pos: pos}
				if m.ToolCallID != "" {
					c.arg = "id=" + oneLine(m.ToolCallID, 40)
				}
				a.calls = append(a.calls, c)
			}
			c.res = &o
			a.entities(w, 1, pos, false)
			if o.failed && o.errLine != "" {
				a.addEnt(o.errLine, entError, 3, pos)
			}
		default:
			// System (and unknown) messages: their names matter, their rules are not the user's.
			a.entities(w, 1, pos, false)
		}
	}
	return a
}

func hasAnyPrefix(s string, ps []string) bool {
	for _, p := range ps {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// dropCalls removes text actions that were never executed.
func (a *analysis) dropCalls(cs []*call) {
	if len(cs) == 0 {
		return
	}
	drop := map[*call]bool{}
	for _, c := range cs {
		drop[c] = true
	}
	out := a.calls[:0]
	for _, c := range a.calls {
		if !drop[c] {
			out = append(out, c)
		}
	}
	a.calls = out
}

func analyzeOutcome(w window, isErr bool, pos int) outcome {
	o := outcome{pos: pos}
	o.code, o.hasCode = exitCode(w)
	line, st := bestErrorLine(w)
	o.failed = isErr || (o.hasCode && o.code != 0) || (!o.hasCode && st >= 3)
	if o.failed {
		o.errLine = line
	}
	return o
}

// keyArg returns the telling argument of a tool call: the command, path, url or query when
// there is one, else the first one or two arguments as key=value; the raw text when the
// arguments are not a JSON object.
func keyArg(args string) string {
	t := strings.TrimSpace(args)
	if t == "" || t == "{}" {
		return ""
	}
	if len(t) > 1<<16 || t[0] != '{' {
		return oneLine(validUTF8(firstBytes(t, 512)), 120)
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return oneLine(validUTF8(firstBytes(t, 512)), 120)
	}
	type kv struct{ k, v string }
	var pairs []kv
	for dec.More() && len(pairs) < 32 {
		kt, err := dec.Token()
		if err != nil {
			break
		}
		k, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = string(raw)
		}
		pairs = append(pairs, kv{k, s})
	}
	if len(pairs) == 0 {
		return oneLine(validUTF8(firstBytes(t, 512)), 120)
	}
	for _, pref := range []string{"command", "cmd", "path", "file_path", "filepath", "file", "filename", "url", "query", "pattern"} {
		for _, p := range pairs {
			if strings.EqualFold(p.k, pref) {
				return oneLine(validUTF8(p.v), 120)
			}
		}
	}
	out := oneLine(pairs[0].k, 40) + "=" + oneLine(pairs[0].v, 80)
	if len(pairs) > 1 {
		out += ", " + oneLine(pairs[1].k, 40) + "=" + oneLine(pairs[1].v, 60)
	}
	return oneLine(validUTF8(out), 160)
}

// commandKey shortens a shell command for Progress: its first line when it has several (a
// heredoc's first line names the file it writes), at most 120 bytes.
func commandKey(cmd string) string {
	if first, _, ok := strings.Cut(cmd, "\n"); ok && len(strings.TrimSpace(first)) >= 8 {
		return oneLine(first, 116) + " ..."
	}
	return oneLine(cmd, 120)
}

var trivialRequests = map[string]bool{
	"continue": true, "go on": true, "ok": true, "okay": true, "yes": true, "y": true, "no": true, "thanks": true,
	"thank you": true, "proceed": true, "go ahead": true, "sure": true, "keep going": true, "next": true, "done": true,
}

// requestTags are tags whose contents are the request itself in harness-built prompts.
var requestTags = []string{"pr_description", "task", "issue", "problem_statement", "user_request", "request", "question"}

// requestText returns the request in a user message: the contents of a request tag when there
// is one (without a leading "Consider the following ...:" line), else the text.
func requestText(s string) string {
	for _, tag := range requestTags {
		open := "<" + tag + ">"
		if i := strings.Index(s, open); i >= 0 {
			inner := s[i+len(open):]
			if j := strings.Index(inner, "</"+tag+">"); j >= 0 {
				inner = inner[:j]
			}
			inner = strings.TrimSpace(inner)
			if nl := strings.IndexByte(inner, '\n'); nl > 0 && nl < 80 && strings.HasSuffix(strings.TrimSpace(inner[:nl]), ":") {
				inner = inner[nl+1:]
			}
			return inner
		}
	}
	return s
}

func (a *analysis) userRequest(w window, pos int) {
	all := w.all()
	req := oneLine(requestText(all), 400)
	if req != "" && !trivialRequests[strings.ToLower(strings.Trim(req, " .!"))] && len(req) >= 4 && !isNoneText(req) {
		a.requests = append(a.requests, request{pos: pos, text: req})
	}
	a.endsWithReply = false
	later := len(a.requests) > 1
	for k, s := range sentences(all, 240, 400) {
		low := lower(s)
		if !constraintKW.MatchString(low) {
			continue
		}
		prio := 20
		if strongConstr.MatchString(low) {
			prio = 30
		}
		if later {
			prio += 5 // a correction made later in the conversation
		}
		if shouted.MatchString(s) {
			prio += 3 // "DO NOT MODIFY", "MUST"
		}
		a.constraints = append(a.constraints, item{text: s, key: itemKey(s), prio: prio, seq: pos*1000 + k})
	}
	a.entities(w, 3, pos, true)
	// A pasted error.
	if line, st := bestErrorLine(w); st >= 3 {
		a.addEnt(line, entError, 3, pos)
	}
}

func (a *analysis) assistantDecisions(text string, pos int) {
	n := 0
	for k, s := range sentences(text, 240, 200) {
		low := lower(s)
		if !decisionKW.MatchString(low) {
			continue
		}
		prio := 45
		if strongDecide.MatchString(low) {
			prio = 55
		}
		a.decisions = append(a.decisions, item{text: s, key: itemKey(s), prio: prio, seq: pos*1000 + k})
		n++
		if n >= 6 {
			break
		}
	}
}

// entities counts the entities of a message window (each entity once per message).
func (a *analysis) entities(w window, weight, pos int, numbers bool) {
	seen := map[string]bool{}
	f := func(tok string) {
		if name, k, ok := classify(tok, numbers); ok {
			key := string(rune('0'+k)) + name
			if seen[key] {
				return
			}
			seen[key] = true
			a.addEnt(name, k, weight, pos)
		}
	}
	forEachToken(w.head, f)
	forEachToken(w.tail, f)
}

func (a *analysis) entitiesText(s string, weight, pos int, numbers bool) {
	a.entities(window{head: s, total: len(s)}, weight, pos, numbers)
}

func (a *analysis) addEnt(name string, k entKind, weight, pos int) {
	if name == "" {
		return
	}
	key := string(rune('0'+k)) + name
	e := a.ents[key]
	if e == nil {
		if len(a.ents) >= 20000 {
			return // bounded memory on pathological inputs
		}
		e = &entAcc{name: name, kind: k, last: pos}
		a.ents[key] = e
	}
	e.weight += weight
	e.last = max(e.last, pos)
}

// ---- merging into the summary ----------------------------------------------------------------

// merge adds the analysis to d (which holds the previous summary's items).
func (a *analysis) merge(d *doc, sp *instrSpec) {
	// Goal.
	if len(a.requests) > 0 {
		if len(d.parts[pGoal]) == 0 {
			r := a.requests[0]
			d.parts[pGoal] = append(d.parts[pGoal], item{text: r.text, key: itemKey(r.text), prio: 100, seq: r.pos * 1000})
			if len(a.requests) > 1 {
				l := a.requests[len(a.requests)-1]
				t := "Latest request (#" + strconv.Itoa(l.pos) + "): " + l.text
				if itemKey(l.text) != itemKey(r.text) {
					d.parts[pGoal] = append(d.parts[pGoal], item{text: t, key: itemKey(l.text), prio: 90, seq: l.pos * 1000})
				}
			}
		} else {
			// The previous latest request is now an earlier one.
			for i := range d.parts[pGoal] {
				if rest, ok := strings.CutPrefix(d.parts[pGoal][i].text, "Latest request"); ok {
					d.parts[pGoal][i].text = "Earlier request" + rest
				}
			}
			l := a.requests[len(a.requests)-1]
			t := "Latest request (#" + strconv.Itoa(l.pos) + "): " + l.text
			d.parts[pGoal] = append(d.parts[pGoal], item{text: t, key: itemKey(l.text), prio: 90, seq: l.pos * 1000})
		}
	}
	d.parts[pConstraints] = append(d.parts[pConstraints], a.constraints...)
	d.parts[pDecisions] = append(d.parts[pDecisions], a.decisions...)

	// Progress: one entry per distinct call, its latest outcome deciding Done or Blocked.
	type agg struct {
		c     *call
		count int
	}
	byKey := map[string]*agg{}
	var order []string
	for _, c := range a.calls {
		k := c.key()
		g := byKey[k]
		if g == nil {
			g = &agg{}
			byKey[k] = g
			order = append(order, k)
		}
		g.count++
		if c.res != nil || g.c == nil || g.c.res == nil {
			g.c = c // the latest call, preferring one that has a result
		}
	}
	var done, blocked, pending []item
	for _, k := range order {
		g := byKey[k]
		c := g.c
		ref := " (#" + strconv.Itoa(c.pos)
		if g.count > 1 {
			ref += ", x" + strconv.Itoa(g.count)
		}
		ref += ")"
		switch {
		case c.res == nil:
			ref = strings.TrimSuffix(ref, ")") + ", no result yet)"
			pending = append(pending, item{text: k + ref, key: itemKey(k), prio: 75, seq: c.pos * 1000})
		case c.res.failed:
			out := "failed"
			if c.res.hasCode {
				out = "exit " + strconv.Itoa(c.res.code)
			}
			if c.res.errLine != "" {
				out += ": " + c.res.errLine
			}
			blocked = append(blocked, item{text: oneLine(k+" → "+out+ref, 360), key: itemKey(k), prio: 70, seq: c.pos * 1000})
		default:
			prio := 40
			if modifyRe.MatchString(c.name + " " + c.arg) {
				prio = 45
			}
			done = append(done, item{text: oneLine(k+" → ok"+ref, 300), key: itemKey(k), prio: prio, seq: c.pos * 1000})
		}
	}
	// A call now done or blocked replaces its previous-summary entry in every subsection.
	fresh := map[string]bool{}
	for _, list := range [][]item{done, blocked, pending} {
		for _, it := range list {
			fresh[it.key] = true
		}
	}
	for _, p := range []part{pDone, pBlocked, pInProgress} {
		kept := d.parts[p][:0]
		for _, it := range d.parts[p] {
			if !fresh[it.key] {
				kept = append(kept, it)
			}
		}
		d.parts[p] = kept
	}
	d.parts[pDone] = append(d.parts[pDone], done...)
	d.parts[pBlocked] = append(d.parts[pBlocked], blocked...)

	// In Progress and Next Steps describe the present: new ones replace the previous ones.
	var inprog, next []item
	inprog = append(inprog, pending...)
	for _, it := range pending {
		t := "Check the result of " + strings.TrimSuffix(it.text, ", no result yet)") + ")"
		next = append(next, item{text: t, key: itemKey(t), prio: 70, seq: it.seq})
	}
	if a.lastThought != "" {
		ss := sentences(a.lastThought, 240, 60)
		if !a.endsWithReply && len(ss) > 0 {
			t := "Last step (#" + strconv.Itoa(a.lastThoughtPos) + "): " + ss[0]
			inprog = append(inprog, item{text: t, key: itemKey(t), prio: 60, seq: a.lastThoughtPos*1000 + 999})
		}
		k := 0
		for j, s := range ss {
			if j == 0 && !a.endsWithReply {
				continue
			}
			if planKW.MatchString(lower(s)) {
				next = append(next, item{text: s, key: itemKey(s), prio: 65, seq: a.lastThoughtPos*1000 + j})
				if k++; k >= 4 {
					break
				}
			}
		}
	}
	if a.n > 0 {
		d.parts[pInProgress] = inprog
		if len(next) > 0 || a.lastThought != "" {
			d.parts[pNext] = next
		}
	}

	// Critical Context: rank the entities.
	a.rankEntities(d, sp)
}

// kindWeight scales an entity kind's score: paths and errors are what an agent most often
// needs back verbatim.
var kindWeight = [numEntKinds]int{3, 2, 2, 2, 4, 2}

func (a *analysis) rankEntities(d *doc, sp *instrSpec) {
	merged := map[string]*entity{}
	var all []*entity
	key := func(name string, k entKind) string { return string(rune('0'+k)) + name }
	for i := range d.ents {
		e := d.ents[i]
		ec := e
		merged[key(e.name, e.kind)] = &ec
		all = append(all, &ec)
	}
	span := max(a.n, 1)
	for _, acc := range a.ents {
		s := acc.weight*100*kindWeight[acc.kind]/2 + 200*(acc.last-a.first+1)/span
		k := key(acc.name, acc.kind)
		if e := merged[k]; e != nil {
			e.score += s
			e.last = max(e.last, acc.last)
			continue
		}
		e := &entity{name: acc.name, kind: acc.kind, score: s, last: acc.last}
		merged[k] = e
		all = append(all, e)
	}
	// A bare file name already named by a full path adds nothing.
	base := map[string]bool{}
	for _, e := range all {
		if e.kind == entFile && strings.IndexByte(e.name, '/') >= 0 {
			b := e.name[strings.LastIndexByte(e.name, '/')+1:]
			base[b] = true
		}
	}
	out := make([]entity, 0, len(all))
	for _, e := range all {
		if e.kind == entFile && strings.IndexByte(e.name, '/') < 0 && base[e.name] {
			continue
		}
		if sp.boost(e.name) {
			e.score += 10000
		}
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if x.score != y.score {
			return x.score > y.score
		}
		if x.last != y.last {
			return x.last > y.last
		}
		if x.kind != y.kind {
			return x.kind < y.kind
		}
		return x.name < y.name
	})
	d.ents = out
}
