package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	openai "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
)

// managedBody is a chat completions body the proxy manages (two messages and a tool) with
// max_completion_tokens n.
func managedBody(n int) string {
	return fmt.Sprintf(`{"model":"gpt-4o","max_completion_tokens":%d,"messages":[{"role":"system","content":"sys"},{"role":"user","content":"hello %d"}],`+
		`"tools":[{"type":"function","function":{"name":"run","parameters":{"type":"object","properties":{}}}}]}`, n, n)
}

// TestManagersBounded: a client that varies max_tokens does not grow the proxy's Managers
// without bound; a Manager in use is never closed to make room.
func TestManagersBounded(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	for i := 0; i < 3*maxManagers; i++ {
		resp, err := http.Post(e.px.URL+"/v1/chat/completions", "application/json", strings.NewReader(managedBody(100+i)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	e.srv.mgrMu.Lock()
	n := len(e.srv.managers)
	e.srv.mgrMu.Unlock()
	if n > maxManagers {
		t.Fatalf("%d Managers kept after %d reply sizes (bound %d)", n, 3*maxManagers, maxManagers)
	}

	// A Manager in use stays, however many are made after it.
	held, key, err := e.srv.manager(FormatOpenAI, "gpt-4o", 200000, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2*maxManagers; i++ {
		m, _, err := e.srv.manager(FormatOpenAI, "gpt-4o", 200000, 1000+i)
		if err != nil {
			t.Fatal(err)
		}
		e.srv.releaseManager(m)
	}
	e.srv.mgrMu.Lock()
	kept := e.srv.managers[key] == held
	n = len(e.srv.managers)
	e.srv.mgrMu.Unlock()
	if !kept || n > maxManagers {
		t.Fatalf("the Manager in use was dropped (%v), or %d Managers kept", !kept, n)
	}
	e.srv.releaseManager(held)
	checkNoneInUse(t, e.srv)
}

// checkNoneInUse asserts that once every request has ended no session and no Manager is
// counted in use: a use never released would keep it in memory for good. A client has its
// answer before the handler has returned (its answer ends first, and a streaming client
// closes the body at the last event), so the handlers are given a moment to end.
func checkNoneInUse(t testing.TB, s *Server) {
	t.Helper()
	var inUse []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		inUse = inUse[:0]
		s.sessMu.Lock()
		for id, ps := range s.sessions {
			if ps.users != 0 {
				inUse = append(inUse, fmt.Sprintf("session %s: %d uses", id, ps.users))
			}
		}
		s.sessMu.Unlock()
		s.mgrMu.Lock()
		for k, m := range s.managers {
			if m.users != 0 {
				inUse = append(inUse, fmt.Sprintf("Manager %+v: %d uses", k, m.users))
			}
		}
		s.mgrMu.Unlock()
		if len(inUse) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, u := range inUse {
		t.Errorf("%s after every request ended", u)
	}
}

// TestSessionCacheKeepsSessionsInUse: the session cache never drops a session a request is
// using (unlocked while its upstream answers), so a request for it meanwhile gets the same one,
// not a second copy loaded beside it.
func TestSessionCacheKeepsSessionsInUse(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{MaxSessions: 1})
	s := e.srv
	a := s.ref("a") // in use: its request is upstream
	s.ref("b")
	a2 := s.ref("a")
	if a2 != a {
		t.Fatal("the session in use was dropped from the cache: a second copy was made")
	}
}

// TestManagerPrices: the Manager of an OpenAI-format request prices rewrites with OpenAI's
// prompt-cache prices, an Anthropic one with Anthropic's.
func TestManagerPrices(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{}, Config{})
	ctx := ctxT(t)
	oa := newOpenAIAgent(e.px.URL, bigOutput(100), ooption.WithHeader(SessionHeader, "price-oa"))
	an := newAnthropicAgent(e.px.URL, bigOutput(100), aoption.WithHeader(SessionHeader, "price-an"))
	for _, a := range []agent{oa, an} {
		if _, err := a.turn(ctx, "run it", false); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]ctxmgr.Prices{"price-oa": ctxmgr.PricesOpenAI, "price-an": ctxmgr.PricesAnthropic} {
		e.srv.sessMu.Lock()
		ps := e.srv.sessions[id]
		e.srv.sessMu.Unlock()
		if ps == nil {
			t.Fatalf("no session %s", id)
		}
		if got := ps.mgr.m.Config().Prices; got != want {
			t.Errorf("%s: prices %+v, want %+v", id, got, want)
		}
	}
}

// cutUpstream serves the fake, and once armed cuts short the answer to the second request
// after: the follow-up of a ctxmgr_read call.
type cutUpstream struct {
	fake  *fakeupstream.Server
	armed atomic.Int32 // requests since armed, when > 0
}

func (c *cutUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.armed.Load() == 0 || c.armed.Add(1) != 3 {
		c.fake.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	c.fake.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body[:len(body)/2])
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler) // the connection drops mid-body
}

// TestReadFollowUpCutShort: when the answer to a ctxmgr_read follow-up is cut short, the
// client gets the answer before it (without the read call), never the truncated bytes.
func TestReadFollowUpCutShort(t *testing.T) {
	cu := &cutUpstream{fake: fakeupstream.New(fakeupstream.Options{})}
	up := httptest.NewServer(cu)
	t.Cleanup(up.Close)
	srv, err := New(Config{UpstreamOpenAI: up.URL, Logger: quietLogger(), Tune: smallTune})
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { px.Close(); _ = srv.Close() })
	ctx := ctxT(t)
	a := newOpenAIAgent(px.URL, bigOutput(6000), ooption.WithHeader(SessionHeader, "read-cut"))
	if _, err := a.turn(ctx, "run the big command", false); err != nil {
		t.Fatal(err)
	}
	n := len(cu.fake.Records())
	cu.armed.Store(1)
	a.msgs = append(a.msgs, openai.UserMessage("now read back the full output"))
	msg, err := a.complete(ctx, false)
	if err != nil {
		t.Fatalf("the client got the cut answer: %v", err)
	}
	recs := cu.fake.Records()[n:]
	if len(recs) != 2 || recs[0].Reply != "ctxmgr_read" {
		t.Fatalf("want a ctxmgr_read call and a follow-up, got %+v", recs)
	}
	for _, tc := range msg.ToolCalls {
		if tc.Function.Name == readToolName {
			t.Fatal("the client saw a ctxmgr_read call")
		}
	}
}
