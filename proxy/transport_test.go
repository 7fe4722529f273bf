package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	ooption "github.com/openai/openai-go/v3/option"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store"
)

// transportEnv is a fake upstream, mounted under /gw (so that the URL the client addresses
// carries a path of its own), and a Transport in front of it.
type transportEnv struct {
	fake  *fakeupstream.Server
	up    *httptest.Server
	tr    *Transport
	store store.Store
	// base is the base URL clients address: the upstream's, with its /gw prefix.
	base string
}

func newTransportEnv(t testing.TB, fo fakeupstream.Options, cfg Config) *transportEnv {
	t.Helper()
	e := &transportEnv{fake: fakeupstream.New(fo)}
	mux := http.NewServeMux()
	mux.Handle("/gw/", http.StripPrefix("/gw", e.fake))
	e.up = httptest.NewServer(mux)
	t.Cleanup(e.up.Close)
	if cfg.Store == nil {
		cfg.Store = store.NewMemory()
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	e.store = cfg.Store
	tr, err := NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	e.tr, e.base = tr, e.up.URL+"/gw"
	return e
}

func (e *transportEnv) client() *http.Client { return &http.Client{Transport: e.tr} }

// TestTransportAgentLoops: agent loops written with openai-go (chat completions and
// Responses) and with anthropic-sdk-go, each through NewTransport, against a strict upstream
// whose window is far smaller than the conversation: every call is answered, every request
// the upstream receives fits the window and pairs its tool calls, streaming and not; the
// history is compacted and kept whole in the store.
func TestTransportAgentLoops(t *testing.T) {
	const window = 6000
	for _, format := range []Format{FormatOpenAI, FormatAnthropic, FormatResponses} {
		t.Run(string(format), func(t *testing.T) {
			e := newTransportEnv(t, fakeupstream.Options{Window: window}, Config{Window: window, Tune: smallTune})
			ctx := ctxT(t)
			id := "transport-" + string(format)
			var a agent
			switch format {
			case FormatOpenAI:
				a = newOpenAIAgent(e.base, bigOutput(1800), ooption.WithHTTPClient(e.client()), ooption.WithHeader(SessionHeader, id))
			case FormatAnthropic:
				a = newAnthropicAgent(e.base, bigOutput(1800), aoption.WithHTTPClient(e.client()), aoption.WithHeader(SessionHeader, id))
			case FormatResponses:
				a = newResponsesAgent(t, e.base, bigOutput(1800), ooption.WithHTTPClient(e.client()), ooption.WithHeader(SessionHeader, id))
			}
			buildTurns(ctx, t, a, 40) // streamed and not, alternately
			recs := e.fake.Records()
			checkRecords(t, recs, window)
			streamed := 0
			for _, r := range recs {
				if r.Status != 200 {
					t.Errorf("request %d answered %d", r.Seq, r.Status)
				}
				if r.Stream {
					streamed++
				}
			}
			if streamed == 0 || streamed == len(recs) {
				t.Errorf("%d of %d requests streamed: want both kinds", streamed, len(recs))
			}
			srv := e.tr.Server()
			srv.sessMu.Lock()
			ps := srv.sessions[id]
			srv.sessMu.Unlock()
			if ps == nil {
				t.Fatalf("no session %s", id)
			}
			st := ps.sess.Stats()
			if st.Evicted == 0 || st.SummaryVersion == 0 {
				t.Errorf("no compaction: %+v", st)
			}
			total := 0
			for _, m := range ps.sess.History() {
				total += e.fake.Count(&chat.Request{Messages: []chat.Message{m}})
			}
			if total < 5*window {
				t.Fatalf("history of %d tokens does not far exceed the window %d", total, window)
			}
			stored, err := e.store.Messages(ctx, id, 0, -1)
			if err != nil || len(stored) != st.Total {
				t.Errorf("store holds %d messages (%v), session %d", len(stored), err, st.Total)
			}
			checkNoneInUse(t, srv)
		})
	}
}

// TestTransportServesAsTheHandler: commands are answered in-process, an overflow is recovered
// from, what the Transport does not manage reaches the base transport untouched, and a
// request whose context ends returns its error.
func TestTransportServesAsTheHandler(t *testing.T) {
	e := newTransportEnv(t, fakeupstream.Options{RejectAbove: 9000}, Config{Window: 40000, Tune: smallTune})
	ctx := ctxT(t)
	oa := newOpenAIAgent(e.base, bigOutput(2500), ooption.WithHTTPClient(e.client()), ooption.WithHeader(SessionHeader, "tr-oa"))
	an := newAnthropicAgent(e.base, bigOutput(2500), aoption.WithHTTPClient(e.client()), aoption.WithHeader(SessionHeader, "tr-an"))
	for _, a := range []agent{oa, an} {
		buildTurns(ctx, t, a, 10)
		n := len(e.fake.Records())
		for _, stream := range []bool{false, true} {
			out, err := a.turn(ctx, "/context", stream)
			if err != nil || !strings.Contains(out, "/context: session tr-") {
				t.Fatalf("/context (stream %v): %q %v", stream, out, err)
			}
			out, err = a.turn(ctx, "/compact keep the decisions", stream)
			if err != nil || !strings.Contains(out, "/compact") {
				t.Fatalf("/compact (stream %v): %q %v", stream, out, err)
			}
		}
		if got := len(e.fake.Records()); got != n {
			t.Fatalf("commands called the upstream (%d requests)", got-n)
		}
	}
	recs := e.fake.Records()
	checkRecovered(t, recs)
	for _, r := range recs {
		if r.Path != "/v1/chat/completions" && r.Path != "/v1/messages" {
			t.Errorf("request %d went to %s", r.Seq, r.Path)
		}
	}
	if v := counterValue(e.tr.Server().metrics.recoveries); v == 0 {
		t.Errorf("recoveries not counted")
	}
	checkNoneInUse(t, e.tr.Server())

	// Not managed: a GET reaches the base transport as the client sent it.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/v1/models?limit=2", nil)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := e.tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Fake-Upstream") != "models" || !strings.Contains(string(body), "gpt-4o") {
		t.Fatalf("passthrough: %d %s", resp.StatusCode, body)
	}

	// A request whose context is done before any answer returns the context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	req, _ = http.NewRequestWithContext(cctx, http.MethodPost, e.base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	if resp, err := e.tr.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a cancelled request answered %d", resp.StatusCode)
	}
}

