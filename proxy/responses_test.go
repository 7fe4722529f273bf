package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
	"github.com/ctxmgr/ctxmgr/wire"
)

// responsesAgent is a stateless Responses API client as Codex CLI is: store false, the whole
// history (reasoning items with their encrypted content included) in every request.
type responsesAgent struct {
	client openai.Client
	model  string
	input  responses.ResponseInputParam
	tools  []responses.ToolUnionParam
	out    toolOutput
	turns  int
	calls  []string
	maxOut int64
	t      *testing.T
	// lastID is the id of the last response.
	lastID string
}

func newResponsesAgent(t *testing.T, url string, out toolOutput, opts ...ooption.RequestOption) *responsesAgent {
	base := []ooption.RequestOption{ooption.WithBaseURL(url + "/v1/"), ooption.WithAPIKey("sk-test-openai"), ooption.WithMaxRetries(0)}
	return &responsesAgent{
		client: openai.NewClient(append(base, opts...)...),
		model:  "gpt-4o",
		tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("run_command",
			map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}, "required": []string{"cmd"}, "additionalProperties": false}, true)},
		out:    out,
		maxOut: 512,
		t:      t,
	}
}

func (a *responsesAgent) called() []string { return a.calls }
func (a *responsesAgent) dropLast(n int)   { a.input = a.input[:len(a.input)-n] }

func (a *responsesAgent) params() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:           a.model,
		Instructions:    openai.String("You are a coding agent under test. Use the tools."),
		Input:           responses.ResponseNewParamsInputUnion{OfInputItemList: a.input},
		Tools:           a.tools,
		Store:           openai.Bool(false),
		MaxOutputTokens: openai.Int(a.maxOut),
		Include:         []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
	}
}

