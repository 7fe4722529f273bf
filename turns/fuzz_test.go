package turns

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

// fuzzIDs is the small set fuzzed ids come from, so that orphans, duplicates, reused ids and
// parallel calls happen often. "a_2" collides with the first fresh id Repair derives from "a";
// "" is an empty id.
var fuzzIDs = []string{"a", "b", "c", "d", "", "a_2"}

// fuzzHistory decodes an arbitrary history from bytes, one message per leading byte b:
//
//	b%8 0,1 user; 2 system; 3,4 assistant with (b>>3)%4 calls, one id byte each;
//	5,6 tool result with id (b>>3); 7 a non-assistant message (user or tool by bit 3) that
//	carries a tool call (invalid).
//
// Bit 7 marks the message as decoded from Anthropic, bit 6 sets JoinPrev. Every message has the
// text "#i", its index, so that it can be traced through Repair.
func fuzzHistory(data []byte) []chat.Message {
	var msgs []chat.Message
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	id := func(b byte) string { return fuzzIDs[int(b)%len(fuzzIDs)] }
	for len(data) > 0 && len(msgs) < 64 {
		b := next()
		m := chat.TextMessage(chat.RoleUser, "#"+strconv.Itoa(len(msgs)))
		switch b % 8 {
		case 0, 1:
		case 2:
			m.Role = chat.RoleSystem
		case 3, 4:
			m.Role = chat.RoleAssistant
			for k := int(b>>3) % 4; k > 0; k-- {
				m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: id(next()), Name: "fn", Arguments: "{}"})
			}
		case 5, 6:
			m.Role = chat.RoleTool
			m.ToolCallID = id(b >> 3)
			m.Name = "fn"
		case 7:
			if b&8 != 0 {
				m.Role = chat.RoleTool
				m.ToolCallID = id(b >> 4)
			}
			m.ToolCalls = []chat.ToolCall{{ID: id(b >> 5), Name: "fn"}}
		}
		if b&0x80 != 0 {
			m.Wire = "anthropic"
		}
		if b&0x40 != 0 {
			m.JoinPrev = true
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func addSeeds(f *testing.F, add func(data []byte)) {
	for _, s := range [][]byte{
		nil,
		{0},
		{3, 3, 3},              // only assistant messages
		{0, 3 | 1<<3, 0, 5, 0}, // user, a(a), t(a), user
		{3 | 1<<3, 0, 5, 0, 4}, // starts with an assistant tool call
		{0, 3 | 1<<3, 0, 5, 3 | 1<<3, 1, 5 | 1<<3, 4},              // chained calls in one turn
		{0, 3 | 3<<3, 0, 1, 2, 5 | 2<<3, 5, 5 | 1<<3, 4},           // parallel calls, results out of order
		{0, 3 | 1<<3, 0, 5, 3 | 1<<3, 0, 5, 3 | 1<<3, 1, 5 | 1<<3}, // one giant turn
		{0, 5, 4, 0, 3 | 1<<3, 0, 0, 5, 5},                         // orphan, misplaced, duplicate
		{0, 3 | 2<<3, 0, 0, 5, 5, 0, 3 | 1<<3, 4, 5 | 4<<3},        // duplicate and empty ids
		{0, 3 | 1<<3, 0, 3 | 1<<3, 5, 5 | 5<<3, 5},                 // "a_2" collides with a fresh id
		{7, 7 | 8, 0, 3 | 1<<3, 2, 0xC5 | 2<<3, 0xC5 | 2<<3, 2},    // calls on non-assistant messages, anthropic joins
		[]byte("an arbitrary history of some length to mix everything together"),
		{0x83, 0xff, 0x3f, 0x7e, 0x55, 0xaa, 0x01, 0x13, 0x9b, 0x25, 0x66, 0x4c, 0xd3, 0x0b, 0xe5, 0x2d},
	} {
		add(s)
	}
}

// FuzzRepair checks that Repair returns a history Validate accepts, never modifies its input,
// is idempotent, leaves valid histories alone, and loses no message it does not report.
func FuzzRepair(f *testing.F) {
	addSeeds(f, func(data []byte) { f.Add(data) })
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzHistory(data)
		before := cloneAll(in)
		out, changes := Repair(in)
		if !reflect.DeepEqual(in, before) {
			t.Fatal("Repair modified its input")
		}
		if err := Validate(out, ValidateOptions{}); err != nil {
			t.Fatalf("Repair output invalid: %v\n in: %s\nout: %s", err, notation(in), notation(out))
		}
		if err := chat.Validate(out); err != nil {
			t.Fatalf("Repair output rejected by chat.Validate: %v\n in: %s\nout: %s", err, notation(in), notation(out))
		}
		again, more := Repair(out)
		if len(more) != 0 || !reflect.DeepEqual(again, out) {
			t.Fatalf("Repair not idempotent: %v\n in: %s\nout: %s", more, notation(in), notation(out))
		}
		if Validate(in, ValidateOptions{}) == nil && (len(changes) != 0 || !reflect.DeepEqual(out, in)) {
			t.Fatalf("Repair changed a valid history: %v", changes)
		}
		checkAccounting(t, in, out, changes)
	})
}

