package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// rawAgent is an OpenAI-format client that keeps its whole history, as agents do, and sends
// it with every request. It builds bodies from pre-encoded messages so that a long soak
// spends its time in the proxy, not in the client.
type rawAgent struct {
	url, session string
	maxOut       int
	msgs         []json.RawMessage
	client       *http.Client
}

const soakTools = `[{"type":"function","function":{"name":"read_file","description":"Read a file.",` +
	`"parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]`

func (a *rawAgent) add(raw string) {
	a.msgs = append(a.msgs, json.RawMessage(raw))
}

// complete sends the history and returns the assistant message as the upstream answered it
// (a stream is accumulated into the message it spells).
func (a *rawAgent) complete(ctx context.Context, stream bool) (json.RawMessage, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":"gpt-4o","max_completion_tokens":%d,"tools":%s,`, a.maxOut, soakTools)
	if stream {
		b.WriteString(`"stream":true,"stream_options":{"include_usage":true},`)
	}
	b.WriteString(`"messages":[`)
	for i, m := range a.msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString("]}")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/v1/chat/completions", &b)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-soak")
	req.Header.Set(SessionHeader, a.session)
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	if stream {
		return accumulateStream(data)
	}
	var v struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &v); err != nil || len(v.Choices) == 0 {
		return nil, fmt.Errorf("answer without choices (%v): %s", err, data)
	}
	return v.Choices[0].Message, nil
}

