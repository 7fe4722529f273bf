package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

// checkNext decodes next after prev with DecodeNext and checks it against Decode: the same
// request, or the same error.
func checkNext(t *testing.T, f Format, prev, next []byte) (reused bool) {
	t.Helper()
	_, lay, err := DecodeLayout(f, prev)
	if err != nil {
		lay = nil
	}
	want, werr := Decode(f, next)
	own := bytes.Clone(next)
	got, glay, gerr := DecodeNext(f, own, lay)
	scribble(own) // the request keeps nothing of the body it was decoded from
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("errors differ: Decode %v, DecodeNext %v\nprev: %s\nnext: %s", werr, gerr, prev, next)
	}
	if werr != nil {
		return false
	}
	if !reflect.DeepEqual(want, got) {
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		t.Fatalf("DecodeNext differs from Decode\nprev: %s\nnext: %s\nwant: %s\ngot:  %s", prev, next, wj, gj)
	}
	if glay != nil && !reflect.DeepEqual(glay.Request(), want) {
		t.Fatalf("the layout holds another request")
	}
	// The layout of the result decodes the next body the same way again.
	if glay != nil {
		glay.body = bytes.TrimSpace(next) // its own body (own, trimmed) was scribbled on
		if again, _, err := DecodeNext(f, next, glay); err != nil || !reflect.DeepEqual(again, want) {
			t.Fatalf("decoding the same body again through its own layout differs: %v", err)
		}
	}
	return lay != nil && glay != nil && len(glay.ends) > 0 && lay.open == glay.open
}

// scribble overwrites b, as a reused buffer would be.
func scribble(b []byte) {
	for i := range b {
		b[i] = '#'
	}
}

// tauRun is one tau-bench run: its OpenAI messages.
type tauRun struct {
	Traj []json.RawMessage `json:"traj"`
}

// tauBenchRuns reads the tau-bench airline runs of the embedded sample.
func tauBenchRuns(t *testing.T) []tauRun {
	t.Helper()
	var runs []tauRun
	if err := json.Unmarshal(tauBenchFile(t), &runs); err != nil {
		t.Fatal(err)
	}
	return runs
}

