package summarize

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
)

const guide = "Earlier messages are archived verbatim in dialog/2025-06-01.jsonl (messages 0-13); read them back with read_file."

// history is a constructed conversation: OpenAI-style tool calls, a mini-swe-agent-style
// fenced command with a <returncode> output, an error result, a pending call.
func history() []chat.Message {
	return []chat.Message{
		chat.TextMessage(chat.RoleUser, "Fix the failing test in pkg/store/file.go. You must not change the public API. Never delete tests. I prefer small commits."),
		assistantCalls("I will run the tests first to see the failure.", tcall("c1", "bash", `{"command":"go test ./pkg/store"}`)),
		chat.ToolResult("c1", "bash", "--- FAIL: TestAppend (0.00s)\n    file_test.go:42: open /tmp/x/dialog.jsonl: no such file or directory\nFAIL\nFAIL\tgithub.com/acme/app/pkg/store\t0.012s\nexit status 1", false),
		assistantCalls("The fix is to create the directory with os.MkdirAll before opening the file, because the store path may not exist yet.",
			tcall("c2", "edit_file", `{"path":"pkg/store/file.go","old":"f, err := os.OpenFile(p)","new":"os.MkdirAll(dir, 0o755)\nf, err := os.OpenFile(p)"}`)),
		chat.ToolResult("c2", "edit_file", "Edited pkg/store/file.go (1 replacement).", false),
		assistantCalls("", tcall("c3", "bash", `{"command":"go test ./pkg/store"}`)),
		chat.ToolResult("c3", "bash", "ok  \tgithub.com/acme/app/pkg/store\t0.015s\nexit status 0", false),
		chat.TextMessage(chat.RoleAssistant, "THOUGHT: Tests pass. Let me run the linter.\n\n```bash\ngolangci-lint run ./...\n```"),
		chat.TextMessage(chat.RoleUser, "<returncode>1</returncode>\n<output>\npkg/store/file.go:57:2: ineffectual assignment to err (ineffassign)\npkg/store/file.go:10:2: error: declared and not used: tmpDir (typecheck)\n</output>"),
		assistantCalls("Let me check the README for lint settings.", tcall("c4", "read_file", `{"path":"README.md"}`)),
		chat.ToolResult("c4", "read_file", "Error: file not found: README.md", true),
		chat.TextMessage(chat.RoleUser, "Also keep the changelog entry in CHANGELOG.md short, and don't touch vendor/."),
		assistantCalls("I decided to remove tmpDir instead of using it. Next I will rebuild with make build and then rerun the linter.",
			tcall("c5", "bash", `{"command":"make build"}`)),
	}
}

func summarizeExtractive(t testing.TB, req Request, opts ExtractiveOptions) Result {
	t.Helper()
	r, err := NewExtractive(opts).Summarize(context.Background(), req)
	if err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	return r
}

