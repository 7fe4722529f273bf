package proxy

import (
	"fmt"
	"strings"
	"testing"

	ooption "github.com/openai/openai-go/v3/option"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
)

// TestReadFollowUpWithinWindow: when the request before a ctxmgr_read call leaves no room for
// the call and its result, the follow-up never exceeds the window (invariant 2) and the
// client never gets a "could not read back" placeholder as the assistant's reply: the model
// is asked again without the read tool and answers with what it has.
func TestReadFollowUpWithinWindow(t *testing.T) {
	const window = 8192
	tune := func(c *ctxmgr.Config) {
		smallTune(c)
		c.Budget.Threshold, c.Budget.SoftThreshold, c.Budget.Reserve = 1, 1, 0.05
	}
	e := newEnv(t, fakeupstream.Options{Window: window}, Config{Window: window, Tune: tune})
	ctx := ctxT(t)
	for _, stream := range []bool{false, true} {
		a := newOpenAIAgent(e.px.URL, bigOutput(6000), ooption.WithHeader(SessionHeader, fmt.Sprintf("read-room-%v", stream)))
		if _, err := a.turn(ctx, "run the big command", stream); err != nil {
			t.Fatal(err)
		}
		// A probe measures the request that asks for the read, then is rewound.
		n := len(e.fake.Records())
		if _, err := a.turn(ctx, "now read back the full output", stream); err != nil {
			t.Fatal(err)
		}
		probe := e.fake.Records()[n]
		if probe.Reply != "ctxmgr_read" {
			t.Fatalf("probe: want a ctxmgr_read call, got %+v", probe)
		}
		a.dropLast(2)
		// The same request again, with max tokens leaving 8 tokens of the window free.
		a.maxOut = int64(window - probe.Tokens - 8)
		n = len(e.fake.Records())
		out, err := a.turn(ctx, "now read back the full output", stream)
		if err != nil {
			t.Fatalf("stream %v: %v (requests %+v)", stream, err, e.fake.Records()[n:])
		}
		if strings.Contains(out, "could not read back") || strings.HasPrefix(out, "[ctxmgr:") {
			t.Errorf("stream %v: the client got a placeholder as the reply: %q", stream, out)
		}
		recs := e.fake.Records()[n:]
		if len(recs) < 2 || recs[0].Reply != "ctxmgr_read" {
			t.Fatalf("stream %v: want a ctxmgr_read call first, got %+v", stream, recs)
		}
		for _, r := range recs {
			if r.Status != 200 {
				t.Errorf("stream %v: request %d refused upstream (%d): %d tokens + %d max > %d", stream, r.Seq, r.Status, r.Tokens, r.MaxTokens, window)
			}
		}
		// Either the read fits (the proxy lowers max_tokens to make room: the follow-up
		// carries the result) or it does not (the model is asked again without the tool);
		// both must fit the window, which checkRecords asserts.
		if contains(recs[1].Tools, readToolName) && recs[1].MaxTokens >= int(a.maxOut) {
			t.Errorf("stream %v: the follow-up offers ctxmgr_read with the client's whole max_tokens (%d)", stream, recs[1].MaxTokens)
		}
		// Here the result fits in half the reply's reserve: the read is answered, not dropped.
		if !contains(recs[1].Tools, readToolName) || !strings.HasPrefix(out, "Read back: [ctxmgr_read") {
			t.Errorf("stream %v: the read was dropped (follow-up tools %v, answer %q)", stream, recs[1].Tools, out)
		}
		t.Logf("stream %v: follow-up offers the read tool: %v, max tokens %d of the client's %d", stream, contains(recs[1].Tools, readToolName), recs[1].MaxTokens, a.maxOut)
		checkRecords(t, recs, window)
		a.maxOut = 512
	}
}

// TestReadResultFitsItsRoom: a ctxmgr_read result, its header and "more" line included, never
// exceeds the tokens the follow-up made room for (a result over it made the follow-up ask
// again without the read tool, so a read the model asked for was lost when the window was
// nearly full), down to the smallest room followUp asks a result for.
func TestReadResultFitsItsRoom(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{Tune: smallTune})
	ctx := ctxT(t)
	a := newOpenAIAgent(e.px.URL, bigOutput(6000), ooption.WithHeader(SessionHeader, "read-fit"))
	if _, err := a.turn(ctx, "run the big command", false); err != nil {
		t.Fatal(err)
	}
	e.srv.sessMu.Lock()
	ps := e.srv.sessions["read-fit"]
	e.srv.sessMu.Unlock()
	if ps == nil {
		t.Fatal("no session \"read-fit\"")
	}
	offs := ps.sess.Stats().Offloads
	if len(offs) == 0 {
		t.Fatal("nothing offloaded: the test proves nothing")
	}
	counter := ps.mgr.m.Config().Counter
	ref := string(offs[0].Location)
	for _, room := range []int{128, 160, 200, 400, 1000} { // followUp asks for at least 128
		args := fmt.Sprintf(`{"ref": %q, "from_line": 1, "lines": 200}`, ref)
		text, isErr := e.srv.answerRead(ctx, ps.id, nil, ps.mgr, ps.sess, args, room, counter)
		if isErr || !strings.HasPrefix(text, "[ctxmgr_read ") {
			t.Fatalf("room %d: %q (error %v)", room, text, isErr)
		}
		if n := counter.Text(text); n > room {
			t.Errorf("room %d: the result takes %d tokens: %q", room, n, text)
		}
	}
}

// TestReadRoomNearThreshold: a request near default's 95% threshold still leaves a
// ctxmgr_read result room, borrowed from the reply's reserve. The figures are those of the
// e2e's Claude Code run whose read was dropped when the result had only the window's free
// room: 27,769 tokens sent with 11,339 of reply reserve in a 40,000-token window.
func TestReadRoomNearThreshold(t *testing.T) {
	per, limit := readRoom(40000, 11339, 27769+60, 1)
	if per < 2000 {
		t.Errorf("one result gets %d tokens; want at least 2000 (half the reserve is %d)", per, 11339/2)
	}
	if limit+11339/2 > 40000 {
		t.Errorf("limit %d leaves the reply less than half its reserve", limit)
	}
	// Without a reserve to borrow from, the window's free room alone, less the margin.
	if per, _ := readRoom(8192, 0, 8000, 1); per >= 0 {
		t.Errorf("a full window still gives a result %d tokens", per)
	}
}
