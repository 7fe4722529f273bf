package tokens_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// FuzzCount: no counter panics on any text, in any field of a message, a tool or an image;
// counts are non-negative and deterministic; Text("") is 0 and Text of a non-empty string at
// least 1 (and, for valid UTF-8, at most one token a byte: every BPE token is at least one
// byte, and the heuristic charges at most one token a byte). Nothing else is asserted: BPE
// counts are not additive over concatenation.
func FuzzCount(f *testing.F) {
	for _, s := range []string{
		"", " ", "a", "hello world", "<|endoftext|>", "<|fim_prefix|>x<|fim_suffix|>", "\xff\xfe\x00",
		"你好，世界。", "👩‍👩‍👧‍👦", "\r\n\r\n", strings.Repeat("=", 600), "def f(x):\n    return x  # ok\n",
		"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
	} {
		f.Add(s)
	}
	// A few golden lines.
	b, err := os.ReadFile(goldenPath)
	if err != nil {
		f.Fatal(err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		var g goldenLine
		if i%40 != 0 || json.Unmarshal([]byte(line), &g) != nil || len(g.Text) > 4000 {
			continue
		}
		f.Add(g.Text)
	}
	o200k := mustEncoding(f, tokens.O200kBase)
	cl100k := mustEncoding(f, tokens.CL100kBase)
	heur := tokens.NewHeuristic(tokens.HeuristicOptions{})
	cal := tokens.NewCalibrator(tokens.NewCache(heur, 256), tokens.CalibratorOptions{})
	cal.Observe("m", 100, 93)
	anthropic, err := tokens.ForEncodingOptions(tokens.CL100kBase, tokens.Options{Images: tokens.ImagesAnthropic})
	if err != nil {
		f.Fatal(err)
	}
	counters := []tokens.Counter{o200k, cl100k, heur, tokens.NewCache(o200k, 256), cal.Counter("m"), anthropic}

	f.Fuzz(func(t *testing.T, s string) {
		msgs := []chat.Message{
			chat.TextMessage(chat.RoleUser, s),
			{Role: chat.Role(s), Name: s, WireRole: s},
			{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartReasoning, Text: s, Redacted: s}},
				ToolCalls: []chat.ToolCall{{ID: s, Name: s, Arguments: s}}},
			chat.ToolResult(s, s, s, true),
			{Role: chat.RoleUser, Content: []chat.Part{
				{Type: chat.PartImage, Image: &chat.Image{Data: s, Detail: s}},
				{Type: chat.PartImage, Image: &chat.Image{URL: "data:image/png;base64," + s}},
				{Type: chat.PartImage, Image: &chat.Image{Data: "iVBORw0KGgo" + s}},
				{Type: chat.PartImage, Image: &chat.Image{Data: "/9j/" + s, Width: -1, Height: 1 << 30}},
				{Type: chat.PartImage},
				{Type: chat.PartFile, File: &chat.FileRef{Data: s, MediaType: s}},
				{Type: chat.PartFile},
				{Type: chat.PartOther, Raw: json.RawMessage(s)},
				{Type: chat.PartType(s), Text: s},
			}},
		}
		tools := []chat.Tool{{Name: s, Description: s, Parameters: json.RawMessage(s)}, {Raw: json.RawMessage(s)}}
		for _, c := range counters {
			n := c.Text(s)
			if n < 0 || n != c.Text(s) {
				t.Fatalf("%s: Text(%q) = %d, then %d", c.Name(), s, n, c.Text(s))
			}
			if s == "" && n != 0 || s != "" && n < 1 {
				t.Fatalf("%s: Text(%q) = %d", c.Name(), s, n)
			}
			if utf8.ValidString(s) && n > len(s) && c.Name() != "calibrated(heuristic)" {
				t.Fatalf("%s: Text(%q) = %d tokens for %d bytes", c.Name(), s, n, len(s))
			}
			for i := range msgs {
				m := c.Message(&msgs[i])
				if m < tokens.TokensPerMessage || m != c.Message(&msgs[i]) {
					t.Fatalf("%s: message %d costs %d", c.Name(), i, m)
				}
			}
			if tc := c.Tools(tools); tc < tokens.ToolsOverhead {
				t.Fatalf("%s: tools cost %d", c.Name(), tc)
			}
			b := c.Request(&chat.Request{System: msgs[:1], Tools: tools, Messages: msgs[1:]})
			sum := b.System + b.Tools + b.Priming
			for _, m := range b.Messages {
				sum += m
			}
			if sum != b.Total || b.Total <= 0 {
				t.Fatalf("%s: breakdown %+v", c.Name(), b)
			}
		}
	})
}
