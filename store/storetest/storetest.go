// Package storetest is the conformance suite of store.Store: every backend (memory, files,
// SQLite, PostgreSQL, ...) runs the same subtests from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return store.NewMemory() })
//	}
//
// Backends that persist also pass a reopen function (RunReopen) so that the suite can check
// that everything survives a close and an open.
//
// The contract the suite checks, beyond the doc comments of store.Store:
//
//   - Messages come back equal (reflect.DeepEqual) to what encoding/json makes of them after
//     one round trip: that is the meaning of "verbatim". Messages that encoding/json cannot
//     encode make Append (or Archive) fail, storing nothing.
//   - Append with a wrong `at` returns an error matching store.ErrConflict and stores nothing;
//     an empty msgs with the right `at` is a no-op that creates no session.
//   - Messages clamps its range: from < 0 counts as 0, to < 0 or beyond the end as the end,
//     from >= to gives no messages. An unknown session has no messages and no error.
//   - Summaries of an unknown session: none, no error. PutSummary requires exactly latest+1
//     (store.ErrConflict otherwise) and sets a zero Created.
//   - Archive with positions already archived keeps the first copy; ReadArchive returns the
//     archived positions in [from, to) in position order, none (no error) for an unknown
//     session; Archive at a negative position is an error.
//   - ReadOffload of an unknown session or key: store.ErrNotFound; of an expired result:
//     store.ErrExpired until Cleanup removes it, store.ErrNotFound afterwards. Offload of a
//     key that is stored and not expired keeps the first text; once the key is gone (cleaned
//     up, or while it is expired) it can be stored again. Line numbers follow store.SplitLines.
//   - Expiry: a result expires when its Expires is set and lies before the clock; Cleanup(now)
//     removes exactly those expiring before now and returns how many it removed.
//   - Every method that takes a session id or key returns store.ErrInvalidID for ids that
//     store.CheckID rejects, and stores nothing.
//   - Sessions lists every session with stored data, sorted by id, with its message count and
//     latest summary version.
//   - After Close every method, Close included, returns store.ErrClosed.
//   - A canceled context makes a method fail with the context's error, storing nothing.
//   - Appending to a session makes it newer (Updated moves to the append's time).
//   - Prune deletes exactly the sessions whose Updated (as
//     Sessions reports it) is before the cut, with everything stored for them, and returns
//     them; a dry run deletes nothing and returns the same list; a pruned id starts afresh.
//   - Events and configuration: events come back in the order appended, with increasing ids;
//     Config returns what PutConfig stored, empty and nil for none; Prune deletes both with
//     the session.
//   - Concurrency: appends racing from many goroutines, each retrying on ErrConflict, store
//     every message exactly once, each batch contiguous and each goroutine's in its order.
package storetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// Options configures the suite.
type Options struct {
	// Reopen, when set, returns a store over the same storage as old, which the suite has
	// already closed; the persistence subtests run only when it is set.
	Reopen func(t *testing.T, old store.Store) store.Store
}

// Run runs the conformance suite against stores made by open, which must return a new,
// empty store on every call (a fresh directory, database or schema). The suite closes them.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	RunWith(t, open, Options{})
}

// RunReopen runs the suite including the persistence subtests: reopen returns a store over
// the same storage as old, which the suite has closed.
func RunReopen(t *testing.T, open func(t *testing.T) store.Store, reopen func(t *testing.T, old store.Store) store.Store) {
	RunWith(t, open, Options{Reopen: reopen})
}

