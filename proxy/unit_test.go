package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

func TestSSEReader(t *testing.T) {
	in := ": keep-alive\n\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: line1\ndata: line2\n\n\n\ndata: [DONE]"
	r := sse.NewReader(strings.NewReader(in))
	var got []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, ev)
	}
	if len(got) != 4 {
		t.Fatalf("%d events: %q", len(got), got)
	}
	if got[1].Name != "message_start" || string(got[1].Data) != `{"a":1}` || string(got[1].Raw) != "event: message_start\r\ndata: {\"a\":1}\r\n\r\n" {
		t.Errorf("event 1: %+v", got[1])
	}
	if string(got[2].Data) != "line1\nline2" || string(got[3].Data) != "[DONE]" {
		t.Errorf("events 2-3: %q %q", got[2].Data, got[3].Data)
	}
}

// TestNormHash: the same conversation spelled differently by two clients hashes the same.
func TestNormHash(t *testing.T) {
	a, err := wire.DecodeOpenAI([]byte(`{"messages":[
		{"role":"user","content":"hi"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"b\": 1, \"a\": [1, 2]}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"out"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := wire.DecodeOpenAI([]byte(`{"messages":[
		{"role":"user","content":[{"type":"text","text":"hi"}]},
		{"role":"assistant","content":"","refusal":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":[1,2],\"b\":1}"}}]},
		{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"out"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Messages {
		if normHash(&a.Messages[i]) != normHash(&b.Messages[i]) {
			t.Errorf("message %d hashes differ", i)
		}
	}
	c := a.Messages[0].Clone()
	c.Content[0].Text = "hi!"
	if normHash(&c) == normHash(&a.Messages[0]) {
		t.Errorf("different texts hash the same")
	}
}

func TestSplitCommands(t *testing.T) {
	msgs := []chat.Message{
		chat.TextMessage(chat.RoleUser, "do it"),
		chat.TextMessage(chat.RoleAssistant, "done"),
		chat.TextMessage(chat.RoleUser, "/compact keep decisions"),
		chat.TextMessage(chat.RoleAssistant, "[ctxmgr] /compact: compacted 2 messages"),
		chat.TextMessage(chat.RoleUser, "/context"),
		chat.TextMessage(chat.RoleAssistant, "[ctxmgr] /context: session x"),
		chat.TextMessage(chat.RoleUser, "next"),
		chat.TextMessage(chat.RoleAssistant, "ok"),
		chat.TextMessage(chat.RoleUser, " /context clear "),
	}
	out, cmd := splitCommands(msgs)
	if cmd == nil || cmd.name != "clear" {
		t.Fatalf("command %+v", cmd)
	}
	var texts []string
	for _, m := range out {
		texts = append(texts, m.Text())
	}
	if strings.Join(texts, "|") != "do it|done|next|ok" {
		t.Fatalf("history %q", texts)
	}
	if c, ok := parseCommand(&msgs[2]); !ok || c.name != "compact" || c.arg != "keep decisions" {
		t.Fatalf("parse %+v", c)
	}
	for _, s := range []string{"/compacting", "/context please", "compact", "/contextclear"} {
		m := chat.TextMessage(chat.RoleUser, s)
		if _, ok := parseCommand(&m); ok {
			t.Errorf("%q parsed as a command", s)
		}
	}
}

func TestTargetURL(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/chat/completions?x=1", nil)
	for base, want := range map[string]string{
		"https://api.openai.com":      "https://api.openai.com/v1/chat/completions?x=1",
		"https://api.openai.com/v1":   "https://api.openai.com/v1/chat/completions?x=1",
		"https://api.openai.com/v1/":  "https://api.openai.com/v1/chat/completions?x=1",
		"http://127.0.0.1:9/prefix/":  "http://127.0.0.1:9/prefix/v1/chat/completions?x=1",
		"http://gateway/openai/v1///": "http://gateway/openai/v1/chat/completions?x=1",
	} {
		if got, err := targetURL(base, r); err != nil || got != want {
			t.Errorf("%s: %s %v, want %s", base, got, err, want)
		}
	}
	if _, err := targetURL("not a url", r); err == nil {
		t.Errorf("bad base accepted")
	}
}

func TestSanitizeID(t *testing.T) {
	for _, in := range []string{"abc", "a b/c", strings.Repeat("x", 300), "../etc", ".hidden", "ünï"} {
		id := sanitizeID("", in)
		if id == "" || len(id) > 150 || strings.ContainsAny(id, "/ ") || id[0] == '.' {
			t.Errorf("%q -> %q", in, id)
		}
	}
	if sanitizeID("", "a b") == sanitizeID("", "a_b") {
		t.Errorf("distinct names collide")
	}
}

// TestConfigRoutes: routes pick the upstream by model prefix; per-model windows apply.
func TestConfigRoutes(t *testing.T) {
	main := fakeupstream.New(fakeupstream.Options{})
	other := fakeupstream.New(fakeupstream.Options{})
	mainUp, otherUp := httptest.NewServer(main), httptest.NewServer(other)
	defer mainUp.Close()
	defer otherUp.Close()
	srv, err := New(Config{UpstreamOpenAI: mainUp.URL, Routes: []Route{{ModelPrefix: "local-", Format: FormatOpenAI, URL: otherUp.URL}},
		Models: []ModelLimits{{Prefix: "local-", Window: 32000, MaxOutput: 2000}}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	px := httptest.NewServer(srv.Handler())
	defer px.Close()
	ctx := ctxT(t)
	a := newOpenAIAgent(px.URL, bigOutput(100))
	a.model = "local-llama"
	if _, err := a.turn(ctx, "hi, no tools", false); err != nil {
		t.Fatal(err)
	}
	if len(other.Records()) != 1 || len(main.Records()) != 0 {
		t.Fatalf("routing: other %d, main %d", len(other.Records()), len(main.Records()))
	}
	if w, out := srv.cfg.limits("local-llama"); w != 32000 || out != 2000 {
		t.Fatalf("limits %d %d", w, out)
	}
	if _, err := New(Config{}); err == nil {
		t.Errorf("a config without upstream was accepted")
	}
	if _, err := New(Config{UpstreamOpenAI: "http://x", Preset: "nope"}); err == nil {
		t.Errorf("an unknown preset was accepted")
	}
}

func TestModelLimits(t *testing.T) {
	def := Config{}.withDefaults()
	cases := []struct {
		cfg    Config
		model  string
		window int
	}{
		{def, "gpt-4o-2024-08-06", 128000},
		{def, "openai/gpt-4o-mini", 128000},
		{def, "gpt-4", 8192},
		{def, "gpt-4-turbo-preview", 128000},
		{def, "gpt-4.1-mini", 1000000},
		{def, "claude-sonnet-4-5", 200000},
		{def, "my-local-llama", 200000},
		{Config{Window: 9000}.withDefaults(), "gpt-4o", 9000},
		{Config{Window: 200000}.withDefaults(), "gpt-4o", 200000},
		// A Config made of the defaulted one's values means the same.
		{Config{Window: def.Window, MaxOutput: def.MaxOutput}.withDefaults(), "gpt-4o", 128000},
		{def.withDefaults(), "gpt-4o", 128000},
		{Config{Models: []ModelLimits{{Prefix: "gpt-4o", Window: 64000}}}.withDefaults(), "gpt-4o-mini", 64000},
	}
	for _, c := range cases {
		if w, _ := c.cfg.limits(c.model); w != c.window {
			t.Errorf("%s: window %d, want %d", c.model, w, c.window)
		}
	}
}

func TestSessionKeySources(t *testing.T) {
	user := []chat.Message{chat.TextMessage(chat.RoleUser, "hi")}
	cases := []struct {
		header string
		extra  map[string]json.RawMessage
		id     string
		source string
	}{
		{"mine", map[string]json.RawMessage{"prompt_cache_key": json.RawMessage(`"c1"`)}, "mine", "header"},
		{"", map[string]json.RawMessage{"metadata": json.RawMessage(`{"user_id":"u1"}`), "prompt_cache_key": json.RawMessage(`"c1"`)}, "user-u1", "metadata.user_id"},
		{"", map[string]json.RawMessage{"prompt_cache_key": json.RawMessage(`"019a-conv"`)}, "pck-019a-conv", "prompt_cache_key"},
		{"", map[string]json.RawMessage{"prompt_cache_key": json.RawMessage(`""`)}, "", "hash"},
	}
	for _, c := range cases {
		id, source := sessionKey(c.header, &chat.Request{Extra: c.extra, Messages: user}, user)
		if source != c.source || c.id != "" && id != c.id {
			t.Errorf("%v: %s (%s), want %s (%s)", c.extra, id, source, c.id, c.source)
		}
	}
}

// TestReadBody: a declared length sizes the buffer, a body cut short of it is an error (not a
// shorter body), and the limit holds with or without a declared length.
func TestReadBody(t *testing.T) {
	for _, c := range []struct {
		name     string
		body     string
		declared int64
		limit    int64
		want     string
		err      bool
	}{
		{"exact", `{"a":1}`, 7, 100, `{"a":1}`, false},
		{"undeclared", `{"a":1}`, -1, 100, `{"a":1}`, false},
		{"cut short", `{"a"`, 7, 100, "", true},
		{"longer than declared", `{"a":1}`, 3, 100, `{"a":1}`, false},
		{"over the limit, declared", `{"a":1}`, 7, 5, "", true},
		{"over the limit, undeclared", `{"a":1}`, -1, 5, "", true},
	} {
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(c.body))
		r.ContentLength = c.declared
		got, err := readBody(httptest.NewRecorder(), r, c.limit, nil, nil)
		if (err != nil) != c.err || err == nil && string(got) != c.want {
			t.Errorf("%s: got %q, %v", c.name, got, err)
		}
	}
}

// TestSentCount: the calibrator's count of a request sent, reusing the previous request's
// message counts, is the base counter's Request total, across growth, an edit, a new system
// prompt and new tools.
func TestSentCount(t *testing.T) {
	base := tokens.NewCache(tokens.NewHeuristic(tokens.HeuristicOptions{}), 1024)
	msgs := []chat.Message{chat.TextMessage(chat.RoleUser, "find the bug in pkg/a"), chat.TextMessage(chat.RoleAssistant, "looking")}
	r := &chat.Request{System: []chat.Message{chat.TextMessage(chat.RoleSystem, "You are terse.")},
		Tools: []chat.Tool{{Name: "grep", Parameters: json.RawMessage(`{"type":"object"}`)}}, Messages: msgs}
	var c sentCount
	check := func(what string) {
		t.Helper()
		if got, want := c.total(base, r), base.Request(r).Total; got != want {
			t.Fatalf("%s: %d, want %d", what, got, want)
		}
	}
	check("first")
	r.Messages = append(r.Messages, chat.TextMessage(chat.RoleUser, strings.Repeat("more words here ", 50)))
	check("grown")
	edited := append([]chat.Message(nil), r.Messages...)
	edited[1] = chat.TextMessage(chat.RoleAssistant, strings.Repeat("a much longer answer ", 40))
	r.Messages = edited
	check("edited")
	r.System = []chat.Message{chat.TextMessage(chat.RoleSystem, strings.Repeat("A long new system prompt. ", 30))}
	check("new system")
	r.Tools = append(r.Tools, chat.Tool{Name: "read", Description: strings.Repeat("reads files ", 20)})
	check("new tools")
	r.Messages = r.Messages[:1]
	check("rewound")
	// A slice that continues the last one's array (as Prepare extends its slice): only the
	// new messages are counted, and the total still is the whole request's.
	room := make([]chat.Message, 1, 8)
	copy(room, r.Messages)
	r.Messages = room
	check("another array")
	for i := range 3 {
		r.Messages = append(r.Messages, chat.TextMessage(chat.RoleUser, strings.Repeat("step ", 10*(i+1))))
		check(fmt.Sprintf("extended in place %d", i))
	}
}

// TestPlaceBreakpointsKnown: with the clean list of the previous call, the substitutes
// applied give what placeBreakpoints gives, the prepared slice is never modified, and a
// message that carries a breakpoint is never taken as clean.
func TestPlaceBreakpointsKnown(t *testing.T) {
	v := json.RawMessage(`{"type":"ephemeral"}`)
	msgs := []chat.Message{chat.TextMessage(chat.RoleUser, "a"), chat.TextMessage(chat.RoleAssistant, "b"), chat.TextMessage(chat.RoleUser, "c")}
	orig := slices.Clone(msgs)
	rep := ctxmgr.Report{Pinned: -1}
	bps := []breakpoint{{2, v}}
	want := placeBreakpoints(msgs, rep, bps, 4)
	if breakpointOf(&want[2]) == nil || breakpointOf(&msgs[2]) != nil {
		t.Fatal("placeBreakpoints: the breakpoint is not on the copy only")
	}
	subs, clean := placeBreakpointsKnown(msgs, rep, bps, 4, nil)
	if !reflect.DeepEqual(encodecache.Substituted(msgs, subs), want) || len(subs) != 1 || len(clean) != 3 {
		t.Fatalf("first call: %d substitutes, %d clean", len(subs), len(clean))
	}
	// The same messages again, known clean: the same result.
	subs, _ = placeBreakpointsKnown(msgs, rep, bps, 4, clean)
	if !reflect.DeepEqual(encodecache.Substituted(msgs, subs), want) {
		t.Fatal("known-clean call differs")
	}
	// A message that carries a breakpoint (a changed value) is searched, stripped, and the
	// call returns no clean list.
	marked := slices.Clone(msgs)
	marked[0].Extra = map[string]json.RawMessage{"block.": json.RawMessage(`{"cache_control":{"type":"ephemeral"}}`)}
	marked[0].Wire = "anthropic"
	subs, clean2 := placeBreakpointsKnown(marked, rep, bps, 4, clean)
	if clean2 != nil || !reflect.DeepEqual(encodecache.Substituted(marked, subs), placeBreakpoints(marked, rep, bps, 4)) || breakpointOf(&marked[0]) == nil {
		t.Fatalf("a message with a breakpoint: clean %d", len(clean2))
	}
	// A call whose slice continues the clean one's array (as Prepare extends its slice) is
	// searched only past it, yet a breakpoint wanted inside the known part is placed there.
	base := make([]chat.Message, len(msgs), 10)
	copy(base, msgs)
	_, clean = placeBreakpointsKnown(base, rep, bps, 4, nil)
	grown := append(base, chat.TextMessage(chat.RoleAssistant, "d"), chat.TextMessage(chat.RoleUser, "e"))
	moved := []breakpoint{{0, v}, {4, v}}
	subs, clean3 := placeBreakpointsKnown(grown, rep, moved, 4, clean)
	got := encodecache.Substituted(grown, subs)
	if !reflect.DeepEqual(got, placeBreakpoints(grown, rep, moved, 4)) || len(clean3) != len(grown) {
		t.Fatalf("continued slice: %+v, clean %d", got, len(clean3))
	}
	if breakpointOf(&got[0]) == nil || breakpointOf(&got[4]) == nil || breakpointOf(&got[2]) != nil {
		t.Fatal("continued slice: breakpoints not where wanted")
	}
	if !reflect.DeepEqual(msgs, orig) || !reflect.DeepEqual(grown[:3], orig) {
		t.Fatal("the prepared messages were modified")
	}
}

// TestDecodeKeepsFirstCommand: the decode cache's index of the first command, carried from
// body to body of a growing conversation, is the one a full scan finds, before and after a
// command appears; and splitCommandsFrom with it gives what splitCommands gives.
func TestDecodeKeepsFirstCommand(t *testing.T) {
	c := newDecodeCache(64 << 20)
	// A system prompt past the 1 KB that names a conversation in the cache (headLen).
	msgs := []map[string]any{{"role": "system", "content": strings.Repeat("You are a careful agent. ", 80)}}
	texts := []string{"hello", "ok", "more", "ok", "/compact keep it short", "[ctxmgr] /compact: compacted", "go on", "ok", "/context", "[ctxmgr] /context: x", "next", "ok"}
	for i, text := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": text})
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs})
		req, di, err := c.decode(FormatOpenAI, body, nil, nil)
		first := di.firstCmd
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && c.lookup(bodyHead(body), body, nil) == nil {
			t.Fatal("the conversation is not in the decode cache: the test proves nothing")
		}
		if want := firstCommand(req.Messages, 0); first != want {
			t.Fatalf("after %d messages: first command %d, a scan finds %d", len(msgs), first, want)
		}
		got, gotCmd := splitCommandsFrom(req.Messages, first)
		want, wantCmd := splitCommands(req.Messages)
		if len(got) != len(want) || (gotCmd == nil) != (wantCmd == nil) {
			t.Fatalf("after %d messages: splitCommandsFrom differs from splitCommands", len(msgs))
		}
	}
}

