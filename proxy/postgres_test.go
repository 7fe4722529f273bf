package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	ooption "github.com/openai/openai-go/v3/option"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store/postgres"
)

// alternate sends each request to the next of several proxies in turn.
type alternate struct {
	targets []*url.URL
	n       atomic.Int64
}

func (a *alternate) RoundTrip(r *http.Request) (*http.Response, error) {
	t := a.targets[int(a.n.Add(1)-1)%len(a.targets)]
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = t.Scheme, t.Host, t.Host
	return http.DefaultTransport.RoundTrip(r)
}

// TestTwoInstancesPostgres: two proxy instances on one PostgreSQL database serve one session
// alternately, request by request, and lose nothing: the stored history is the client's
// history, every request fits and is valid.
func TestTwoInstancesPostgres(t *testing.T) {
	dsn := os.Getenv("CTXMGR_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("set CTXMGR_TEST_POSTGRES to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the two-instance test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "ctxmgr_proxy_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	const window = 6000
	fake := fakeupstream.New(fakeupstream.Options{Window: window})
	up := httptest.NewServer(fake)
	defer up.Close()
	var proxies []*url.URL
	var servers []*Server
	for i := 0; i < 2; i++ {
		st, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		srv, err := New(Config{UpstreamOpenAI: up.URL, UpstreamAnthropic: up.URL, Store: st, SharedStore: true, Window: window, Tune: smallTune, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		px := httptest.NewServer(srv.Handler())
		defer px.Close()
		u, _ := url.Parse(px.URL)
		proxies = append(proxies, u)
		servers = append(servers, srv)
	}
	alt := &alternate{targets: proxies}
	a := newOpenAIAgent(proxies[0].String(), bigOutput(1500), ooption.WithHTTPClient(&http.Client{Transport: alt}),
		ooption.WithHeader(SessionHeader, "shared"))
	for i := 0; i < 16; i++ {
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d: build and test", i), i%2 == 0); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if i == 8 {
			if out, err := a.turn(ctx, "/compact", false); err != nil || !strings.Contains(out, "/compact") {
				t.Fatalf("/compact: %q %v", out, err)
			}
		}
	}
	// The proxy stores the assistant's last reply when the client sends it back: a final
	// /context (answered by the proxy) does that.
	if out, err := a.turn(ctx, "/context", false); err != nil || !strings.Contains(out, "session shared") {
		t.Fatalf("/context: %q %v", out, err)
	}
	checkRecords(t, fake.Records(), window)
	for _, r := range fake.Records() {
		if r.Status != 200 {
			t.Errorf("request %d answered %d", r.Seq, r.Status)
		}
	}
	// The stored history is exactly the client's history (commands aside).
	st, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stored, err := st.Messages(ctx, "shared", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	want := clientHistory(t, a)
	if len(stored) != len(want) {
		t.Fatalf("store has %d messages, the client %d", len(stored), len(want))
	}
	for i := range want {
		if normHash(&stored[i]) != normHash(&want[i]) {
			t.Fatalf("message %d differs: stored %q, client %q", i, stored[i].Text(), want[i].Text())
		}
	}
	for i, srv := range servers {
		for _, reason := range []string{"history", "config", "does_not_fit", "decode"} {
			if v := counterValue(srv.metrics.unmanaged.WithLabelValues(reason)); v != 0 {
				t.Errorf("instance %d forwarded %v requests unmanaged (%s)", i, v, reason)
			}
		}
	}
	reloads := counterValue(servers[0].metrics.reloads) + counterValue(servers[1].metrics.reloads)
	if reloads == 0 {
		t.Errorf("no instance ever reloaded the session after another appended: the test proves little")
	}
	t.Logf("%d requests alternated, %v session reloads after store conflicts", alt.n.Load(), reloads)
	if alt.n.Load() < 30 {
		t.Fatalf("only %d requests alternated", alt.n.Load())
	}
}

// clientHistory decodes the openai agent's history as the proxy sees it, without the system
// prompt and the command exchanges.
func clientHistory(t *testing.T, a *openaiAgent) []chat.Message {
	t.Helper()
	var msgs []chat.Message
	for _, m := range a.msgs {
		b, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		dm, err := decodeOpenAIMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if dm.Role != chat.RoleSystem {
			msgs = append(msgs, dm)
		}
	}
	out, _ := splitCommands(msgs)
	return out
}