// tauRequest decodes a tau-bench run as the OpenAI request of its whole history.
func tauRequest(t *testing.T, run tauRun) *chat.Request {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": run.Traj})
	req, err := DecodeOpenAI(body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// conversation returns the bodies an agent sends: each with one more message of msgs.
func conversation(prefix, suffix string, msgs []string) []string {
	var out []string
	for n := 1; n <= len(msgs); n++ {
		out = append(out, prefix+"["+strings.Join(msgs[:n], ",")+"]"+suffix)
	}
	return out
}

func TestDecodeNextTauBench(t *testing.T) {
	runs := tauBenchRuns(t)
	bodies, reused := 0, 0
	for r, run := range runs[:min(len(runs), 20)] {
		msgs := make([]string, len(run.Traj))
		for i, m := range run.Traj {
			msgs[i] = string(m)
		}
		conv := conversation(`{"model":"gpt-4o","temperature":0,"messages":`, `,"tools":[{"type":"function","function":{"name":"f"}}],"stream":true}`, msgs)
		for i := 1; i < len(conv); i++ {
			if checkNext(t, OpenAI, []byte(conv[i-1]), []byte(conv[i])) {
				reused++
			}
			bodies++
		}
		// An edit in the middle, and a rewind.
		if len(conv) > 4 {
			edited := strings.Replace(conv[len(conv)-1], msgs[2], `{"role":"user","content":"edited"}`, 1)
			checkNext(t, OpenAI, []byte(conv[len(conv)-1]), []byte(edited))
			checkNext(t, OpenAI, []byte(conv[len(conv)-1]), []byte(conv[2]))
		}
		_ = r
	}
	if reused < bodies*9/10 {
		t.Fatalf("DecodeNext reused the previous decoding for %d of %d bodies", reused, bodies)
	}
	t.Logf("%d bodies, %d decoded from where they differ", bodies, reused)
}

func TestDecodeNextAnthropic(t *testing.T) {
	msgs := []string{
		`{"role":"user","content":[{"type":"text","text":"run ls"}]}`,
		`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"toolu_1","name":"bash","input":{"cmd":"ls"}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a\nb"},{"type":"text","text":"go on"}]}`,
		`{"role":"system","content":"mid-conversation"}`,
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"bash","input":{}},{"type":"tool_use","id":"toolu_3","name":"cat","input":{}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"x"},{"type":"tool_result","tool_use_id":"toolu_3","content":"y","cache_control":{"type":"ephemeral"}}]}`,
		`{"role":"assistant","content":"done"}`,
	}
	conv := conversation(`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"sys"}],"messages":`, `,"tools":[{"name":"bash","input_schema":{"type":"object"}}],"metadata":{"user_id":"u"}}`, msgs)
	reused := 0
	for i := 1; i < len(conv); i++ {
		if checkNext(t, Anthropic, []byte(conv[i-1]), []byte(conv[i])) {
			reused++
		}
	}
	if reused != len(conv)-1 {
		t.Fatalf("reused %d of %d", reused, len(conv)-1)
	}
	// Tool names of results decoded apart come from the kept tool_use blocks.
	req, lay, err := DecodeLayout(Anthropic, []byte(conv[4]))
	if err != nil || lay == nil {
		t.Fatal(err)
	}
	next, _, err := DecodeNext(Anthropic, []byte(conv[5]), lay)
	if err != nil || next.Messages[len(next.Messages)-1].Name != "cat" || len(req.Messages) >= len(next.Messages) {
		t.Fatalf("names: %v %+v", err, next.Messages[len(next.Messages)-1])
	}
	// Changes DecodeNext must not reuse through: other top-level fields, whitespace, errors.
	last := conv[len(conv)-1]
	for _, next := range []string{
		strings.Replace(last, `"max_tokens":1024`, `"max_tokens":2048`, 1),
		strings.Replace(last, `"user_id":"u"`, `"user_id":"v"`, 1),
		strings.Replace(last, `"done"}]`, `"done"} , {"role":"user","content":"more"} ]`, 1),
		strings.Replace(last, `"done"}]`, `"done"},]`, 1),
		strings.Replace(last, `"done"}]`, `"done"},{"role":"robot","content":"x"}]`, 1),
		strings.Replace(last, `"done"}]`, "\"done\"},{\"role\":\"user\",\"content\":\"\xff\"}]", 1),
		strings.Replace(last, `"done"}]`, `"done"}{"role":"user","content":"x"}]`, 1),
		"  " + last + "\n",
		strings.Replace(last, `"messages":[`, `"messages": [ `, 1),
		strings.Replace(last, `,"tools"`, `,"messages":[],"tools"`, 1),
	} {
		checkNext(t, Anthropic, []byte(last), []byte(next))
	}
}

func TestDecodeNextOpenAISystem(t *testing.T) {
	// Leading system messages go to Request.System: a new one after them joins them.
	prev := `{"model":"m","messages":[{"role":"system","content":"a"}]}`
	for _, next := range []string{
		`{"model":"m","messages":[{"role":"system","content":"a"},{"role":"system","content":"b"}]}`,
		`{"model":"m","messages":[{"role":"system","content":"a"},{"role":"user","content":"b"},{"role":"system","content":"c"}]}`,
		`{"model":"m","messages":[{"role":"developer","content":"a"}]}`,
		`{"model":"m","messages":[]}`,
	} {
		checkNext(t, OpenAI, []byte(prev), []byte(next))
	}
}

// FuzzDecodeNext: for arbitrary pairs of bodies, DecodeNext gives exactly what Decode gives.
func FuzzDecodeNext(f *testing.F) {
	for _, bodies := range [][]string{openAIBodies, anthropicBodies} {
		for _, b := range bodies {
			// Each seed body, and the same body with a message appended or removed.
			f.Add([]byte(b), []byte(strings.Replace(b, `]}`, `,{"role":"user","content":"more"}]}`, 1)), bodies[0] == anthropicBodies[0])
			f.Add([]byte(b), []byte(strings.Replace(b, `},{"role":`, `}]}`+"\x00", 1)), bodies[0] == anthropicBodies[0])
		}
	}
	f.Fuzz(func(t *testing.T, prev, next []byte, anthropic bool) {
		format := OpenAI
		if anthropic {
			format = Anthropic
		}
		fuzzNext(t, format, prev, next)
	})
}

// fuzzNext checks DecodeNext of next after prev against Decode of next: the same request or
// the same outcome, and typed errors only.
func fuzzNext(t *testing.T, format Format, prev, next []byte) {
	_, lay, err := DecodeLayout(format, prev)
	if err != nil {
		var ce *chat.Error
		if !errors.As(err, &ce) {
			t.Fatalf("untyped error: %v", err)
		}
		lay = nil
	}
	want, werr := Decode(format, next)
	own := bytes.Clone(next)
	got, _, gerr := DecodeNext(format, own, lay)
	scribble(own) // the request keeps nothing of the body it was decoded from
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("errors differ: %v / %v", werr, gerr)
	}
	if werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("DecodeNext differs from Decode")
	}
	own = bytes.Clone(next)
	whole, _ := Decode(format, own)
	scribble(own)
	if werr == nil && !reflect.DeepEqual(want, whole) {
		t.Fatalf("the request Decode returned changed with the body it was decoded from")
	}
	// Given prev up: its messages may be overwritten, the result is the same.
	if lay != nil {
		_, lay, _ = DecodeLayout(format, prev)
		got, _, gerr = DecodeNextOwned(format, next, lay, func(int, int) bool { return true })
		if (werr == nil) != (gerr == nil) || werr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("DecodeNextOwned differs from Decode: %v / %v", werr, gerr)
		}
		// Told of a shared prefix (all of it, part of it, or more than it: ignored past
		// either body's end), the result is the same.
		shared := SharedPrefix(bytes.TrimSpace(next), lay.Body())
		for _, n := range []int{shared, shared / 2, len(next) + 1} {
			_, lay, _ = DecodeLayout(format, prev)
			got, _, gerr = DecodeNextShared(format, next, lay, n, nil)
			if (werr == nil) != (gerr == nil) || werr == nil && !reflect.DeepEqual(want, got) {
				t.Fatalf("DecodeNextShared(%d of %d) differs from Decode: %v / %v", n, shared, werr, gerr)
			}
		}
	}
}

// TestDecodeNextOwned: a conversation with Claude Code's moving breakpoint, each body decoded
// against the previous one's layout given up, equals Decode's; the previous last message is
// overwritten in place; and a layout still alive (one that another extended in place) keeps
// its request intact whatever its descendants overwrite.
func TestDecodeNextOwned(t *testing.T) {
	body := func(n int) []byte {
		var b strings.Builder
		b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[`)
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			if i == n-1 {
				fmt.Fprintf(&b, `{"role":%q,"content":[{"type":"text","text":"m%d","cache_control":{"type":"ephemeral"}}]}`, role, i)
			} else {
				fmt.Fprintf(&b, `{"role":%q,"content":[{"type":"text","text":"m%d"}]}`, role, i)
			}
		}
		b.WriteString(`],"system":"Be brief."}`)
		return []byte(b.String())
	}
	yes := func(int, int) bool { return true }
	decode := func(n int, prev *Layout) (*chat.Request, *Layout) {
		t.Helper()
		want, err := Decode(Anthropic, body(n))
		if err != nil {
			t.Fatal(err)
		}
		got, lay, err := DecodeNextOwned(Anthropic, body(n), prev, yes)
		if err != nil || lay == nil || !reflect.DeepEqual(want, got) {
			t.Fatalf("%d messages: DecodeNextOwned differs from Decode (%v)", n, err)
		}
		return got, lay
	}
	// Each body against the previous one's layout, given up: its last message changed (the
	// breakpoint moved), one message added. The array grows by doubling, as append's does:
	// most steps write in place.
	_, lay := decode(3, nil)
	inPlace, endsInPlace := 0, 0
	for n := 4; n <= 40; n++ {
		prev, prevEnds, prevCount := lay.Request().Messages, lay.ends, lay.count
		var got *chat.Request
		got, lay = decode(n, lay)
		if lay.Reused() != n-2 || lay.Dropped() != 1 {
			t.Fatalf("%d messages: reused %d, dropped %d; want %d, 1", n, lay.Reused(), lay.Dropped(), n-2)
		}
		if &got.Messages[0] == &prev[0] {
			inPlace++
		} else if cap(prev) >= n {
			t.Fatalf("%d messages: copied, though the previous array had room", n)
		}
		// The offsets and counts of the wire messages too (they were copied every request).
		if &lay.ends[0] == &prevEnds[0] && &lay.count[0] == &prevCount[0] {
			endsInPlace++
		} else if cap(prevEnds) >= n && cap(prevCount) >= n {
			t.Fatalf("%d messages: ends and counts copied, though the previous arrays had room", n)
		}
	}
	if inPlace < 30 || endsInPlace < 30 {
		t.Fatalf("%d of 37 steps in place, %d for ends and counts: want most", inPlace, endsInPlace)
	}
	_, l1 := decode(3, nil)
	_, l2 := decode(5, l1)
	// l2 is extended in place by a body that keeps all of it (the breakpoint left as it was):
	// l2 lives on, as a caller holding it would.
	keep := bytes.Replace(body(5), []byte(`]}],"system"`), []byte(`]},{"role":"assistant","content":"m5"},{"role":"user","content":"m6"}],"system"`), 1)
	want3, _ := Decode(Anthropic, keep)
	r3, l3, err := DecodeNextOwned(Anthropic, keep, l2, yes)
	if err != nil || !reflect.DeepEqual(want3, r3) || l3.Dropped() != 0 {
		t.Fatalf("extension differs from Decode (%v) or dropped %d", err, l3.Dropped())
	}
	// Against l3, in a chain made anew each time: the last message edited (l3's own:
	// overwritten in place), the last message of l2 edited, and a body back at 3 messages
	// (below l3's base: l2's messages, copied). l2 must keep its request: l3 extended it.
	want2, _ := Decode(Anthropic, body(5))
	for i, next := range [][]byte{
		bytes.Replace(keep, []byte(`"content":"m6"`), []byte(`"content":"m6 edited"`), 1),
		bytes.Replace(keep, []byte(`"text":"m4"`), []byte(`"text":"m4 edited"`), 1),
		body(3),
	} {
		_, l1, _ := DecodeLayout(Anthropic, body(3))
		_, l2, _ := DecodeNextOwned(Anthropic, body(5), l1, yes)
		_, l3, _ := DecodeNextOwned(Anthropic, keep, l2, yes)
		ends2, count2 := slices.Clone(l2.ends), slices.Clone(l2.count)
		want, _ := Decode(Anthropic, next)
		got, l4, err := DecodeNextOwned(Anthropic, next, l3, yes)
		if err != nil || !reflect.DeepEqual(want, got) {
			t.Fatalf("case %d: DecodeNextOwned differs from Decode (%v)", i, err)
		}
		if !reflect.DeepEqual(want2, l2.Request()) {
			t.Fatalf("case %d: a layout another extended in place lost its request", i)
		}
		if !slices.Equal(ends2, l2.ends) || !slices.Equal(count2, l2.count) {
			t.Fatalf("case %d: a layout another extended in place lost its messages' ends or counts", i)
		}
		if inPlace := &got.Messages[0] == &l3.Request().Messages[0]; inPlace && i > 0 || l4.Reused() == 0 {
			t.Fatalf("case %d: in place %v, reused %d", i, inPlace, l4.Reused())
		}
	}
}

