package tokens_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"strings"
	"sync"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

func mustEncoding(tb testing.TB, name string) tokens.Counter {
	tb.Helper()
	c, err := tokens.ForEncoding(name)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func TestEncodingForModel(t *testing.T) {
	o200k := []string{
		"gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-mini", "gpt-4o-mini-2024-07-18", "GPT-4o",
		"gpt-4.1", "gpt-4.1-nano-2025-04-14", "gpt-4.5-preview", "gpt-5", "gpt-5-mini", "gpt-5.1",
		"gpt-5-codex", "o1", "o1-mini", "o1-preview-2024-09-12", "o3", "o3-mini", "o4-mini",
		"chatgpt-4o-latest", "gpt-oss-120b", "gpt-oss-20b", "openai/gpt-4o", "azure/gpt-4.1",
		"openrouter/openai/gpt-5", "ft:gpt-4o-mini-2024-07-18:acme::abc123", " gpt-4o ",
	}
	cl100k := []string{
		"gpt-4", "gpt-4-0613", "gpt-4-turbo", "gpt-4-turbo-2024-04-09", "gpt-4-32k",
		"gpt-3.5-turbo", "gpt-3.5-turbo-0125", "gpt-3.5-turbo-instruct", "gpt-35-turbo",
		"gpt-35-turbo-16k", "azure/gpt-35-turbo", "text-embedding-3-small",
		"text-embedding-3-large", "text-embedding-ada-002", "ft:gpt-3.5-turbo:acme::x",
	}
	unknown := []string{
		"", "gpt", "claude-sonnet-4-5", "claude-3-5-haiku-20241022", "gemini-2.5-pro",
		"google/gemini-3-pro-preview", "anthropic/claude-opus-4", "llama-3.1-70b", "o10",
		"o1x", "davinci", "mistral-large",
	}
	for _, m := range o200k {
		if enc, ok := tokens.EncodingForModel(m); !ok || enc != tokens.O200kBase {
			t.Errorf("EncodingForModel(%q) = %q, %v; want o200k_base", m, enc, ok)
		}
	}
	for _, m := range cl100k {
		if enc, ok := tokens.EncodingForModel(m); !ok || enc != tokens.CL100kBase {
			t.Errorf("EncodingForModel(%q) = %q, %v; want cl100k_base", m, enc, ok)
		}
	}
	for _, m := range unknown {
		if enc, ok := tokens.EncodingForModel(m); ok {
			t.Errorf("EncodingForModel(%q) = %q; want unknown", m, enc)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, name := range []string{"", "p50k_base", "r50k_base", "O200K_BASE", "gpt2"} {
		c, err := tokens.ForEncoding(name)
		if !errors.Is(err, tokens.ErrUnknownEncoding) || c != nil {
			t.Errorf("ForEncoding(%q) = %v, %v; want ErrUnknownEncoding", name, c, err)
		}
	}
	for _, m := range []string{"claude-sonnet-4-5", "gemini-2.5-flash", ""} {
		c, err := tokens.ForModel(m)
		if !errors.Is(err, tokens.ErrUnknownModel) || c != nil {
			t.Errorf("ForModel(%q) = %v, %v; want ErrUnknownModel", m, c, err)
		}
	}
	c, err := tokens.ForModel("openai/gpt-4o-mini")
	if err != nil || c.Name() != "o200k_base" {
		t.Fatalf("ForModel(openai/gpt-4o-mini) = %v, %v", c, err)
	}
}

// cookbookMessages is the example of the OpenAI cookbook "How to count tokens with
// tiktoken", whose prompt the API reports as 129 tokens for gpt-3.5-turbo and gpt-4
// (cl100k_base) and 124 for gpt-4o and gpt-4o-mini (o200k_base).
func cookbookMessages() []chat.Message {
	msg := func(role chat.Role, name, text string) chat.Message {
		m := chat.TextMessage(role, text)
		m.Name = name
		return m
	}
	return []chat.Message{
		msg(chat.RoleSystem, "", "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."),
		msg(chat.RoleSystem, "example_user", "New synergies will help drive top-line growth."),
		msg(chat.RoleSystem, "example_assistant", "Things working well together will increase revenue."),
		msg(chat.RoleSystem, "example_user", "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."),
		msg(chat.RoleSystem, "example_assistant", "Let's talk later when we're less busy about how to do better."),
		msg(chat.RoleUser, "", "This late pivot means we don't have time to boil the ocean for the client deliverable."),
	}
}

func TestCookbookFraming(t *testing.T) {
	for enc, want := range map[string]int{tokens.O200kBase: 124, tokens.CL100kBase: 129} {
		c := mustEncoding(t, enc)
		msgs := cookbookMessages()
		// The leading system message as System, the rest as Messages: same total.
		b := c.Request(&chat.Request{System: msgs[:1], Messages: msgs[1:]})
		if b.Total != want {
			t.Errorf("%s: cookbook example counts %d, the API reports %d (breakdown %+v)", enc, b.Total, want, b)
		}
		b2 := c.Request(&chat.Request{Messages: msgs})
		if b2.Total != want || b2.System != 0 || len(b2.Messages) != 6 || b2.Priming != tokens.ReplyPriming {
			t.Errorf("%s: all as messages: %+v", enc, b2)
		}
	}
}

func TestMessageFraming(t *testing.T) {
	c := mustEncoding(t, tokens.O200kBase)
	T := c.Text
	user := chat.TextMessage(chat.RoleUser, "hello world")
	if got, want := c.Message(&user), 3+T("user")+T("hello world"); got != want {
		t.Errorf("user message: %d, want %d", got, want)
	}
	named := user
	named.Name = "alice"
	if got, want := c.Message(&named), c.Message(&user)+1+T("alice"); got != want {
		t.Errorf("named message: %d, want %d", got, want)
	}
	call := chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{
		{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
		{ID: "call_2", Name: "get_time", Arguments: `{"tz":"Europe/Paris"`}, // invalid JSON is counted as text
	}}
	want := 3 + T("assistant") + 2*tokens.ToolCallOverhead + T("get_weather") + T(`{"city":"Paris"}`) + T("get_time") + T(`{"tz":"Europe/Paris"`)
	if got := c.Message(&call); got != want {
		t.Errorf("tool calls: %d, want %d", got, want)
	}
	res := chat.ToolResult("call_1", "", "18°C, sunny", false)
	if got, want := c.Message(&res), 3+T("tool")+T("18°C, sunny")+T("call_1"); got != want {
		t.Errorf("tool result: %d, want %d", got, want)
	}
	reasoning := chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{
		{Type: chat.PartReasoning, Text: "The user greets me.", Signature: "c2lnbmF0dXJl"},
		{Type: chat.PartText, Text: "Hi!"},
	}}
	if got, want := c.Message(&reasoning), 3+T("assistant")+T("The user greets me.")+T("Hi!"); got != want {
		t.Errorf("reasoning: %d, want %d", got, want)
	}
	dev := chat.TextMessage(chat.RoleSystem, "Be brief.")
	dev.WireRole = "developer"
	if got, want := c.Message(&dev), 3+T("developer")+T("Be brief."); got != want {
		t.Errorf("developer: %d, want %d", got, want)
	}
	other := chat.Message{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartOther, Raw: json.RawMessage(`{"type":"x","v":1}`)}}}
	if got, want := c.Message(&other), 3+T("user")+T(`{"type":"x","v":1}`); got != want {
		t.Errorf("other part: %d, want %d", got, want)
	}
	textFile := chat.Message{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartFile, File: &chat.FileRef{MediaType: "text/plain", Data: "some notes"}}}}
	if got, want := c.Message(&textFile), 3+T("user")+T("some notes"); got != want {
		t.Errorf("text file: %d, want %d", got, want)
	}
	pdf := chat.Message{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartFile, File: &chat.FileRef{MediaType: "application/pdf", Data: "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3Ro"}}}}
	if got, want := c.Message(&pdf), 3+T("user")+tokens.DefaultUnknownFileTokens; got != want {
		t.Errorf("pdf file: %d, want %d", got, want)
	}
	if c.Message(nil) != 0 {
		t.Error("nil message counts")
	}
}

