package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/store"
)

// earlyConversation returns the body of an OpenAI request whose history has turns tool calls,
// each answered by a 5 KB result (a body of 5-6 KB a turn); maxTokens, when positive, is
// written after the messages, so that it leaves the body's first bytes as they were, and last
// is the text of a final user message (none when empty).
func earlyConversation(turns, maxTokens int, last string) []byte {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type msg struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		ToolCalls  []call  `json:"tool_calls,omitempty"`
		ToolCallID string  `json:"tool_call_id,omitempty"`
	}
	str := func(s string) *string { return &s }
	msgs := []msg{{Role: "system", Content: str("You are a coding agent. Read files with cat.")}, {Role: "user", Content: str("Find where the limit is set.")}}
	for i := range turns {
		id := fmt.Sprintf("call_%d", i)
		var out strings.Builder
		for j := 0; out.Len() < 5000; j++ {
			fmt.Fprintf(&out, "pkg%d/file%d.go:%d: limit = %d // checked by test %d\n", i, j%9, j*7, i*1000+j, j)
		}
		msgs = append(msgs, msg{Role: "assistant", ToolCalls: []call{{ID: id, Type: "function", Function: fn{Name: "bash", Arguments: fmt.Sprintf(`{"command":"cat pkg%d/*.go"}`, i)}}}},
			msg{Role: "tool", ToolCallID: id, Content: str(out.String())})
	}
	if last != "" {
		msgs = append(msgs, msg{Role: "user", Content: str(last)})
	}
	m, _ := json.Marshal(msgs)
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":"gpt-4o","messages":%s,"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}]`, m)
	if maxTokens > 0 {
		fmt.Fprintf(&b, `,"max_tokens":%d`, maxTokens)
	}
	b.WriteString("}")
	return b.Bytes()
}

// recordingUpstream answers every chat request whose body arrives whole, and counts the ones
// cut short (an early request dropped before its last byte).
type recordingUpstream struct {
	mu     sync.Mutex
	bodies [][]byte // complete requests, in order
	cut    int
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	u.mu.Lock()
	if err != nil {
		u.cut++
	} else {
		u.bodies = append(u.bodies, body)
	}
	u.mu.Unlock()
	if err != nil {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1}}`)
}

func (u *recordingUpstream) complete() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.bodies...)
}