// accumulateStream turns an OpenAI chat.completion.chunk stream into the assistant message.
func accumulateStream(data []byte) (json.RawMessage, error) {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type tc struct {
		Index    int    `json:"index"`
		ID       string `json:"id,omitempty"`
		Type     string `json:"type,omitempty"`
		Function fn     `json:"function"`
	}
	var content strings.Builder
	var calls []tc
	done := false
	for _, line := range strings.Split(string(data), "\n") {
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if payload == "[DONE]" {
			done = true
			break
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []tc   `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			return nil, fmt.Errorf("bad chunk %q: %w", payload, err)
		}
		for _, ch := range c.Choices {
			content.WriteString(ch.Delta.Content)
			for _, d := range ch.Delta.ToolCalls {
				for len(calls) <= d.Index {
					calls = append(calls, tc{Index: len(calls), Type: "function"})
				}
				if d.ID != "" {
					calls[d.Index].ID = d.ID
				}
				calls[d.Index].Function.Name += d.Function.Name
				calls[d.Index].Function.Arguments += d.Function.Arguments
			}
		}
	}
	if !done {
		return nil, fmt.Errorf("stream without [DONE]: %s", data)
	}
	msg := map[string]any{"role": "assistant", "content": content.String()}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	return json.Marshal(msg)
}

// turn sends a user message and runs the tool loop: every tool call is answered with
// output(turn), and the turn ends with the model's text answer.
func (a *rawAgent) turn(ctx context.Context, n int, text string, stream bool, output func(int) string) (string, error) {
	a.add(fmt.Sprintf(`{"role":"user","content":%q}`, text))
	for iter := 0; iter < 4; iter++ {
		msg, err := a.complete(ctx, stream)
		if err != nil {
			return "", err
		}
		var m struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		}
		if err := json.Unmarshal(msg, &m); err != nil {
			return "", err
		}
		a.msgs = append(a.msgs, msg)
		if len(m.ToolCalls) == 0 {
			if m.Content == nil {
				return "", fmt.Errorf("answer without content: %s", msg)
			}
			return *m.Content, nil
		}
		for _, tc := range m.ToolCalls {
			res, _ := json.Marshal(map[string]string{"role": "tool", "tool_call_id": tc.ID, "content": output(n)})
			a.msgs = append(a.msgs, res)
		}
	}
	return "", fmt.Errorf("tool loop did not end")
}

// soakOutput is a tool result of 120 bytes to 6 KB, different every turn: mostly under
// 400 bytes, every twentieth about 6 KB (about 0.55 KB on average). The client resends its
// whole history every request, so the soak's cost grows with the square of this size.
func soakOutput(n int) string {
	size := 120 + int(int64(n)*2654435761%280)
	if n%20 == 19 {
		size = 5800 + n%200
	}
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "turn %d line %d: /src/pkg%d/file%d.go:%d ok value=%x\n", n, i, n%13, i%7, i*3, n*1000+i)
	}
	return b.String()
}

// TestSoak is a long tool-using session through the proxy on a 4K window:
// 1,000 turns (a user message, a tool call, a 0.1-6 KB result, an answer; every fourth turn
// streamed), compacted every
// few turns (the memory store; SOAK_FILES=1 uses a file store, SOAK_TURNS=N sets the
// length). Every turn is answered, every request the upstream receives fits the window, the
// summary stays within its budget however many versions it has, and the store holds every
// message the client sent. Under -short or the race detector it runs 150 turns.
func TestSoak(t *testing.T) {
	const window = 4096
	turns := 1000
	if testing.Short() || soakRace {
		turns = 150
	}
	if v := os.Getenv("SOAK_TURNS"); v != "" {
		turns, _ = strconv.Atoi(v)
	}
	var st store.Store = store.NewMemory()
	if os.Getenv("SOAK_FILES") != "" {
		fst, err := files.Open(t.TempDir(), files.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st = fst
	}
	e := newEnv(t, fakeupstream.Options{Window: window}, Config{Window: window, Store: st})
	// The client resends a history that grows to megabytes: collecting garbage less often
	// halves the soak's time without changing what it checks.
	defer debug.SetGCPercent(debug.SetGCPercent(200))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := &rawAgent{url: e.px.URL, session: "soak", maxOut: 512, client: e.px.Client()}
	a.add(`{"role":"system","content":"You are a coding agent under test. Use the tools."}`)
	start := time.Now()
	for i := 0; i < turns; i++ {
		out, err := a.turn(ctx, i, fmt.Sprintf("turn %d: look at /src/pkg%d/file%d.go", i, i%13, i%7), i%4 == 3, soakOutput)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if !strings.HasPrefix(out, "Done: ") {
			t.Fatalf("turn %d: answer %q", i, out)
		}
	}
	elapsed := time.Since(start)

	recs := e.fake.Records()
	if len(recs) != 2*turns {
		t.Errorf("the upstream received %d requests for %d turns, want %d", len(recs), turns, 2*turns)
	}
	checkRecords(t, recs, window)
	largest, streamed := 0, 0
	for _, r := range recs {
		if r.Stream {
			streamed++
		}
		if r.Status != http.StatusOK {
			t.Errorf("request %d answered %d", r.Seq, r.Status)
		}
		largest = max(largest, r.Tokens+r.MaxTokens)
	}
	if n := counterSum(e.srv.metrics.unmanaged); n != 0 {
		t.Errorf("%v requests forwarded unmanaged", n)
	}
	if streamed != 2*(turns/4) {
		t.Errorf("%d streamed requests, want %d", streamed, 2*(turns/4))
	}

	e.srv.sessMu.Lock()
	ps := e.srv.sessions["soak"]
	e.srv.sessMu.Unlock()
	if ps == nil {
		t.Fatal("no session \"soak\"")
	}
	sums, err := st.Summaries(ctx, ps.id)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) < turns/15 { // default's 95% threshold makes one about every 10 turns
		t.Fatalf("%d summary versions in %d turns: not compacting every few turns", len(sums), turns)
	}
	c, err := tokens.ForEncoding(tokens.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	target := ps.mgr.m.Config().SummaryTokens
	biggest := 0
	for _, s := range sums {
		n := c.Text(s.Text)
		biggest = max(biggest, n)
		if n > target {
			t.Errorf("summary v%d costs %d tokens, above its target %d", s.Version, n, target)
		}
	}

	// Nothing lost: the store holds every message the client sent, in order, as sent.
	stored, err := st.Messages(ctx, ps.id, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	// The system message is not history; the last answer was received but never sent back.
	sentMsgs := a.msgs[1 : len(a.msgs)-1]
	want := make([]chat.Message, 0, len(sentMsgs))
	for i, raw := range sentMsgs {
		m, err := wire.DecodeOpenAIMessage(i, raw)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m)
	}
	if len(stored) != len(want) {
		t.Fatalf("store holds %d messages, the client sent %d", len(stored), len(want))
	}
	for i := range want {
		if stored[i].Role != want[i].Role || stored[i].Text() != want[i].Text() || len(stored[i].ToolCalls) != len(want[i].ToolCalls) {
			t.Fatalf("message %d: stored %s %.80q, sent %s %.80q", i, stored[i].Role, stored[i].Text(), want[i].Role, want[i].Text())
		}
	}
	t.Logf("%d turns, %d requests in %v (%.1f ms/request); largest request %d tokens incl. max output (window %d); %d summary versions, largest %d tokens (target %d); %d messages stored",
		turns, len(recs), elapsed.Round(time.Millisecond), float64(elapsed.Milliseconds())/float64(len(recs)), largest, window, len(sums), biggest, target, len(stored))
}

// counterSum adds up every series of a counter vector.
func counterSum(v *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { v.Collect(ch); close(ch) }()
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			sum += d.GetCounter().GetValue()
		}
	}
	return sum
}