// TestDecodeNextExtendsInPlaceOnce: the first DecodeNext that continues a layout appends to
// its arrays in place; a second continuation of the same layout (a branch: the agent went
// back) must copy, so that neither request sees the other's messages.
func TestDecodeNextExtendsInPlaceOnce(t *testing.T) {
	const pre, suf = `{"model":"m","messages":`, `}`
	a, b := `{"role":"user","content":"a"}`, `{"role":"assistant","content":"b"}`
	c, d := `{"role":"user","content":"c"}`, `{"role":"user","content":"d"}`
	_, l0, err := DecodeLayout(OpenAI, []byte(pre+"["+a+","+b+"]"+suf))
	if err != nil {
		t.Fatal(err)
	}
	r1, l1, err := DecodeNext(OpenAI, []byte(pre+"["+a+","+b+","+c+"]"+suf), l0)
	if err != nil || l1.Reused() != 2 {
		t.Fatalf("first continuation: %v, reused %d", err, l1.Reused())
	}
	r2, l2, err := DecodeNext(OpenAI, []byte(pre+"["+a+","+b+","+d+"]"+suf), l0)
	if err != nil || l2.Reused() != 2 {
		t.Fatalf("second continuation: %v, reused %d", err, l2.Reused())
	}
	if got := r1.Messages[2].Text(); got != "c" {
		t.Fatalf("the first continuation's new message became %q", got)
	}
	if got := r2.Messages[2].Text(); got != "d" {
		t.Fatalf("the second continuation's new message is %q", got)
	}
	if len(l0.Request().Messages) != 2 || len(l0.ends) != 2 || len(l0.count) != 2 {
		t.Fatalf("the continued layout changed: %d messages", len(l0.Request().Messages))
	}
	// Each continues again from its own layout, in place or not, and stays what Decode says.
	for _, x := range []struct {
		lay  *Layout
		last string
	}{{l1, c}, {l2, d}} {
		body := pre + "[" + a + "," + b + "," + x.last + `,{"role":"assistant","content":"e"}]` + suf
		want, _ := Decode(OpenAI, []byte(body))
		got, _, err := DecodeNext(OpenAI, []byte(body), x.lay)
		if err != nil || !reflect.DeepEqual(want, got) {
			t.Fatalf("continuing %s: %v", x.last, err)
		}
	}
}

