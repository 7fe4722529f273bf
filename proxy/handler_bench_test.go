package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/sample"
	"github.com/ctxmgr/ctxmgr/replay"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/wire"
)

// stubUpstream answers every request at once, without a network, as benchUpstream does.
type stubUpstream struct{ up http.Handler }

func (s stubUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	s.up.ServeHTTP(rec, r)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return rec.Result(), nil
}

// newStubbedProxy is a proxy on a memory store whose upstream answers at once, without a
// network; cut-through forwarding is off unless cut.
func newStubbedProxy(b *testing.B, cut bool) http.Handler {
	srv, err := New(Config{UpstreamOpenAI: "http://upstream.invalid", UpstreamAnthropic: "http://upstream.invalid",
		Store: store.NewMemory(), Window: 1000000, DisableCutThrough: !cut, Logger: quietLogger(),
		HTTPClient: &http.Client{Transport: stubUpstream{benchUpstream(0)}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return srv.Handler()
}

// serveBench sends body to h as a client of session would, at path, and fails on any
// answer but 200.
func serveBench(b *testing.B, h http.Handler, path, session string, body []byte) {
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SessionHeader, session)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		b.Fatalf("status %d: %s", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	_, _ = io.Copy(io.Discard, rec.Body)
}

// BenchmarkHandler is the proxy's own work on a request, without a network: the handler
// served in the benchmark's goroutine, the upstream a RoundTripper that answers at once, the
// sessions in memory, cut-through off but in the cases that say it. BenchmarkProxyOverhead
// measures latency as clients see it, where the client, the upstream and both anchors share
// the cores; this one is the CPU of the decision (decode, session, count, Prepare, encode)
// and of the relay of the answer, to profile and to compare builds:
//
//	go test -run '^$' -bench Handler -benchtime 500x -cpuprofile cpu.out ./proxy
func BenchmarkHandler(b *testing.B) {
	cases := []struct {
		name   string
		format Format
		tool   bool
		cut    bool // cut-through on, as serve runs: the upstream call starts while the body is read
	}{
		{"100K", FormatOpenAI, false, false},
		{"100K-anthropic", FormatAnthropic, false, false},
		{"100K-responses", FormatResponses, false, false},
		{"100K-tool-turns", FormatOpenAI, true, false},
		{"100K-cut-through", FormatOpenAI, false, true},
		{"100K-tool-turns-cut-through", FormatOpenAI, true, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			h := newStubbedProxy(b, c.cut)
			conv := newBenchConversation(100000)
			next := bodyMaker(conv, c.format)
			if c.tool {
				next = conv.toolTurnBody
			}
			path := "/v1/chat/completions"
			switch c.format {
			case FormatAnthropic:
				path = "/v1/messages"
			case FormatResponses:
				path = "/v1/responses"
			}
			serveBench(b, h, path, "bench", next(-1))
			bodies := make([][]byte, b.N)
			for i := range bodies {
				bodies[i] = next(i)
			}
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				serveBench(b, h, path, "bench", bodies[i])
			}
		})
	}
}

// BenchmarkTransport is BenchmarkHandler's cases without cut-through, served through
// NewTransport's RoundTrip instead of the handler: what the in-process Transport adds to the
// handler's own work (a goroutine, a pipe, a response) is the difference between the two.
//
//	go test -run '^$' -bench 'Handler/100K$|Handler/100K-anthropic$|Handler/100K-responses$|Transport' -benchtime 500x ./proxy
func BenchmarkTransport(b *testing.B) {
	for _, f := range []Format{FormatOpenAI, FormatAnthropic, FormatResponses} {
		b.Run(string(f), func(b *testing.B) {
			tr, err := NewTransport(Config{Store: store.NewMemory(), Window: 1000000, Logger: quietLogger(),
				HTTPClient: &http.Client{Transport: stubUpstream{benchUpstream(0)}}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tr.Close() })
			next := bodyMaker(newBenchConversation(100000), f)
			url := map[Format]string{FormatOpenAI: "/v1/chat/completions", FormatAnthropic: "/v1/messages", FormatResponses: "/v1/responses"}[f]
			url = "http://upstream.invalid" + url
			roundTripBench(b, tr, url, next(-1))
			bodies := make([][]byte, b.N)
			for i := range bodies {
				bodies[i] = next(i)
			}
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				roundTripBench(b, tr, url, bodies[i])
			}
		})
	}
}