// checkAccounting checks that every input message is in out exactly once unless a Dropped
// change names it, altered only as its changes say, and that every other message of out is a
// reported synthetic result.
func checkAccounting(t *testing.T, in, out []chat.Message, changes []Change) {
	t.Helper()
	kinds := make(map[int]map[ChangeKind]bool)
	inserts := 0
	for i, c := range changes {
		if c.Index < 0 || c.Index >= len(in) || c.Kind < DropOrphanResult || c.Kind > DropToolCall {
			t.Fatalf("bad change %v", c)
		}
		if i > 0 && c.Index < changes[i-1].Index {
			t.Fatalf("changes not in input order: %v", changes)
		}
		if kinds[c.Index] == nil {
			kinds[c.Index] = make(map[ChangeKind]bool)
		}
		kinds[c.Index][c.Kind] = true
		if c.Kind == InsertMissingResult {
			inserts++
		}
	}
	seen := make([]int, len(in))
	synth := 0
	for _, m := range out {
		if m.Meta[MetaSynthetic] != "" {
			if m.Role != chat.RoleTool || !m.IsError || m.Text() != MissingResultText {
				t.Fatalf("bad synthetic result %+v", m)
			}
			synth++
			continue
		}
		k, err := strconv.Atoi(strings.TrimPrefix(m.Text(), "#"))
		if err != nil || k < 0 || k >= len(in) {
			t.Fatalf("output message %q is not from the input", m.Text())
		}
		seen[k]++
		o, has := in[k], kinds[k]
		if m.Role != o.Role || m.Name != o.Name || m.IsError != o.IsError || m.Wire != o.Wire ||
			!reflect.DeepEqual(m.Content, o.Content) || !reflect.DeepEqual(m.Meta, o.Meta) {
			t.Fatalf("message %d altered: %+v -> %+v", k, o, m)
		}
		if m.ToolCallID != o.ToolCallID && !has[RenameResultID] {
			t.Fatalf("message %d: tool_call_id %q -> %q unreported", k, o.ToolCallID, m.ToolCallID)
		}
		if m.JoinPrev != o.JoinPrev && !has[MoveResult] {
			t.Fatalf("message %d: JoinPrev changed unreported", k)
		}
		if len(m.ToolCalls) != len(o.ToolCalls) {
			if len(m.ToolCalls) != 0 || !has[DropToolCall] {
				t.Fatalf("message %d: tool calls %d -> %d unreported", k, len(o.ToolCalls), len(m.ToolCalls))
			}
			continue
		}
		for j := range m.ToolCalls {
			a, b := m.ToolCalls[j], o.ToolCalls[j]
			if a.Name != b.Name || a.Arguments != b.Arguments || a.ID != b.ID && !has[RenameCallID] {
				t.Fatalf("message %d: tool call %d altered: %+v -> %+v", k, j, b, a)
			}
		}
	}
	for k, n := range seen {
		dropped := kinds[k][DropOrphanResult] || kinds[k][DropDuplicateResult]
		if dropped && n != 0 || !dropped && n != 1 {
			t.Fatalf("message %d appears %d times (dropped: %v)\n in: %s\nout: %s", k, n, dropped, notation(in), notation(out))
		}
	}
	if synth != inserts {
		t.Fatalf("%d synthetic results, %d reported", synth, inserts)
	}
}