// TestDecodeNextResponses: a Codex-style stateless Responses conversation (developer item,
// reasoning, messages, calls and outputs, a custom tool call) decoded item by item from where
// each body differs, equal to the whole decode; resuming only where no assistant turn is open.
func TestDecodeNextResponses(t *testing.T) {
	items := []string{
		`{"type":"message","role":"developer","content":[{"type":"input_text","text":"sandbox: workspace-write"}]}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"run ls"}]}`,
		`{"type":"reasoning","summary":[{"type":"summary_text","text":"list files"}],"encrypted_content":"gAAA"}`,
		`{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{\"cmd\":[\"ls\"]}"}`,
		`{"type":"function_call_output","call_id":"call_1","output":"a\nb"}`,
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"two files"}]}`,
		`{"type":"function_call","call_id":"call_2","name":"shell","arguments":"{}"}`,
		`{"type":"function_call_output","call_id":"call_2","output":"ok"}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"now patch"}]}`,
		`{"type":"custom_tool_call","call_id":"call_3","name":"apply_patch","input":"*** Begin Patch"}`,
		`{"type":"custom_tool_call_output","call_id":"call_3","output":"done"}`,
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"patched"}]}`,
	}
	conv := conversation(`{"model":"gpt-5","instructions":"You are Codex.","input":`, `,"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}],"store":false,"stream":true}`, items)
	reused := 0
	for i := 1; i < len(conv); i++ {
		if checkNext(t, Responses, []byte(conv[i-1]), []byte(conv[i])) {
			reused++
		}
		for j := 0; j < i; j++ { // several items at once, and a rewind
			checkNext(t, Responses, []byte(conv[j]), []byte(conv[i]))
			checkNext(t, Responses, []byte(conv[i]), []byte(conv[j]))
		}
	}
	if reused < len(conv)-4 {
		t.Fatalf("reused the previous decoding for %d of %d bodies", reused, len(conv)-1)
	}
	// Growth by one item reuses every message before the last open turn.
	resumed := 0
	for i := 1; i < len(conv); i++ {
		_, lay, err := DecodeLayout(Responses, []byte(conv[i-1]))
		if err != nil || lay == nil {
			t.Fatalf("body %d: no layout (%v)", i-1, err)
		}
		_, next, err := DecodeNext(Responses, []byte(conv[i]), lay)
		if err != nil {
			t.Fatal(err)
		}
		if next.Reused() > 0 {
			resumed++
		}
	}
	if resumed < len(conv)-4 {
		t.Fatalf("decoded from where they differ: %d of %d bodies", resumed, len(conv)-1)
	}
	last := conv[len(conv)-1]
	for _, next := range []string{
		strings.Replace(last, `"patched"}]}]`, `"patched"}]},{"type":"function_call","call_id":"c9","name":"shell","arguments":"{}"}]`, 1),
		strings.Replace(last, `"patched"}]}]`, `"patched"}]},{"role":"system","content":"late"}]`, 1),
		strings.Replace(last, `"patched"}]}]`, `"patched"}]},{"type":7}]`, 1),
		strings.Replace(last, `"patched"}]}]`, `"patched"}]},{"content":"no type"}]`, 1),
		strings.Replace(last, `"store":false`, `"store":true`, 1),
		strings.Replace(last, `"You are Codex."`, `"You are Codex!"`, 1),
		strings.Replace(last, `"input":[`, `"input": [ `, 1),
	} {
		checkNext(t, Responses, []byte(last), []byte(next))
	}
}