// RunWith runs the suite with options.
func RunWith(t *testing.T, open func(t *testing.T) store.Store, opts Options) {
	newStore := func(t *testing.T) store.Store {
		t.Helper()
		s := open(t)
		t.Cleanup(func() { s.Close() })
		return s
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Copies", testCopies},
		{"Unencodable", testUnencodable},
		{"Ranges", testRanges},
		{"AppendConflict", testAppendConflict},
		{"ConcurrentAppend", testConcurrentAppend},
		{"Summaries", testSummaries},
		{"Archive", testArchive},
		{"Offload", testOffload},
		{"State", testState},
		{"Expiry", testExpiry},
		{"InvalidIDs", testInvalidIDs},
		{"UnknownSession", testUnknownSession},
		{"Sessions", testSessions},
		{"Canceled", testCanceled},
		{"Closed", testClosed},
		{"Prune", testPrune},
		{"AppendMakesNewer", testAppendMakesNewer},
		{"EventsAndConfig", testEventsAndConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
	if opts.Reopen == nil {
		return // the backend does not persist: there is nothing to reopen
	}
	t.Run("Reopen", func(t *testing.T) {
		testReopen(t, newStore(t), func(t *testing.T, old store.Store) store.Store {
			if err := old.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
				t.Fatalf("Close: %v", err)
			}
			s := opts.Reopen(t, old)
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// Kinds returns one message of every kind the model has: text, images with data, files,
// tool calls with odd argument text, tool results with IsError, reasoning with signatures,
// PartOther raw JSON, Extra maps, Meta, unicode and emoji, and a 1 MiB text.
func Kinds() []chat.Message {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR fake image bytes \xff\xfe"))
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	return []chat.Message{
		chat.TextMessage(chat.RoleSystem, "You are terse."),
		{Role: chat.RoleUser, Name: "alice", Content: []chat.Part{{Type: chat.PartText,
			Text: "héllo wörld — 你好 🌍👩‍💻 \u2028sep\u2029 \"quotes\" <html> & \\ back\nslash\ttab \x00nul \x7f"}},
			Meta: map[string]string{"turn": "1", "ünï": "çødé 🎉"}},
		{Role: chat.RoleUser, Wire: "anthropic", Shape: chat.ShapeParts, Content: []chat.Part{
			{Type: chat.PartText, Text: "look at these"},
			{Type: chat.PartImage, Image: &chat.Image{MediaType: "image/png", Data: png, Width: 640, Height: 480}},
			{Type: chat.PartImage, Image: &chat.Image{URL: "https://example.com/a.png?x=1&y=<2>", Detail: "high"}},
			{Type: chat.PartFile, File: &chat.FileRef{ID: "file-1", Name: "a.pdf", MediaType: "application/pdf", Data: "JVBERi0xLjQK"}},
		}},
		{Role: chat.RoleAssistant, Wire: "anthropic", Content: []chat.Part{
			{Type: chat.PartReasoning, Text: "Let me think…\nstep 1", Signature: "EqQBCkYIARgCIkD+/=="},
			{Type: chat.PartReasoning, Redacted: "opaque-redacted-data=="},
			{Type: chat.PartText, Text: "Running tools."},
		}, ToolCalls: []chat.ToolCall{
			{ID: "call_1", Name: "bash", Arguments: `{"cmd": "ls -la \"/tmp\" | grep '<x>'", "n": 1e3}`},
			{ID: "call_2", Name: "edit", Arguments: `{"broken": [1, 2`, Extra: map[string]json.RawMessage{"index": json.RawMessage(`0`)}},
			{ID: "call_3", Name: "noargs", Arguments: ""},
			{ID: "call_4", Name: "spaces", Arguments: "  {\n  \"a\" : 1 }\n"},
		}},
		chat.ToolResult("call_1", "bash", "total 0\n-rw-r--r-- 1 root root 0 a\n", false),
		{Role: chat.RoleTool, ToolCallID: "call_2", Name: "edit", IsError: true, JoinPrev: true,
			Content: []chat.Part{{Type: chat.PartText, Text: "error: invalid JSON in arguments"}}},
		{Role: chat.RoleTool, ToolCallID: "call_3", Name: "noargs", Content: []chat.Part{{Type: chat.PartText, Text: big}}},
		{Role: chat.RoleTool, ToolCallID: "call_4", Name: "spaces", Content: []chat.Part{{Type: chat.PartText, Text: ""}}},
		{Role: chat.RoleAssistant, Wire: "openai", Shape: chat.ShapeString, Content: []chat.Part{
			{Type: chat.PartOther, Raw: json.RawMessage(`{"type": "server_tool_use", "id": "srv_1", "input": {"q": "x <y>"}}`)},
			{Type: chat.PartText, Text: "done", Extra: map[string]json.RawMessage{
				"cache_control": json.RawMessage(`{"type":"ephemeral"}`),
				"citations":     json.RawMessage(`[{"a": 1, "b": "\u00e9"}]`),
			}},
		}, Extra: map[string]json.RawMessage{"refusal": json.RawMessage(`null`), "audio": json.RawMessage(`{"id":"a1"}`)}},
		{Role: chat.RoleSystem, WireRole: "developer", Wire: "openai", Content: []chat.Part{{Type: chat.PartText, Text: "dev"}}},
		{Role: chat.RoleUser, Shape: chat.ShapeNull},
		{Role: chat.RoleAssistant, Shape: chat.ShapeAbsent, Content: []chat.Part{}, Meta: map[string]string{}},
	}
}

// RoundTrip returns msgs as they come back from one encoding/json round trip: what a
// conforming store returns.
func RoundTrip(t testing.TB, msgs []chat.Message) []chat.Message {
	t.Helper()
	out := make([]chat.Message, len(msgs))
	for i := range msgs {
		b, err := json.Marshal(&msgs[i])
		if err != nil {
			t.Fatalf("marshal message %d: %v", i, err)
		}
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatalf("unmarshal message %d: %v", i, err)
		}
	}
	return out
}

// EqualMessages fails t unless got equals want exactly (reflect.DeepEqual, message by
// message).
func EqualMessages(t testing.TB, what string, got, want []chat.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			g, _ := json.Marshal(got[i])
			w, _ := json.Marshal(want[i])
			t.Fatalf("%s: message %d differs:\n got %s\nwant %s", what, i, short(g), short(w))
		}
	}
}

func short(b []byte) string {
	if len(b) > 400 {
		return string(b[:200]) + fmt.Sprintf("...(%d bytes)...", len(b)-400) + string(b[len(b)-200:])
	}
	return string(b)
}

func texts(prefix string, n int) []chat.Message {
	out := make([]chat.Message, n)
	for i := range out {
		role := chat.RoleUser
		if i%2 == 1 {
			role = chat.RoleAssistant
		}
		out[i] = chat.TextMessage(role, fmt.Sprintf("%s %d", prefix, i))
	}
	return out
}

func mustAppend(t *testing.T, s store.Store, session string, at int, msgs []chat.Message) {
	t.Helper()
	if err := s.Append(context.Background(), session, at, msgs); err != nil {
		t.Fatalf("Append(%q, at %d, %d messages): %v", session, at, len(msgs), err)
	}
}

func mustMessages(t *testing.T, s store.Store, session string, from, to int) []chat.Message {
	t.Helper()
	got, err := s.Messages(context.Background(), session, from, to)
	if err != nil {
		t.Fatalf("Messages(%q, %d, %d): %v", session, from, to, err)
	}
	return got
}

func testRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	kinds := Kinds()
	want := RoundTrip(t, kinds)
	mustAppend(t, s, "rt", 0, kinds[:3])
	mustAppend(t, s, "rt", 3, kinds[3:])
	EqualMessages(t, "Messages", mustMessages(t, s, "rt", 0, -1), want)
	for i := range want {
		EqualMessages(t, fmt.Sprintf("Messages(%d, %d)", i, i+1), mustMessages(t, s, "rt", i, i+1), want[i:i+1])
	}
	if _, err := s.Archive(ctx, "rt", 0, kinds); err != nil {
		t.Fatalf("Archive: %v", err)
	}
	got, err := s.ReadArchive(ctx, "rt", 0, -1)
	if err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	EqualMessages(t, "ReadArchive", ArchivedMessages(got), want)
}

// smallKinds is Kinds without the 1 MiB message, for subtests that read it many times.
func smallKinds() []chat.Message {
	var out []chat.Message
	for _, m := range Kinds() {
		if len(m.Text()) < 1<<16 {
			out = append(out, m)
		}
	}
	return out
}

func testCopies(t *testing.T, s store.Store) {
	ctx := context.Background()
	kinds := smallKinds()
	want := RoundTrip(t, kinds)
	mustAppend(t, s, "cp", 0, kinds)
	if _, err := s.Archive(ctx, "cp", 0, kinds); err != nil {
		t.Fatalf("Archive: %v", err)
	}
	mutate := func(msgs []chat.Message) {
		for i := range msgs {
			m := &msgs[i]
			for j := range m.Content {
				m.Content[j].Text += "!"
				if m.Content[j].Image != nil {
					m.Content[j].Image.Data = "changed"
				}
				if len(m.Content[j].Raw) > 0 {
					m.Content[j].Raw[0] = ' '
				}
				for k, v := range m.Content[j].Extra {
					if len(v) > 0 {
						v[0] = ' '
					}
					m.Content[j].Extra[k] = json.RawMessage(`"changed"`)
				}
			}
			for j := range m.ToolCalls {
				m.ToolCalls[j].Arguments = "changed"
			}
			if m.Meta != nil {
				m.Meta["turn"] = "changed"
			}
			m.Extra = nil
		}
	}
	mutate(kinds) // the caller's values after Append
	got := mustMessages(t, s, "cp", 0, -1)
	mutate(got) // values returned to a caller
	EqualMessages(t, "Messages after mutating input and output", mustMessages(t, s, "cp", 0, -1), want)
	arch, err := s.ReadArchive(ctx, "cp", 0, -1)
	if err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	mutate(ArchivedMessages(arch))
	for i := range arch {
		mutate([]chat.Message{arch[i].Message})
	}
	arch, err = s.ReadArchive(ctx, "cp", 0, -1)
	if err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	EqualMessages(t, "ReadArchive after mutating output", ArchivedMessages(arch), want)
}

func testUnencodable(t *testing.T, s store.Store) {
	ctx := context.Background()
	bad := chat.TextMessage(chat.RoleUser, "x")
	bad.Extra = map[string]json.RawMessage{"x": json.RawMessage(`{not json`)}
	good := chat.TextMessage(chat.RoleUser, "good")
	if err := s.Append(ctx, "un", 0, []chat.Message{good, bad}); err == nil || errors.Is(err, store.ErrConflict) {
		t.Fatalf("Append of an unencodable message: %v, want a non-conflict error", err)
	}
	if got := mustMessages(t, s, "un", 0, -1); len(got) != 0 {
		t.Fatalf("after failed Append: %d messages stored, want 0", len(got))
	}
	if _, err := s.Archive(ctx, "un", 0, []chat.Message{good, bad}); err == nil {
		t.Fatalf("Archive of an unencodable message succeeded")
	}
	if got, err := s.ReadArchive(ctx, "un", 0, -1); err != nil || len(got) != 0 {
		t.Fatalf("after failed Archive: %d archived, %v; want 0, nil", len(got), err)
	}
	mustAppend(t, s, "un", 0, []chat.Message{good})
	EqualMessages(t, "Messages", mustMessages(t, s, "un", 0, -1), RoundTrip(t, []chat.Message{good}))
}

func testRanges(t *testing.T, s store.Store) {
	msgs := texts("r", 10)
	want := RoundTrip(t, msgs)
	mustAppend(t, s, "rg", 0, msgs[:4])
	mustAppend(t, s, "rg", 4, msgs[4:5])
	mustAppend(t, s, "rg", 5, msgs[5:])
	for _, r := range []struct{ from, to, wantFrom, wantTo int }{
		{0, -1, 0, 10}, {0, 10, 0, 10}, {0, 100, 0, 10}, {3, 7, 3, 7}, {9, -1, 9, 10},
		{-5, 2, 0, 2}, {5, 5, 5, 5}, {7, 3, 7, 7}, {10, -1, 10, 10}, {15, 20, 10, 10}, {0, 0, 0, 0},
	} {
		got := mustMessages(t, s, "rg", r.from, r.to)
		EqualMessages(t, fmt.Sprintf("Messages(%d, %d)", r.from, r.to), got, want[r.wantFrom:r.wantTo])
	}
	if got := mustMessages(t, s, "rg-unknown", 0, -1); len(got) != 0 {
		t.Fatalf("unknown session: %d messages", len(got))
	}
}

func testAppendConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	msgs := texts("c", 6)
	want := RoundTrip(t, msgs)
	for _, at := range []int{1, -1, 5} {
		if err := s.Append(ctx, "cf", at, msgs[:1]); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("Append at %d to an empty session: %v, want ErrConflict", at, err)
		}
	}
	if err := s.Append(ctx, "cf", 1, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("empty Append at 1 to an empty session: %v, want ErrConflict", err)
	}
	mustAppend(t, s, "cf", 0, msgs[:3])
	for _, at := range []int{0, 2, 4, -1} {
		if err := s.Append(ctx, "cf", at, msgs[3:]); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("Append at %d with 3 stored: %v, want ErrConflict", at, err)
		}
	}
	EqualMessages(t, "after conflicts", mustMessages(t, s, "cf", 0, -1), want[:3])
	mustAppend(t, s, "cf", 3, nil)
	if err := s.Append(ctx, "cf", 2, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("empty Append at 2 with 3 stored: %v, want ErrConflict", err)
	}
	mustAppend(t, s, "cf", 3, msgs[3:])
	EqualMessages(t, "final", mustMessages(t, s, "cf", 0, -1), want)
}