// TestEarlyForward: a body whose conversation last went upstream as the client's bytes is
// sent as it arrives, and the early request is the request when the pipeline forwards the
// client's bytes again. When the pipeline rewrites the request, answers it itself, or the
// client's body is cut short, the early request is dropped before its last byte: the
// upstream receives exactly one complete request per request forwarded, and never the
// client's bytes when something else was sent.
func TestEarlyForward(t *testing.T) {
	up := &recordingUpstream{}
	us := httptest.NewServer(up)
	defer us.Close()
	srv, err := New(Config{UpstreamOpenAI: us.URL, Store: store.NewMemory(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(srv.Handler())
	defer px.Close()
	defer srv.Close()
	post := func(body []byte) string {
		t.Helper()
		resp, err := http.Post(px.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		return string(out)
	}
	early := func(outcome string) float64 { return counterValue(srv.metrics.early.WithLabelValues(outcome)) }

	// Requests 1-3 and 5-6 go as the client's bytes; request 4 asks for more reply than the
	// window leaves, so the proxy lowers its max_tokens (a rewrite). Its body starts as the
	// others do, so it is sent early on the strength of request 3, then dropped.
	sent := [][]byte{
		earlyConversation(7, 0, ""), earlyConversation(8, 0, ""), earlyConversation(9, 0, ""),
		earlyConversation(10, 199000, ""), earlyConversation(11, 0, ""), earlyConversation(12, 0, ""),
	}
	for i, b := range sent {
		if len(b) < defaultEarlyForwardBytes {
			t.Fatalf("body %d: %d bytes, below the early forward size", i+1, len(b))
		}
		post(b)
	}
	// Early: 2 and 3 (after 1 and 2 went as sent), 4 (dropped), 6 (after 5); not 1 (nothing
	// cached) nor 5 (after a rewrite).
	if s, d := early("sent"), early("dropped"); s != 3 || d != 1 {
		t.Errorf("early forwards: %v sent, %v dropped; want 3 and 1", s, d)
	}
	got := up.complete()
	if len(got) != len(sent) {
		t.Fatalf("upstream received %d complete requests for %d forwarded", len(got), len(sent))
	}
	for i := range sent {
		if want := i != 3; bytes.Equal(got[i], sent[i]) != want {
			t.Errorf("request %d: forwarded as the client's bytes %v, want %v", i+1, !want, want)
		}
	}
	if !strings.Contains(string(got[3]), `"max_tokens"`) || bytes.Contains(got[3], []byte(`199000`)) {
		t.Errorf("request 4 went with its max_tokens unlowered: %s", got[3][len(got[3])-80:])
	}

	// A client that goes away halfway through a body that would have gone early: dropped.
	next := earlyConversation(13, 0, "")
	conn, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(next))
	_, _ = conn.Write(next[:len(next)/2])
	time.Sleep(100 * time.Millisecond) // the proxy reads the first bytes and sends early
	conn.Close()
	for deadline := time.Now().Add(5 * time.Second); early("dropped") < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if d := early("dropped"); d != 2 {
		t.Errorf("a body cut short: %v early requests dropped, want 2", d)
	}

	// A command answered by the proxy, in a body that continues request 6: dropped.
	if out := post(earlyConversation(12, 0, "/context")); !strings.Contains(out, "window") {
		t.Errorf("/context answer: %.200s", out)
	}
	if d := early("dropped"); d != 3 {
		t.Errorf("a command: %v early requests dropped, want 3", d)
	}
	if got := up.complete(); len(got) != len(sent) {
		t.Errorf("upstream received %d complete requests, want %d: a dropped early request arrived whole", len(got), len(sent))
	}
}

// TestEarlyReaderHoldsLastByte: the body an early request streams stops one byte short until
// released, ends in the drop's error when dropped, and reads again from its start for a retry.
func TestEarlyReaderHoldsLastByte(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[]}`)
	newEarly := func(avail int) *early {
		e := &early{buf: body, avail: avail, cancel: func() {}, done: make(chan struct{})}
		e.cond.L = &e.mu
		return e
	}
	readAll := func(r io.Reader) chan []byte {
		ch := make(chan []byte, 1)
		go func() {
			var got []byte
			p := make([]byte, 7)
			for {
				n, err := r.Read(p)
				got = append(got, p[:n]...)
				if err != nil {
					if !errors.Is(err, io.EOF) {
						got = append(got, []byte("|"+err.Error())...)
					}
					ch <- got
					return
				}
			}
		}()
		return ch
	}

	e := newEarly(10)
	r := &earlyReader{e: e}
	ch := readAll(r)
	time.Sleep(10 * time.Millisecond)
	e.publish(len(body))
	time.Sleep(10 * time.Millisecond)
	e.mu.Lock()
	if r.off != len(body)-1 {
		t.Errorf("before the decision the reader has %d bytes, want %d (all but the last)", r.off, len(body)-1)
	}
	e.mu.Unlock()
	close(e.done)
	if _, _, ok, _ := e.release(); !ok {
		t.Fatal("release refused")
	}
	if got := <-ch; !bytes.Equal(got, body) {
		t.Errorf("released: read %q, want the whole body", got)
	}
	if got := <-readAll(&earlyReader{e: e}); !bytes.Equal(got, body) {
		t.Errorf("a retry's reader read %q, want the whole body", got)
	}
	if e.drop(errEarlyDropped) {
		t.Error("a released request was dropped")
	}

	e = newEarly(len(body))
	ch = readAll(&earlyReader{e: e})
	time.Sleep(10 * time.Millisecond)
	if !e.drop(errEarlyDropped) {
		t.Fatal("drop refused")
	}
	if got := string(<-ch); got != string(body[:len(body)-1])+"|"+errEarlyDropped.Error() {
		t.Errorf("dropped: read %q, want all but the last byte, then the error", got)
	}
	if _, _, ok, _ := e.release(); ok {
		t.Error("a dropped request was released")
	}
}