func TestExtractiveSections(t *testing.T) {
	r := summarizeExtractive(t, Request{Messages: history(), ArchiveGuide: guide, TargetTokens: 2000}, ExtractiveOptions{})
	s := r.Text
	t.Logf("\n%s", s)
	if !strings.HasPrefix(s, guide+"\n\n"+Title+"\n") {
		t.Errorf("summary does not start with the guide and the title:\n%s", s)
	}
	if !hasAllHeadings(s) {
		t.Fatalf("headings missing")
	}
	if !strings.Contains(s, "Covers messages 0-12.") {
		t.Errorf("no coverage line")
	}
	check := func(where, body string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q:\n%s", where, w, body)
			}
		}
	}
	check("Goal", section(s, "## Goal"), "Fix the failing test in pkg/store/file.go", "Latest request (#11): Also keep the changelog entry")
	check("Constraints", section(s, "## Constraints & Preferences"),
		"You must not change the public API.", "Never delete tests.", "I prefer small commits.", "don't touch vendor/")
	done := subsection(s, "### Done")
	check("Done", done, "`bash` `go test ./pkg/store` → ok (#5, x2)", "`edit_file` `pkg/store/file.go` → ok")
	blocked := subsection(s, "### Blocked")
	check("Blocked", blocked,
		"`bash` `golangci-lint run ./...` → exit 1: pkg/store/file.go:10:2: error: declared and not used: tmpDir (typecheck) (#7)",
		"`read_file` `README.md` → failed: Error: file not found: README.md (#9)")
	if strings.Contains(blocked, "go test") {
		t.Errorf("a failure fixed later is still Blocked:\n%s", blocked)
	}
	check("In Progress", subsection(s, "### In Progress"), "`bash` `make build` (#12, no result yet)")
	check("Key Decisions", section(s, "## Key Decisions"),
		"The fix is to create the directory with os.MkdirAll before opening the file, because the store path may not exist yet.",
		"I decided to remove tmpDir instead of using it.")
	check("Next Steps", section(s, "## Next Steps"), "make build", "Next I will rebuild with make build and then rerun the linter.")
	check("Critical Context", section(s, "## Critical Context"),
		"`pkg/store/file.go`", "`/tmp/x/dialog.jsonl`", "`os.MkdirAll`", "`CHANGELOG.md`", "`tmpDir`",
		"Error: pkg/store/file.go:10:2: error: declared and not used: tmpDir (typecheck)",
		"Error: Error: file not found: README.md")
	if r.Summarizer != "extractive" || r.Fallback || r.Attempts != 0 {
		t.Errorf("result metadata: %+v", r)
	}
}

func TestExtractiveTokens(t *testing.T) {
	req := Request{Messages: history(), Previous: "# Conversation summary\n## Goal\n- earlier goal\n", Instruction: "keep only decisions", ArchiveGuide: guide, TargetTokens: 800}
	r := summarizeExtractive(t, req, ExtractiveOptions{Counter: wordCounter{}})
	sp := parseInstruction(req.Instruction)
	system, user := buildPrompt(req, &sp, DefaultTranscriptCap)
	wc := wordCounter{}
	if want := wc.Text(system) + wc.Text(user); r.InputTokens != want {
		t.Errorf("InputTokens = %d, want %d (the LLM prompt)", r.InputTokens, want)
	}
	if !strings.Contains(user, "earlier goal") || !strings.Contains(user, "keep only decisions") || !strings.Contains(user, "golangci-lint") {
		t.Errorf("the prompt lacks the previous summary, the instruction or the messages")
	}
	if want := wc.Text(r.Text); r.OutputTokens != want {
		t.Errorf("OutputTokens = %d, want %d", r.OutputTokens, want)
	}
	if r.InputTokens <= r.OutputTokens {
		t.Errorf("InputTokens %d <= OutputTokens %d", r.InputTokens, r.OutputTokens)
	}
}