// complete sends the history; streamed, it checks the event sequence as a strict client
// would: sequence numbers 0, 1, 2, ...; every output item announced, done once, and listed in
// response.completed, which ends the stream.
func (a *responsesAgent) complete(ctx context.Context, stream bool) (*responses.Response, error) {
	if !stream {
		return a.client.Responses.New(ctx, a.params())
	}
	s := a.client.Responses.NewStreaming(ctx, a.params())
	var done []responses.ResponseOutputItemUnion
	var final *responses.Response
	want := int64(0)
	added := map[int64]bool{}
	for s.Next() {
		ev := s.Current()
		if final != nil {
			return nil, fmt.Errorf("event %s after response.completed", ev.Type)
		}
		if ev.SequenceNumber != want {
			return nil, fmt.Errorf("event %s has sequence_number %d, want %d", ev.Type, ev.SequenceNumber, want)
		}
		want++
		switch ev.Type {
		case "response.output_item.added":
			if added[ev.OutputIndex] || ev.OutputIndex != int64(len(added)) {
				return nil, fmt.Errorf("output_item.added at index %d after %d items", ev.OutputIndex, len(added))
			}
			added[ev.OutputIndex] = true
		case "response.output_item.done":
			if !added[ev.OutputIndex] || ev.OutputIndex != int64(len(done)) {
				return nil, fmt.Errorf("output_item.done at index %d (%d done)", ev.OutputIndex, len(done))
			}
			done = append(done, ev.Item)
		case "response.completed":
			r := ev.Response
			final = &r
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if final == nil {
		return nil, fmt.Errorf("stream ended without response.completed")
	}
	if len(final.Output) != len(done) {
		return nil, fmt.Errorf("response.completed lists %d items, the stream sent %d", len(final.Output), len(done))
	}
	for i := range done {
		if done[i].ID != final.Output[i].ID {
			return nil, fmt.Errorf("item %d: streamed %s, completed lists %s", i, done[i].ID, final.Output[i].ID)
		}
	}
	return final, nil
}

func (a *responsesAgent) turn(ctx context.Context, text string, stream bool) (string, error) {
	a.input = append(a.input, responses.ResponseInputItemParamOfMessage(text, responses.EasyInputMessageRoleUser))
	for iter := 0; iter < 6; iter++ {
		resp, err := a.complete(ctx, stream)
		if err != nil {
			return "", err
		}
		a.lastID = resp.ID
		var calls []responses.ResponseFunctionToolCall
		for _, it := range resp.Output {
			switch it.Type {
			case "message":
				m := it.AsMessage().ToParam()
				a.input = append(a.input, responses.ResponseInputItemUnionParam{OfOutputMessage: &m})
			case "reasoning":
				r := it.AsReasoning().ToParam()
				a.input = append(a.input, responses.ResponseInputItemUnionParam{OfReasoning: &r})
			case "function_call":
				fc := it.AsFunctionCall()
				p := fc.ToParam()
				a.input = append(a.input, responses.ResponseInputItemUnionParam{OfFunctionCall: &p})
				calls = append(calls, fc)
			default:
				return "", fmt.Errorf("unexpected output item %s", it.Type)
			}
		}
		if len(calls) == 0 {
			a.turns++
			return resp.OutputText(), nil
		}
		for i, c := range calls {
			a.calls = append(a.calls, c.Name)
			o := responses.ResponseInputItemParamOfFunctionCallOutput(a.out(a.turns, i))
			o.OfFunctionCallOutput.CallID = openai.String(c.CallID)
			a.input = append(a.input, o)
		}
	}
	return "", fmt.Errorf("tool loop did not end")
}

func postJSON(t testing.TB, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// TestResponsesLongConversation: a stateless Responses conversation far larger than an
// 8192-token window, through the proxy, streaming and not: every upstream request fits and
// pairs its calls (the fake refuses otherwise), reasoning is replayed byte for byte (the fake
// refuses encrypted content it did not issue), history was compacted and offloaded, and
// ctxmgr_read is answered without the client seeing it.
func TestResponsesLongConversation(t *testing.T) {
	const window = 8192
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			e := newEnv(t, fakeupstream.Options{Window: window}, Config{Window: window, Tune: smallTune})
			big := bigOutput(2500)
			a := newResponsesAgent(t, e.px.URL, func(turn, call int) string {
				if turn%6 == 3 {
					return bigOutput(14000)(turn, call) // above the tool result cap: offloaded
				}
				return big(turn, call)
			})
			turn := func(ctx context.Context, text string) (string, error) { return a.turn(ctx, text, stream) }
			recs, st, raw := longConversation(t, e, window, "responses", turn, a.called)
			t.Logf("history %d tokens in %d messages; %d upstream requests, largest %d tokens + %d max output; summary v%d, %d evicted, %d offloaded",
				raw, st.Total, len(recs), maxTokens(recs), a.maxOut, st.SummaryVersion, st.Evicted, len(st.Offloads))
			// Usage is read from usage.input_tokens: the exact counter's estimate matches.
			if n, sum := histogram(e.srv.metrics.usageRatio.WithLabelValues("exact")); n == 0 || sum != float64(n) {
				t.Errorf("usage ratio (exact): %d observations, sum %v", n, sum)
			}
		})
	}
}