func testConcurrentAppend(t *testing.T, s store.Store) {
	ctx := context.Background()
	const writers, perWriter = 8, 12
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			known := 0
			for i, batch := 0, 0; i < perWriter; batch++ {
				n := 1 + (g+batch)%2
				if i+n > perWriter {
					n = perWriter - i
				}
				msgs := make([]chat.Message, n)
				for j := range msgs {
					msgs[j] = chat.TextMessage(chat.RoleUser, fmt.Sprintf("g%d i%d", g, i+j))
					msgs[j].Meta = map[string]string{"g": strconv.Itoa(g), "i": strconv.Itoa(i + j), "b": strconv.Itoa(batch)}
				}
				for attempt := 0; ; attempt++ {
					if attempt > 10000 {
						errs <- fmt.Errorf("writer %d: too many conflicts", g)
						return
					}
					err := s.Append(ctx, "cc", known, msgs)
					if err == nil {
						known += n
						break
					}
					if !errors.Is(err, store.ErrConflict) {
						errs <- fmt.Errorf("writer %d: Append at %d: %v", g, known, err)
						return
					}
					newer, err := s.Messages(ctx, "cc", known, -1)
					if err != nil {
						errs <- fmt.Errorf("writer %d: Messages: %v", g, err)
						return
					}
					known += len(newer)
				}
				i += n
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := mustMessages(t, s, "cc", 0, -1)
	if len(got) != writers*perWriter {
		t.Fatalf("%d messages, want %d", len(got), writers*perWriter)
	}
	next := make([]int, writers)
	lastPos, lastBatch := make([]int, writers), make([]string, writers)
	for k, m := range got {
		g, _ := strconv.Atoi(m.Meta["g"])
		i, _ := strconv.Atoi(m.Meta["i"])
		if g < 0 || g >= writers || i != next[g] || m.Text() != fmt.Sprintf("g%d i%d", g, i) {
			t.Fatalf("message %d is %q (g %s, i %s), want writer %s's message %d", k, m.Text(), m.Meta["g"], m.Meta["i"], m.Meta["g"], next[g])
		}
		// A batch is stored contiguously.
		if i > 0 && lastBatch[g] == m.Meta["b"] && lastPos[g] != k-1 {
			t.Fatalf("message %d: batch %s of writer %d was interleaved with other messages", k, m.Meta["b"], g)
		}
		next[g]++
		lastPos[g], lastBatch[g] = k, m.Meta["b"]
	}
}

func equalSummaries(t *testing.T, what string, got, want []store.Summary) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d summaries, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if !g.Created.Equal(w.Created) {
			t.Fatalf("%s: summary %d created %v, want %v", what, i, g.Created, w.Created)
		}
		g.Created, w.Created = time.Time{}, time.Time{}
		if g != w {
			t.Fatalf("%s: summary %d is %+v, want %+v", what, i, g, w)
		}
	}
}

