package ctxmgr

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// smallCalls appends n small tool iterations, preparing a request before each, so that the
// cost model expects calls to come.
func smallCalls(t *testing.T, s *Session, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := s.Prepare(context.Background()); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("%s%d", prefix, i)
		appendAll(t, s, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"command":"echo %d"}`, i)}}}, chat.ToolResult(id, "bash", "ok", false))
	}
}

func viewKindAt(s *Session, i int) viewKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries[i].kind
}

// The miss a rewrite causes counts only what the previous call sent after its change point:
// the latest assistant message and the results after it are new, billed uncached whether the
// rewrite is made or not. A result that has just left the newest, followed only by new
// messages, ages out at once, however large the new result after it is.
func TestAgeOutMissCountsSentTokensOnly(t *testing.T) {
	ctx := context.Background()
	_, s := testManager(t, Config{ToolResultCap: 100000, AgeOut: true, OldToolResultCap: 1000, RecentToolResults: 1})
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"))
	smallCalls(t, s, "w", 30)
	at := len(s.entries) + 1
	appendAll(t, s, call("x"), chat.ToolResult("x", "bash", lines(400, "first output line"), false)) // ~2,400 tokens
	if _, err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	// A much larger new result: the old miss (the whole tail, new tokens included) would not
	// pay; the miss of what was sent (the aged result alone) does.
	appendAll(t, s, call("y"), chat.ToolResult("y", "bash", lines(3000, "second output line"), false))
	if _, err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if k := viewKindAt(s, at); k != viewRetruncated {
		t.Fatalf("result followed only by new messages not aged out: %v", k)
	}
}

// A batch waits for a result of its tail that is due to age out: made now, the batch would
// re-send that result's full text as a miss, and again when it ages out a call later.
func TestAgeOutWaitsForDueResult(t *testing.T) {
	ctx := context.Background()
	_, s := testManager(t, Config{ToolResultCap: 100000, AgeOut: true, OldToolResultCap: 1000, RecentToolResults: 2})
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"))
	smallCalls(t, s, "w", 10)
	x := len(s.entries) + 1
	// ~12,000 tokens: alone, its age-out pays against the ~7,800 sent after it.
	appendAll(t, s, call("x"), chat.ToolResult("x", "bash", lines(1900, "first output line"), false))
	if _, err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	appendAll(t, s, call("y"), chat.ToolResult("y", "bash", lines(1200, "second output line"), false))
	if _, err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	y := len(s.entries) - 1
	// x leaves the two newest; y, sent last call and due next, sits after it.
	appendAll(t, s, call("z"), chat.ToolResult("z", "bash", "ok", false))
	if _, err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if k := viewKindAt(s, x); k != viewOriginal {
		t.Fatalf("aged out before the result due after it: %v", k)
	}
	// A call later both age out, in one batch.
	appendAll(t, s, call("v"), chat.ToolResult("v", "bash", "ok", false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kx, ky := viewKindAt(s, x), viewKindAt(s, y); kx != viewRetruncated || ky != viewRetruncated {
		t.Fatalf("not aged out together: %v %v; steps %+v", kx, ky, p.Report.Steps)
	}
}

// Paging through a document: an agent that reads a document page after page, naming nothing
// of it, is gathering the pages for its answer. The pages stay whole while it reads and after,
// with no evidence that it will not quote them, even far from the newest results and with
// many calls to come.
func TestPagesKeptForTheAnswer(t *testing.T) {
	ctx := context.Background()
	_, s := testManager(t, Config{ToolResultCap: 100000, AgeOut: true, OldToolResultCap: 1000, RecentToolResults: 2, CostMaskKeep: 2})
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "quote /doc.md"))
	smallCalls(t, s, "w", 30)
	var pages []int
	for k := 0; k < 8; k++ {
		pages = append(pages, len(s.entries)+1)
		id := fmt.Sprintf("p%d", k)
		appendAll(t, s, readCall(id, "/doc.md", 1+300*k, 300), chat.ToolResult(id, "Read", lines(300, fmt.Sprintf("Section %d: the option_%d_value (default %d) controls", k, k, k)), false))
		if _, err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range pages {
		if k := viewKindAt(s, i); k != viewOriginal {
			t.Fatalf("page at %d cut while the agent reads: %v", i, k)
		}
	}
}

// What the session shows decides: the same command outputs are let go in a session whose
// agent never names anything of them again, and kept in one whose agent keeps quoting outputs
// a few results back (those within its reach stay whole).
func TestReuseLearnedFromTheSession(t *testing.T) {
	run := func(quotes bool) (cut int, recent []viewKind) {
		t.Helper()
		ctx := context.Background()
		_, s := testManager(t, Config{ToolResultCap: 100000, AgeOut: true, OldToolResultCap: 1000, RecentToolResults: 2, CostMaskKeep: 2})
		appendAll(t, s, chat.TextMessage(chat.RoleUser, "investigate"))
		var outs []int
		for k := 0; k < 40; k++ {
			if _, err := s.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			text := "running the next check"
			if quotes && k >= 4 {
				// Names, for the first time, a term from the middle of the output four results back.
				text = fmt.Sprintf("the earlier output said value_%d_%d", k-4, 75)
			}
			id := fmt.Sprintf("b%d", k)
			appendAll(t, s, chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: text}},
				ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"command":"./check %d"}`, k)}}})
			var out strings.Builder
			for l := 0; l < 150; l++ {
				fmt.Fprintf(&out, "check %d line %d: value_%d_%d is fine\n", k, l, k, l)
			}
			outs = append(outs, len(s.entries))
			appendAll(t, s, chat.ToolResult(id, "bash", out.String(), false))
		}
		if _, err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		for _, i := range outs {
			if viewKindAt(s, i) != viewOriginal {
				cut++
			}
		}
		// The outputs the agent has not quoted yet but will: ranks 2 to 4.
		for _, i := range outs[len(outs)-5 : len(outs)-2] {
			recent = append(recent, viewKindAt(s, i))
		}
		return cut, recent
	}
	silent, _ := run(false)
	quoting, recent := run(true)
	t.Logf("outputs cut: %d of 40 when the agent never looks back, %d when it quotes", silent, quoting)
	if silent < 20 || quoting >= silent {
		t.Fatalf("outputs cut: %d when the agent never looks back, %d when it quotes", silent, quoting)
	}
	for _, k := range recent {
		if k != viewOriginal {
			t.Fatalf("an agent quoting four results back: outputs within its reach cut: %v", recent)
		}
	}
}