// TestResponsesCommands: /context and /compact answered by the proxy as a response object and
// as an event stream the SDK reads, without calling the upstream.
func TestResponsesCommands(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{Window: 20000, Tune: smallTune})
	ctx := ctxT(t)
	a := newResponsesAgent(t, e.px.URL, bigOutput(1500), ooption.WithHeader(SessionHeader, "cmd-responses"))
	for i := 0; i < 8; i++ {
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d: build it", i), i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, stream := range []bool{false, true} {
		n := len(e.fake.Records())
		out, err := a.turn(ctx, "/context", stream)
		if err != nil || !strings.Contains(out, "/context: session cmd-responses") || !strings.Contains(out, "of window 20000") {
			t.Fatalf("/context (stream %v): %q %v", stream, out, err)
		}
		out, err = a.turn(ctx, "/compact keep the decisions", stream)
		if err != nil || !strings.Contains(out, "/compact") {
			t.Fatalf("/compact (stream %v): %q %v", stream, out, err)
		}
		if !stream && !strings.Contains(out, "compacted ") {
			t.Fatalf("/compact compacted nothing: %q", out)
		}
		if got := len(e.fake.Records()); got != n {
			t.Fatalf("commands called the upstream (%d requests)", got-n)
		}
		if _, err := a.turn(ctx, "next: build it again", stream); err != nil {
			t.Fatal(err)
		}
	}
	checkRecords(t, e.fake.Records(), 20000)
	msgs, _ := e.store.Messages(ctx, "cmd-responses", 0, -1)
	for _, m := range msgs {
		if strings.HasPrefix(m.Text(), "/co") || strings.HasPrefix(m.Text(), replyPrefix) {
			t.Fatalf("command stored in history: %q", m.Text())
		}
	}
	// A plain string input is a command too.
	resp, body := postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-4o","input":"/context","stream":true}`, SessionHeader, "cmd-responses")
	if resp.StatusCode != 200 || resp.Header.Get("X-Ctxmgr-Local") != "1" {
		t.Fatalf("string /context: %d %s", resp.StatusCode, body)
	}
	rd := sse.NewReader(bytes.NewReader(body))
	var last sse.Event
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		last = ev
	}
	if last.Name != "response.completed" || !bytes.Contains(last.Data, []byte("/context: session")) {
		t.Fatalf("stream ends with %s %s", last.Name, last.Data)
	}
}

// TestResponsesOverflowRecovery: the upstream's limit is below the configured window; its
// context_length_exceeded answer makes the proxy compact and retry, and the client never sees
// the error.
func TestResponsesOverflowRecovery(t *testing.T) {
	const limit = 9000
	e := newEnv(t, fakeupstream.Options{RejectAbove: limit}, Config{Window: 40000, Tune: smallTune})
	ctx := ctxT(t)
	a := newResponsesAgent(t, e.px.URL, bigOutput(2500))
	for i := 0; i < 14; i++ {
		text, err := a.turn(ctx, fmt.Sprintf("turn %d: run the build", i), i%2 == 1)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if !strings.HasPrefix(text, "Done: ") {
			t.Fatalf("turn %d: %q", i, text)
		}
	}
	checkRecoveredCounted(t, e)
}