func testSummaries(t *testing.T, s store.Store) {
	ctx := context.Background()
	if got, err := s.Summaries(ctx, "sm"); err != nil || len(got) != 0 {
		t.Fatalf("Summaries of an unknown session: %v, %v; want none, nil", got, err)
	}
	created := time.Date(2025, 3, 1, 12, 30, 15, 123456789, time.UTC)
	sums := []store.Summary{
		{Version: 1, Text: "## Goal\nfix the bug 🐛 in <main.go>\n", From: 0, To: 10, Created: created, Summarizer: "extractive"},
		{Version: 2, Text: "## Goal\nv2 — ünïcode\x00", From: 0, To: 20, Created: created.Add(time.Minute), Summarizer: "llm:gpt-4o"},
		{Version: 3, Text: strings.Repeat("long summary line\n", 1000), From: 20, To: 31, Created: created.Add(2 * time.Minute)},
	}
	for _, bad := range []int{0, 2, -1} {
		b := sums[0]
		b.Version = bad
		if err := s.PutSummary(ctx, "sm", b); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("PutSummary version %d first: %v, want ErrConflict", bad, err)
		}
	}
	for i, sum := range sums {
		if err := s.PutSummary(ctx, "sm", sum); err != nil {
			t.Fatalf("PutSummary version %d: %v", sum.Version, err)
		}
		dup := sum
		dup.Text = "duplicate"
		if err := s.PutSummary(ctx, "sm", dup); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("PutSummary duplicate version %d: %v, want ErrConflict", sum.Version, err)
		}
		skip := sum
		skip.Version += 2
		if err := s.PutSummary(ctx, "sm", skip); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("PutSummary version %d after %d: %v, want ErrConflict", skip.Version, sum.Version, err)
		}
		got, err := s.Summaries(ctx, "sm")
		if err != nil {
			t.Fatalf("Summaries: %v", err)
		}
		equalSummaries(t, "Summaries", got, sums[:i+1])
	}
	// A zero Created is stamped by the store.
	before := time.Now().Add(-time.Hour)
	if err := s.PutSummary(ctx, "sm", store.Summary{Version: 4, Text: "four"}); err != nil {
		t.Fatalf("PutSummary version 4: %v", err)
	}
	got, err := s.Summaries(ctx, "sm")
	if err != nil || len(got) != 4 {
		t.Fatalf("Summaries: %d, %v; want 4", len(got), err)
	}
	if c := got[3].Created; c.IsZero() || c.Before(before) {
		t.Fatalf("summary 4 created %v, want about now", c)
	}
	if got, err := s.Summaries(ctx, "sm-other"); err != nil || len(got) != 0 {
		t.Fatalf("Summaries of another session: %v, %v; want none, nil", got, err)
	}
}

func testArchive(t *testing.T, s store.Store) {
	ctx := context.Background()
	msgs := texts("a", 30)
	want := RoundTrip(t, msgs)
	read := func(from, to int) []chat.Message {
		t.Helper()
		got, err := s.ReadArchive(ctx, "ar", from, to)
		if err != nil {
			t.Fatalf("ReadArchive(%d, %d): %v", from, to, err)
		}
		// Each message comes with its position: the messages archived are texts of their
		// position ("a 7" at 7).
		for _, a := range got {
			if text := a.Message.Text(); text != fmt.Sprintf("a %d", a.Pos) {
				t.Fatalf("ReadArchive(%d, %d): position %d holds %q", from, to, a.Pos, text)
			}
		}
		return ArchivedMessages(got)
	}
	if got := read(0, -1); len(got) != 0 {
		t.Fatalf("ReadArchive of an unknown session: %d messages", len(got))
	}
	loc, err := s.Archive(ctx, "ar", 0, msgs[:5])
	if err != nil || loc == "" {
		t.Fatalf("Archive: %q, %v", loc, err)
	}
	EqualMessages(t, "ReadArchive(0, -1)", read(0, -1), want[:5])
	EqualMessages(t, "ReadArchive(1, 3)", read(1, 3), want[1:3])
	EqualMessages(t, "ReadArchive(4, 100)", read(4, 100), want[4:5])
	// Retrying the same positions, even with other content, keeps the first copy.
	if _, err := s.Archive(ctx, "ar", 0, texts("other", 5)); err != nil {
		t.Fatalf("Archive again: %v", err)
	}
	EqualMessages(t, "after re-archiving", read(0, -1), want[:5])
	// An overlapping range adds only the new positions.
	over := append(texts("other", 2), msgs[5:8]...)
	if _, err := s.Archive(ctx, "ar", 3, over); err != nil {
		t.Fatalf("Archive overlapping: %v", err)
	}
	EqualMessages(t, "after overlapping archive", read(0, -1), want[:8])
	// Gaps: positions never archived are absent.
	if _, err := s.Archive(ctx, "ar", 20, msgs[20:22]); err != nil {
		t.Fatalf("Archive at 20: %v", err)
	}
	EqualMessages(t, "with a gap", read(0, -1), append(append([]chat.Message(nil), want[:8]...), want[20:22]...))
	EqualMessages(t, "ReadArchive(8, 20)", read(8, 20), nil)
	EqualMessages(t, "ReadArchive(7, 21)", read(7, 21), []chat.Message{want[7], want[20]})
	EqualMessages(t, "ReadArchive(5, 5)", read(5, 5), nil)
	if _, err := s.Archive(ctx, "ar", 30, nil); err != nil {
		t.Fatalf("Archive of nothing: %v", err)
	}
	if _, err := s.Archive(ctx, "ar", -1, msgs[:1]); err == nil {
		t.Fatalf("Archive at -1 succeeded")
	}
	EqualMessages(t, "final", read(0, -1), append(append([]chat.Message(nil), want[:8]...), want[20:22]...))
	if got, err := s.ReadArchive(ctx, "ar-other", 0, -1); err != nil || len(got) != 0 {
		t.Fatalf("ReadArchive of another session: %d, %v", len(got), err)
	}
}

func readOffload(t *testing.T, s store.Store, session, key string, from, max int) (string, int) {
	t.Helper()
	text, total, err := s.ReadOffload(context.Background(), session, key, from, max)
	if err != nil {
		t.Fatalf("ReadOffload(%q, %q, %d, %d): %v", session, key, from, max, err)
	}
	return text, total
}

