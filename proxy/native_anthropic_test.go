package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
)

// anthropicToolHistory is an Anthropic history of n tool uses, each result about 2,500 tokens.
func anthropicToolHistory(n int) string {
	var b strings.Builder
	b.WriteString(`{"role":"user","content":"build the project"}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"text","text":"step %d"},{"type":"tool_use","id":"toolu_%02d","name":"bash","input":{"command":"make step%d"}}]}`, i, i, i)
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%02d","content":%s}]}`, i, mustMarshal(bigOutput(6000)(i, 0)))
	}
	return b.String()
}

const anthropicTools = `"tools":[{"name":"bash","description":"run","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}]`

// anthropicNoneRefused checks that the non-native upstream refused nothing and never received
// the providers' context management, nor its betas.
func anthropicNoneRefused(t *testing.T, e *env) {
	t.Helper()
	for _, r := range e.fake.Records() {
		if r.Status != 200 || r.Extra["context_management"] != nil || r.Extra["compaction"] != nil ||
			strings.Contains(r.Headers["Anthropic-Beta"], "context-management") || strings.Contains(r.Headers["Anthropic-Beta"], "compact-") ||
			strings.Contains(string(r.Body), `"type":"compaction"`) {
			t.Fatalf("the upstream received the providers' context management: %+v", r)
		}
	}
}