// TestResponsesProviderState: a request chained with previous_response_id (or conversation)
// keeps its history on the provider: forwarded byte for byte, counted as unmanaged.
func TestResponsesProviderState(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true}, Config{})
	ctx := ctxT(t)
	a := newResponsesAgent(t, e.px.URL, bigOutput(100))
	if _, err := a.turn(ctx, "hello, no tools", false); err != nil {
		t.Fatal(err)
	}
	chained, err := a.client.Responses.New(ctx, responses.ResponseNewParams{Model: a.model, PreviousResponseID: openai.String(a.lastID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and then? no tools")}})
	if err != nil {
		t.Fatal(err)
	}
	if chained.OutputText() != "Echo: and then? no tools" {
		t.Fatalf("answer %q", chained.OutputText())
	}
	body := `{"model":"gpt-4o","conversation":"conv_1","input":[{"role":"user","content":"hi"}],"store":true}`
	resp, got := postJSON(t, e.px.URL+"/v1/responses", body)
	if resp.StatusCode != 200 {
		t.Fatalf("conversation: %d %s", resp.StatusCode, got)
	}
	recs := e.fake.Records()
	if last := recs[len(recs)-1]; string(last.Body) != body {
		t.Fatalf("the chained request was changed:\n%s\n%s", last.Body, body)
	}
	// An id the provider does not know: its error reaches the client as it is.
	_, err = a.client.Responses.New(ctx, responses.ResponseNewParams{Model: a.model, PreviousResponseID: openai.String("resp_unknown"),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != 400 || oerr.Code != "previous_response_not_found" {
		t.Fatalf("error %v", err)
	}
	if got := counterValue(e.srv.metrics.unmanaged.WithLabelValues("provider_state")); got != 3 {
		t.Fatalf("provider_state requests counted %v, want 3", got)
	}
	_, metrics := get(t, e.px.URL+"/metrics")
	if !strings.Contains(metrics, `ctxmgr_unmanaged_requests_total{reason="provider_state"} 3`) {
		t.Errorf("metric missing")
	}
}

// TestResponsesInputTokens: /v1/responses/input_tokens is answered for a known session with
// the count of what the proxy would forward (far below the client's history), and passed
// through otherwise. The counted turn is one that does not cross the compaction threshold:
// the count is the session's request as it stands plus the new messages whole, so it does
// not foresee a compaction the new messages set off (see managedCount).
func TestResponsesInputTokens(t *testing.T) {
	const window = 8192
	e := newEnv(t, fakeupstream.Options{Window: window, KeepBodies: true}, Config{Window: window, Tune: smallTune})
	ctx := ctxT(t)
	a := newResponsesAgent(t, e.px.URL, bigOutput(2500), ooption.WithHeader(SessionHeader, "count"))
	for i := 0; i < 13; i++ {
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d: run it", i), false); err != nil {
			t.Fatal(err)
		}
	}
	a.input = append(a.input, responses.ResponseInputItemParamOfMessage("one more thing", responses.EasyInputMessageRoleUser))
	p := a.params()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	full, err := wire.DecodeResponses(b)
	if err != nil {
		t.Fatal(err)
	}
	rawCount := e.fake.Count(full)
	n0 := len(e.fake.Records())
	resp, body := postJSON(t, e.px.URL+"/v1/responses/input_tokens", string(b), SessionHeader, "count")
	var v struct {
		Object      string `json:"object"`
		InputTokens int    `json:"input_tokens"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &v) != nil || v.Object != "response.input_tokens" || resp.Header.Get(SessionHeader) != "count" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if len(e.fake.Records()) != n0 {
		t.Fatalf("a known session's count went upstream")
	}
	if v.InputTokens <= 0 || v.InputTokens >= window || rawCount < window+window/2 {
		t.Fatalf("input_tokens %d for a client history of %d tokens, window %d", v.InputTokens, rawCount, window)
	}
	// The same request, sent: the upstream receives what was counted.
	if _, err := a.client.Responses.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	recs := e.fake.Records()
	sent := recs[len(recs)-1].Tokens
	t.Logf("client history %d tokens; input_tokens answered %d; forwarded %d", rawCount, v.InputTokens, sent)
	if d := sent - v.InputTokens; d < -sent/20 || d > sent/20 {
		t.Errorf("input_tokens %d, but the proxy forwarded %d tokens", v.InputTokens, sent)
	}
	// Unknown session: the upstream counts.
	resp, body = postJSON(t, e.px.URL+"/v1/responses/input_tokens", `{"model":"gpt-4o","input":"count me"}`)
	if resp.StatusCode != 200 || resp.Header.Get(SessionHeader) != "" || !strings.Contains(string(body), `"input_tokens"`) {
		t.Fatalf("passthrough: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	if recs := e.fake.Records(); recs[len(recs)-1].Reply != "input_tokens" {
		t.Fatalf("the upstream did not count: %+v", recs[len(recs)-1])
	}
}

// TestFakeResponsesStrict: the fake refuses what the real API refuses, so the tests above
// prove something.
func TestFakeResponsesStrict(t *testing.T) {
	fake := fakeupstream.New(fakeupstream.Options{Window: 1000})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	up := srv.URL
	cases := []struct {
		name, body, want string
	}{
		{"call without output", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]}`, "No tool output found for function call c1."},
		{"output without call", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"c2","output":"x"}]}`, "No tool call found for function call output with call_id c2."},
		{"forged reasoning", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAforged"}]}`, "could not be verified"},
		{"too long", `{"model":"m","max_output_tokens":900,"input":"` + strings.Repeat("word ", 200) + `"}`, "context_length_exceeded"},
		{"unknown previous", `{"model":"m","previous_response_id":"resp_x","input":"x"}`, "previous_response_not_found"},
	}
	for _, c := range cases {
		resp, body := postJSON(t, up+"/v1/responses", c.body)
		if resp.StatusCode != 400 || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		}
	}
	// Paired calls and issued reasoning pass.
	resp, body := postJSON(t, up+"/v1/responses", `{"model":"m","include":["reasoning.encrypted_content"],"tools":[{"type":"function","name":"f","parameters":{}}],"input":"go"}`)
	var r struct {
		Output []json.RawMessage `json:"output"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil || len(r.Output) != 3 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var call struct {
		CallID string `json:"call_id"`
	}
	_ = json.Unmarshal(r.Output[2], &call)
	next := fmt.Sprintf(`{"model":"m","tools":[{"type":"function","name":"f","parameters":{}}],"input":[{"role":"user","content":"go"},%s,%s,%s,{"type":"function_call_output","call_id":%q,"output":"ok"}]}`,
		r.Output[0], r.Output[1], r.Output[2], call.CallID)
	resp, body = postJSON(t, up+"/v1/responses", next)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Done: f returned 2 bytes.") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// responsesEvents renders a response's stream as the API does: output items (reasoning,
// messages, function calls) each announced, filled and done, then response.completed.
func responsesEvents(id string, items ...map[string]any) []sse.Event {
	var evs []sse.Event
	seq := 0
	add := func(typ string, v map[string]any) {
		v["type"], v["sequence_number"] = typ, seq
		seq++
		b, _ := json.Marshal(v)
		evs = append(evs, sse.Event{Name: typ, Data: b, Raw: sse.Format(typ, b)})
	}
	add("response.created", map[string]any{"response": map[string]any{"id": id, "status": "in_progress", "output": []any{}}})
	var out []any
	for i, it := range items {
		add("response.output_item.added", map[string]any{"output_index": i, "item": it})
		if it["type"] == "function_call" {
			add("response.function_call_arguments.delta", map[string]any{"output_index": i, "item_id": it["id"], "delta": it["arguments"]})
			add("response.function_call_arguments.done", map[string]any{"output_index": i, "item_id": it["id"], "arguments": it["arguments"]})
		}
		add("response.output_item.done", map[string]any{"output_index": i, "item": it})
		out = append(out, it)
	}
	add("response.completed", map[string]any{"response": map[string]any{"id": id, "status": "completed", "output": out,
		"usage": map[string]any{"input_tokens": 1234}}})
	return evs
}

type seenEvent struct {
	Type     string              `json:"type"`
	Seq      int                 `json:"sequence_number"`
	Index    *int                `json:"output_index"`
	Item     map[string]any      `json:"item"`
	Response *responses.Response `json:"response"`
}

func runFilter(t *testing.T, f streamFilter, evs []sse.Event) []seenEvent {
	t.Helper()
	var out []seenEvent
	for _, ev := range evs {
		b := f.event(ev)
		if b == nil {
			continue
		}
		rd := sse.NewReader(bytes.NewReader(b))
		for {
			e, err := rd.Next()
			if err != nil {
				break
			}
			var s seenEvent
			if err := json.Unmarshal(e.Data, &s); err != nil {
				t.Fatalf("%v: %s", err, e.Data)
			}
			out = append(out, s)
		}
	}
	return out
}

// TestResponsesFilter: the stream filter holds ctxmgr_read calls back, continues the client's
// stream with the follow-up (one response id, output indices and sequence numbers continued,
// a response.completed listing what the client got), and lets mixed answers through without
// the read calls.
func TestResponsesFilter(t *testing.T) {
	reasoning := map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{}, "encrypted_content": "gAAA"}
	read := map[string]any{"type": "function_call", "id": "fc_r", "call_id": "call_r", "name": readToolName, "arguments": `{"ref":"x"}`, "status": "completed"}
	text := func(id, s string) map[string]any {
		return map[string]any{"type": "message", "id": id, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": s, "annotations": []any{}}}}
	}
	f := newFilter(FormatResponses, true)
	got := runFilter(t, f, responsesEvents("resp_1", reasoning, text("msg_1", "let me look"), read))
	asst, calls := f.pending()
	if len(calls) != 1 || calls[0].ID != "call_r" || calls[0].Args != `{"ref":"x"}` || f.usage().Input != 1234 {
		t.Fatalf("calls %+v usage %d", calls, f.usage().Input)
	}
	if len(asst.ToolCalls) != 1 || asst.Text() != "let me look" || len(asst.Content) != 2 || string(asst.Content[0].Raw) == "" {
		t.Fatalf("assistant %+v", asst)
	}
	f.next()
	got = append(got, runFilter(t, f, responsesEvents("resp_2", text("msg_2", "Read back: it")))...)
	if _, calls := f.pending(); len(calls) != 0 {
		t.Fatalf("second round pending %v", calls)
	}
	var types []string
	for i, e := range got {
		if e.Seq != i {
			t.Fatalf("event %d (%s) has sequence_number %d", i, e.Type, e.Seq)
		}
		if e.Item != nil && e.Item["name"] == readToolName {
			t.Fatalf("the client saw the read call")
		}
		types = append(types, e.Type)
	}
	want := "response.created response.output_item.added response.output_item.done response.output_item.added response.output_item.done " +
		"response.output_item.added response.output_item.done response.completed"
	if strings.Join(types, " ") != want {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(types, " "), want)
	}
	if *got[5].Index != 2 {
		t.Fatalf("follow-up item at output_index %d, want 2", *got[5].Index)
	}
	final := got[len(got)-1].Response
	if final.ID != "resp_1" || len(final.Output) != 3 || final.Output[2].ID != "msg_2" {
		t.Fatalf("completed %+v", final)
	}

	// Mixed: a read call beside a client call goes to the client without the read call.
	f = newFilter(FormatResponses, true)
	other := map[string]any{"type": "function_call", "id": "fc_o", "call_id": "call_o", "name": "run_command", "arguments": "{}", "status": "completed"}
	got = runFilter(t, f, responsesEvents("resp_3", read, other))
	if _, calls := f.pending(); len(calls) != 0 {
		t.Fatalf("mixed answer held")
	}
	final = got[len(got)-1].Response
	if len(final.Output) != 1 || final.Output[0].Name != "run_command" || *got[1].Index != 0 {
		t.Fatalf("mixed: %+v", got)
	}

	// Abort: a held stream ends with a note and a response.completed.
	f = newFilter(FormatResponses, true)
	got = runFilter(t, f, responsesEvents("resp_4", read))
	b := f.abort("\n[ctxmgr: limit]")
	rd := sse.NewReader(bytes.NewReader(b))
	var last sse.Event
	n := len(got)
	for {
		e, err := rd.Next()
		if err != nil {
			break
		}
		var s seenEvent
		_ = json.Unmarshal(e.Data, &s)
		if s.Seq != n {
			t.Fatalf("abort event %s seq %d, want %d", s.Type, s.Seq, n)
		}
		n++
		last = e
	}
	var done seenEvent
	_ = json.Unmarshal(last.Data, &done)
	if done.Type != "response.completed" || done.Response.ID != "resp_4" || done.Response.OutputText() != "[ctxmgr: limit]" {
		t.Fatalf("abort ends with %s", last.Data)
	}
}

// TestResponsesStripReads: a non-streamed answer that could not be followed up loses its
// read calls; one left empty gets a note.
func TestResponsesStripReads(t *testing.T) {
	data := []byte(`{"id":"resp_1","object":"response","output":[{"type":"reasoning","id":"rs","summary":[]},` +
		`{"type":"function_call","id":"fc","call_id":"c","name":"ctxmgr_read","arguments":"{}"}]}`)
	m, calls, mixed, ok := findReads(FormatResponses, data)
	if !ok || mixed || len(calls) != 1 || len(m.ToolCalls) != 1 {
		t.Fatalf("findReads: %+v %v %v %v", m, calls, mixed, ok)
	}
	var r responses.Response
	if err := json.Unmarshal(stripReads(FormatResponses, data), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Output) != 2 || r.Output[0].Type != "reasoning" || !strings.Contains(r.OutputText(), "could not be read back") {
		t.Fatalf("stripped: %+v", r.Output)
	}
}

// TestResponsesCodexShapes: a Codex-shaped request (developer message, custom and local_shell
// tools, a custom tool call, a local_shell call, reasoning) whose large output the proxy
// offloads: the forwarded body keeps every other item and tool byte for byte.
func TestResponsesCodexShapes(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true}, Config{Tune: smallTune})
	big, _ := json.Marshal(bigOutput(14000)(0, 0))
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"patching"}],"encrypted_content":null}`
	shell := `{"type":"local_shell_call","id":"lsh_1","call_id":"call_4","status":"completed","action":{"type":"exec","command":["pwd"],"env":{}}}`
	tools := `[{"type":"custom","name":"apply_patch","description":"patch","format":{"type":"grammar","syntax":"lark","definition":"start: x"}},{"type":"local_shell"},{"type":"web_search"}]`
	body := `{"model":"gpt-5-codex","instructions":"You are Codex.","store":false,"stream":false,"parallel_tool_calls":false,"prompt_cache_key":"conv-1","tools":` + tools + `,"input":[` +
		`{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions/>"}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the bug"}]},` +
		reasoning + `,` +
		`{"type":"custom_tool_call","id":"ctc_1","call_id":"call_3","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"},` +
		`{"type":"custom_tool_call_output","call_id":"call_3","output":` + string(big) + `},` +
		shell + `,{"type":"local_shell_call_output","id":"call_4","output":"/src"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Patched."}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}]}`
	resp, out := postJSON(t, e.px.URL+"/v1/responses", body)
	if resp.StatusCode != 200 || !strings.Contains(string(out), "Echo: go on") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	recs := e.fake.Records()
	checkRecords(t, recs, 200000)
	sent := string(recs[0].Body)
	if len(sent) >= len(body) || !strings.Contains(sent, "Full text: ") {
		t.Fatalf("the large output was not offloaded (%d -> %d bytes)", len(body), len(sent))
	}
	for _, verbatim := range []string{reasoning, shell, `"tools":` + strings.TrimSuffix(tools, "]") + `,{"type":"function","name":"ctxmgr_read"`, `"prompt_cache_key":"conv-1"`, `"instructions":"You are Codex."`,
		`{"type":"custom_tool_call","call_id":"call_3","name":"apply_patch","id":"ctc_1","input":"*** Begin Patch\n*** End Patch"}`} {
		if !strings.Contains(sent, verbatim) {
			t.Errorf("forwarded body lost %s\n%s", verbatim, sent)
		}
	}
}

// FuzzResponsesFilter: whatever the upstream streams, the filter neither panics nor emits
// anything but whole events.
func FuzzResponsesFilter(f *testing.F) {
	read := map[string]any{"type": "function_call", "id": "fc_r", "call_id": "call_r", "name": readToolName, "arguments": `{"ref":"x"}`}
	for _, ev := range responsesEvents("resp_1", read) {
		f.Add(ev.Name, ev.Data)
	}
	f.Add("response.output_item.done", []byte(`{"type":"response.output_item.done","output_index":-3,"item":null}`))
	f.Add("", []byte(`{"output_index":0,"type":"response.function_call_arguments.delta","delta":7}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		fl := newFilter(FormatResponses, true)
		evs := append(responsesEvents("resp_0", read)[:3], sse.Event{Name: name, Data: data, Raw: sse.Format(name, data)})
		for _, ev := range evs {
			out := fl.event(ev)
			if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n\n")) {
				t.Fatalf("partial event %q", out)
			}
		}
		fl.pending()
		fl.next()
		_ = fl.abort("x")
	})
}