// FuzzDecodeNextResponses is FuzzDecodeNext for Responses bodies.
func FuzzDecodeNextResponses(f *testing.F) {
	for _, b := range responsesBodies {
		f.Add([]byte(b), []byte(strings.Replace(b, `]}`, `,{"role":"user","content":"more"}]}`, 1)))
		f.Add([]byte(b), []byte(strings.Replace(b, `},{"type":`, `}]}`+"\x00", 1)))
		f.Add([]byte(b), []byte(strings.Replace(b, `]`, `,{"type":"function_call","call_id":"x","name":"f","arguments":"{}"}]`, 1)))
	}
	// Codex CLI's shape: a field after the input that changes on every request.
	prev := `{"model":"gpt-5","instructions":"Be brief.","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"store":false,"client_metadata":{"turn":"1"}}`
	f.Add([]byte(prev), []byte(strings.Replace(strings.Replace(prev, `"1"}`, `"2","x":[1]}`, 1), `"ok"}]`, `"ok"},{"role":"user","content":"more"}]`, 1)))
	f.Add([]byte(prev), []byte(strings.Replace(prev, `"store":false`, `"input":[],"store":false`, 1)))
	f.Fuzz(func(t *testing.T, prev, next []byte) { fuzzNext(t, Responses, prev, next) })
}

