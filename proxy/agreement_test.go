package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"sync"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/sample"
	"github.com/ctxmgr/ctxmgr/replay"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// recordingUpstream answers every request at once and keeps the bodies it received.
type recordingUpstream struct {
	up     http.Handler
	mu     sync.Mutex
	bodies [][]byte
}

func (u *recordingUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	u.bodies = append(u.bodies, b)
	u.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	rec := httptest.NewRecorder()
	u.up.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// independentCost prices a sequence of chat-completions bodies one conversation sent, the way
// a provider with a prompt cache bills them, without any of replay's code: every token of a
// body is input; the longest run of leading messages a body shares with the one before (the
// same tools and system first) is served from the cache when it is at least 1,024 tokens.
// OpenAI's prices, as for every chat-completions request: uncached 1.0, cached 0.1.
func independentCost(t *testing.T, c tokens.Counter, bodies [][]byte) float64 {
	t.Helper()
	var prevMsgs []json.RawMessage
	var prevTools json.RawMessage
	cost := 0.0
	for _, b := range bodies {
		var body struct {
			Messages []json.RawMessage `json:"messages"`
			Tools    json.RawMessage   `json:"tools"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		req, err := wire.DecodeOpenAI(b)
		if err != nil {
			t.Fatal(err)
		}
		total := c.Request(req).Total
		// The tokens of each message, in the body's order (system messages first).
		var toks []int
		for i := range req.System {
			toks = append(toks, c.Message(&req.System[i]))
		}
		for i := range req.Messages {
			toks = append(toks, c.Message(&req.Messages[i]))
		}
		if len(toks) != len(body.Messages) {
			t.Fatalf("%d messages decoded of %d", len(toks), len(body.Messages))
		}
		// The leading messages shared with the previous body, tools and priming aside.
		shared := 0
		if prevMsgs != nil && bytes.Equal(prevTools, body.Tools) {
			shared = total - tokens.ReplyPriming
			for i := range body.Messages {
				if i < len(prevMsgs) && bytes.Equal(prevMsgs[i], body.Messages[i]) {
					continue
				}
				for _, n := range toks[i:] {
					shared -= n
				}
				break
			}
		}
		if shared < 1024 {
			shared = 0
		}
		cost += float64(total-shared)*1.0 + float64(shared)*0.1
		prevMsgs, prevTools = body.Messages, body.Tools
	}
	return cost / 1e6
}

// What replay reports is what the proxy costs: real runs sent call by call through the proxy
// (default preset) as chat completions, the requests it forwards priced by an independent rule
// at OpenAI's prices (which the proxy decides OpenAI-format requests by), cost the same share of
// the client's own requests as replay says under --profile openai, within 2 points, at a window
// where nothing compacts and at one where the runs must be cut.
//
// CTXMGR_AGREEMENT_DIR=../../shared/data/trajectories/openhands-tuning measures other runs
// (chat-completions JSON files), for the benchmark page.
func TestReplayAgreesWithTheProxy(t *testing.T) {
	var runs []replay.Trajectory
	keep := func(tr replay.Trajectory) error { runs = append(runs, tr); return nil }
	if dir := os.Getenv("CTXMGR_AGREEMENT_DIR"); dir != "" {
		if _, err := replay.LoadEach([]string{dir}, "", keep); err != nil {
			t.Fatal(err)
		}
	} else if _, err := replay.LoadEachFS(sample.FS(), []string{path.Join(sample.Dir, "mini-swe-agent")}, replay.FormatMiniSWEAgent, keep); err != nil {
		t.Fatal(err)
	}
	if testing.Short() && len(runs) > 4 {
		runs = runs[:4]
	}
	counter, err := tokens.ForEncoding(tokens.O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ window, maxOutput int }{{200000, 32000}, {32768, 4096}} {
		t.Run(fmt.Sprint(w.window), func(t *testing.T) {
			up := &recordingUpstream{up: benchUpstream(0)}
			srv, err := New(Config{UpstreamOpenAI: "http://upstream.invalid", Store: store.NewMemory(), Window: w.window,
				MaxOutput: w.maxOutput, Logger: quietLogger(), HTTPClient: &http.Client{Transport: up}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			h := srv.Handler()
			var raw, managed float64
			for ri := range runs {
				tr := &runs[ri]
				var client [][]byte
				up.bodies = up.bodies[:0]
				for k := range tr.Messages {
					if tr.Messages[k].Role != chat.RoleAssistant || k == 0 {
						continue
					}
					body, err := wire.EncodeOpenAI(&chat.Request{System: tr.System, Tools: tr.Tools, Messages: tr.Messages[:k],
						Extra: map[string]json.RawMessage{"model": json.RawMessage(`"gpt-4o"`), "max_completion_tokens": json.RawMessage(fmt.Sprint(w.maxOutput))}})
					if err != nil {
						t.Fatal(err)
					}
					client = append(client, body)
					req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set(SessionHeader, fmt.Sprintf("run-%d", ri))
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != 200 {
						t.Fatalf("%s call %d: status %d: %s", tr.Name, k, rec.Code, rec.Body.String())
					}
				}
				if len(up.bodies) != len(client) {
					t.Fatalf("%s: %d requests forwarded for %d sent", tr.Name, len(up.bodies), len(client))
				}
				raw += independentCost(t, counter, client)
				managed += independentCost(t, counter, up.bodies)
			}
			res, err := replay.Run(context.Background(), runs, replay.Options{Window: w.window, MaxOutput: w.maxOutput,
				Strategies: []string{replay.StrategyRaw, "default"}, Profile: "openai", Counter: tokens.NewCache(counter, 1<<16)})
			if err != nil {
				t.Fatal(err)
			}
			var replayRaw, replayDefault float64
			for _, s := range res.Strategies {
				c := (float64(s.InputTokens-s.CachedTokens)*1.0 + float64(s.CachedTokens)*0.1) / 1e6
				if s.Name == replay.StrategyRaw {
					replayRaw = c
				} else {
					replayDefault = c
				}
			}
			proxyRatio, replayRatio := managed/raw, replayDefault/replayRaw
			t.Logf("cut-through: %v committed, %v aborted", counterValue(srv.metrics.cutThrough.WithLabelValues("committed")), counterValue(srv.metrics.cutThrough.WithLabelValues("aborted")))
			t.Logf("%d runs at %d tokens: the proxy's requests cost %.4f of the client's, replay says %.4f (raw %.3f / %.3f)",
				len(runs), w.window, proxyRatio, replayRatio, raw, replayRaw)
			if math.Abs(proxyRatio-replayRatio) > 0.02 {
				t.Errorf("the proxy's requests cost %.4f of the client's, replay says %.4f", proxyRatio, replayRatio)
			}
		})
	}
}