// roundTripBench sends body through t as a client of one session would, and fails on any
// answer but 200.
func roundTripBench(b *testing.B, t http.RoundTripper, url string, body []byte) {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SessionHeader, "bench")
	resp, err := t.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkHandlerRealRuns is BenchmarkHandler on real agent runs: the 42 mini-swe-agent runs
// of ../shared/data when they are beside the repository (the README's figures are on them),
// else the 12 of the embedded sample (SWE-bench tasks, each turn a bash call and its output),
// each request of each run sent in order, as the agent sent it (its history up to an
// assistant message). One session per run; ns/op is per request. Where the synthetic cases
// grow by one short tool output, these grow by real ones (file listings, diffs, tracebacks),
// and the pipeline acts on them (superseded reads, aged-out outputs), so that some requests
// are re-encoded.
func BenchmarkHandlerRealRuns(b *testing.B) {
	var runs []replay.Trajectory
	keep := func(t replay.Trajectory) error {
		runs = append(runs, t)
		return nil
	}
	dir := filepath.Join("..", "..", "shared", "data", "trajectories", "mini-swe-agent")
	if _, err := os.Stat(dir); err == nil {
		if _, err := replay.LoadEach([]string{dir}, replay.FormatMiniSWEAgent, keep); err != nil {
			b.Fatal(err)
		}
		b.Logf("%d mini-swe-agent runs of %s", len(runs), dir)
	} else {
		if _, err := replay.LoadEachFS(sample.FS(), []string{path.Join(sample.Dir, "mini-swe-agent")}, replay.FormatMiniSWEAgent, keep); err != nil {
			b.Fatal(err)
		}
		b.Logf("%d mini-swe-agent runs of the embedded sample (%s not found: figures not comparable with the README's)", len(runs), dir)
	}
	h := newStubbedProxy(b, false)
	// The requests of every run, encoded once: each holds the history before one assistant
	// message. A run's first request (its task alone) is sent before the clock starts.
	type request struct {
		session string
		body    []byte
	}
	var first, reqs []request
	total := 0
	for ri := range runs {
		t := &runs[ri]
		session := fmt.Sprintf("run-%d", ri)
		n := 0
		for k := range t.Messages {
			if t.Messages[k].Role != chat.RoleAssistant || k == 0 {
				continue
			}
			body, err := wire.EncodeOpenAI(&chat.Request{System: t.System, Tools: t.Tools, Messages: t.Messages[:k],
				Extra: map[string]json.RawMessage{"model": json.RawMessage(`"gpt-4o"`)}})
			if err != nil {
				b.Fatal(err)
			}
			total += len(body)
			if n == 0 {
				first = append(first, request{session, body})
			} else {
				reqs = append(reqs, request{session, body})
			}
			n++
		}
	}
	const path = "/v1/chat/completions"
	for _, r := range first {
		serveBench(b, h, path, r.session, r.body)
	}
	runtime.GC()
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	// Each iteration is one request; once every run has ended they start over, under new
	// sessions.
	for i := 0; i < b.N; i++ {
		r, pass := reqs[i%len(reqs)], i/len(reqs)
		if pass > 0 {
			r.session = fmt.Sprintf("%s-%d", r.session, pass)
			if i%len(reqs) == 0 {
				b.StopTimer()
				for _, f := range first {
					serveBench(b, h, path, fmt.Sprintf("%s-%d", f.session, pass), f.body)
				}
				b.StartTimer()
			}
		}
		t0 := time.Now()
		serveBench(b, h, path, r.session, r.body)
		times = append(times, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(times, 0.50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(percentile(times, 0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(len(reqs)), "requests/pass")
	b.ReportMetric(float64(total)/float64(len(reqs)+len(first))/1024, "body-KiB")
}