func testOffload(t *testing.T, s store.Store) {
	ctx := context.Background()
	text := "line 1\nline 2 🎉\n\nline 4\nline 5 no newline"
	exp := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	o, err := s.Offload(ctx, "of", "call_1", text, exp)
	if err != nil {
		t.Fatalf("Offload: %v", err)
	}
	if o.Key != "call_1" || o.Location == "" || o.Bytes != len(text) || o.Lines != 5 || !o.Expires.Equal(exp) {
		t.Fatalf("Offload returned %+v", o)
	}
	for _, c := range []struct{ from, max int }{{1, 0}, {2, 2}, {0, 1}, {-3, 0}, {5, 1}, {5, 10}, {6, 1}, {100, 0}, {3, 1}, {1, 5}, {4, -1}} {
		got, total := readOffload(t, s, "of", "call_1", c.from, c.max)
		want, wantTotal := store.SplitLines(text, c.from, c.max)
		if got != want || total != wantTotal {
			t.Fatalf("ReadOffload(%d, %d) = %q, %d; want %q, %d", c.from, c.max, got, total, want, wantTotal)
		}
	}
	// Keep-first: storing the key again keeps the first text.
	o2, err := s.Offload(ctx, "of", "call_1", "other text\n", time.Time{})
	if err != nil {
		t.Fatalf("Offload again: %v", err)
	}
	if o2.Bytes != len(text) || o2.Lines != 5 || !o2.Expires.Equal(exp) || o2.Location != o.Location {
		t.Fatalf("Offload again returned %+v, want the first %+v", o2, o)
	}
	if got, _ := readOffload(t, s, "of", "call_1", 1, 0); got != text {
		t.Fatalf("after Offload again: %q, want the first text", got)
	}
	// Other keys and sessions are independent; empty and large texts; trailing newline.
	if o, err := s.Offload(ctx, "of", "empty", "", time.Time{}); err != nil || o.Lines != 0 || o.Bytes != 0 || !o.Expires.IsZero() {
		t.Fatalf("Offload empty: %+v, %v", o, err)
	}
	if got, total := readOffload(t, s, "of", "empty", 1, 0); got != "" || total != 0 {
		t.Fatalf("ReadOffload empty: %q, %d", got, total)
	}
	var b strings.Builder
	for i := 1; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, "%06d %s\n", i, strings.Repeat("x", 100))
	}
	big := b.String()
	o, err = s.Offload(ctx, "of-2", "call_1", big, time.Time{})
	if err != nil || o.Bytes != len(big) || o.Lines != store.CountLines(big) {
		t.Fatalf("Offload big: %+v, %v", o, err)
	}
	got, total := readOffload(t, s, "of-2", "call_1", 5000, 3)
	want, wantTotal := store.SplitLines(big, 5000, 3)
	if got != want || total != wantTotal || !strings.HasPrefix(got, "005000 ") {
		t.Fatalf("ReadOffload big: %q, %d; want %q, %d", got, total, want, wantTotal)
	}
	if got, _ := readOffload(t, s, "of-2", "call_1", 1, 0); got != big {
		t.Fatalf("ReadOffload big whole: %d bytes, want %d", len(got), len(big))
	}
	if got, _ := readOffload(t, s, "of", "call_1", 1, 0); got != text {
		t.Fatalf("other session's key changed the text")
	}
	for _, c := range []struct{ session, key string }{{"of", "nope"}, {"of-unknown", "call_1"}} {
		if _, _, err := s.ReadOffload(ctx, c.session, c.key, 1, 0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("ReadOffload(%q, %q): %v, want ErrNotFound", c.session, c.key, err)
		}
	}
}

func testExpiry(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now()
	offload := func(key string, exp time.Time) {
		t.Helper()
		if _, err := s.Offload(ctx, "ex", key, "text of "+key+"\n", exp); err != nil {
			t.Fatalf("Offload(%q): %v", key, err)
		}
	}
	offload("past", now.Add(-time.Minute))
	offload("soon", now.Add(time.Hour))
	offload("never", time.Time{})
	if _, err := s.Offload(ctx, "ex-2", "past", "other session\n", now.Add(-time.Minute)); err != nil {
		t.Fatalf("Offload: %v", err)
	}
	if _, err := s.Offload(ctx, "ex-2", "gone", "other session\n", now.Add(-time.Minute)); err != nil {
		t.Fatalf("Offload: %v", err)
	}
	for _, sess := range []string{"ex", "ex-2"} {
		if _, _, err := s.ReadOffload(ctx, sess, "past", 1, 0); !errors.Is(err, store.ErrExpired) && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("ReadOffload of an expired result: %v, want ErrExpired or ErrNotFound", err)
		}
	}
	readOffload(t, s, "ex", "soon", 1, 0)
	readOffload(t, s, "ex", "never", 1, 0)
	n, err := s.Cleanup(ctx, now)
	if err != nil || n != 3 {
		t.Fatalf("Cleanup(now) = %d, %v; want 3, nil", n, err)
	}
	if _, _, err := s.ReadOffload(ctx, "ex", "past", 1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadOffload after Cleanup: %v, want ErrNotFound", err)
	}
	if n, err := s.Cleanup(ctx, now); err != nil || n != 0 {
		t.Fatalf("Cleanup(now) again = %d, %v; want 0, nil", n, err)
	}
	readOffload(t, s, "ex", "soon", 1, 0)
	if n, err := s.Cleanup(ctx, now.Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("Cleanup(now+2h) = %d, %v; want 1, nil", n, err)
	}
	if got, _ := readOffload(t, s, "ex", "never", 1, 0); got != "text of never\n" {
		t.Fatalf("never-expiring result: %q", got)
	}
	if n, err := s.Cleanup(ctx, now.Add(1000*time.Hour)); err != nil || n != 0 {
		t.Fatalf("Cleanup(far future) = %d, %v; want 0, nil", n, err)
	}
	// An expired key that Cleanup has not removed yet is replaced by a new Offload.
	if _, err := s.Offload(ctx, "ex-2", "late", "old\n", now.Add(-time.Minute)); err != nil {
		t.Fatalf("Offload: %v", err)
	}
	if _, err := s.Offload(ctx, "ex-2", "late", "replacement\n", time.Time{}); err != nil {
		t.Fatalf("Offload over an expired result: %v", err)
	}
	if got, _ := readOffload(t, s, "ex-2", "late", 1, 0); got != "replacement\n" {
		t.Fatalf("Offload over an expired result: read %q", got)
	}
	// A cleaned-up key can be stored again.
	if _, err := s.Offload(ctx, "ex", "past", "new text\n", time.Time{}); err != nil {
		t.Fatalf("Offload after Cleanup: %v", err)
	}
	if got, _ := readOffload(t, s, "ex", "past", 1, 0); got != "new text\n" {
		t.Fatalf("re-offloaded: %q", got)
	}
}

// BadIDs are ids that store.CheckID rejects and every backend must refuse.
var BadIDs = []string{"../x", "..", ".", "a/b", "/abs", `a\b`, "", strings.Repeat("a", 300), ".hidden", "a\x00b", "x y", "é"}

func testInvalidIDs(t *testing.T, s store.Store) {
	ctx := context.Background()
	msgs := texts("bad", 1)
	for _, id := range BadIDs {
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, store.ErrInvalidID) {
				t.Fatalf("%s with id %q: %v, want ErrInvalidID", what, id, err)
			}
		}
		check("Append", s.Append(ctx, id, 0, msgs))
		_, err := s.Messages(ctx, id, 0, -1)
		check("Messages", err)
		check("PutSummary", s.PutSummary(ctx, id, store.Summary{Version: 1, Text: "x"}))
		_, err = s.Summaries(ctx, id)
		check("Summaries", err)
		_, err = s.Archive(ctx, id, 0, msgs)
		check("Archive", err)
		_, err = s.ReadArchive(ctx, id, 0, -1)
		check("ReadArchive", err)
		_, err = s.Offload(ctx, id, "key", "text", time.Time{})
		check("Offload (session)", err)
		_, err = s.Offload(ctx, "ok-session", id, "text", time.Time{})
		check("Offload (key)", err)
		_, _, err = s.ReadOffload(ctx, id, "key", 1, 0)
		check("ReadOffload (session)", err)
		_, _, err = s.ReadOffload(ctx, "ok-session", id, 1, 0)
		check("ReadOffload (key)", err)
	}
	infos, err := s.Sessions(ctx)
	if err != nil || len(infos) != 0 {
		t.Fatalf("Sessions after invalid ids: %+v, %v; want none", infos, err)
	}
}