// TestDecodeKeepsBreakpoints: the decode cache's breakpoints, carried from body to body of a
// growing Anthropic conversation whose newest message carries the moving breakpoint (Claude
// Code's) beside a fixed one on its first message, are those a full scan finds.
func TestDecodeKeepsBreakpoints(t *testing.T) {
	c := newDecodeCache(64 << 20)
	bp := map[string]any{"type": "ephemeral"}
	block := func(text string, mark bool) map[string]any {
		b := map[string]any{"type": "text", "text": text}
		if mark {
			b["cache_control"] = bp
		}
		return b
	}
	system := strings.Repeat("You are a careful agent. ", 80)
	// The first message, which json.Marshal puts before the system prompt, is past headLen.
	texts := []string{strings.Repeat("Fix the failing test in pkg/a. ", 60)}
	reused := 0
	for i := 0; i < 12; i++ {
		if i > 0 {
			texts = append(texts, fmt.Sprintf("turn %d", i))
		}
		msgs := make([]map[string]any, len(texts))
		for j, text := range texts {
			role := "user"
			if j%2 == 1 {
				role = "assistant"
			}
			msgs[j] = map[string]any{"role": role, "content": []any{block(text, j == 0 || j == len(texts)-1)}}
		}
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": system, "messages": msgs})
		prev := c.lookup(bodyHead(body), body, nil)
		req, di, err := c.decode(FormatAnthropic, body, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil {
			reused++
		}
		want := messageBreakpoints(req.Messages, 0, nil)
		if len(di.bps) != len(want) {
			t.Fatalf("after %d messages: %d breakpoints carried, a scan finds %d", len(texts), len(di.bps), len(want))
		}
		for k := range want {
			if di.bps[k].pos != want[k].pos || !bytes.Equal(di.bps[k].value, want[k].value) {
				t.Fatalf("after %d messages: breakpoint %d at %d, a scan finds it at %d", len(texts), k, di.bps[k].pos, want[k].pos)
			}
		}
	}
	if reused < 11 {
		t.Fatalf("%d of 11 bodies continued a cached one: the test proves nothing", reused)
	}
	if n := c.lru.Len(); n != 1 {
		t.Fatalf("the cache holds %d bodies of one conversation whose breakpoint moves; want 1 (each replacing the last)", n)
	}
}

// TestDecodeCacheKeepsSiblings: two sessions of one agent whose bodies share their first
// kilobyte (the head that names candidates) and differ after their messages (the system
// prompt of an Anthropic body, the instructions of a Responses body), sent in turn: each
// later body is decoded against its own session's previous body, and at most the two first
// bodies are decoded whole (the second may continue the first: they share their first
// message). A fork (an earlier message edited) is kept beside the conversation it left, which
// continues too; an edit of the last two messages replaces the body it edits.
func TestDecodeCacheKeepsSiblings(t *testing.T) {
	first := strings.Repeat("Fix the failing test in pkg/a and explain the cause. ", 40) // past headLen
	body := func(f Format, system string, texts []string) []byte {
		var items []any
		for j, text := range texts {
			role := "user"
			if j%2 == 1 {
				role = "assistant"
			}
			if f == FormatResponses {
				kind := "input_text"
				if role == "assistant" {
					kind = "output_text"
				}
				items = append(items, map[string]any{"type": "message", "role": role, "content": []any{map[string]any{"type": kind, "text": text}}})
			} else {
				items = append(items, map[string]any{"role": role, "content": text})
			}
		}
		var b []byte
		if f == FormatResponses {
			b, _ = json.Marshal(map[string]any{"model": "gpt-5", "input": items, "instructions": system, "store": false})
		} else {
			b, _ = json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": items, "system": system})
		}
		return b
	}
	for _, f := range []Format{FormatAnthropic, FormatResponses} {
		t.Run(string(f), func(t *testing.T) {
			c := newDecodeCache(64 << 20)
			convs := [][]string{{first}, {first}}
			systems := []string{"You are agent A.", "You are agent B."}
			if bodyHead(body(f, systems[0], convs[0])) != bodyHead(body(f, systems[1], convs[1])) {
				t.Fatal("the two sessions' bodies do not share their head: the test proves nothing")
			}
			last := make([][]byte, len(convs))
			decode := func(i int) {
				t.Helper()
				b := body(f, systems[i], convs[i])
				if last[i] != nil {
					if prev := c.lookup(bodyHead(b), b, nil); prev == nil || !bytes.Equal(prev.lay.Body(), last[i]) {
						t.Fatalf("session %d after %d messages: not decoded against its own previous body", i, len(convs[i]))
					}
				}
				last[i] = b
				// Compared while read with the body predicted (the other session's, as often
				// as not: then unused), in chunks.
				exp, _ := c.predict(bodyHead(b), len(b))
				for got := headLen; exp != nil; got += 97 {
					exp.compare(b[:min(got, len(b))])
					if got >= len(b) {
						if want := wire.SharedPrefix(b, exp.d.lay.Body()); exp.shared != want {
							t.Fatalf("compared while read: %d bytes shared, want %d", exp.shared, want)
						}
						break
					}
				}
				req, _, err := c.decode(f, b, nil, exp)
				exp.release()
				if err != nil {
					t.Fatal(err)
				}
				if want, _ := wire.Decode(f, b); !reflect.DeepEqual(req.Messages, want.Messages) {
					t.Fatalf("session %d after %d messages: the decoded messages differ from a whole decode", i, len(convs[i]))
				}
			}
			for round := 0; round < 10; round++ {
				for i := range convs {
					if round > 0 {
						convs[i] = append(convs[i], fmt.Sprintf("ok %d", round), fmt.Sprintf("%c: step %d", 'A'+i, round))
					}
					decode(i)
				}
			}
			// The second session's first body may continue the first's (they share their
			// first message); every later body continued its own session's (checked above).
			if w, n := c.whole.Load(), c.continued.Load(); w+n != 20 || w > 2 {
				t.Fatalf("decoded whole %d, continued %d; want at most 2 whole of 20", w, n)
			}
			// A fork of session 0: its third message edited. Both then go on.
			fork := append(slices.Clone(convs[0][:2]), "Actually, fix pkg/b instead.")
			b := body(f, systems[0], fork)
			if _, _, err := c.decode(f, b, nil, nil); err != nil {
				t.Fatal(err)
			}
			had := len(convs[0])
			convs[0] = append(convs[0], "ok", "A: and after")
			b = body(f, systems[0], convs[0])
			if prev := c.lookup(bodyHead(b), b, nil); prev == nil || len(prev.lay.Request().Messages) != had {
				t.Fatalf("after a fork, the conversation it left is not the one continued")
			}
			decode(0)
			if w := c.whole.Load(); w > 2 {
				t.Fatalf("decoded whole %d after a fork; want at most 2 (the conversation the fork left still cached)", w)
			}
			// A body that changes the last two messages of session 1's (a rewind, or a client
			// that moves two breakpoints) replaces it: the cache keeps no more bodies of it.
			entries := c.lru.Len()
			edited := append(slices.Clone(convs[1][:len(convs[1])-2]), "edited", "B: again")
			if _, _, err := c.decode(f, body(f, systems[1], edited), nil, nil); err != nil {
				t.Fatal(err)
			}
			if n := c.lru.Len(); n != entries {
				t.Fatalf("the cache holds %d bodies after an edit of the last two messages, %d before", n, entries)
			}
		})
	}
}

// TestDecodeCacheCodexMetadata: Codex CLI's bodies change a field after their input on every
// request (client_metadata, its keys in another order each time). Each body continues the
// last one all the same, replaces it in the cache, and decodes as a whole decode does.
func TestDecodeCacheCodexMetadata(t *testing.T) {
	c := newDecodeCache(64 << 20)
	items := []any{map[string]any{"role": "user", "content": strings.Repeat("Fix the failing test in pkg/a. ", 60)}}
	for turn := 0; turn < 12; turn++ {
		if turn > 0 {
			id := fmt.Sprintf("call_%d", turn)
			items = append(items,
				map[string]any{"type": "function_call", "call_id": id, "name": "exec_command", "arguments": `{"cmd":"ls"}`},
				map[string]any{"type": "function_call_output", "call_id": id, "output": fmt.Sprintf("file%d.go", turn)})
		}
		input, _ := json.Marshal(items)
		// Codex's field order: the instructions before the input, the metadata after it.
		body := fmt.Sprintf(`{"model":"gpt-5.1-codex","instructions":"You are Codex.","input":%s,"tools":[],"store":false,"stream":true,"client_metadata":{"turn_id":"t%d","thread_id":"th"}}`, input, turn)
		if turn%2 == 1 {
			body = fmt.Sprintf(`{"model":"gpt-5.1-codex","instructions":"You are Codex.","input":%s,"tools":[],"store":false,"stream":true,"client_metadata":{"thread_id":"th","turn_id":"t%d","x":"%d"}}`, input, turn, turn)
		}
		req, _, err := c.decode(FormatResponses, []byte(body), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := wire.Decode(FormatResponses, []byte(body)); !reflect.DeepEqual(req, want) {
			t.Fatalf("turn %d: the request differs from a whole decode", turn)
		}
	}
	if w, n := c.whole.Load(), c.continued.Load(); w != 1 || n != 11 {
		t.Fatalf("decoded whole %d, continued %d; want 1 and 11", w, n)
	}
	if n := c.lru.Len(); n != 1 {
		t.Fatalf("the cache holds %d bodies of one conversation; want 1", n)
	}
}

// heldLog holds the handler's "proxy request" line, the last thing a handler does, until
// released.
type heldLog struct{ release chan struct{} }

func (h heldLog) Enabled(context.Context, slog.Level) bool { return true }
func (h heldLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h heldLog) WithGroup(string) slog.Handler            { return h }
func (h heldLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "proxy request" {
		<-h.release
	}
	return nil
}

// TestAnswerEndsBeforeHandler: the client has the whole answer of a managed request, with
// its length, while the handler's own work after it (its log line) is still to do.
func TestAnswerEndsBeforeHandler(t *testing.T) {
	h := heldLog{release: make(chan struct{})}
	e := newEnv(t, fakeupstream.Options{}, Config{Logger: slog.New(h)})
	defer close(h.release)
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"again"}]}`
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Post(e.px.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the answer did not end before the handler: %v", err)
	}
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(got)) || !json.Valid(got) {
		t.Fatalf("status %d, length %d for %d bytes: %s", resp.StatusCode, resp.ContentLength, len(got), got)
	}
	if n := counterValue(e.srv.metrics.unmanaged.WithLabelValues(ReasonSingleMessage)); n != 0 {
		t.Fatal("the request was not managed: the test proves nothing")
	}
}

// TestDecodeLookupManySessions: under one head (one agent's system prompt, past headLen), the
// cached body a new body is decoded against is the one that shares the most with it, as
// comparing every candidate whole finds, whether the body compared while it was read is that
// one, another, or none (lookup skips a candidate by the bytes before the best's shared
// length, and takes the shared length the reading found when it compared the whole body).
func TestDecodeLookupManySessions(t *testing.T) {
	c := newDecodeCache(64 << 20)
	system := strings.Repeat("You are a careful agent with a long system prompt. ", 60)
	// edited: the output before the last differs (a branch): it shares all but a turn with the
	// original, and the original a few bytes more with the original's continuation.
	conv := func(task, turns int, edited bool) []byte {
		msgs := []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": fmt.Sprintf("task %d: %s", task, strings.Repeat("fix it. ", 40))}}
		for i := 0; i < turns; i++ {
			out := fmt.Sprintf("output %d", i)
			if edited && i == turns-2 {
				out = fmt.Sprintf("output %d!", i)
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": fmt.Sprintf("step %d of task %d", i, task)},
				map[string]any{"role": "user", "content": out})
		}
		b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs})
		return b
	}
	// Stored as siblings (decode would let an edit of a recent message replace the body it
	// edits: see continues).
	var cached [][]byte
	for task := 0; task < 12; task++ {
		for _, edited := range []bool{task%2 == 0, task%2 == 1} { // either first
			b := conv(task, 3+task%4, edited)
			req, lay, err := wire.DecodeLayout(wire.OpenAI, b)
			if err != nil {
				t.Fatal(err)
			}
			c.store(&decoded{head: bodyHead(b), lay: lay, hashes: hashAll(req.Messages), firstCmd: -1}, nil)
			cached = append(cached, b)
		}
	}
	if len(c.byHead[bodyHead(cached[0])]) < 2 {
		t.Fatal("the conversations do not share a head: the test proves nothing")
	}
	for task := 0; task < 12; task++ {
		body := conv(task, 7, false) // the same task, further on
		best := 0
		for _, cb := range cached {
			best = max(best, wire.SharedPrefix(cb, body))
		}
		for k, guess := range []int{-1, 2 * task, 2*task + 1, (2*task + 5) % len(cached), 2 * task, 2*task + 1} {
			whole := k < 4 // the last two: the body compared while read up to its middle only
			var exp *expected
			if guess >= 0 {
				for _, d := range c.byHead[bodyHead(body)] {
					if bytes.Equal(d.lay.Body(), cached[guess]) {
						exp = &expected{d: d}
					}
				}
				if exp == nil {
					t.Fatalf("task %d: body %d is not cached", task, guess)
				}
				exp.compare(body[:len(body)/2])
				if whole {
					exp.compare(body)
				}
			}
			prev := c.lookup(bodyHead(body), body, exp)
			if prev == nil {
				t.Fatalf("task %d: nothing found", task)
			}
			if got := wire.SharedPrefix(prev.lay.Body(), body); got != best {
				t.Fatalf("task %d, compared with %d while read: found a body sharing %d bytes, the best shares %d", task, guess, got, best)
			}
			prev.users.Add(-1)
		}
	}
}
