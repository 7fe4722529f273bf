package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
)

// codexHistory is a Codex-like stateless history: a task, a tool call and its output, an answer.
const codexHistory = `{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent."}]},
 {"type":"message","role":"user","content":[{"type":"input_text","text":"fix the failing test in /src/app/main_test.go"}]},
 {"type":"function_call","call_id":"call_1","name":"shell","arguments":"{\"cmd\":\"go test ./...\"}"},
 {"type":"function_call_output","call_id":"call_1","output":"--- FAIL: TestMain (0.00s)\n main_test.go:12: want 3, got 4\nFAIL"},
 {"type":"message","role":"assistant","content":[{"type":"output_text","text":"The test expects 3; the function returns 4. I fixed sum() in /src/app/main.go."}]}`

// responsesOutput decodes a response object's output items.
func responsesOutput(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var v struct {
		Object string           `json:"object"`
		Output []map[string]any `json:"output"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return v.Output
}

// onlyCompaction checks that output is exactly one compaction item carrying a ctxmgr token,
// and returns the item.
func onlyCompaction(t *testing.T, output []map[string]any) map[string]any {
	t.Helper()
	n := 0
	var item map[string]any
	for _, it := range output {
		if it["type"] == "compaction" {
			n++
			item = it
		}
	}
	if n != 1 || len(output) != 1 {
		t.Fatalf("want exactly one compaction output item, got %v", output)
	}
	if enc, _ := item["encrypted_content"].(string); !strings.HasPrefix(enc, tokenPrefix) || item["id"] == "" {
		t.Fatalf("compaction item %v", item)
	}
	return item
}

// noneRefused checks that the non-native upstream refused nothing and never received the
// providers' context management.
func noneRefused(t *testing.T, e *env) {
	t.Helper()
	for _, r := range e.fake.Records() {
		if r.Rule == fakeupstream.RuleProviderContext || strings.Contains(string(r.Body), "compaction") ||
			strings.Contains(string(r.Body), "context_management") {
			t.Fatalf("the upstream received the providers' context management: %+v %s", r, r.Body)
		}
	}
}

// TestResponsesCompactionTriggerLocal: Codex's remote compaction through the proxy in front of
// an upstream without it. The trigger is answered by the proxy with exactly one compaction
// item, streaming and not; the upstream never sees the trigger; the item sent back is
// expanded into the summary before it is forwarded; a forged one is forwarded untouched.
func TestResponsesCompactionTriggerLocal(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 16000})
	body := `{"model":"gpt-5-codex","store":false,"prompt_cache_key":"conv-1","input":[` + codexHistory + `,{"type":"compaction_trigger"}]}`
	resp, b := postJSON(t, e.px.URL+"/v1/responses", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	item := onlyCompaction(t, responsesOutput(t, b))
	if n := len(e.fake.Records()); n != 0 {
		t.Fatalf("the upstream was asked %d times for a compaction the proxy answers", n)
	}

	// Streaming: the typed event sequence with the item in output_item.added/done.
	stream := strings.Replace(body, `"store":false`, `"store":false,"stream":true`, 1)
	resp, b = postJSON(t, e.px.URL+"/v1/responses", stream)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var types []string
	var done []map[string]any
	for _, ev := range parseSSE(t, b) {
		var v struct {
			Type     string          `json:"type"`
			Item     map[string]any  `json:"item"`
			Response json.RawMessage `json:"response"`
		}
		_ = json.Unmarshal(ev.Data, &v)
		types = append(types, v.Type)
		if v.Type == "response.output_item.done" {
			done = append(done, v.Item)
		}
		if v.Type == "response.completed" {
			onlyCompaction(t, responsesOutput(t, v.Response))
		}
	}
	want := "response.created response.in_progress response.output_item.added response.output_item.done response.completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	onlyCompaction(t, done)

	// Codex's next request: its user messages, the compaction item, a new task.
	next := `{"model":"gpt-5-codex","store":false,"prompt_cache_key":"conv-1","input":[
	 {"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent."}]},
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"fix the failing test in /src/app/main_test.go"}]},
	 ` + string(mustMarshal(item)) + `,
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"now add a test for sum, no tools"}]}]}`
	resp, b = postJSON(t, e.px.URL+"/v1/responses", next)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	recs := e.fake.Records()
	if len(recs) != 1 {
		t.Fatalf("%d upstream requests", len(recs))
	}
	fwd := string(recs[0].Body)
	if !strings.Contains(fwd, "Summary of the earlier conversation") || !strings.Contains(fwd, "main_test.go") {
		t.Fatalf("the compaction item was not expanded into its summary: %s", fwd)
	}
	noneRefused(t, e)

	// A token that does not verify is not the proxy's: forwarded as the client sent it.
	forged := strings.Replace(next, item["encrypted_content"].(string), item["encrypted_content"].(string)[:40]+"AAAA", 1)
	e.fake.Reset()
	resp, _ = postJSON(t, e.px.URL+"/v1/responses", forged)
	recs = e.fake.Records()
	if resp.StatusCode != 400 || len(recs) != 1 || recs[0].Rule != fakeupstream.RuleProviderContext {
		t.Fatalf("a forged compaction item: status %d, upstream records %+v", resp.StatusCode, recs)
	}
}

// TestResponsesCompactEndpointLocal: POST /v1/responses/compact answered by the proxy with
// the input's user messages and one compaction item.
func TestResponsesCompactEndpointLocal(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 16000})
	resp, b := postJSON(t, e.px.URL+"/v1/responses/compact", `{"model":"gpt-5-codex","input":[`+codexHistory+`]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var v struct {
		Object string           `json:"object"`
		Output []map[string]any `json:"output"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Object != "response.compaction" || len(v.Output) != 2 {
		t.Fatalf("answer %s", b)
	}
	if v.Output[0]["role"] != "user" {
		t.Fatalf("kept items %v", v.Output[0])
	}
	onlyCompaction(t, v.Output[1:])
	if n := len(e.fake.Records()); n != 0 {
		t.Fatalf("the upstream was asked %d times", n)
	}
}

// TestResponsesContextManagementStripped: a compaction threshold is honoured by the proxy
// (the context it forwards is compacted once it reaches it) and never forwarded.
func TestResponsesContextManagementStripped(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 16000})
	body := `{"model":"gpt-5-codex","store":false,"context_management":[{"type":"compaction","compact_threshold":2000}],"input":[` +
		longHistory(12) + `,{"type":"message","role":"user","content":[{"type":"input_text","text":"and the docs, no tools"}]}]}`
	resp, b := postJSON(t, e.px.URL+"/v1/responses", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	recs := e.fake.Records()
	if len(recs) != 1 || recs[0].Status != 200 {
		t.Fatalf("records %+v", recs)
	}
	noneRefused(t, e)
	if !strings.Contains(string(recs[0].Body), "Goal") {
		t.Fatalf("the threshold did not compact the forwarded context: %s", recs[0].Body)
	}
	// A malformed one is the client's error.
	resp, b = postJSON(t, e.px.URL+"/v1/responses", strings.Replace(body, `"compact_threshold":2000`, `"compact_threshold":-1`, 1))
	if resp.StatusCode != 400 || !strings.Contains(string(b), "compact_threshold") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestResponsesCompactionPassthrough: an upstream set to pass through gets the trigger and
// answers it itself.
func TestResponsesCompactionPassthrough(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNative},
		Config{Window: 16000, ProviderContext: map[string]ProviderContextMode{"*": ProviderContextPassthrough}})
	resp, b := postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","store":false,"input":[`+codexHistory+`,{"type":"compaction_trigger"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	out := responsesOutput(t, b)
	if len(out) != 1 || !strings.HasPrefix(out[0]["encrypted_content"].(string), "fakecmp_") {
		t.Fatalf("output %v", out)
	}
	resp, b = postJSON(t, e.px.URL+"/v1/responses/compact", `{"model":"gpt-5-codex","input":[`+codexHistory+`]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "fakecmp_") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// parseSSE reads every event of a stream.
func parseSSE(t *testing.T, b []byte) []sse.Event {
	t.Helper()
	var evs []sse.Event
	rd := sse.NewReader(bytes.NewReader(b))
	for {
		ev, err := rd.Next()
		if err != nil {
			return evs
		}
		evs = append(evs, ev)
	}
}

// longHistory is codexHistory followed by n more tool turns of about 1,500 tokens each.
func longHistory(n int) string {
	var b strings.Builder
	b.WriteString(codexHistory)
	for i := range n {
		out := bigOutput(6000)(i, 0)
		fmt.Fprintf(&b, `,{"type":"message","role":"user","content":[{"type":"input_text","text":"step %d: run it again"}]}`, i)
		fmt.Fprintf(&b, `,{"type":"function_call","call_id":"call_s%d","name":"shell","arguments":"{\"cmd\":\"go test ./pkg%d\"}"}`, i, i)
		fmt.Fprintf(&b, `,{"type":"function_call_output","call_id":"call_s%d","output":%s}`, i, mustMarshal(out))
		fmt.Fprintf(&b, `,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"step %d done"}]}`, i)
	}
	return b.String()
}

// TestResponsesCompactionAfterCutThrough: a trigger whose body was predicted to be
// forwarded as it is (a cut-through request started while it was read) is answered by the
// proxy, twice in a row on the compacted conversation.
func TestResponsesCompactionAfterCutThrough(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 200000, Tune: noCostMask})
	hist := longHistory(8)
	ask := `,{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}`
	for i, body := range []string{hist + ask, hist + ask + `,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]},{"type":"compaction_trigger"}`} {
		resp, b := postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","store":false,"prompt_cache_key":"c2","input":[`+body+`]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		if i == 1 {
			onlyCompaction(t, responsesOutput(t, b))
		}
	}
	if n := e.cutThroughCount("aborted"); n != 1 {
		t.Fatalf("cut-through requests aborted: %d, want 1 (the test does not exercise it)", n)
	}
	noneRefused(t, e)
}