func TestToolsAndRequest(t *testing.T) {
	c := mustEncoding(t, tokens.O200kBase)
	T := c.Text
	if c.Tools(nil) != 0 {
		t.Error("no tools should cost 0")
	}
	params := json.RawMessage("{\n  \"type\": \"object\",\n  \"properties\": {\"city\": {\"type\": \"string\"}}\n}")
	tools := []chat.Tool{{Name: "get_weather", Description: "Weather of a city.", Parameters: params}}
	want := tokens.ToolsOverhead + tokens.PerToolOverhead + T("get_weather") + T("Weather of a city.") +
		T(`{"type":"object","properties":{"city":{"type":"string"}}}`)
	if got := c.Tools(tools); got != want {
		t.Errorf("tools: %d, want %d", got, want)
	}
	bad := []chat.Tool{{Name: "x", Parameters: json.RawMessage(`{"type":`)}, {Raw: json.RawMessage(`{"type":"web_search_20250305","name":"web_search"}`)}}
	if got := c.Tools(bad); got <= tokens.ToolsOverhead+2*tokens.PerToolOverhead {
		t.Errorf("malformed/server tools: %d", got)
	}
	sys := chat.TextMessage(chat.RoleSystem, "You are terse.")
	u := chat.TextMessage(chat.RoleUser, "Weather in Paris?")
	r := &chat.Request{System: []chat.Message{sys}, Tools: tools, Messages: []chat.Message{u}}
	b := c.Request(r)
	if b.System != c.Message(&sys) || b.Tools != c.Tools(tools) || len(b.Messages) != 1 ||
		b.Messages[0] != c.Message(&u) || b.Priming != tokens.ReplyPriming ||
		b.Total != b.System+b.Tools+b.Messages[0]+b.Priming {
		t.Errorf("breakdown %+v", b)
	}
	if z := c.Request(nil); z.Total != 0 {
		t.Errorf("nil request: %+v", z)
	}
}

