package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
)

// The encoders that reuse what a cache holds, reached as the proxy reaches them.
func encodeOpenAICached(r *chat.Request, c *encodecache.Cache) ([]byte, error) {
	return encodecache.AppendOpenAI(nil, r, c)
}

func encodeAnthropicCached(r *chat.Request, c *encodecache.Cache) ([]byte, error) {
	return encodecache.AppendAnthropic(nil, r, c, nil)
}

func encodeResponsesCached(r *chat.Request, c *encodecache.Cache) ([]byte, error) {
	return encodecache.AppendResponses(nil, r, c)
}

// TestEncodeAnthropicCached: with one cache per format (OpenAI, Anthropic, Responses) across a
// growing conversation (and across edits, moved breakpoints and a rewind), every body is byte
// for byte the one the uncached encoder gives.
func TestEncodeAnthropicCached(t *testing.T) {
	var convs [][]chat.Message
	runs := tauBenchRuns(t)
	for _, run := range runs[:min(len(runs), 10)] {
		req := tauRequest(t, run)
		convs = append(convs, append(req.System, req.Messages...))
	}
	for _, body := range anthropicBodies {
		req, err := DecodeAnthropic([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		convs = append(convs, req.Messages)
	}
	for _, body := range responsesBodies {
		req, err := DecodeResponses([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		convs = append(convs, req.Messages)
	}
	// A cache for each encoder (one serving both in turn would start afresh at every change
	// of format), so that each reuses what its last call rendered.
	responsesCaches, openAICaches := map[*encodecache.Cache]*encodecache.Cache{}, map[*encodecache.Cache]*encodecache.Cache{}
	check := func(c *encodecache.Cache, r *chat.Request) {
		t.Helper()
		want, werr := EncodeOpenAI(r)
		got, gerr := encodeOpenAICached(r, openAICaches[c])
		if (werr == nil) != (gerr == nil) || !bytes.Equal(want, got) {
			t.Fatalf("cached OpenAI encoding differs: %v / %v\nwant %s\ngot  %s", werr, gerr, want, got)
		}
		want, werr = EncodeAnthropic(r)
		got, gerr = encodeAnthropicCached(r, c)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(want, got) {
			t.Fatalf("cached Anthropic encoding differs: %v / %v\nwant %s\ngot  %s", werr, gerr, want, got)
		}
		want, werr = EncodeResponses(r)
		got, gerr = encodeResponsesCached(r, responsesCaches[c])
		if (werr == nil) != (gerr == nil) || !bytes.Equal(want, got) {
			t.Fatalf("cached Responses encoding differs: %v / %v\nwant %s\ngot  %s", werr, gerr, want, got)
		}
	}
	hits := 0
	for _, msgs := range convs {
		c := encodecache.New()
		responsesCaches[c], openAICaches[c] = encodecache.New(), encodecache.New()
		for n := 1; n <= len(msgs); n++ {
			r := &chat.Request{Messages: msgs[:n], Extra: map[string]json.RawMessage{"model": json.RawMessage(`"claude"`), "max_tokens": json.RawMessage(`1024`)}}
			check(c, r)
			hits += c.Stats().Groups
			// A breakpoint on the newest message, as a proxy places it: a changed copy.
			last := msgs[n-1]
			last.Extra = map[string]json.RawMessage{"cache_control": json.RawMessage(`{"type":"ephemeral"}`)}
			moved := append(append([]chat.Message(nil), msgs[:n-1]...), last)
			check(c, &chat.Request{Messages: moved, Extra: r.Extra})
		}
		// An edit in the middle and a rewind.
		if len(msgs) > 4 {
			edited := append([]chat.Message(nil), msgs...)
			edited[2] = chat.TextMessage(chat.RoleUser, "edited")
			check(c, &chat.Request{Messages: edited, Extra: map[string]json.RawMessage{"model": json.RawMessage(`"claude"`)}})
			check(c, &chat.Request{Messages: msgs[:3], Extra: map[string]json.RawMessage{"model": json.RawMessage(`"claude"`)}})
		}
	}
	if hits == 0 {
		t.Fatal("the cache kept nothing")
	}
}

// TestEncodeCacheTellsMessagesApart: a message in the place of another, of the same role and
// shape, is encoded anew (its fingerprint covers its content), in both formats.
// TestEncodeCacheReuses: a growing conversation, with a breakpoint moved to its newest
// message each time as a proxy does, encodes only its new and changed messages and hashes
// nothing it encoded before; an edit in the middle encodes and hashes that message alone.
func TestEncodeCacheReuses(t *testing.T) {
	msgs := tauRequest(t, tauBenchRuns(t)[0]).Messages
	extra := map[string]json.RawMessage{"model": json.RawMessage(`"m"`), "max_tokens": json.RawMessage(`1024`)}
	for _, f := range []struct {
		name   string
		cached func(*chat.Request, *encodecache.Cache) ([]byte, error)
	}{{"openai", encodeOpenAICached}, {"anthropic", encodeAnthropicCached}, {"responses", encodeResponsesCached}} {
		c := encodecache.New()
		bp := map[string]json.RawMessage{"cache_control": json.RawMessage(`{"type":"ephemeral"}`)}
		var prev []chat.Message
		for n := 1; n <= len(msgs); n++ {
			// The request: the previous one's messages (the same values) without the
			// previous breakpoint, the new message with one.
			cur := append(append([]chat.Message(nil), msgs[:n-1]...), msgs[n-1])
			cur[n-1].Extra = bp
			if _, err := f.cached(&chat.Request{Messages: cur, Extra: extra}, c); err != nil {
				t.Fatal(err)
			}
			// The message that lost its breakpoint and the new one, at most (an Anthropic
			// message may join both).
			if st := c.Stats(); n > 1 && (st.Encoded > 2 || st.Hashed > 2) {
				t.Fatalf("%s, %d messages: %d groups encoded, %d messages hashed; want at most 2", f.name, n, st.Encoded, st.Hashed)
			}
			prev = cur
		}
		edited := append([]chat.Message(nil), prev...)
		edited[len(edited)/2] = chat.TextMessage(edited[len(edited)/2].Role, "edited")
		if edited[len(edited)/2].Role == chat.RoleTool {
			continue
		}
		if _, err := f.cached(&chat.Request{Messages: edited, Extra: extra}, c); err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); st.Encoded != 1 || st.Hashed != 1 {
			t.Fatalf("%s, an edit: %d groups encoded, %d messages hashed; want 1 and 1", f.name, st.Encoded, st.Hashed)
		}
	}
}

func TestEncodeCacheTellsMessagesApart(t *testing.T) {
	c := encodecache.New()
	for _, f := range []struct {
		name   string
		whole  func(*chat.Request) ([]byte, error)
		cached func(*chat.Request, *encodecache.Cache) ([]byte, error)
	}{{"openai", EncodeOpenAI, encodeOpenAICached}, {"anthropic", EncodeAnthropic, encodeAnthropicCached}, {"responses", EncodeResponses, encodeResponsesCached}} {
		for _, text := range []string{"first question", "second question", "first question"} {
			r := &chat.Request{Messages: []chat.Message{chat.TextMessage(chat.RoleUser, text)}, Extra: map[string]json.RawMessage{"model": json.RawMessage(`"m"`)}}
			want, _ := f.whole(r)
			got, err := f.cached(r, c)
			if err != nil || !bytes.Equal(want, got) {
				t.Fatalf("%s, %q: %s, want %s (%v)", f.name, text, got, want, err)
			}
		}
	}
}

// TestAppendEncoders: the Append forms write the body the Encode forms give after what dst
// holds, reusing its array when it has room.
func TestAppendEncoders(t *testing.T) {
	req := tauRequest(t, tauBenchRuns(t)[1])
	buf := make([]byte, 0, 1<<20)
	buf = append(buf, "prefix"...)
	check := func(name string, want []byte, got []byte, err error) {
		t.Helper()
		if err != nil || string(got) != "prefix"+string(want) {
			t.Fatalf("%s: the appended body differs (%v)", name, err)
		}
		if &got[0] != &buf[0] {
			t.Fatalf("%s: a buffer with room was not reused", name)
		}
	}
	want, _ := EncodeOpenAI(req)
	got, err := encodecache.AppendOpenAI(buf, req, encodecache.New())
	check("openai", want, got, err)
	want, _ = EncodeAnthropic(req)
	got, err = encodecache.AppendAnthropic(buf, req, encodecache.New(), nil)
	check("anthropic", want, got, err)
	want, _ = EncodeResponses(req)
	got, err = encodecache.AppendResponses(buf, req, encodecache.New())
	check("responses", want, got, err)
}

// TestAppendAnthropicCachedWith: a conversation kept in one growing array, encoded call after
// call with substitutes that move (a breakpoint on the newest message, as a proxy places it,
// and one on an earlier message now and then), gives byte for byte what EncodeAnthropic gives
// for the substituted messages, and encodes and hashes only what is new or changed: the
// messages the array shares with the last call and no substitute touches, now or then, are
// reused without being compared.
func TestAppendAnthropicCachedWith(t *testing.T) {
	whole, err := EncodeAnthropic(tauRequest(t, tauBenchRuns(t)[0]))
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeAnthropic(whole) // Anthropic messages: their blocks carry breakpoints
	if err != nil {
		t.Fatal(err)
	}
	all := req.Messages
	extra := map[string]json.RawMessage{"model": json.RawMessage(`"claude"`), "max_tokens": json.RawMessage(`1024`)}
	bp := json.RawMessage(`{"type":"ephemeral"}`)
	marked := func(m chat.Message) chat.Message { // as a proxy places a breakpoint
		if n := len(m.ToolCalls); n > 0 {
			m.ToolCalls = slices.Clone(m.ToolCalls)
			m.ToolCalls[n-1].Extra = map[string]json.RawMessage{"cache_control": bp}
			return m
		}
		if m.Role == chat.RoleTool || len(m.Content) == 0 {
			m.Extra = map[string]json.RawMessage{"block.": json.RawMessage(`{"cache_control":` + string(bp) + `}`)}
			return m
		}
		n := len(m.Content) - 1
		p := m.Content[n]
		p.Extra = map[string]json.RawMessage{"cache_control": bp}
		m.Content = append(slices.Clone(m.Content[:n]), p)
		m.Shape = chat.ShapeParts
		return m
	}
	c := encodecache.New()
	arr := make([]chat.Message, 0, len(all)) // never reallocated: one array, growing
	for n := 1; n <= len(all); n++ {
		arr = append(arr, all[n-1])
		subs := map[int]chat.Message{n - 1: marked(arr[n-1])}
		if n%5 == 0 && n > 3 {
			subs[n/2] = marked(arr[n/2]) // a second breakpoint, on an earlier message
		}
		r := &chat.Request{Messages: arr, Extra: extra}
		got, err := encodecache.AppendAnthropic(nil, r, c, subs)
		if err != nil {
			t.Fatal(err)
		}
		wantBody, _ := EncodeAnthropic(&chat.Request{Messages: encodecache.Substituted(arr, subs), Extra: extra})
		if marks := bytes.Count(wantBody, []byte(`"cache_control"`)); marks < 1 {
			t.Fatalf("%d messages: %d breakpoints in the body", n, marks)
		}
		if !bytes.Equal(got, wantBody) {
			t.Fatalf("%d messages: the body differs\nwant %s\ngot  %s", n, wantBody, got)
		}
		// New: the newest message (it may join the group before it), a message that gains
		// or loses a breakpoint, and the one before each.
		if st := c.Stats(); n > 1 && (st.Encoded > 4 || st.Hashed > 6) {
			t.Fatalf("%d messages: %d groups encoded, %d messages hashed", n, st.Encoded, st.Hashed)
		}
	}
}

// TestAppendAnthropicCachedWithRegroups: a substitute may change how messages group into
// Anthropic messages (a proxy's breakpoint marks a message of no format as Anthropic, and
// then it no longer joins the tool results before it): the body still is EncodeAnthropic's
// for the substituted messages, call after call over one growing array.
func TestAppendAnthropicCachedWithRegroups(t *testing.T) {
	extra := map[string]json.RawMessage{"model": json.RawMessage(`"claude"`), "max_tokens": json.RawMessage(`64`)}
	var all []chat.Message
	for turn := range 6 {
		a := chat.TextMessage(chat.RoleAssistant, "")
		a.Content = nil
		a.ToolCalls = []chat.ToolCall{{ID: "c" + string(rune('a'+turn)) + "1", Name: "ls", Arguments: `{}`}, {ID: "c" + string(rune('a'+turn)) + "2", Name: "ls", Arguments: `{}`}}
		all = append(all, chat.TextMessage(chat.RoleUser, "turn"), a,
			chat.ToolResult(a.ToolCalls[0].ID, "ls", "one", false), chat.ToolResult(a.ToolCalls[1].ID, "ls", "two", false))
	}
	mark := func(m chat.Message) chat.Message {
		m.Wire = string(Anthropic)
		m.Extra = map[string]json.RawMessage{"block.": json.RawMessage(`{"cache_control":{"type":"ephemeral"}}`)}
		if m.Role != chat.RoleTool {
			m.Extra = nil
			m.Shape = chat.ShapeParts
			p := m.Content[len(m.Content)-1]
			p.Extra = map[string]json.RawMessage{"cache_control": json.RawMessage(`{"type":"ephemeral"}`)}
			m.Content = append(slices.Clone(m.Content[:len(m.Content)-1]), p)
		}
		return m
	}
	c := encodecache.New()
	arr := make([]chat.Message, 0, len(all))
	for n := 1; n <= len(all); n++ {
		arr = append(arr, all[n-1])
		subs := map[int]chat.Message{}
		if last := arr[n-1]; last.Role == chat.RoleTool || len(last.ToolCalls) == 0 {
			subs[n-1] = mark(last)
		}
		got, err := encodecache.AppendAnthropic(nil, &chat.Request{Messages: arr, Extra: extra}, c, subs)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := EncodeAnthropic(&chat.Request{Messages: encodecache.Substituted(arr, subs), Extra: extra})
		if !bytes.Equal(got, want) {
			t.Fatalf("%d messages: the body differs\nwant %s\ngot  %s", n, want, got)
		}
	}
}

// FuzzAppendAnthropicCachedWith: over one growing array, messages of every kind the encoder
// groups (user and assistant text, tool calls, tool results of no format or Anthropic's, joined
// or not, mid-conversation system messages) and substitutes at arbitrary positions (a
// breakpoint, which may mark a message of no format as Anthropic's), each call's body is
// EncodeAnthropic's for the substituted messages, and fails when it fails.
func FuzzAppendAnthropicCachedWith(f *testing.F) {
	f.Add([]byte{0, 2, 3, 3, 5, 1, 0, 13, 2, 3, 3, 21, 4, 0, 6})
	f.Add([]byte{0, 1, 0, 1, 5, 7, 0, 2, 11, 3, 19, 3, 2, 3, 27, 3, 1})
	f.Add([]byte{3, 3, 3, 5, 13, 21, 2, 3, 3, 3, 6, 14, 22, 30, 0})
	extra := map[string]json.RawMessage{"model": json.RawMessage(`"claude"`), "max_tokens": json.RawMessage(`64`)}
	bp := json.RawMessage(`{"type":"ephemeral"}`)
	mark := func(m chat.Message, anthropic bool) chat.Message {
		m = m.Clone()
		if anthropic {
			m.Wire = string(Anthropic)
		}
		switch {
		case len(m.ToolCalls) > 0:
			m.ToolCalls[len(m.ToolCalls)-1].Extra = map[string]json.RawMessage{"cache_control": bp}
		case m.Role == chat.RoleTool || len(m.Content) == 0:
			m.Extra = map[string]json.RawMessage{"block.": json.RawMessage(`{"cache_control":` + string(bp) + `}`)}
		default:
			m.Content[len(m.Content)-1].Extra = map[string]json.RawMessage{"cache_control": bp}
			m.Shape = chat.ShapeParts
		}
		return m
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			return
		}
		c := encodecache.New()
		arr := make([]chat.Message, 0, len(ops)) // one array, growing in place
		subs := map[int]chat.Message{}
		calls := 0
		for i, b := range ops {
			wireOf := ""
			if b&0x40 != 0 {
				wireOf = string(Anthropic)
			}
			var m chat.Message
			switch b % 8 {
			case 0:
				m = chat.TextMessage(chat.RoleUser, fmt.Sprintf("user %d", i))
			case 1:
				m = chat.TextMessage(chat.RoleAssistant, fmt.Sprintf("answer %d", i))
			case 2:
				m = chat.TextMessage(chat.RoleAssistant, "")
				m.Content = nil
				m.ToolCalls = []chat.ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: "ls", Arguments: `{"dir":"."}`}}
				if b&0x20 != 0 {
					m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: fmt.Sprintf("call_%d_b", i), Name: "ls", Arguments: `{}`})
				}
			case 3:
				m = chat.ToolResult(fmt.Sprintf("call_%d", i), "ls", fmt.Sprintf("result %d", i), false)
				m.JoinPrev = b&0x20 != 0
			case 4:
				m = chat.TextMessage(chat.RoleSystem, fmt.Sprintf("system note %d", i))
			default:
				if len(arr) > 0 {
					k := int(b>>3) % len(arr)
					subs[k] = mark(arr[k], b&0x80 != 0)
				}
				continue
			}
			m.Wire = wireOf
			arr = append(arr, m)
			got, gerr := encodecache.AppendAnthropic(nil, &chat.Request{Messages: arr, Extra: extra}, c, subs)
			want, werr := EncodeAnthropic(&chat.Request{Messages: encodecache.Substituted(arr, subs), Extra: extra})
			if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
				t.Fatalf("call %d (%d messages, substitutes at %v): %v / %v\nwant %s\ngot  %s", calls, len(arr), slices.Sorted(maps.Keys(subs)), werr, gerr, want, got)
			}
			calls++
			subs = map[int]chat.Message{}
		}
	})
}