func TestExtractiveDeterministic(t *testing.T) {
	req := Request{Messages: history(), ArchiveGuide: guide, TargetTokens: 400, Previous: "# Conversation summary\n## Critical Context\n- Files: `a/b/c.go`, `d.py`\n"}
	want := summarizeExtractive(t, req, ExtractiveOptions{}).Text
	s := NewExtractive(ExtractiveOptions{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				r, err := s.Summarize(context.Background(), req)
				if err != nil || r.Text != want {
					t.Errorf("not deterministic (err %v):\n%s\n---\n%s", err, r.Text, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestExtractiveIncremental(t *testing.T) {
	msgs := history()
	first := summarizeExtractive(t, Request{Messages: msgs[:9], ArchiveGuide: guide, TargetTokens: 1500}, ExtractiveOptions{})
	if !strings.Contains(subsection(first.Text, "### Blocked"), "golangci-lint") {
		t.Fatalf("first summary: lint failure not Blocked:\n%s", first.Text)
	}
	later := []chat.Message{
		chat.TextMessage(chat.RoleUser, "Now add a retention option to the store: delete files older than 5 days."),
		chat.TextMessage(chat.RoleAssistant, "THOUGHT: The lint error was fixed by removing tmpDir; run the linter again.\n\n```bash\ngolangci-lint run ./...\n```"),
		chat.TextMessage(chat.RoleUser, "<returncode>0</returncode>\n<output>\n</output>"),
		assistantCalls("I'll add RetentionDays to store.Options in pkg/store/options.go.", tcall("d1", "edit_file", `{"path":"pkg/store/options.go"}`)),
		chat.ToolResult("d1", "edit_file", "Edited pkg/store/options.go", false),
	}
	second := summarizeExtractive(t, Request{Messages: later, First: 9, Previous: first.Text, ArchiveGuide: guide, TargetTokens: 1500}, ExtractiveOptions{})
	s := second.Text
	t.Logf("\n%s", s)
	if strings.Count(s, guide) != 1 || !strings.HasPrefix(s, guide) {
		t.Errorf("guide not exactly once at the top")
	}
	if !strings.Contains(s, "Covers messages 0-13.") {
		t.Errorf("coverage not merged")
	}
	goal := section(s, "## Goal")
	if !strings.HasPrefix(goal, "- Fix the failing test in pkg/store/file.go") || !strings.Contains(goal, "Latest request (#9): Now add a retention option") {
		t.Errorf("goal not merged:\n%s", goal)
	}
	for _, w := range []string{"`/tmp/x/dialog.jsonl`", "`os.MkdirAll`", "`pkg/store/options.go`", "`pkg/store/file.go`", "`RetentionDays`"} {
		if !strings.Contains(section(s, "## Critical Context"), w) {
			t.Errorf("critical context lost %s:\n%s", w, section(s, "## Critical Context"))
		}
	}
	if !strings.Contains(section(s, "## Constraints & Preferences"), "You must not change the public API.") {
		t.Errorf("constraint lost")
	}
	if !strings.Contains(section(s, "## Key Decisions"), "os.MkdirAll") {
		t.Errorf("earlier decision lost")
	}
	if strings.Contains(subsection(s, "### Blocked"), "golangci-lint") {
		t.Errorf("lint failure fixed later still Blocked:\n%s", subsection(s, "### Blocked"))
	}
	if !strings.Contains(subsection(s, "### Done"), "`bash` `golangci-lint run ./...` → ok (#10)") {
		t.Errorf("lint success not Done:\n%s", subsection(s, "### Done"))
	}
	if !strings.Contains(subsection(s, "### Done"), "`bash` `go test ./pkg/store` → ok") {
		t.Errorf("earlier Done entry lost")
	}
	// A third round with nothing new keeps the summary's content.
	third := summarizeExtractive(t, Request{First: 14, Previous: s, ArchiveGuide: guide, TargetTokens: 1500}, ExtractiveOptions{})
	if third.Text != s {
		t.Errorf("an empty update changed the summary:\n%s\n---\n%s", third.Text, s)
	}
}

func TestExtractiveTargets(t *testing.T) {
	trajs := loadTrajectories(t)
	msgs := trajs["django__django-11149"]
	if msgs == nil {
		t.Fatal("django__django-11149 is not in the embedded sample")
	}
	for _, c := range []TokenCounter{ByteCounter{}, wordCounter{}} {
		prevLen := 0
		for _, target := range []int{120, 250, 500, 1000, 2000, 4000} {
			r := summarizeExtractive(t, Request{Messages: msgs, ArchiveGuide: guide, TargetTokens: target}, ExtractiveOptions{Counter: c})
			n := c.Text(r.Text)
			if n > target {
				t.Errorf("%T target %d: summary has %d tokens", c, target, n)
			}
			if !hasAllHeadings(r.Text) || !strings.HasPrefix(r.Text, guide) {
				t.Errorf("%T target %d: headings or guide missing", c, target)
			}
			if n < prevLen {
				t.Errorf("%T target %d: smaller (%d) than for a smaller target (%d)", c, target, n, prevLen)
			}
			prevLen = n
			t.Logf("%T target %5d -> %5d tokens", c, target, n)
		}
	}
	// A huge target is no target.
	huge := summarizeExtractive(t, Request{Messages: msgs, ArchiveGuide: guide, TargetTokens: math.MaxInt}, ExtractiveOptions{})
	none := summarizeExtractive(t, Request{Messages: msgs, ArchiveGuide: guide}, ExtractiveOptions{})
	if huge.Text != none.Text {
		t.Errorf("TargetTokens MaxInt differs from no target")
	}
	// Below the skeleton: the skeleton alone, headings intact.
	r := summarizeExtractive(t, Request{Messages: msgs, ArchiveGuide: guide, TargetTokens: 5}, ExtractiveOptions{})
	if !hasAllHeadings(r.Text) || strings.Contains(r.Text, "\n- ") {
		t.Errorf("tiny target: want the bare skeleton, got:\n%s", r.Text)
	}
}

func TestExtractiveHugeToolResult(t *testing.T) {
	big := strings.Repeat("building chunk 0123456789 abcdefghij ok\n", 50<<20/40)
	big += "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nMemoryError: cannot allocate 4096 MB\nexit code 137\n"
	msgs := []chat.Message{
		chat.TextMessage(chat.RoleUser, "Train the model with scripts/train.py."),
		assistantCalls("", tcall("t1", "bash", `{"command":"python scripts/train.py"}`)),
		chat.ToolResult("t1", "bash", big, false),
		// The same output as several parts.
		{Role: chat.RoleTool, ToolCallID: "t2", Content: []chat.Part{{Type: chat.PartText, Text: big[:len(big)/2]}, {Type: chat.PartText, Text: big[len(big)/2:]}}},
	}
	r := summarizeExtractive(t, Request{Messages: msgs, TargetTokens: 1000}, ExtractiveOptions{})
	if !strings.Contains(subsection(r.Text, "### Blocked"), "exit 137: MemoryError: cannot allocate 4096 MB") {
		t.Errorf("the tail's error and exit code were not found:\n%s", r.Text)
	}
	if r.InputTokens > 200000 {
		t.Errorf("InputTokens %d: the prompt was not bounded", r.InputTokens)
	}
}

func TestExtractiveInvalidUTF8(t *testing.T) {
	bad := "caf\xc3 \xff\xfe path/to/f\xffile.py \xe2\x82 error: bad \xc0\xaf byte\n"
	msgs := []chat.Message{
		chat.TextMessage(chat.RoleUser, bad+" You must keep \xed\xa0\x80 this."),
		assistantCalls(bad, tcall("x\xff", "to\xffol", "{\"command\":\"ls \xff\"}")),
		chat.ToolResult("x\xff", "to\xffol", bad+"exit code 2", true),
		chat.TextMessage(chat.RoleAssistant, "```bash\necho \xff\n```"),
	}
	r := summarizeExtractive(t, Request{Messages: msgs, Previous: "## Goal\n- \xff\xfe\n## Critical Context\n- Files: `\xffa/b.py`", ArchiveGuide: "guide \xff", Instruction: "only \xff decisions", TargetTokens: 400}, ExtractiveOptions{})
	if !utf8.ValidString(r.Text) {
		t.Errorf("summary is not valid UTF-8: %q", r.Text)
	}
	if !hasAllHeadings(r.Text) {
		t.Errorf("headings missing:\n%s", r.Text)
	}
}

func TestExtractiveEmptyAndOdd(t *testing.T) {
	cases := map[string]Request{
		"zero":           {},
		"empty messages": {Messages: []chat.Message{{}, {Role: chat.RoleUser}, {Role: "bogus", Content: []chat.Part{{Type: chat.PartText, Text: "x"}}}}},
		"orphan result":  {Messages: []chat.Message{chat.ToolResult("nope", "", "FAILED", true)}},
		"negative first": {First: -5, Messages: []chat.Message{chat.TextMessage(chat.RoleUser, "hi there, please fix a/b/c.go")}},
		"garbage prev":   {Previous: "## Goal\n## Goal\n### Done\n- Files: `\n- Covers messages 9-1.\n## Critical Context\n- Files: ``, `x"},
		"prev only":      {Previous: "just some free text about src/main.go and FooBar", TargetTokens: 100},
		"images":         {Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartImage, Image: &chat.Image{URL: "https://x/y.png"}}}}}},
		"args not json":  {Messages: []chat.Message{assistantCalls("", tcall("1", "bash", "ls -la /etc"), tcall("2", "", "{\"a\":"), tcall("3", "x", "[1,2]"))}},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			r := summarizeExtractive(t, req, ExtractiveOptions{})
			if !hasAllHeadings(r.Text) {
				t.Errorf("headings missing:\n%s", r.Text)
			}
		})
	}
	r := summarizeExtractive(t, Request{Previous: "just some free text about src/main.go and FooBar"}, ExtractiveOptions{})
	if !strings.Contains(r.Text, "`src/main.go`") || !strings.Contains(r.Text, "just some free text") {
		t.Errorf("unstructured previous summary lost:\n%s", r.Text)
	}
}