func pngBase64(tb testing.TB, w, h int) string {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		tb.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestImages(t *testing.T) {
	cases := []struct {
		w, h   int
		detail string
		want   int
	}{
		{1024, 1024, "high", 765}, // 768x768: 4 tiles
		{1024, 1024, "low", 85},
		{2048, 4096, "", 1105}, // 1024x2048 -> 768x1536: 2x3 tiles
		{512, 512, "auto", 255},
		{100, 100, "high", 255},
		{4096, 8192, "high", 1105},
		{1, 10000, "high", 85 + 170*4}, // 1x2048 after fitting: 1x4 tiles
	}
	for _, tc := range cases {
		if got := tokens.OpenAIImageTokens(tc.w, tc.h, tc.detail); got != tc.want {
			t.Errorf("OpenAI %dx%d %s: %d, want %d", tc.w, tc.h, tc.detail, got, tc.want)
		}
	}
	anth := []struct{ w, h, want int }{
		{1000, 1000, 1334},
		{1092, 1092, 1590},
		{3000, 2000, 2185}, // 1568x1045
		{200, 100, 27},
	}
	for _, tc := range anth {
		if got := tokens.AnthropicImageTokens(tc.w, tc.h); got != tc.want {
			t.Errorf("Anthropic %dx%d: %d, want %d", tc.w, tc.h, got, tc.want)
		}
	}

	openai := mustEncoding(t, tokens.O200kBase)
	anthropic, err := tokens.ForEncodingOptions(tokens.O200kBase, tokens.Options{Images: tokens.ImagesAnthropic, UnknownImageTokens: 1600})
	if err != nil {
		t.Fatal(err)
	}
	flat := tokens.NewHeuristic(tokens.HeuristicOptions{Options: tokens.Options{Images: tokens.ImagesFlat}})
	img := func(im *chat.Image) *chat.Message {
		return &chat.Message{Role: chat.RoleUser, Content: []chat.Part{{Type: chat.PartImage, Image: im}}}
	}
	frame := openai.Message(img(nil)) - tokens.DefaultUnknownImageTokens
	check := func(c tokens.Counter, im *chat.Image, want int) {
		t.Helper()
		if got := c.Message(img(im)) - frame; got != want {
			t.Errorf("%s image %+v: %d, want %d", c.Name(), *im, got, want)
		}
	}
	check(openai, &chat.Image{Width: 1024, Height: 1024}, 765)
	check(openai, &chat.Image{URL: "https://example.com/cat.png"}, tokens.DefaultUnknownImageTokens)
	check(openai, &chat.Image{URL: "https://example.com/cat.png", Detail: "low"}, 85)
	check(anthropic, &chat.Image{Width: 1000, Height: 1000}, 1334)
	check(anthropic, &chat.Image{URL: "https://example.com/cat.png"}, 1600)
	// Dimensions read from inline PNG data (and from a data URL).
	data := pngBase64(t, 1500, 300) // OpenAI: 1500x300 -> 3x1 tiles; Anthropic: 600 tokens
	check(openai, &chat.Image{MediaType: "image/png", Data: data}, 85+170*3)
	check(anthropic, &chat.Image{URL: "data:image/png;base64," + data}, 600)
	check(openai, &chat.Image{Data: "iVBORw0KGgoAAAAnotreallyapng"}, tokens.DefaultUnknownImageTokens)
	hFrame := flat.Message(img(nil)) - tokens.DefaultUnknownImageTokens
	if got := flat.Message(img(&chat.Image{Width: 10, Height: 10})) - hFrame; got != tokens.DefaultUnknownImageTokens {
		t.Errorf("flat rule: %d", got)
	}
}

func TestHeuristic(t *testing.T) {
	h := tokens.NewHeuristic(tokens.HeuristicOptions{})
	if h.Name() != "heuristic" || h.Text("") != 0 {
		t.Fatal("name or empty text")
	}
	for _, s := range []string{" ", "\u200d", "\xff", "a", "\n"} {
		if h.Text(s) < 1 {
			t.Errorf("Text(%q) = %d, want >= 1", s, h.Text(s))
		}
	}
	cjk := strings.Repeat("上下文窗口", 20) // 100 Han runes
	if got := h.Text(cjk); got != 100 {
		t.Errorf("100 Han runes: %d tokens, want 100", got)
	}
	if got := tokens.NewHeuristic(tokens.HeuristicOptions{CJKTokensPerRune: 0.7}).Text(cjk); got != 70 {
		t.Errorf("100 Han runes at 0.7: %d", got)
	}
	if got := h.Text(strings.Repeat("コンテキスト", 10) + strings.Repeat("컨텍스트", 10)); got != 100 {
		t.Errorf("60 Kana + 40 Hangul: %d, want 100", got)
	}
	prose := "The context window is like a backpack of limited size: what does not fit stays behind, and the agent forgets it."
	code := `if (x[i] != nil && y->z == 0) { return f(a, b[0]); } // ok: {"k": [1, 2]}`
	if pp, pc := float64(h.Text(prose))/float64(len(prose)), float64(h.Text(code))/float64(len(code)); pc <= pp {
		t.Errorf("code should cost more per char than prose: %.3f vs %.3f", pc, pp)
	}
	if got, flat := h.Text("a"+strings.Repeat(" ", 32)+"b"), h.Text("a b"); got > flat+2 {
		t.Errorf("a run of 32 spaces costs %d tokens more than one space", got-flat)
	}
	long := strings.Repeat("abcdefgh ", 100)
	if a, b := h.Text(long), tokens.NewHeuristic(tokens.HeuristicOptions{CharsPerToken: 2}).Text(long); b != 2*a {
		t.Errorf("CharsPerToken 2 should double 8-letter words: %d vs %d", b, a)
	}
	// The heuristic frames like the exact counter.
	o := mustEncoding(t, tokens.O200kBase)
	msgs := cookbookMessages()
	hb, ob := h.Request(&chat.Request{Messages: msgs}), o.Request(&chat.Request{Messages: msgs})
	if hb.Priming != ob.Priming || len(hb.Messages) != len(ob.Messages) {
		t.Errorf("framing differs: %+v vs %+v", hb, ob)
	}
	if r := float64(hb.Total) / float64(ob.Total); r < 0.7 || r > 1.5 {
		t.Errorf("heuristic %d vs o200k %d on the cookbook example", hb.Total, ob.Total)
	}
}

// TestHeuristicVsExact logs how the heuristic compares with the golden o200k_base counts.
func TestHeuristicVsExact(t *testing.T) {
	t.Parallel()
	lines := loadGolden(t)
	h := tokens.NewHeuristic(tokens.HeuristicOptions{})
	bySource := map[string][2]int{}
	for _, g := range lines {
		src := g.Source
		if i := strings.IndexByte(src, ':'); i >= 0 {
			src = src[:i]
		}
		v := bySource[src]
		v[0] += h.Text(g.Text)
		v[1] += g.O200k
		bySource[src] = v
	}
	for src, v := range bySource {
		t.Logf("%-15s heuristic %7d, o200k_base %7d, ratio %.3f", src, v[0], v[1], float64(v[0])/float64(max(v[1], 1)))
		if r := float64(v[0]) / float64(v[1]); r < 0.5 || r > 2 {
			t.Errorf("%s: heuristic off by more than 2x: %.3f", src, r)
		}
	}
}

// TestLongRuns: texts with very long runs of one character class are counted in bounded time
// (counting them whole would take minutes) and within a token per 512-byte slice of the
// heap-based BPE of github.com/tiktoken-go/tokenizer (which has no quadratic case and agrees
// with the golden file on short texts), never below it.
func TestLongRuns(t *testing.T) {
	t.Parallel()
	c := mustEncoding(t, tokens.O200kBase)
	ref := secondCandidate(t, "o200k_base")
	var b strings.Builder
	x := uint32(1)
	for b.Len() < 16000 {
		x = x*1664525 + 1013904223
		b.WriteByte(byte('a' + x>>24%26))
	}
	random := b.String()
	texts := []string{random}
	for _, unit := range []string{"A", "a", "ab", "=", " ", "\n", "7", "中", "é", "-_", "\t", "ÄÖ"} {
		texts = append(texts, "x"+strings.Repeat(unit, 16000/len(unit))+" end")
	}
	for _, s := range texts {
		got := c.Text(s)
		want, err := ref.Count(s)
		if err != nil {
			t.Fatal(err)
		}
		if got < want || got > want+len(s)/512 {
			t.Errorf("%d-byte run of %q: %d tokens, reference %d", len(s), s[1:5], got, want)
		}
		if got != want {
			t.Logf("%d-byte run of %q: %d tokens, reference %d (+%.2f%%)", len(s), s[1:5], got, want, 100*float64(got-want)/float64(want))
		}
	}
}

func TestConcurrentCounting(t *testing.T) {
	t.Parallel()
	counters := []tokens.Counter{mustEncoding(t, tokens.O200kBase), mustEncoding(t, tokens.CL100kBase), tokens.NewHeuristic(tokens.HeuristicOptions{})}
	msgs := cookbookMessages()
	want := make([]int, len(counters))
	for i, c := range counters {
		want[i] = c.Request(&chat.Request{Messages: msgs}).Total
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, c := range counters {
				if got := c.Request(&chat.Request{Messages: msgs}).Total; got != want[i] {
					t.Errorf("%s: concurrent count %d, want %d", c.Name(), got, want[i])
				}
			}
		}()
	}
	wg.Wait()
}

// TestToolConstants: the fixed tool overheads cover the text the provider wraps around tool
// definitions and calls, under both encodings.
func TestToolConstants(t *testing.T) {
	for _, enc := range tokens.Encodings() {
		c := mustEncoding(t, enc)
		wrapper := c.Text("# Tools\n\n## functions\n\nnamespace functions {\n\n} // namespace functions")
		perTool := c.Text("// \ntype  = (_: {\n}) => any;\n\n")
		// A call as its own assistant turn: <|start|>assistant<|channel|>commentary
		// to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>: five special tokens.
		call := c.Text("assistant commentary to=functions. json") + 5
		t.Logf("%s: tools wrapper %d, per tool %d, per call %d", enc, wrapper, perTool, call)
		if wrapper > tokens.ToolsOverhead || perTool > tokens.PerToolOverhead || call > tokens.ToolCallOverhead {
			t.Errorf("%s: a constant is below the wrapper it covers", enc)
		}
	}
}