func testUnknownSession(t *testing.T, s store.Store) {
	ctx := context.Background()
	if got, err := s.Messages(ctx, "nobody", 0, -1); err != nil || len(got) != 0 {
		t.Fatalf("Messages: %d, %v", len(got), err)
	}
	if got, err := s.Summaries(ctx, "nobody"); err != nil || len(got) != 0 {
		t.Fatalf("Summaries: %d, %v", len(got), err)
	}
	if got, err := s.ReadArchive(ctx, "nobody", 0, -1); err != nil || len(got) != 0 {
		t.Fatalf("ReadArchive: %d, %v", len(got), err)
	}
	if _, _, err := s.ReadOffload(ctx, "nobody", "k", 1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadOffload: %v, want ErrNotFound", err)
	}
	if err := s.Append(ctx, "nobody", 1, texts("x", 1)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Append at 1: %v, want ErrConflict", err)
	}
	if err := s.Append(ctx, "nobody", 0, nil); err != nil {
		t.Fatalf("empty Append at 0: %v", err)
	}
	if n, err := s.Cleanup(ctx, time.Now()); err != nil || n != 0 {
		t.Fatalf("Cleanup of an empty store: %d, %v", n, err)
	}
	if infos, err := s.Sessions(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("Sessions after reads only: %+v, %v; want none (reads and empty appends create nothing)", infos, err)
	}
}

func testSessions(t *testing.T, s store.Store) {
	ctx := context.Background()
	start := time.Now().Add(-time.Hour)
	if infos, err := s.Sessions(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("Sessions of an empty store: %+v, %v", infos, err)
	}
	mustAppend(t, s, "s-b", 0, texts("b", 3))
	mustAppend(t, s, "s-a", 0, texts("a", 1))
	mustAppend(t, s, "s-b", 3, texts("b2", 2))
	if err := s.PutSummary(ctx, "s-b", store.Summary{Version: 1, Text: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSummary(ctx, "s-b", store.Summary{Version: 2, Text: "two"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Offload(ctx, "s-c", "k", "only an offload", time.Time{}); err != nil {
		t.Fatal(err)
	}
	infos, err := s.Sessions(ctx)
	if err != nil {
		t.Fatalf("Sessions: %v", err)
	}
	want := []store.SessionInfo{{ID: "s-a", Messages: 1}, {ID: "s-b", Messages: 5, Summary: 2}, {ID: "s-c"}}
	if len(infos) != len(want) {
		t.Fatalf("Sessions: %+v, want %+v", infos, want)
	}
	for i, info := range infos {
		if info.ID != want[i].ID || info.Messages != want[i].Messages || info.Summary != want[i].Summary {
			t.Fatalf("Sessions[%d] = %+v, want %+v", i, info, want[i])
		}
		if info.Created.IsZero() || info.Created.Before(start) || info.Updated.Before(info.Created) {
			t.Fatalf("Sessions[%d] times: created %v, updated %v", i, info.Created, info.Updated)
		}
	}
}

func testCanceled(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s with a canceled context: %v, want context.Canceled", what, err)
		}
	}
	msgs := texts("cx", 2)
	check("Append", s.Append(ctx, "cx", 0, msgs))
	_, err := s.Messages(ctx, "cx", 0, -1)
	check("Messages", err)
	_, err = s.Sessions(ctx)
	check("Sessions", err)
	check("PutSummary", s.PutSummary(ctx, "cx", store.Summary{Version: 1, Text: "x"}))
	_, err = s.Summaries(ctx, "cx")
	check("Summaries", err)
	_, err = s.Archive(ctx, "cx", 0, msgs)
	check("Archive", err)
	_, err = s.ReadArchive(ctx, "cx", 0, -1)
	check("ReadArchive", err)
	_, err = s.Offload(ctx, "cx", "k", "t", time.Time{})
	check("Offload", err)
	_, _, err = s.ReadOffload(ctx, "cx", "k", 1, 0)
	check("ReadOffload", err)
	_, err = s.Cleanup(ctx, time.Now())
	check("Cleanup", err)
	if infos, err := s.Sessions(context.Background()); err != nil || len(infos) != 0 {
		t.Fatalf("Sessions after canceled calls: %+v, %v; want none", infos, err)
	}
}

func testClosed(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustAppend(t, s, "cl", 0, texts("cl", 1))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	check("Append", s.Append(ctx, "cl", 1, texts("x", 1)))
	_, err := s.Messages(ctx, "cl", 0, -1)
	check("Messages", err)
	_, err = s.Sessions(ctx)
	check("Sessions", err)
	check("PutSummary", s.PutSummary(ctx, "cl", store.Summary{Version: 1, Text: "x"}))
	_, err = s.Summaries(ctx, "cl")
	check("Summaries", err)
	_, err = s.Archive(ctx, "cl", 0, texts("x", 1))
	check("Archive", err)
	_, err = s.ReadArchive(ctx, "cl", 0, -1)
	check("ReadArchive", err)
	_, err = s.Offload(ctx, "cl", "k", "t", time.Time{})
	check("Offload", err)
	_, _, err = s.ReadOffload(ctx, "cl", "k", 1, 0)
	check("ReadOffload", err)
	_, err = s.Cleanup(ctx, time.Now())
	check("Cleanup", err)
	_, err = s.Prune(ctx, time.Now(), true)
	check("Prune", err)
	check("AppendEvent", s.AppendEvent(ctx, "cl", "compact", []byte(`{}`)))
	_, err = s.Events(ctx, "cl")
	check("Events", err)
	check("PutConfig", s.PutConfig(ctx, "cl", "m", []byte(`{}`)))
	_, _, err = s.Config(ctx, "cl")
	check("Config", err)
	check("Close", s.Close())
}

func testReopen(t *testing.T, s store.Store, reopen func(t *testing.T, old store.Store) store.Store) {
	ctx := context.Background()
	kinds := smallKinds()
	want := RoundTrip(t, kinds)
	mustAppend(t, s, "ro", 0, kinds[:5])
	mustAppend(t, s, "ro", 5, kinds[5:])
	mustAppend(t, s, "ro-2", 0, texts("two", 2))
	sums := []store.Summary{
		{Version: 1, Text: "first", To: 4, Created: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), Summarizer: "extractive"},
		{Version: 2, Text: "second 🎉", From: 0, To: 8, Created: time.Date(2025, 1, 2, 3, 5, 5, 6, time.FixedZone("X", 3600))},
	}
	for _, sum := range sums {
		if err := s.PutSummary(ctx, "ro", sum); err != nil {
			t.Fatalf("PutSummary: %v", err)
		}
	}
	if _, err := s.Archive(ctx, "ro", 0, kinds[:6]); err != nil {
		t.Fatalf("Archive: %v", err)
	}
	if err := s.PutState(ctx, "ro", []byte(`{"start":4}`)); err != nil {
		t.Fatalf("PutState: %v", err)
	}
	exp := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if _, err := s.Offload(ctx, "ro", "call_1", "a\nb\nc\n", exp); err != nil {
		t.Fatalf("Offload: %v", err)
	}
	if _, err := s.Offload(ctx, "ro", "old", "expired\n", time.Now().Add(-time.Hour)); err != nil {
		t.Fatalf("Offload: %v", err)
	}

	for round := 0; round < 2; round++ {
		s = reopen(t, s)
		EqualMessages(t, "Messages after reopen", mustMessages(t, s, "ro", 0, -1), want)
		EqualMessages(t, "Messages(3, 6) after reopen", mustMessages(t, s, "ro", 3, 6), want[3:6])
		got, err := s.Summaries(ctx, "ro")
		if err != nil {
			t.Fatalf("Summaries: %v", err)
		}
		equalSummaries(t, "Summaries after reopen", got, sums)
		arch, err := s.ReadArchive(ctx, "ro", 0, -1)
		if err != nil {
			t.Fatalf("ReadArchive: %v", err)
		}
		EqualMessages(t, "ReadArchive after reopen", ArchivedMessages(arch), want[:6])
		if st, err := s.State(ctx, "ro"); err != nil || string(st) != `{"start":4}` {
			t.Fatalf("State after reopen: %q, %v", st, err)
		}
		if text, total := readOffload(t, s, "ro", "call_1", 2, 1); text != "b\n" || total != 3 {
			t.Fatalf("ReadOffload after reopen: %q, %d", text, total)
		}
		o, err := s.Offload(ctx, "ro", "call_1", "other", time.Time{})
		if err != nil || o.Bytes != 6 || o.Lines != 3 || !o.Expires.Equal(exp) {
			t.Fatalf("Offload again after reopen: %+v, %v; want the first", o, err)
		}
		infos, err := s.Sessions(ctx)
		if err != nil || len(infos) != 2 || infos[0].ID != "ro" || infos[0].Messages != len(kinds)+round || infos[0].Summary != 2+round || infos[1].ID != "ro-2" || infos[1].Messages != 2 {
			t.Fatalf("Sessions after reopen: %+v, %v", infos, err)
		}
		// Compare-and-swap, versions and idempotency hold across the reopen.
		n := len(kinds) + round
		if err := s.Append(ctx, "ro", n-1, texts("late", 1)); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("Append at a stale position after reopen: %v, want ErrConflict", err)
		}
		if err := s.PutSummary(ctx, "ro", store.Summary{Version: 2 + round, Text: "dup"}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("PutSummary of an existing version after reopen: %v, want ErrConflict", err)
		}
		if _, err := s.Archive(ctx, "ro", 0, texts("other", 3)); err != nil {
			t.Fatalf("Archive again: %v", err)
		}
		more := texts(fmt.Sprintf("more %d", round), 1)
		mustAppend(t, s, "ro", n, more)
		want = append(want, RoundTrip(t, more)...)
		if err := s.PutSummary(ctx, "ro", store.Summary{Version: 3 + round, Text: "next", Created: sums[0].Created}); err != nil {
			t.Fatalf("PutSummary next version after reopen: %v", err)
		}
		sums = append(sums, store.Summary{Version: 3 + round, Text: "next", Created: sums[0].Created})
	}
	if n, err := s.Cleanup(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("Cleanup after reopen: %d, %v; want 1", n, err)
	}
	s = reopen(t, s)
	if _, _, err := s.ReadOffload(ctx, "ro", "old", 1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cleaned-up result after reopen: %v, want ErrNotFound", err)
	}
	EqualMessages(t, "Messages after the last reopen", mustMessages(t, s, "ro", 0, -1), want)
}

