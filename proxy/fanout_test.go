package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store/postgres"
	"github.com/ctxmgr/ctxmgr/wire"
)

// TestFanOutPostgres: two proxy instances on one PostgreSQL database, three clients fanning
// out to one session: every step of the conversation is sent by the three clients at once,
// to both instances, so that their appends conflict. No request is forwarded unmanaged, none
// is refused, and the stored history is the conversation exactly: nothing lost, nothing
// duplicated.
func TestFanOutPostgres(t *testing.T) {
	dsn := os.Getenv("CTXMGR_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("set CTXMGR_TEST_POSTGRES to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the fan-out test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "ctxmgr_fanout_test_" + hex.EncodeToString(b)
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
	var urls []string
	var servers []*Server
	for i := 0; i < 2; i++ {
		st, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		srv, err := New(Config{UpstreamOpenAI: up.URL, UpstreamAnthropic: up.URL, Store: st, SharedStore: true, Window: window, Tune: smallTune, Logger: fanoutLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		px := httptest.NewServer(srv.Handler())
		defer px.Close()
		urls = append(urls, px.URL)
		servers = append(servers, srv)
	}

	// The conversation: the three clients send the same history at every step; the first
	// answer continues it.
	clients := make([]*rawAgent, 3)
	for i := range clients {
		clients[i] = &rawAgent{session: "fanout", maxOut: 512, client: &http.Client{}}
	}
	var msgs []json.RawMessage
	msgs = append(msgs, json.RawMessage(`{"role":"system","content":"You are a coding agent under test. Use the tools."}`))
	var busy atomic.Int64
	step := func(n int) json.RawMessage {
		var wg sync.WaitGroup
		answers := make([]json.RawMessage, len(clients))
		errs := make([]error, len(clients))
		for i, c := range clients {
			c.url = urls[(n+i)%len(urls)]
			c.msgs = msgs
			wg.Go(func() {
				// A 503 (session busy) is the documented answer to contention: retry it, as
				// clients retry 503s.
				for try := 0; try < 5; try++ {
					answers[i], errs[i] = c.complete(ctx, n%3 == 1)
					if errs[i] == nil || !isStatus(errs[i], 503) {
						return
					}
					busy.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("step %d, client %d: %v", n, i, err)
			}
		}
		return answers[0]
	}
	for turn := 0; turn < 12; turn++ {
		msgs = append(msgs, json.RawMessage(fmt.Sprintf(`{"role":"user","content":"turn %d: build and test"}`, turn)))
		for iter := 0; iter < 4; iter++ {
			ans := step(2*turn + iter)
			msgs = append(msgs, ans)
			var m struct {
				ToolCalls []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			}
			if err := json.Unmarshal(ans, &m); err != nil {
				t.Fatal(err)
			}
			if len(m.ToolCalls) == 0 {
				break
			}
			for _, tc := range m.ToolCalls {
				res, _ := json.Marshal(map[string]string{"role": "tool", "tool_call_id": tc.ID, "content": bigOutput(1500)(turn, 0)})
				msgs = append(msgs, res)
			}
		}
	}
	// The last answer is stored once a client sends it back.
	msgs = append(msgs, json.RawMessage(`{"role":"user","content":"/context"}`))
	step(1000)

	for i, srv := range servers {
		if n := counterSum(srv.metrics.unmanaged); n != 0 {
			t.Errorf("instance %d forwarded %v requests unmanaged", i, n)
		}
	}
	for _, r := range fake.Records() {
		if r.Status != 200 {
			t.Errorf("upstream request %d answered %d", r.Seq, r.Status)
		}
	}
	checkRecords(t, fake.Records(), window)

	st, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stored, err := st.Messages(ctx, "fanout", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	var want []chat.Message
	for i, raw := range msgs[1 : len(msgs)-1] { // no system prompt, no command
		m, err := wire.DecodeOpenAIMessage(i, raw)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m)
	}
	if len(stored) != len(want) {
		t.Fatalf("store has %d messages, the conversation %d (lost or duplicated)", len(stored), len(want))
	}
	for i := range want {
		if normHash(&stored[i]) != normHash(&want[i]) {
			t.Fatalf("message %d differs: stored %q, sent %q", i, stored[i].Text(), want[i].Text())
		}
	}
	reloads := counterValue(servers[0].metrics.reloads) + counterValue(servers[1].metrics.reloads)
	busyTotal := counterValue(servers[0].metrics.busy) + counterValue(servers[1].metrics.busy)
	t.Logf("%d upstream requests, %v session reloads after store conflicts, %v answered 503 busy (%d client retries)", len(fake.Records()), reloads, busyTotal, busy.Load())
	if reloads == 0 {
		t.Errorf("no store conflict happened: the test proves little")
	}
}

// isStatus reports whether a rawAgent error is an HTTP answer with the given status.
func isStatus(err error, status int) bool {
	var s string
	_, _ = fmt.Sscanf(err.Error(), "status %s", &s)
	return s == fmt.Sprint(status)
}

func fanoutLogger() *slog.Logger {
	if os.Getenv("FANOUT_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return quietLogger()
}
