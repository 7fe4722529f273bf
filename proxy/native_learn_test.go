package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store"
)

// officialEnv is a proxy whose upstreams are the official endpoints, reached through a
// transport that sends them to a fake (the official endpoints get the providers' context
// management by default).
func officialEnv(t *testing.T, fo fakeupstream.Options) (*env, *fakeupstream.Server) {
	t.Helper()
	fake := fakeupstream.New(fo)
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = u.Scheme, u.Host
		return tr.RoundTrip(r)
	})}
	cfg := Config{Window: 200000, Store: store.NewMemory(), Logger: quietLogger(), HTTPClient: client,
		UpstreamOpenAI: "https://api.openai.com", UpstreamAnthropic: "https://api.anthropic.com"}
	e := &env{t: t, fake: fake, up: up, store: cfg.Store, cfg: cfg}
	e.start()
	return e, fake
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestNativeLearnedFromRefusal: an upstream that is passed the providers' context management
// by default but refuses it (400 naming it) is learned as lacking it: the request is answered
// by the proxy and retried, the client never sees the 400, and later requests are answered by
// the proxy from the start.
func TestNativeLearnedFromRefusal(t *testing.T) {
	e, fake := officialEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative})
	trigger := `{"model":"gpt-5-codex","store":false,"input":[` + codexHistory + `,{"type":"compaction_trigger"}]}`
	for i := range 2 {
		resp, b := postJSON(t, e.px.URL+"/v1/responses", trigger)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		onlyCompaction(t, responsesOutput(t, b))
	}
	if recs := fake.Records(); len(recs) != 1 || recs[0].Rule != fakeupstream.RuleProviderContext {
		t.Fatalf("want one refused request, then none: %+v", recs)
	}
	if n := counterValue(e.srv.metrics.providerContext.WithLabelValues("responses", FeatureResponsesCompaction, decisionLearned)); n != 1 {
		t.Fatalf("learned %v times", n)
	}

	fake.Reset()
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,` + anthropicTools + `,
	 "context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":5000}}]},
	 "messages":[` + anthropicToolHistory(6) + `]}`
	hdr := []string{"anthropic-version", "2023-06-01", "anthropic-beta", "context-management-2025-06-27"}
	resp, b := postJSON(t, e.px.URL+"/v1/messages", body, hdr...)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	appliedEdits(t, b)
	recs := fake.Records()
	if len(recs) != 2 || recs[0].Rule != fakeupstream.RuleProviderContext || recs[1].Status != 200 ||
		strings.Contains(recs[1].Headers["Anthropic-Beta"], "context-management") || recs[1].Extra["context_management"] != nil {
		t.Fatalf("want a refusal then the request without context management: %+v", recs)
	}
}

// TestNativePassthroughSetting: an upstream set to pass through gets the fields even when it
// refuses them; one set to local never does, official or not.
func TestNativePassthroughSetting(t *testing.T) {
	e := newEnv(t, fakeupstream.Options{KeepBodies: true, ProviderContext: fakeupstream.ProviderContextNonNative},
		Config{Window: 200000, ProviderContext: map[string]ProviderContextMode{"*": ProviderContextPassthrough}})
	resp, _ := postJSON(t, e.px.URL+"/v1/responses", `{"model":"gpt-5-codex","store":false,"input":[`+codexHistory+`,{"type":"compaction_trigger"}]}`)
	if resp.StatusCode != 400 {
		t.Fatalf("status %d: the refusal of an upstream set to pass through reaches the client", resp.StatusCode)
	}
	if _, err := ParseProviderContextMode("sometimes"); err == nil {
		t.Fatal("a bad mode is accepted")
	}
	if _, err := New(Config{UpstreamOpenAI: "http://x", ProviderContext: map[string]ProviderContextMode{"*": "sometimes"}}); err == nil {
		t.Fatal("a bad mode is accepted in the config")
	}
}

// TestProviderModes: a mode is found by an upstream's base URL, then its host, then "*".
func TestProviderModes(t *testing.T) {
	got := map[string]ProviderContextMode{"*": ProviderContextLocal, "https://relay.example": ProviderContextPassthrough, "api.openai.com": ProviderContextAuto}
	c := Config{ProviderContext: got}
	if c.providerMode("https://relay.example") != ProviderContextPassthrough || c.providerMode("https://api.openai.com") != ProviderContextAuto ||
		c.providerMode("http://127.0.0.1:8080") != ProviderContextLocal {
		t.Fatal("modes by base URL, host and *")
	}
}

// A client that names its session like the store's key session gets a session of its own:
// the key that seals compaction tokens is never in a client's reach (ctxmgr_read).
func TestKeySessionNotAClientSession(t *testing.T) {
	id, _ := sessionKey(keySession, &chat.Request{}, nil)
	if id == keySession {
		t.Fatalf("header %q maps to the key session", keySession)
	}
	if id2, _ := sessionKey("my-session", &chat.Request{}, nil); id2 != "my-session" {
		t.Fatalf("header my-session maps to %q", id2)
	}
}