// TestAnthropicClearToolUsesLocal: clear_tool_uses_20250919 in front of an upstream without
// it: the proxy clears all but the newest tool results it keeps, once the client's input
// reaches the trigger, stores them for ctxmgr_read, and reports the edit in the answer,
// streaming and not; the upstream never sees the edit nor its beta.
func TestAnthropicClearToolUsesLocal(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 200000})
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,` + anthropicTools + `,
	 "context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":5000},"keep":{"type":"tool_uses","value":2},"exclude_tools":["none"]}]},
	 "messages":[` + anthropicToolHistory(6) + `]}`
	hdr := []string{"anthropic-version", "2023-06-01", "anthropic-beta", "context-management-2025-06-27,fine-grained-tool-streaming-2025-05-14"}
	resp, b := postJSON(t, e.px.URL+"/v1/messages", body, hdr...)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	ae := appliedEdits(t, b)[0]
	if ae["type"] != "clear_tool_uses_20250919" || ae["cleared_tool_uses"] != float64(4) || ae["cleared_input_tokens"].(float64) < 4000 {
		t.Fatalf("applied edit %v", ae)
	}
	recs := e.fake.Records()
	if len(recs) != 1 {
		t.Fatalf("%d upstream requests", len(recs))
	}
	anthropicNoneRefused(t, e)
	fwd := string(recs[0].Body)
	if n := strings.Count(fwd, "[ctxmgr: tool result cleared"); n != 4 {
		t.Fatalf("%d results cleared in what was forwarded, want 4", n)
	}
	if !strings.Contains(recs[0].Headers["Anthropic-Beta"], "fine-grained-tool-streaming") {
		t.Fatalf("another beta was dropped: %q", recs[0].Headers["Anthropic-Beta"])
	}
	// The cleared text is stored, and read back by ctxmgr_read.
	sess, err := e.store.Sessions(context.Background())
	if err != nil || len(sess) == 0 {
		t.Fatalf("sessions %v %v", sess, err)
	}
	var read bool
	for _, si := range sess {
		if text, _, err := e.store.ReadOffload(context.Background(), si.ID, clearedRef("toolu_00"), 1, 3); err == nil && strings.Contains(text, "turn 0 call 0 line 0") {
			read = true
		}
	}
	if !read {
		t.Fatal("the cleared result is not stored")
	}

	// Streaming: the message_delta carries the applied edits.
	resp, b = postJSON(t, e.px.URL+"/v1/messages", strings.Replace(body, `"max_tokens":1024,`, `"max_tokens":1024,"stream":true,`, 1), hdr...)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	found := false
	for _, ev := range parseSSE(t, b) {
		if ev.Name == "message_delta" && strings.Contains(string(ev.Data), `"applied_edits":[{`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no applied_edits in the stream: %s", b)
	}
	anthropicNoneRefused(t, e)

	// Under the trigger nothing is cleared, and the answer says so.
	resp, b = postJSON(t, e.px.URL+"/v1/messages", strings.Replace(body, `"value":5000`, `"value":500000`, 1), hdr...)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"applied_edits":[]`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	anthropicNoneRefused(t, e)
}

// TestAnthropicClearThinkingNeedsThinking: clear_thinking_20251015 without thinking is the
// client's error, as the API says.
func TestAnthropicClearThinkingNeedsThinking(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 200000})
	resp, b := postJSON(t, e.px.URL+"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":1024,
	 "context_management":{"edits":[{"type":"clear_thinking_20251015"}]},"messages":[`+anthropicToolHistory(1)+`]}`)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "thinking") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestAnthropicCompactionLocal: on-demand compaction and compact_20260112 answered by the
// proxy with a compaction block; the block sent back stands for the messages before it.
func TestAnthropicCompactionLocal(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 200000})
	hist := anthropicToolHistory(3) + `,{"role":"assistant","content":[{"type":"text","text":"built"}]}`
	hdr := []string{"anthropic-version", "2023-06-01", "anthropic-beta", "compact-2026-09-04"}
	for _, stream := range []bool{false, true} {
		resp, b := postJSON(t, e.px.URL+"/v1/messages", fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":%v,`, stream)+anthropicTools+`,
		 "compaction":{"type":"summarize","instructions":"keep the file names"},"messages":[`+hist+`]}`, hdr...)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if stream {
			if !strings.Contains(string(b), `"compaction_delta"`) || !strings.Contains(string(b), `"stop_reason":"compaction"`) {
				t.Fatalf("stream %s", b)
			}
			continue
		}
		var msg anthropicAnswer
		if err := json.Unmarshal(b, &msg); err != nil || len(msg.Content) != 1 || msg.Content[0]["type"] != "compaction" ||
			msg.StopReason != "compaction" || len(msg.Usage.Iterations) != 1 || msg.Usage.Iterations[0]["type"] != "compaction" {
			t.Fatalf("answer %s", b)
		}
		if c, _ := msg.Content[0]["content"].(string); !strings.Contains(c, "Goal") {
			t.Fatalf("compaction content %q", c)
		}
		// The client sends the block back and goes on.
		next := `{"model":"claude-sonnet-4-5","max_tokens":1024,` + anthropicTools + `,"messages":[` + hist +
			`,{"role":"assistant","content":[` + string(mustMarshal(msg.Content[0])) + `]},{"role":"user","content":"now the docs, no tools"}]}`
		resp, b = postJSON(t, e.px.URL+"/v1/messages", next, hdr...)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	recs := e.fake.Records()
	if len(recs) != 1 {
		t.Fatalf("%d upstream requests, want 1", len(recs))
	}
	anthropicNoneRefused(t, e)
	fwd := string(recs[0].Body)
	if !strings.Contains(fwd, "Summary of the earlier conversation") || strings.Contains(fwd, "toolu_00") {
		t.Fatalf("the block was not expanded, or what precedes it was forwarded: %s", fwd)
	}
	// A request ending in an unanswered tool use cannot be summarized.
	resp, b := postJSON(t, e.px.URL+"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":1024,`+anthropicTools+`,"compaction":{"type":"summarize"},
	 "messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_x","name":"bash","input":{}}]}]}`, hdr...)
	if resp.StatusCode != 400 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// compact_20260112 under its trigger: forwarded without it.
	e.fake.Reset()
	resp, b = postJSON(t, e.px.URL+"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":1024,`+anthropicTools+`,
	 "context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":50000}}]},"messages":[`+hist+`,{"role":"user","content":"go on, no tools"}]}`,
		"anthropic-beta", "compact-2026-01-12")
	if resp.StatusCode != 200 || strings.Contains(string(b), `"compaction"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	anthropicNoneRefused(t, e)
	// Over it, with pause_after_compaction: the compaction block alone.
	over := `{"model":"claude-sonnet-4-5","max_tokens":1024,` + anthropicTools + `,
	 "context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":50000},"pause_after_compaction":true}]},
	 "messages":[` + anthropicToolHistory(24) + `,{"role":"assistant","content":"ok"},{"role":"user","content":"go on, no tools"}]}`
	resp, b = postJSON(t, e.px.URL+"/v1/messages", over, "anthropic-beta", "compact-2026-01-12")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"stop_reason":"compaction"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// Without it: the block, then the model's answer to the summary, in one response.
	e.fake.Reset()
	cont := strings.Replace(over, `,"pause_after_compaction":true`, ``, 1)
	resp, b = postJSON(t, e.px.URL+"/v1/messages", cont, "anthropic-beta", "compact-2026-01-12")
	var msg anthropicAnswer
	if err := json.Unmarshal(b, &msg); err != nil || resp.StatusCode != 200 || len(msg.Content) < 2 || msg.Content[0]["type"] != "compaction" ||
		msg.StopReason == "compaction" || len(msg.Usage.Iterations) != 2 || msg.Usage.Iterations[1]["type"] != "message" {
		t.Fatalf("%d %s", resp.StatusCode, b[max(0, len(b)-600):])
	}
	recs = e.fake.Records()
	if len(recs) != 1 || recs[0].Messages != 1 || !strings.Contains(string(recs[0].Body), "Summary of the earlier conversation") {
		t.Fatalf("the model was not asked with the summary alone: %+v", recs)
	}
	anthropicNoneRefused(t, e)
	// Streamed: the block's events come first, the model's blocks after it.
	resp, b = postJSON(t, e.px.URL+"/v1/messages", strings.Replace(cont, `"max_tokens":1024,`, `"max_tokens":1024,"stream":true,`, 1), "anthropic-beta", "compact-2026-01-12")
	var starts []string
	for _, ev := range parseSSE(t, b) {
		if ev.Name == "content_block_start" {
			var v struct {
				Index int            `json:"index"`
				Block map[string]any `json:"content_block"`
			}
			_ = json.Unmarshal(ev.Data, &v)
			starts = append(starts, fmt.Sprintf("%d:%v", v.Index, v.Block["type"]))
		}
	}
	if resp.StatusCode != 200 || len(starts) < 2 || starts[0] != "0:compaction" || starts[1] != "1:text" || !strings.Contains(string(b), `"iterations"`) {
		t.Fatalf("%d %v %s", resp.StatusCode, starts, b)
	}
}

// appliedEdits returns the one applied edit of an Anthropic message object.
func appliedEdits(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var msg struct {
		ContextManagement struct {
			AppliedEdits []map[string]any `json:"applied_edits"`
		} `json:"context_management"`
	}
	if err := json.Unmarshal(b, &msg); err != nil || len(msg.ContextManagement.AppliedEdits) != 1 {
		t.Fatalf("answer %s", b)
	}
	return msg.ContextManagement.AppliedEdits
}

// anthropicAnswer is what the tests read of an Anthropic message object.
type anthropicAnswer struct {
	Content    []map[string]any `json:"content"`
	StopReason string           `json:"stop_reason"`
	Usage      struct {
		Iterations []map[string]any `json:"iterations"`
	} `json:"usage"`
}