// TestTransportConfig: a Transport needs no configured upstream; a bad Config is refused.
func TestTransportConfig(t *testing.T) {
	tr, err := NewTransport(Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTransport(Config{Preset: "no-such-preset"}); err == nil {
		t.Fatal("an unknown preset was accepted")
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("a Server without upstream was accepted")
	}
	for path, want := range map[string]string{
		"/v1/chat/completions":                           "/v1/chat/completions",
		"/openai/deployments/x/chat/completions":         "/v1/chat/completions",
		"/api/v1/messages/count_tokens":                  "/v1/messages/count_tokens",
		"/v1/messages":                                   "/v1/messages",
		"/v1/responses/compact":                          "/v1/responses/compact",
		"/v1/models":                                     "",
		"/v1/messages/batches":                           "",
		"/v1/threads/thread_1/messages":                  "",
		"/v1/chat/completions/chatcmpl-1/messages/extra": "",
	} {
		req := httptest.NewRequest(http.MethodPost, "http://up.example"+path, nil)
		got, ok := managedPath(req)
		if got != want || ok != (want != "") {
			t.Errorf("managedPath(%s) = %q %v, want %q", path, got, ok, want)
		}
	}
}

// TestTransportBodyCloseCancels: closing a streamed answer's body early ends the request
// upstream, as closing a body of http.Transport's does.
func TestTransportBodyCloseCancels(t *testing.T) {
	ended := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 500; i++ {
			_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`+"\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		ended <- nil
	}))
	t.Cleanup(up.Close)
	tr, err := NewTransport(Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	body := `{"model":"gpt-4o","stream":true,"messages":[{"role":"system","content":"sys"},{"role":"user","content":"go"}],` +
		`"tools":[{"type":"function","function":{"name":"run","parameters":{"type":"object","properties":{}}}}]}`
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, up.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || !strings.HasPrefix(string(buf), "data: ") {
		t.Fatalf("first bytes %q %v", buf, err)
	}
	resp.Body.Close()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the upstream streamed to its end after the body was closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request did not end after the body was closed")
	}
}