// TestResponsesCompactionTwice: Codex compacts, continues from the compaction item, and
// compacts again: the second trigger carries the first item back.
func TestResponsesCompactionTwice(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 200000})
	head := `{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent."}]},
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"fix the failing test in /src/app/main_test.go"}]}`
	input := head + `,{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"call_1","output":"ok"}`
	for round := range 3 {
		resp, b := postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","stream":true,"store":false,"prompt_cache_key":"c3","input":[`+input+`,{"type":"compaction_trigger"}]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("round %d: %d %s", round, resp.StatusCode, b)
		}
		var item map[string]any
		for _, ev := range parseSSE(t, b) {
			var v struct {
				Type string         `json:"type"`
				Item map[string]any `json:"item"`
			}
			_ = json.Unmarshal(ev.Data, &v)
			if v.Type == "response.output_item.done" {
				item = v.Item
			}
		}
		if item == nil {
			t.Fatalf("round %d: no item in %s", round, b)
		}
		calls := fmt.Sprintf(`,{"type":"function_call","call_id":"call_r%d","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"call_r%d","output":%s}`,
			round, round, mustMarshal(bigOutput(40000)(round, 0)))
		input = head + "," + string(mustMarshal(item)) + calls
		for i := range 3 {
			// Large bodies that continue one another: cut-through requests are predicted.
			input += fmt.Sprintf(`,{"type":"message","role":"user","content":[{"type":"input_text","text":"more %d, no tools"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}`, i)
			resp, b = postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","stream":true,"store":false,"prompt_cache_key":"c3","input":[`+input+`]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("round %d: %d %s", round, resp.StatusCode, b)
			}
		}
	}
	noneRefused(t, e)
}