func testState(t *testing.T, s store.Store) {
	ctx := context.Background()
	if st, err := s.State(ctx, "st"); err != nil || st != nil {
		t.Fatalf("State of an unknown session: %q, %v; want nil, nil", st, err)
	}
	mustAppend(t, s, "st", 0, texts("m", 2))
	for _, v := range []string{`{"v":1}`, `{"v":2,"views":[{"i":0,"kind":"masked"}]}`} {
		if err := s.PutState(ctx, "st", []byte(v)); err != nil {
			t.Fatalf("PutState: %v", err)
		}
		st, err := s.State(ctx, "st")
		if err != nil || string(st) != v {
			t.Fatalf("State = %q, %v; want %q", st, err, v)
		}
		st[0] = 'X' // the caller's copy
		if again, _ := s.State(ctx, "st"); string(again) != v {
			t.Fatal("State returned the store's own buffer")
		}
	}
	for _, id := range BadIDs {
		if err := s.PutState(ctx, id, []byte("{}")); !errors.Is(err, store.ErrInvalidID) {
			t.Fatalf("PutState(%q): %v, want ErrInvalidID", id, err)
		}
		if _, err := s.State(ctx, id); !errors.Is(err, store.ErrInvalidID) {
			t.Fatalf("State(%q): %v, want ErrInvalidID", id, err)
		}
	}
}

func sessionInfo(t *testing.T, s store.Store, id string) store.SessionInfo {
	t.Helper()
	infos, err := s.Sessions(context.Background())
	if err != nil {
		t.Fatalf("Sessions: %v", err)
	}
	for _, info := range infos {
		if info.ID == id {
			return info
		}
	}
	t.Fatalf("Sessions lacks %q: %+v", id, infos)
	return store.SessionInfo{}
}

// An append to a session that already has messages makes it newer: Sessions reports a later
// Updated, and a prune cut between the two times keeps it.
func testAppendMakesNewer(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustAppend(t, s, "grow", 0, texts("first", 3))
	before := sessionInfo(t, s, "grow").Updated
	for time.Now().Before(before.Add(20 * time.Millisecond)) {
		time.Sleep(5 * time.Millisecond)
	}
	mustAppend(t, s, "grow", 3, texts("later", 2))
	after := sessionInfo(t, s, "grow").Updated
	if !after.After(before) {
		t.Fatalf("Updated after an append: %v, before it %v", after, before)
	}
	cut := before.Add(10 * time.Millisecond)
	if got, err := s.Prune(ctx, cut, true); err != nil || len(got) != 0 {
		t.Fatalf("Prune at a cut before the append: %+v, %v; want nothing", got, err)
	}
	if got, err := s.Prune(ctx, after.Add(time.Millisecond), true); err != nil || len(got) != 1 || got[0].ID != "grow" || !got[0].Updated.Equal(after) {
		t.Fatalf("Prune (dry run) after the append: %+v, %v; want grow updated %v", got, err, after)
	}
}

