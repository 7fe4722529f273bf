package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
)

// benchBody is an OpenAI agent request of about n turns: a user request, an assistant tool
// call, a tool result of ~3 KiB with escaped newlines, tabs and quotes, and a reply.
func benchBody(turns int) []byte {
	msgs := []map[string]any{{"role": "system", "content": "You are a coding agent. Use the tools to inspect and change the repository."}}
	for t := 0; t < turns; t++ {
		var out strings.Builder
		for i := 0; i < 30; i++ {
			fmt.Fprintf(&out, "pkg/mod%d/file%d.go:%d:\tfunc Handler%d(ctx context.Context) error { return fmt.Errorf(\"code %%d\", %d) }\n", t, i, i*7, i, i)
		}
		id := fmt.Sprintf("call_%d", t)
		msgs = append(msgs,
			map[string]any{"role": "user", "content": fmt.Sprintf("Step %d: grep the handlers in module %d — which ones return errors?", t, t)},
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": "grep", "arguments": fmt.Sprintf(`{"pattern":"func Handler","path":"pkg/mod%d"}`, t)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": out.String()},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("Module %d has 30 handlers; all return errors.", t)}}},
		)
	}
	b, err := json.Marshal(map[string]any{"model": "gpt-4o", "max_completion_tokens": 4096, "messages": msgs, "temperature": 0.2,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "grep", "description": "Search files.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"pattern": map[string]any{"type": "string"}}}}}}})
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkDecode decodes a ~100K-token request body (about 400 KiB) in both formats, the
// proxy's per-request parsing cost.
func BenchmarkDecode(b *testing.B) {
	openai := benchBody(130)
	r, err := DecodeOpenAI(openai)
	if err != nil {
		b.Fatal(err)
	}
	anthropic, err := EncodeAnthropic(r)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    Format
		body []byte
	}{{"openai", OpenAI, openai}, {"anthropic", Anthropic, anthropic}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(c.f, c.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncode encodes the same request back.
func BenchmarkEncode(b *testing.B) {
	r, err := DecodeOpenAI(benchBody(130))
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range []Format{OpenAI, Anthropic} {
		b.Run(string(f), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Encode(f, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeGrowing encodes a ~100K-token conversation as OpenAI and Anthropic bodies,
// one more message each time, whole and with an encode cache (what the proxy does per request
// it rewrites), side by side.
func BenchmarkEncodeGrowing(b *testing.B) {
	req, err := DecodeOpenAI(benchBody(130))
	if err != nil {
		b.Fatal(err)
	}
	all := req.Messages
	for _, f := range []struct {
		name   string
		cached func([]byte, *chat.Request, *encodecache.Cache) ([]byte, error)
	}{{"openai", encodecache.AppendOpenAI}, {"anthropic", func(dst []byte, r *chat.Request, c *encodecache.Cache) ([]byte, error) {
		return encodecache.AppendAnthropic(dst, r, c, nil)
	}}} {
		for _, c := range []struct {
			name  string
			cache *encodecache.Cache
		}{{"whole", nil}, {"cached", encodecache.New()}} {
			b.Run(f.name+"-"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				start := len(all) - 100
				var buf []byte
				for i := 0; i < b.N; i++ {
					r := *req
					r.Messages = all[:start+i%100]
					if buf, err = f.cached(buf[:0], &r, c.cache); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDecodeNextAnthropic decodes a ~100K-token conversation as Anthropic bodies, each a
// turn longer than the last, against the layout of the one before (what the proxy does per
// request), with Claude Code's breakpoint on the newest message, so that the previous last
// message changes every time.
func BenchmarkDecodeNextAnthropic(b *testing.B) {
	oreq, err := DecodeOpenAI(benchBody(130))
	if err != nil {
		b.Fatal(err)
	}
	whole, err := EncodeAnthropic(oreq)
	if err != nil {
		b.Fatal(err)
	}
	req, err := DecodeAnthropic(whole) // Anthropic messages, which keep a block's extra fields
	if err != nil {
		b.Fatal(err)
	}
	// Prefixes that end with a user or tool message, where Claude Code puts its breakpoint.
	all := req.Messages
	var ends []int
	for k := range all {
		if all[k].Role == chat.RoleUser || all[k].Role == chat.RoleTool {
			ends = append(ends, k+1)
		}
	}
	ends = ends[len(ends)-101:]
	bodies := make([][]byte, len(ends))
	for i, end := range ends {
		r := *req
		r.Messages = slices.Clone(all[:end])
		last := &r.Messages[len(r.Messages)-1]
		bp := json.RawMessage(`{"type":"ephemeral"}`)
		if last.Role == chat.RoleTool {
			last.Extra = map[string]json.RawMessage{"block.": json.RawMessage(`{"cache_control":` + string(bp) + `}`)}
		} else {
			n := len(last.Content) - 1
			p := last.Content[n]
			p.Extra = map[string]json.RawMessage{"cache_control": bp}
			last.Content = append(slices.Clone(last.Content[:n]), p)
			last.Shape = chat.ShapeParts // a breakpoint sits on a block
		}
		if bodies[i], err = EncodeAnthropic(&r); err != nil {
			b.Fatal(err)
		}
	}
	for _, body := range bodies[:2] {
		if n := bytes.Count(body, []byte(`"cache_control"`)); n != 1 {
			b.Fatalf("%d breakpoints in a body, want 1 (on its newest message)", n)
		}
	}
	// compared-after: DecodeNext compares each body with the last; compared-while-read:
	// DecodeNextShared is told what a proxy compared while the body arrived (computed here
	// outside the timer), and resumes there.
	for _, shared := range []bool{false, true} {
		name := "compared-after"
		if shared {
			name = "compared-while-read"
		}
		b.Run(name, func(b *testing.B) {
			_, lay, err := DecodeLayout(Anthropic, bodies[0])
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(bodies[100])))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				next := bodies[1+i%100]
				n := 0
				if i%100 == 0 && i > 0 || shared {
					b.StopTimer()
					if i%100 == 0 && i > 0 {
						_, lay, _ = DecodeLayout(Anthropic, bodies[0])
					}
					if shared {
						n = SharedPrefix(next, lay.Body())
					}
					b.StartTimer()
				}
				_, l, err := DecodeNextShared(Anthropic, next, lay, n, nil)
				if err != nil {
					b.Fatal(err)
				}
				if l.Reused() == 0 {
					b.Fatal("not decoded from where the bodies differ")
				}
				lay = l
			}
		})
	}
}
