package ctxmgr

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

func readCall(id, path string, offset, limit int) chat.Message {
	args := fmt.Sprintf(`{"file_path":%q}`, path)
	if limit > 0 {
		args = fmt.Sprintf(`{"file_path":%q,"offset":%d,"limit":%d}`, path, offset, limit)
	}
	return chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: "reading " + path}},
		ToolCalls: []chat.ToolCall{{ID: id, Name: "Read", Arguments: args}}}
}

// A file read again supersedes the earlier read: the earlier copy becomes a reference to the
// later call, its text stays in the store, the event records the expected saving, and a
// restarted session sends the same request.
func TestSupersedeRereadFile(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	var events []Event
	cfg := Config{Store: st, ToolResultCap: 10000, Supersede: true, OnEvent: func(e Event) { events = append(events, e) }}
	_, s := testManager(t, cfg)
	file := lines(400, "def handler_fn") // ~8 KB
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "fix it"), readCall("r0", "/repo/a.py", 0, 0), chat.ToolResult("r0", "Read", file, false))
	// Many small calls (a superseding rewrite pays once enough calls are expected to come),
	// then the same file again.
	for i := 1; i < 200; i++ {
		id := fmt.Sprintf("c%d", i)
		appendAll(t, s, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"command":"echo %d"}`, i)}}}, chat.ToolResult(id, "bash", "ok", false))
		if _, err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
	}
	appendAll(t, s, readCall("r1", "/repo/a.py", 0, 0), chat.ToolResult("r1", "Read", file, false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := p.Request.Messages[2].Text()
	if !strings.Contains(first, "superseded by the result of call r1") || strings.Contains(first, "handler_fn 200") {
		t.Fatalf("earlier read not superseded: %.200q; events %+v", first, events)
	}
	if last := p.Request.Messages[len(p.Request.Messages)-1].Text(); last != file {
		t.Fatal("the later read is not whole")
	}
	var ev *Event
	for i := range events {
		if events[i].Step == StepSupersede {
			ev = &events[i]
		}
	}
	if ev == nil || ev.ExpectedSaving <= 0 || ev.Freed <= 0 || ev.Messages != 1 {
		t.Fatalf("supersede event: %+v", ev)
	}
	full, _, err := st.ReadOffload(ctx, s.ID(), offloadKey(2, "r0"), 1, 0)
	if err != nil || full != file {
		t.Fatalf("earlier read not in the store: %v", err)
	}
	p2 := prepareAfterRestart(t, Config{Store: st, ToolResultCap: 10000, Supersede: true}, s.ID())
	if len(p2.Request.Messages) != len(p.Request.Messages) || p2.Request.Messages[2].Text() != first {
		t.Fatal("restored session sends another request")
	}
}

// A narrower later read does not supersede a wider earlier one; a wider one does.
func TestSupersedeRanges(t *testing.T) {
	ctx := context.Background()
	_, s := testManager(t, Config{Supersede: true, DisableOffload: true})
	chunk := lines(300, "line of the spec")
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "quote it"),
		readCall("a", "/d.md", 100, 300), chat.ToolResult("a", "Read", chunk, false),
		readCall("b", "/d.md", 150, 50), chat.ToolResult("b", "Read", chunk[:2000], false))
	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("x%d", i)
		appendAll(t, s, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"command":"echo %d"}`, i)}}}, chat.ToolResult(id, "bash", "ok", false))
	}
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.Request.Messages[2].Text(), "superseded") {
		t.Fatal("a wider read superseded by a narrower one")
	}
	appendAll(t, s, readCall("c", "/d.md", 1, 1000), chat.ToolResult("c", "Read", chunk+chunk, false))
	if p, err = s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{2, 4} {
		if !strings.Contains(p.Request.Messages[k].Text(), "superseded by the result of call c") {
			t.Fatalf("message %d not superseded by a read covering it: %.100q", k, p.Request.Messages[k].Text())
		}
	}
}

// A result the agent asked for as a file read keeps up to RequestedReadCap at ingestion; a
// command's output of the same size is capped.
func TestRequestedReadNotCapped(t *testing.T) {
	_, s := testManager(t, Config{ToolResultCap: 4000})
	big := lines(500, "code line") // ~10 KB
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"),
		readCall("r", "/x.py", 10, 500), chat.ToolResult("r", "Read", big, false),
		call("b"), chat.ToolResult("b", "bash", big, false),
		chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "s", Name: "bash", Arguments: `{"command":"sed -n '1,500p' x.py"}`}}}, chat.ToolResult("s", "bash", big, false))
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.entries[2].kind; k != viewOriginal {
		t.Errorf("Read result capped at ingestion: %v", k)
	}
	if k := s.entries[4].kind; k != viewOffloaded {
		t.Errorf("command output not capped: %v", k)
	}
	if k := s.entries[6].kind; k != viewOriginal {
		t.Errorf("sed -n read capped at ingestion: %v", k)
	}
}