func testPrune(t *testing.T, s store.Store) {
	p := s
	ctx := context.Background()
	mustAppend(t, s, "old", 0, texts("old", 3))
	if err := s.PutSummary(ctx, "old", store.Summary{Version: 1, Text: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Archive(ctx, "old", 0, texts("old", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Offload(ctx, "old", "k", "text\n", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutState(ctx, "old", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, "old", "compact", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	oldInfo := sessionInfo(t, s, "old")
	// The cut must fall strictly between the two sessions' update times, as each backend
	// measures them (file modification times are coarse): write "new" once the clock has
	// moved on.
	for time.Now().Before(oldInfo.Updated.Add(20 * time.Millisecond)) {
		time.Sleep(5 * time.Millisecond)
	}
	mustAppend(t, s, "new", 0, texts("new", 1))
	cut := sessionInfo(t, s, "new").Updated
	if !oldInfo.Updated.Before(cut) {
		t.Fatalf("updated times: old %v, new %v", oldInfo.Updated, cut)
	}

	dry, err := p.Prune(ctx, cut, true)
	if err != nil || len(dry) != 1 || dry[0].ID != "old" || dry[0].Messages != 3 || dry[0].Summary != 1 {
		t.Fatalf("Prune dry run: %+v, %v", dry, err)
	}
	if infos, _ := s.Sessions(ctx); len(infos) != 2 {
		t.Fatalf("the dry run deleted something: %+v", infos)
	}
	got, err := p.Prune(ctx, cut, false)
	if err != nil || len(got) != 1 || got[0].ID != "old" || got[0].Messages != 3 {
		t.Fatalf("Prune: %+v, %v", got, err)
	}
	if infos, err := s.Sessions(ctx); err != nil || len(infos) != 1 || infos[0].ID != "new" {
		t.Fatalf("Sessions after Prune: %+v, %v", infos, err)
	}
	if m := mustMessages(t, s, "old", 0, -1); len(m) != 0 {
		t.Fatalf("a pruned session has %d messages", len(m))
	}
	if sums, err := s.Summaries(ctx, "old"); err != nil || len(sums) != 0 {
		t.Fatalf("a pruned session has summaries %+v, %v", sums, err)
	}
	if a, err := s.ReadArchive(ctx, "old", 0, -1); err != nil || len(a) != 0 {
		t.Fatalf("a pruned session has %d archived, %v", len(a), err)
	}
	if _, _, err := s.ReadOffload(ctx, "old", "k", 1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadOffload of a pruned session: %v, want ErrNotFound", err)
	}
	if st, err := s.State(ctx, "old"); err != nil || st != nil {
		t.Fatalf("State of a pruned session: %q, %v", st, err)
	}
	EqualMessages(t, "the kept session", mustMessages(t, s, "new", 0, -1), RoundTrip(t, texts("new", 1)))

	// A pruned id starts afresh: position 0, summary version 1, the offload key free.
	if err := s.Append(ctx, "old", 3, texts("late", 1)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Append after the pruned history: %v, want ErrConflict", err)
	}
	mustAppend(t, s, "old", 0, texts("again", 1))
	if err := s.PutSummary(ctx, "old", store.Summary{Version: 1, Text: "again"}); err != nil {
		t.Fatalf("PutSummary v1 on a pruned id: %v", err)
	}
	if _, err := s.Offload(ctx, "old", "k", "second\n", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if text, _ := readOffload(t, s, "old", "k", 1, 0); text != "second\n" {
		t.Fatalf("offload on a pruned id: %q", text)
	}
	if got, err := p.Prune(ctx, cut, false); err != nil || len(got) != 0 {
		t.Fatalf("Prune again: %+v, %v", got, err)
	}
	if got, err := p.Prune(ctx, time.Time{}, false); err != nil || len(got) != 0 {
		t.Fatalf("Prune before the epoch: %+v, %v", got, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Prune(canceled, time.Now().Add(time.Hour), false); !errors.Is(err, context.Canceled) {
		t.Fatalf("Prune with a canceled context: %v", err)
	}
	if infos, _ := s.Sessions(ctx); len(infos) != 2 {
		t.Fatalf("a canceled Prune deleted something: %+v", infos)
	}
}

func testEventsAndConfig(t *testing.T, s store.Store) {
	ea, er, cs, p := s, s, s, s
	ctx := context.Background()
	mustAppend(t, s, "old", 0, texts("old", 2))
	if err := ea.AppendEvent(ctx, "old", "compact", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := cs.PutConfig(ctx, "old", "gpt-4o", []byte(`{"window":128000}`)); err != nil {
		t.Fatal(err)
	}
	if model, cfg, err := cs.Config(ctx, "old"); err != nil || model != "gpt-4o" || string(cfg) != `{"window":128000}` {
		t.Fatalf("Config: %q, %q, %v", model, cfg, err)
	}
	if model, cfg, err := cs.Config(ctx, "unknown"); err != nil || model != "" || cfg != nil {
		t.Fatalf("Config of an unknown session: %q, %q, %v", model, cfg, err)
	}
	oldInfo := sessionInfo(t, s, "old")
	for time.Now().Before(oldInfo.Updated.Add(20 * time.Millisecond)) {
		time.Sleep(5 * time.Millisecond)
	}
	mustAppend(t, s, "new", 0, texts("new", 1))
	for _, ev := range []struct{ kind, body string }{{"append", `{}`}, {"prepare", `{"tokens":5}`}} {
		if err := ea.AppendEvent(ctx, "new", ev.kind, []byte(ev.body)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := er.Events(ctx, "new")
	if err != nil || len(evs) != 2 || evs[0].Kind != "append" || evs[1].Kind != "prepare" || string(evs[1].Body) != `{"tokens":5}` ||
		evs[0].ID >= evs[1].ID || evs[1].At.Before(evs[0].At) {
		t.Fatalf("Events: %+v, %v", evs, err)
	}
	if evs, err := er.Events(ctx, "unknown"); err != nil || len(evs) != 0 {
		t.Fatalf("Events of an unknown session: %+v, %v", evs, err)
	}
	if got, err := p.Prune(ctx, sessionInfo(t, s, "new").Updated, false); err != nil || len(got) != 1 || got[0].ID != "old" {
		t.Fatalf("Prune: %+v, %v", got, err)
	}
	if evs, _ := er.Events(ctx, "old"); len(evs) != 0 {
		t.Fatalf("a pruned session still has %d events", len(evs))
	}
	if model, cfg, _ := cs.Config(ctx, "old"); model != "" || cfg != nil {
		t.Fatalf("a pruned session still has its configuration: %q %s", model, cfg)
	}
	if evs, _ := er.Events(ctx, "new"); len(evs) != 2 {
		t.Fatalf("the kept session has %d events", len(evs))
	}
}

// ArchivedMessages returns the messages of arch, in its order.
func ArchivedMessages(arch []store.Archived) []chat.Message {
	out := make([]chat.Message, len(arch))
	for i := range arch {
		out[i] = arch[i].Message
	}
	return out
}