func TestExtractiveInstruction(t *testing.T) {
	r := summarizeExtractive(t, Request{Messages: history(), Instruction: "/compact keep only decisions", TargetTokens: 1500}, ExtractiveOptions{})
	s := r.Text
	if !strings.HasPrefix(s, Title+"\nCovers messages 0-12.\n\n## Instruction\n/compact keep only decisions\n") {
		t.Errorf("instruction note not at the top:\n%s", s)
	}
	if !hasAllHeadings(s) {
		t.Fatalf("headings missing")
	}
	for _, h := range []string{"## Goal", "## Constraints & Preferences", "## Progress", "## Next Steps"} {
		if strings.TrimSpace(section(s, h)) != omittedNote {
			t.Errorf("%s not omitted:\n%s", h, section(s, h))
		}
	}
	if !strings.Contains(section(s, "## Key Decisions"), "os.MkdirAll") || !strings.Contains(section(s, "## Critical Context"), "pkg/store/file.go") {
		t.Errorf("decisions or context missing:\n%s", s)
	}

	r = summarizeExtractive(t, Request{Messages: history(), Instruction: "no next steps please, and focus on CHANGELOG.md", TargetTokens: 1500}, ExtractiveOptions{})
	if strings.TrimSpace(section(r.Text, "## Next Steps")) != omittedNote || section(r.Text, "## Goal") == omittedNote {
		t.Errorf("'no next steps' not obeyed:\n%s", r.Text)
	}
	if !strings.HasPrefix(section(r.Text, "## Critical Context"), "- Files: `CHANGELOG.md`") {
		t.Errorf("instruction term not ranked first:\n%s", section(r.Text, "## Critical Context"))
	}

	long := summarizeExtractive(t, Request{Messages: history(), TargetTokens: 600}, ExtractiveOptions{})
	short := summarizeExtractive(t, Request{Messages: history(), Instruction: "make it brief", TargetTokens: 600}, ExtractiveOptions{})
	if ByteCounter.Text(ByteCounter{}, short.Text) > 300 || len(short.Text) >= len(long.Text) {
		t.Errorf("'brief' not obeyed: %d vs %d bytes", len(short.Text), len(long.Text))
	}
}

func TestExtractiveCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewExtractive(ExtractiveOptions{}).Summarize(ctx, Request{Messages: history()}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestExtractiveBadCounter(t *testing.T) {
	r := summarizeExtractive(t, Request{Messages: history(), TargetTokens: 300}, ExtractiveOptions{Counter: panicCounter{}})
	if !hasAllHeadings(r.Text) || ByteCounter.Text(ByteCounter{}, r.Text) > 300 {
		t.Errorf("a panicking counter broke the summary:\n%s", r.Text)
	}
}

type panicCounter struct{}

func (panicCounter) Text(string) int { panic("boom") }

func TestEntityClassify(t *testing.T) {
	yes := map[string]entKind{
		"django/contrib/admin/options.py:2113:": entFile, "./run.sh": entFile, "/testbed": entFile, "src/a/b": entFile,
		"setup.py": entFile, "~/x/y.txt": entFile, "has_add_permission": entIdent, "ManyToManyField": entIdent,
		"models.Model": entIdent, "os.path.join": entIdent, "getUser": entIdent, "__init__": entIdent,
		"https://code.djangoproject.com/ticket/8060#comment:34": entURL, "ZFA04Y": entID, "#W1234567": entID,
		"880a2cc17b": entID, "123e4567-e89b-12d3-a456-426614174000": entID,
	}
	for tok, k := range yes {
		if _, got, ok := classify(tok, true); !ok || got != k {
			t.Errorf("classify(%q) = %v %v, want %v", tok, got, ok, k)
		}
	}
	for _, tok := range []string{"and/or", "e.g", "1.2.3", "s/old/new/g", "1,10s/a/b/", "hello", "ERROR", "a/b", "12", "3.14", "admin/js/%s"} {
		if name, k, ok := classify(tok, false); ok {
			t.Errorf("classify(%q) = %q %v, want none", tok, name, k)
		}
	}
	n := 0
	forEachToken("<output>\nx</output> </returncode>", func(tok string) {
		if _, _, ok := classify(tok, false); ok {
			n++
		}
	})
	if n != 0 {
		t.Errorf("closing tags taken for paths")
	}
}

func TestExitCodeAndErrors(t *testing.T) {
	cases := []struct {
		in      string
		code    int
		hasCode bool
		errLine string
	}{
		{"<returncode>2</returncode>\n<output>\nls: cannot access 'x': No such file or directory\n</output>", 2, true, ""},
		{"Traceback (most recent call last):\n  File \"a.py\", line 1\n    raise ValueError('x')\nValueError: x\n", 0, false, "ValueError: x"},
		{"building...\npanic: runtime error: index out of range\n\ngoroutine 1\nexit status 2", 2, true, "panic: runtime error: index out of range"},
		{"Process exited with code 0", 0, true, ""},
		{"--- FAIL: TestX\nFAILED tests/test_a.py::test_b - AssertionError\nExit status: 1", 1, true, "FAILED tests/test_a.py::test_b - AssertionError"},
		{"fatal: not a git repository", 0, false, "fatal: not a git repository"},
	}
	for _, c := range cases {
		w := textWindow([]chat.Part{{Type: chat.PartText, Text: c.in}}, 1000, 100)
		code, has := exitCode(w)
		if code != c.code || has != c.hasCode {
			t.Errorf("exitCode(%q) = %d %v, want %d %v", c.in, code, has, c.code, c.hasCode)
		}
		if c.errLine != "" {
			if l, _ := bestErrorLine(w); l != c.errLine {
				t.Errorf("bestErrorLine(%q) = %q, want %q", c.in, l, c.errLine)
			}
		}
	}
}

func TestTextWindow(t *testing.T) {
	parts := []chat.Part{{Type: chat.PartText, Text: "héllo"}, {Type: chat.PartImage}, {Type: chat.PartText, Text: "wörld"}}
	w := textWindow(parts, 100, 100)
	if w.head != "héllo\nwörld" || w.cut() {
		t.Errorf("small window: %+v", w)
	}
	w = textWindow(parts, 2, 3)
	if !w.cut() || !utf8.ValidString(w.head) || !utf8.ValidString(w.tail) || w.total != len("héllo\nwörld") {
		t.Errorf("cut window: %+v", w)
	}
	if w.head != "h" || w.tail != "rld" {
		t.Errorf("cut window pieces: %q %q", w.head, w.tail)
	}
}

func TestErrorSeverity(t *testing.T) {
	for line, want := range map[string]int{
		"ValueError: bad value":              4,
		"FAILED tests/test_a.py::test_x":     4,
		"E   AssertionError: 1 != 2":         4,
		"main.go:12: error: undefined: x":    3,
		"got an Error here":                  2,
		"warning: unused variable":           1,
		"permission denied":                  1,
		"all 12 tests passed":                0,
		"":                                   0,
		"KeyboardInterrupt: stopped by user": 4,
	} {
		if got := ErrorSeverity(line); got != want {
			t.Errorf("ErrorSeverity(%q) = %d, want %d", line, got, want)
		}
	}
}