// A page read past in order (the next read of its file begins where it ended) ages out to
// PagedPastCap; a range the next read of its file does not continue (an agent looking at
// ranges of code) to OldToolResultCap. Both are cut only once the session shows that its agent
// does not use them: many calls after the reading, naming nothing of them.
func TestPagedPastCap(t *testing.T) {
	ctx := context.Background()
	_, s := testManager(t, Config{ToolResultCap: 100000, AgeOut: true, OldToolResultCap: 3000, PagedPastCap: 1000, RecentToolResults: 2})
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "quote /doc.md, then look at /code.go"))
	smallCalls(t, s, "w", 9)
	read := func(id, file string, from, n int, text string) int {
		t.Helper()
		at := len(s.entries) + 1
		appendAll(t, s, readCall(id, file, from, n), chat.ToolResult(id, "Read", lines(n, text), false))
		if _, err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		return at
	}
	page1 := read("p1", "/doc.md", 1, 300, "The config_option option (default 1) controls")
	read("p2", "/doc.md", 301, 300, "The other_option option (default 2) controls")
	code1 := read("c1", "/code.go", 100, 200, "func handler(ctx context.Context) error { return nil }")
	read("c2", "/code.go", 20, 60, "func other(ctx context.Context) error { return nil }")
	smallCalls(t, s, "x", 120)
	size := func(i int) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return textBytes(&s.entries[i].view)
	}
	if k := viewKindAt(s, page1); k != viewRetruncated || size(page1) > 1000+400 {
		t.Fatalf("page read past: %v, %d bytes; want cut to about 1,000", k, size(page1))
	}
	if k := viewKindAt(s, code1); k != viewRetruncated || size(code1) < 2000 || size(code1) > 3000+400 {
		t.Fatalf("range looked at: %v, %d bytes; want cut to about 3,000", k, size(code1))
	}
}

// A requested read keeps, at ingestion, what fits under the compaction threshold beside the
// conversation's own messages (at most RequestedReadCap): at a 16K window a 21 KB page is
// kept whole at the start of a run (more than the window in bytes), and capped once the
// conversation fills the room. A restored session caps the same results.
func TestRequestedReadCapFromRoom(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	cfg := Config{Store: st, ToolResultCap: 10000}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 16384, 2048
	_, s := testManager(t, cfg)
	page := lines(700, "The x_y option (default 1)") // ~21 KB, ~7,700 tokens
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "quote /doc.md"), readCall("p1", "/doc.md", 1, 1000), chat.ToolResult("p1", "Read", page, false))
	if k := viewKindAt(s, 2); k != viewOriginal {
		t.Fatalf("page that fits capped at ingestion: %v", k)
	}
	// The assistant's own messages fill the room.
	for i := 0; i < 40; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleAssistant, lines(40, fmt.Sprintf("quote_%d of the page", i))), chat.TextMessage(chat.RoleUser, "go on"))
	}
	appendAll(t, s, readCall("p2", "/doc.md", 1001, 1000), chat.ToolResult("p2", "Read", page, false))
	last := len(s.entries) - 1
	s.mu.Lock()
	size := textBytes(&s.entries[last].view)
	s.mu.Unlock()
	if k := viewKindAt(s, last); k != viewOffloaded || size > 11000 {
		t.Fatalf("page with no room left: %v, %d bytes", k, size)
	}
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2 := prepareAfterRestart(t, Config{Store: st, ToolResultCap: 10000, Budget: cfg.Budget}, s.ID())
	if len(p2.Request.Messages) != len(p.Request.Messages) {
		t.Fatal("restored session sends another request")
	}
	for i := range p.Request.Messages {
		if p2.Request.Messages[i].Text() != p.Request.Messages[i].Text() {
			t.Fatalf("restored session sends another message %d", i)
		}
	}
}
