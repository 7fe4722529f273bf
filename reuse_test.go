package ctxmgr

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// The outlook of removing part of an old result: a chance in [0, 1] that grows with the calls
// to come, and the calls the saving holds, at most those calls and fewer the likelier the
// agent is to look back. A page of a document read in order keeps its hazard; a command's
// output is used less and less as later results arrive, so over many calls it is likelier
// to be left alone than a page with the same hazard now.
func TestOutlook(t *testing.T) {
	var r reuseState
	text := strings.Repeat("line with some_identifier_12 and more text\n", 100)
	r.onResult(10, text, toolAction{tool: "bash", kind: actCommand}, false, 0, 0)
	r.onResult(12, text, toolAction{tool: "Read", kind: actRead}, true, 0, 0)
	for k := 0; k < 5; k++ { // five later results: both are old
		r.onResult(20+k, "ok", toolAction{tool: "bash", kind: actCommand}, false, 0, 0)
	}
	prev := outlook{}
	for _, rem := range []float64{3, 10, 100, 1000} {
		cmd, _ := r.outlook(10, toolAction{tool: "bash", kind: actCommand}, rem)
		page, _ := r.outlook(12, toolAction{tool: "Read", kind: actRead}, rem)
		for _, o := range []outlook{cmd, page} {
			if o.chance < 0 || o.chance > 1 || o.held <= 0 || o.held > rem+1e-9 || math.IsNaN(o.held) {
				t.Fatalf("remaining %v: outlook %+v out of range", rem, o)
			}
		}
		if cmd.chance < prev.chance || cmd.chance == prev.chance && cmd.chance < 1 {
			t.Fatalf("remaining %v: chance %v did not grow from %v", rem, cmd.chance, prev.chance)
		}
		if page.chance <= cmd.chance || page.held >= cmd.held {
			t.Fatalf("remaining %v: a page (%+v) is not likelier to be used than a command's output (%+v)", rem, page, cmd)
		}
		prev = cmd
	}
	// A page of a document read in order, with a constant hazard h: chance 1-exp(-h*rem),
	// held (1-exp(-h*rem))/h.
	h, _ := r.hazard(12, toolAction{tool: "Read", kind: actRead})
	page, _ := r.outlook(12, toolAction{tool: "Read", kind: actRead}, 40)
	if want := 1 - math.Exp(-h*40); math.Abs(page.chance-want) > 1e-9 {
		t.Fatalf("chance %v, want %v", page.chance, want)
	}
	if want := (1 - math.Exp(-h*40)) / h; math.Abs(page.held-want) > 0.01*want {
		t.Fatalf("held %v, want %v", page.held, want)
	}
	// A command's output, with a hazard that decays as its rank grows: held against a fine
	// numerical integral of its survival.
	hc, _ := r.hazard(10, toolAction{tool: "bash", kind: actCommand})
	rank := float64(r.nres - 1) // the first result scanned
	cum, held := 0.0, 0.0
	const dt = 0.001
	for t := 0.0; t < 300; t += dt {
		held += math.Exp(-cum) * dt
		cum += hc * math.Pow(rank/(rank+t+dt/2), 0.8) * dt
	}
	cmd, _ := r.outlook(10, toolAction{tool: "bash", kind: actCommand}, 300)
	if math.Abs(cmd.held-held) > 0.01*held || math.Abs(cmd.chance-(1-math.Exp(-cum))) > 0.01 {
		t.Fatalf("outlook %+v, numerically held %v, chance %v", cmd, held, 1-math.Exp(-cum))
	}
}

// A read-back through the caller's read tool is a use: a session whose model reads back the
// outputs that were cut lets fewer outputs go than the same session without the reads, and a
// session restored from the store learns the same (its next request is the same).
func TestReadBackLearned(t *testing.T) {
	run := func(reads bool) (cut, noted int) {
		t.Helper()
		ctx := context.Background()
		st := store.NewMemory()
		m, s := testManager(t, Config{Store: st, ToolResultCap: 100000, AgeOut: true, OldToolResultCap: 1000, RecentToolResults: 2, CostMaskKeep: 2})
		appendAll(t, s, chat.TextMessage(chat.RoleUser, "investigate"))
		var outs []int
		for k := 0; k < 40; k++ {
			if _, err := s.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			if reads {
				// The model reads back every output that was cut since its last read.
				for _, i := range outs {
					if e := &s.entries[i]; e.off != nil && e.kind != viewOriginal && !slices.ContainsFunc(s.readBacks, func(r readBack) bool { return r.Pos == i }) {
						if !s.NoteReadBack(e.off.Ref()) {
							t.Fatalf("read-back of %s not noted", e.off.Ref())
						}
						noted++
					}
				}
			}
			id := fmt.Sprintf("b%d", k)
			appendAll(t, s, chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: "running the next check"}},
				ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"command":"./check %d"}`, k)}}})
			var out strings.Builder
			for l := 0; l < 150; l++ {
				fmt.Fprintf(&out, "check %d line %d: value_%d_%d is fine\n", k, l, k, l)
			}
			outs = append(outs, len(s.entries))
			appendAll(t, s, chat.ToolResult(id, "bash", out.String(), false))
		}
		if s.NoteReadBack("tool_result/no-such-key") {
			t.Fatal("a ref the session does not hold was noted")
		}
		if _, err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		for _, i := range outs {
			if viewKindAt(s, i) != viewOriginal {
				cut++
			}
		}
		// Restored from the store: the same reads, the same next request.
		appendAll(t, s, chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: "done"}}}, chat.TextMessage(chat.RoleUser, "go on"))
		p1, err := s.Prepare(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.LoadSession(ctx, s.ID(), []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.readBacks) != len(s.readBacks) {
			t.Fatalf("restored %d read-backs of %d", len(r.readBacks), len(s.readBacks))
		}
		p2, err := r.Prepare(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(p1.Request.Messages) != len(p2.Request.Messages) {
			t.Fatalf("restored session sends %d messages, the live one %d", len(p2.Request.Messages), len(p1.Request.Messages))
		}
		for i := range p1.Request.Messages {
			if p1.Request.Messages[i].Text() != p2.Request.Messages[i].Text() {
				t.Fatalf("restored session sends another message %d", i)
			}
		}
		return cut, noted
	}
	silent, _ := run(false)
	reading, noted := run(true)
	t.Logf("outputs cut: %d of 40 without read-backs, %d when the model reads back what was cut (%d reads)", silent, reading, noted)
	if noted == 0 || reading >= silent {
		t.Fatalf("outputs cut: %d without read-backs, %d with %d read-backs", silent, reading, noted)
	}
}
