package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// gateSummarizer is the extractive summarizer whose first call waits until release is closed.
// When that call begins it sends on entered whether the conversation's lock is held then
// (held).
type gateSummarizer struct {
	summarize.Summarizer
	calls   atomic.Int32
	held    func() bool
	entered chan bool
	release chan struct{}
}

func (g *gateSummarizer) Summarize(ctx context.Context, r summarize.Request) (summarize.Result, error) {
	if g.calls.Add(1) == 1 {
		g.entered <- g.held()
		select {
		case <-g.release:
		case <-ctx.Done():
			return summarize.Result{}, ctx.Err()
		}
	}
	return g.Summarizer.Summarize(ctx, r)
}

// chatBody is an OpenAI chat request of msgs (JSON objects) with one tool.
func chatBody(msgs []string) string {
	return `{"model":"gpt-4o","max_completion_tokens":512,"tools":[{"type":"function","function":{"name":"run_command",` +
		`"parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}}],"messages":[` + strings.Join(msgs, ",") + `]}`
}

// postChat posts an OpenAI chat body for session id and returns the status and the body.
func postChat(url, id, body string) (int, string, error) {
	req, err := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SessionHeader, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestSummaryDoesNotHoldTheConversation: while the summarizer works for one request of a
// conversation, the proxy does not hold the conversation's lock, and the conversation's
// other requests (a /context command, a request that goes on with the history), and the
// inspector's view of the session, are answered meanwhile. The request the summary was for
// then sends its own history, not the messages the later one appended while it waited.
func TestSummaryDoesNotHoldTheConversation(t *testing.T) {
	const id, window = "slow-summary", 8000
	g := &gateSummarizer{
		Summarizer: summarize.NewExtractive(summarize.ExtractiveOptions{Counter: tokens.NewHeuristic(tokens.HeuristicOptions{})}),
		entered:    make(chan bool, 1),
		release:    make(chan struct{}),
	}
	e := newEnv(t, fakeupstream.Options{KeepBodies: true}, Config{Window: window, Tune: smallTune, Summarizer: g, UILoopback: true})
	g.held = func() bool {
		e.srv.sessMu.Lock()
		ps := e.srv.sessions[id]
		e.srv.sessMu.Unlock()
		if ps == nil || ps.mu.TryLock() {
			if ps != nil {
				ps.mu.Unlock()
			}
			return false
		}
		return true
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(g.release)
		}
	}
	t.Cleanup(release)

	// A tool loop, one request per turn, until a request's pipeline summarizes: that one
	// waits in the summarizer.
	type result struct {
		status int
		body   string
		err    error
	}
	msgs := []string{`{"role":"system","content":"You are a coding agent under test."}`}
	var waiting atomic.Pointer[string] // the body of the request the summary is for
	done := make(chan result, 1)
	go func() {
		for turn := 0; turn < 200; turn++ {
			call := fmt.Sprintf("call_%d", turn)
			out, _ := json.Marshal(bigOutput(1800)(turn, 0))
			msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"turn %d: run the build"}`, turn),
				`{"role":"assistant","content":null,"tool_calls":[{"id":"`+call+`","type":"function","function":{"name":"run_command","arguments":"{\"cmd\":\"make\"}"}}]}`,
				`{"role":"tool","tool_call_id":"`+call+`","content":`+string(out)+`}`,
				fmt.Sprintf(`{"role":"user","content":"turn %d: what did it say?"}`, turn))
			body := chatBody(msgs)
			waiting.Store(&body)
			status, b, err := postChat(e.px.URL, id, body)
			if err != nil || status != 200 || g.calls.Load() > 0 {
				done <- result{status, b, err}
				return
			}
		}
		done <- result{err: fmt.Errorf("no summary in 200 turns")}
	}()
	var held bool
	select {
	case held = <-g.entered:
	case r := <-done:
		t.Fatalf("the conversation never summarized: %d %s %v", r.status, r.body, r.err)
	}
	if held {
		release()
		<-done
		t.Fatal("the conversation's lock is held while its summary is written")
	}
	// The summarizer waits. The request it works for sent waiting, of which these requests
	// are continuations.
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal([]byte(*waiting.Load()), &req); err != nil {
		t.Fatal(err)
	}
	same := make([]string, len(req.Messages))
	for i, m := range req.Messages {
		same[i] = string(m)
	}
	status, b, err := postChat(e.px.URL, id, chatBody(append(same[:len(same):len(same)], `{"role":"user","content":"/context"}`)))
	if err != nil || status != 200 || !strings.Contains(b, "/context: session "+id) {
		t.Fatalf("/context while the summary is written: %d %s %v", status, b, err)
	}
	var view struct {
		Live bool `json:"live"`
	}
	if code, b := get(t, e.px.URL+"/ui/api/sessions/"+id); code != 200 || json.Unmarshal([]byte(b), &view) != nil || !view.Live {
		t.Fatalf("the inspector's session while the summary is written: %d %s", code, b)
	}
	later := append(same[:len(same):len(same)], `{"role":"assistant","content":"It built."}`, `{"role":"user","content":"later: now test it"}`)
	if status, b, err := postChat(e.px.URL, id, chatBody(later)); err != nil || status != 200 {
		t.Fatalf("a later request while the summary is written: %d %s %v", status, b, err)
	}

	release()
	if r := <-done; r.err != nil || r.status != 200 {
		t.Fatalf("the request the summary was for: %d %s %v", r.status, r.body, r.err)
	}
	// It sent its own history: it ends with its own last message.
	recs := e.fake.Records()
	last := recs[len(recs)-1]
	sent, err := wire.Decode(wire.OpenAI, last.Body)
	if err != nil {
		t.Fatal(err)
	}
	want, err := decodeOpenAIMessage(req.Messages[len(req.Messages)-1])
	if err != nil {
		t.Fatal(err)
	}
	got := sent.Messages[len(sent.Messages)-1]
	if got.Role != chat.RoleUser || got.Text() != want.Text() {
		t.Fatalf("the request the summary was for sent %q last, want its own last message %q", got.Text(), want.Text())
	}
}