// FuzzSafeCut checks that, on a repaired history (optionally ending in an assistant message
// whose calls are pending), every cut SafeCut, SafeCutForward and SafeCutBackward report leaves
// two halves that Validate accepts, is the nearest boundary in the direction searched, and is
// reported not ok only when no boundary qualifies. On the raw, unrepaired history it checks that
// no cut separates a call from its result.
func FuzzSafeCut(f *testing.F) {
	addSeeds(f, func(data []byte) {
		for _, target := range []int{-1, 0, 1, 2, 3, 5, 1 << 20} {
			f.Add(data, target, byte(len(data)))
		}
	})
	f.Fuzz(func(t *testing.T, data []byte, target int, pending byte) {
		raw := fuzzHistory(data)
		h, _ := Repair(raw)
		opts := ValidateOptions{}
		if pending&1 != 0 {
			// An agent that has not run (all) its tools yet.
			h = append(h, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "p1"}, {ID: "p2"}}})
			if pending&2 != 0 {
				h = append(h, chat.ToolResult("p2", "fn", "done", false))
			}
			opts.AllowPendingTail = true
		}
		if err := Validate(h, opts); err != nil {
			t.Fatalf("repaired history invalid: %v", err)
		}
		b := Boundaries(h)
		checkBoundaries(t, h, b)
		isB := make(map[int]bool, len(b))
		for _, x := range b {
			isB[x] = true
		}
		// Also an in-range target, which the fuzzer otherwise rarely produces.
		inRange := int(uint(target)%uint(len(h)+3)) - 1
		for _, tg := range []int{target, inRange} {
			for _, c := range cutFuncs {
				cut, ok := c.f(h, tg)
				checkCut(t, c.name, h, opts, isB, tg, cut, ok)
				rcut, rok := c.f(raw, tg)
				checkNoSplit(t, c.name, raw, tg, rcut, rok)
			}
			checkIterationCut(t, h, opts, tg)
			checkIterationCut(t, raw, ValidateOptions{AllowPendingTail: true}, tg)
		}
	})
}

var cutFuncs = []struct {
	name string
	f    func([]chat.Message, int) (int, bool)
}{
	{"SafeCut", func(h []chat.Message, t int) (int, bool) { return SafeCut(h, t, CutOptions{}) }},
	{"SafeCutForward", func(h []chat.Message, t int) (int, bool) { return SafeCut(h, t, CutOptions{Search: Forward}) }},
	{"SafeCutBackward", func(h []chat.Message, t int) (int, bool) { return SafeCut(h, t, CutOptions{Search: Backward}) }},
}

func checkBoundaries(t *testing.T, h []chat.Message, b []int) {
	t.Helper()
	if len(h) == 0 {
		if b != nil {
			t.Fatalf("Boundaries of an empty history: %v", b)
		}
		return
	}
	want := []int{0}
	for i := 1; i < len(h); i++ {
		if h[i].Role == chat.RoleUser {
			want = append(want, i)
		}
	}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("Boundaries = %v, want %v", b, want)
	}
}

func checkCut(t *testing.T, name string, h []chat.Message, opts ValidateOptions, isB map[int]bool, target, cut int, ok bool) {
	t.Helper()
	n := len(h)
	tc := min(max(target, 0), n)
	// candidate reports whether boundary x (0 < x < n) qualifies for name at clamped target tc.
	candidate := func(x int) bool {
		switch name {
		case "SafeCutForward":
			return x >= tc
		case "SafeCutBackward":
			return x <= tc
		}
		return true
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s(target %d) = %d, %v: "+format+"\n%s", append([]any{name, target, cut, ok}, append(args, notation(h))...)...)
	}
	if !ok {
		if cut != 0 || tc == 0 || tc == n {
			fail("not ok")
		}
		for x := 1; x < n; x++ {
			if isB[x] && candidate(x) {
				fail("missed boundary %d", x)
			}
		}
		return
	}
	switch {
	case tc == 0 || tc == n:
		if cut != tc {
			fail("want %d", tc)
		}
	default:
		if cut <= 0 || cut >= n || !isB[cut] || h[cut].Role != chat.RoleUser || !candidate(cut) {
			fail("not a qualifying boundary")
		}
		// Nearest: no qualifying boundary preferred over cut.
		for x := 1; x < n; x++ {
			if !isB[x] || !candidate(x) || x == cut {
				continue
			}
			better := false
			switch {
			case cut <= tc: // backward hit: a later boundary <= tc would be nearer
				better = x > cut && x <= tc
			default: // forward hit: any boundary <= tc, or an earlier one after tc
				better = x <= tc && name != "SafeCutForward" || x >= tc && x < cut
			}
			if better {
				fail("boundary %d is nearer", x)
			}
		}
	}
	headOpts := ValidateOptions{}
	if cut == n {
		headOpts = opts
	}
	if err := Validate(h[:cut], headOpts); err != nil {
		fail("head invalid: %v", err)
	}
	if err := Validate(h[cut:], opts); err != nil {
		fail("tail invalid: %v", err)
	}
}