// TestResponsesCompactionArchiveReadable: after a compaction the client's history is the
// compaction item (a new branch of the session); the summary it stands for names the archive
// of the session it came from, which the model reads back with ctxmgr_read.
func TestResponsesCompactionArchiveReadable(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 200000})
	tools := `"tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}]`
	resp, b := postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","store":false,"prompt_cache_key":"c4",`+tools+`,"input":[`+codexHistory+`,{"type":"compaction_trigger"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	item := onlyCompaction(t, responsesOutput(t, b))
	resp, b = postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","store":false,"prompt_cache_key":"c4",`+tools+`,"input":[
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"fix the failing test in /src/app/main_test.go"}]},
	 `+string(mustMarshal(item))+`,
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"read back the test output"}]}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if !strings.Contains(string(b), "Read back: [ctxmgr_read messages") || strings.Contains(string(b), "no archived messages") || counterValue(e.srv.metrics.reads) < 1 {
		t.Fatalf("the archive of the compacted session was not read back: %s", b)
	}
}

// TestResponsesCompactionItemDecodeContinues: requests that carry the proxy's compaction item
// (rewritten before they are decoded) still continue one another in the decode cache.
func TestResponsesCompactionItemDecodeContinues(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{ProviderContext: fakeupstream.ProviderContextNonNative}, Config{Window: 200000})
	resp, b := postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","store":false,"prompt_cache_key":"c5","input":[`+codexHistory+`,{"type":"compaction_trigger"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	input := `{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the failing test"}]},` + string(mustMarshal(onlyCompaction(t, responsesOutput(t, b))))
	before := e.srv.decodes.continued.Load()
	for i := range 5 {
		input += fmt.Sprintf(`,{"type":"message","role":"user","content":[{"type":"input_text","text":"step %d, no tools"}]}`, i)
		resp, b = postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","store":false,"prompt_cache_key":"c5","input":[`+input+`]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		out := responsesOutput(t, b)
		input += "," + string(mustMarshal(out[len(out)-1]))
	}
	// The first request after the compaction starts over; the next ones continue.
	if got := e.srv.decodes.continued.Load() - before; got < 3 {
		t.Fatalf("%d of 5 requests continued the one before in the decode cache", got)
	}
}