// TestDecodeNextTailChanged: a body whose fields after the messages differ from the previous
// body's (Codex CLI's client_metadata, changed on every request, in another key order; an
// Anthropic system prompt after the messages; a tool added) still reuses the previous
// messages, and equals Decode's result. A repeated messages key in the new fields is decoded
// whole, as Decode reads it.
func TestDecodeNextTailChanged(t *testing.T) {
	cases := []struct {
		f          Format
		prev, next string
		reuse      bool
	}{
		{Responses,
			`{"model":"gpt-5","instructions":"Be brief.","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"store":false,"client_metadata":{"turn_id":"1","thread_id":"t"}}`,
			`{"model":"gpt-5","instructions":"Be brief.","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"},{"role":"user","content":"more"}],"store":false,"client_metadata":{"thread_id":"t","turn_id":"2"}}`, true},
		{Responses,
			`{"model":"gpt-5","input":[{"role":"developer","content":"rules"},{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}],"store":false,"metadata":{"n":"1"}}`,
			`{"model":"gpt-5","input":[{"role":"developer","content":"rules"},{"role":"user","content":"hi"},{"role":"assistant","content":"ok"},{"role":"user","content":"go"}],"store":false,"metadata":{"n":"2"}}`, true},
		{Anthropic,
			`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}],"system":"Be brief."}`,
			`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"},{"role":"assistant","content":"ok"},{"role":"user","content":"go"}],"system":"Be briefer.","tools":[{"name":"f","input_schema":{"type":"object"}}]}`, true},
		{OpenAI,
			`{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}],"user":"a"}`,
			`{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"},{"role":"assistant","content":"ok"},{"role":"user","content":"go"}],"user":"b"}`, true},
		// The messages key again after the messages: Decode takes the last; so does DecodeNext.
		{OpenAI,
			`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}],"user":"a"}`,
			`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"},{"role":"user","content":"go"}],"user":"a","messages":[{"role":"user","content":"other"}]}`, false},
	}
	for i, c := range cases {
		_, lay, err := DecodeLayout(c.f, []byte(c.prev))
		if err != nil || lay == nil {
			t.Fatalf("case %d: the previous body has no layout: %v", i, err)
		}
		want, werr := Decode(c.f, []byte(c.next))
		own := []byte(c.next)
		got, glay, gerr := DecodeNext(c.f, own, lay)
		scribble(own)
		if (werr == nil) != (gerr == nil) || werr == nil && !reflect.DeepEqual(want, got) {
			wj, _ := json.Marshal(want)
			gj, _ := json.Marshal(got)
			t.Fatalf("case %d: DecodeNext differs from Decode (%v, %v)\nwant: %s\ngot:  %s", i, werr, gerr, wj, gj)
		}
		if reused := glay != nil && glay.Reused() > 0; reused != c.reuse {
			t.Fatalf("case %d: reused %v, want %v", i, reused, c.reuse)
		}
	}
}

// TestSharedPrefix: the length found wherever the two differ, around the chunk sizes the
// comparison steps by, and when one is a prefix of the other.
func TestSharedPrefix(t *testing.T) {
	base := make([]byte, 40<<10)
	for i := range base {
		base[i] = byte('a' + i%23)
	}
	for _, at := range []int{0, 1, 255, 256, 257, 4095, 16<<10 - 1, 16 << 10, 16<<10 + 1, 16<<10 + 300, 32<<10 + 5, len(base) - 1} {
		other := bytes.Clone(base)
		other[at] ^= 1
		if got := SharedPrefix(base, other); got != at {
			t.Errorf("differ at %d: got %d", at, got)
		}
		if got := SharedPrefix(base[:at], base); got != at {
			t.Errorf("prefix of %d bytes: got %d", at, got)
		}
	}
	if got := SharedPrefix(base, base); got != len(base) {
		t.Errorf("equal: got %d, want %d", got, len(base))
	}
}