// checkNoSplit checks that a cut in an arbitrary (invalid) history never separates a result from
// the latest call with its id before it.
// spans reports whether a call made before x is answered at or after x.
func spans(h []chat.Message, x int) bool {
	last := map[string]int{}
	for i := range h {
		if h[i].Role == chat.RoleTool {
			if c, ok := last[h[i].ToolCallID]; ok && c < x && i >= x {
				return true
			}
		}
		for _, tc := range h[i].ToolCalls {
			last[tc.ID] = i
		}
	}
	return false
}

// checkIterationCut: SafeCutBackwardIteration returns the largest x <= target (0 < x < n)
// before a user or assistant message that no call/result pair spans, or not ok when there is
// none; on a valid history both halves of the cut stay valid.
func checkIterationCut(t *testing.T, h []chat.Message, opts ValidateOptions, target int) {
	t.Helper()
	n := len(h)
	tc := min(max(target, 0), n)
	cut, ok := SafeCut(h, target, CutOptions{Search: Backward, Iterations: true})
	qualifies := func(x int) bool {
		return (h[x].Role == chat.RoleUser || h[x].Role == chat.RoleAssistant) && !spans(h, x)
	}
	want, wantOK := 0, false
	if tc == 0 || tc == n {
		want, wantOK = tc, true
	} else {
		for x := tc; x > 0; x-- {
			if qualifies(x) {
				want, wantOK = x, true
				break
			}
		}
	}
	if cut != want || ok != wantOK {
		t.Fatalf("SafeCutBackwardIteration(target %d) = %d, %v; want %d, %v\n%s", target, cut, ok, want, wantOK, notation(h))
	}
	if !ok || cut == 0 || cut == n || Validate(h, opts) != nil {
		return
	}
	if err := Validate(h[:cut], ValidateOptions{}); err != nil {
		t.Fatalf("SafeCutBackwardIteration(target %d) = %d: head invalid: %v\n%s", target, cut, err, notation(h))
	}
	if err := Validate(h[cut:], opts); err != nil {
		t.Fatalf("SafeCutBackwardIteration(target %d) = %d: tail invalid: %v\n%s", target, cut, err, notation(h))
	}
}

func checkNoSplit(t *testing.T, name string, raw []chat.Message, target, cut int, ok bool) {
	t.Helper()
	if !ok || cut == 0 || cut == len(raw) {
		return
	}
	if raw[cut].Role != chat.RoleUser {
		t.Fatalf("%s(raw, %d) = %d: not a user message", name, target, cut)
	}
	for r := cut; r < len(raw); r++ {
		if raw[r].Role != chat.RoleTool {
			continue
		}
	search:
		for c := r - 1; c >= 0; c-- {
			for _, tc := range raw[c].ToolCalls {
				if tc.ID == raw[r].ToolCallID {
					if c < cut {
						t.Fatalf("%s(raw, %d) = %d separates call at %d from result at %d\n%s", name, target, cut, c, r, notation(raw))
					}
					break search
				}
			}
		}
	}
}

// TestRepairValidUnchanged: Repair of a history that is already valid returns an equal copy and
// no changes, over a set of generated histories (every repaired history is valid).
func TestRepairValidUnchanged(t *testing.T) {
	for seed := range 2000 {
		data := make([]byte, seed%97)
		x := uint32(int64(seed)*2654435761 + 1)
		for i := range data {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			data[i] = byte(x)
		}
		valid, _ := Repair(fuzzHistory(data))
		out, changes := Repair(valid)
		if len(changes) != 0 || !reflect.DeepEqual(out, valid) {
			t.Fatalf("seed %d: changes %v on a valid history %s", seed, changes, notation(valid))
		}
	}
}
