package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store"
)

// TestFiftyMegabyteToolOutput: a request carrying a 50 MB tool output, far above what a
// provider accepts, is forwarded small: the output is offloaded whole to the store and the
// upstream receives a snippet and a reference, within the window. Under the race detector,
// which multiplies the memory of every allocation (1.8 GB for this test), the output is 12 MB
// (still above what providers accept); .ci/run runs the 50 MB one without it.
func TestFiftyMegabyteToolOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB")
	}
	size := 50 << 20
	if soakRace {
		size = 12 << 20
	}
	st := store.NewMemory()
	e := newEnv(t, fakeupstream.Options{}, Config{Store: st, MaxBodyBytes: 64 << 20})
	huge := strings.Repeat("0123456789 abcdefghij klmnopqrstuvwxyz ABCDEFGHIJ error? no, fine\n", size/68)
	body, err := json.Marshal(map[string]any{"model": "gpt-4o", "messages": []any{
		map[string]any{"role": "user", "content": "dump the log"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
			"function": map[string]any{"name": "bash", "arguments": `{"cmd":"cat big.log"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "c1", "content": huge},
	}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", e.px.URL+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SessionHeader, "huge")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %.300s", resp.StatusCode, b)
	}
	recs := e.fake.Records()
	if len(recs) != 1 {
		t.Fatalf("%d upstream requests", len(recs))
	}
	if recs[0].Tokens > 20000 {
		t.Fatalf("upstream received %d tokens", recs[0].Tokens)
	}
	// Nothing lost: the whole output is in the store, verbatim.
	e.srv.sessMu.Lock()
	ps := e.srv.sessions["huge"]
	e.srv.sessMu.Unlock()
	if ps == nil {
		t.Fatal("no session")
	}
	stored, err := st.Messages(t.Context(), ps.id, 0, -1)
	if err != nil || len(stored) != 3 || stored[2].Text() != huge {
		t.Fatalf("stored history: %d messages, %v", len(stored), err)
	}
}
