package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// instantUpstream answers every chat request at once with a fixed small completion.
func instantUpstream() *httptest.Server { return httptest.NewServer(benchUpstream(0)) }

// bufferingProxy forwards each request to target after reading its whole body, as any proxy
// that rewrites a body must (ctxmgr decides what to send only once it has the whole history):
// the second anchor of BenchmarkProxyOverhead, the floor of such a proxy on the same requests.
// It adds to a plain reverse proxy only that the upload to the upstream starts when the
// client's upload ends.
func bufferingProxy(target string) http.Handler {
	tr := &http.Transport{MaxIdleConnsPerHost: 100}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path, bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}

// pacedReader reads r at mbps MB/s at most, in 16 KiB steps: a network link.
type pacedReader struct {
	r     io.Reader
	mbps  int
	start time.Time
	n     int
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	if due := p.start.Add(time.Duration(p.n) * time.Microsecond / time.Duration(p.mbps)); time.Until(due) > 0 {
		time.Sleep(time.Until(due))
	}
	n, err := p.r.Read(b[:min(len(b), 16<<10)])
	p.n += n
	return n, err
}

// benchUpstream answers every chat request with a fixed small completion, delay after it has
// read the request (a provider's time to first byte, much shortened).
func benchUpstream(delay time.Duration) http.Handler {
	const answer = `{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`
	const responsesAnswer = `{"id":"resp_bench","object":"response","status":"completed","model":"gpt-5","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"ok","annotations":[]}]}],"usage":{"input_tokens":10,"output_tokens":1,"total_tokens":11}}`
	const anthropicAnswer = `{"id":"msg_bench","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":1}}`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if delay > 0 {
			time.Sleep(delay)
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/messages") {
			_, _ = io.WriteString(w, anthropicAnswer)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/responses") {
			_, _ = io.WriteString(w, responsesAnswer)
			return
		}
		_, _ = io.WriteString(w, answer)
	})
}

// benchSpec is one server of BenchmarkProxyOverhead: an upstream, one of the two anchors, or
// ctxmgr (as ctxmgr serve runs it: SQLite with write-behind, unless Mem).
type benchSpec struct {
	Kind   string        // "upstream", "reverse" (httputil.ReverseProxy), "buffering", "ctxmgr"
	Target string        // the upstream of a proxy
	Delay  time.Duration // an upstream's time to answer
	Window int           // ctxmgr's window
	Mem    bool          // ctxmgr on store.NewMemory
	Shared bool          // ctxmgr with Config.SharedStore (messages written before forwarding)
	NoCut  bool          // ctxmgr with cut-through forwarding off (Config.DisableCutThrough)
	Link   int           // an upstream reading bodies at this many MB/s (0: at once)
}

// handler builds the server, its files in dir; closeFn releases what it holds.
func (spec benchSpec) handler(dir string) (h http.Handler, closeFn func(), err error) {
	switch spec.Kind {
	case "upstream":
		h := benchUpstream(spec.Delay)
		if spec.Link > 0 {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Body = io.NopCloser(&pacedReader{r: r.Body, mbps: spec.Link})
				h.ServeHTTP(w, r)
			}), func() {}, nil
		}
		return h, func() {}, nil
	case "buffering":
		return bufferingProxy(spec.Target), func() {}, nil
	case "reverse":
		target, err := url.Parse(spec.Target)
		if err != nil {
			return nil, nil, err
		}
		return httputil.NewSingleHostReverseProxy(target), func() {}, nil
	case "ctxmgr":
		st, err := sqlite.Open(filepath.Join(dir, "bench.db"), sqlite.Options{Relaxed: true, CheckpointEvery: 200 * time.Millisecond, WriteBehind: 20 * time.Millisecond}) // as ctxmgr serve opens it
		if err != nil {
			return nil, nil, err
		}
		var sst store.Store = st
		if spec.Mem {
			sst = store.NewMemory()
		}
		srv, err := New(Config{UpstreamOpenAI: spec.Target, UpstreamAnthropic: spec.Target, Store: sst, SharedStore: spec.Shared, Window: spec.Window, DisableCutThrough: spec.NoCut, Logger: quietLogger()})
		if err != nil {
			_ = st.Close()
			return nil, nil, err
		}
		return srv.Handler(), func() { _ = srv.Close(); _ = st.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown bench server %q", spec.Kind)
}

// benchServerEnv carries a benchSpec (JSON) to TestBenchServer in a process of its own.
const benchServerEnv = "CTXMGR_BENCH_SERVER"

// startBenchServer runs spec in a process of its own (this test binary, running
// TestBenchServer) and returns its URL and its process ID. The process ends when the
// benchmark does (its standard input closes).
func startBenchServer(b *testing.B, spec benchSpec) (string, int) {
	js, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), benchServerEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = in.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://") {
		b.Fatalf("bench server %s: %q, %v", js, line, err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid
}

// processCPU is the CPU time the process pid has run so far, all its threads: the sum of
// the first field of /proc/pid/task/*/schedstat (nanoseconds on a CPU, a finer clock than
// the ticks of /proc/pid/stat). ok is false where there is no such file (not Linux, or a
// kernel without schedstats). A thread that exits takes its time with it; a Go process
// seldom ends one.
func processCPU(pid int) (d time.Duration, ok bool) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			return 0, false
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		d += time.Duration(ns)
	}
	return d, true
}

// TestBenchServer is the process of one server of BenchmarkProxyOverhead (startBenchServer);
// not started so, it returns at once, as the stores' crash helpers do.
func TestBenchServer(t *testing.T) {
	js := os.Getenv(benchServerEnv)
	if js == "" {
		return
	}
	var spec benchSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		t.Fatal(err)
	}
	h, closeFn, err := spec.handler(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(ln, h) }()
	fmt.Printf("http://%s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark ends
	_ = ln.Close()
	closeFn()
}

// benchConversation is an OpenAI-format agent history of about `target` tokens: turns of a
// user request, an assistant tool call, a tool result of a few hundred tokens, and a reply.
type benchConversation struct {
	msgs []map[string]any
}

func newBenchConversation(target int) *benchConversation {
	c := &benchConversation{msgs: []map[string]any{{"role": "system", "content": "You are a coding agent. Use the tools to inspect and change the repository."}}}
	counter, _ := tokens.ForEncoding(tokens.O200kBase)
	total := 0
	for turn := 0; total < target; turn++ {
		add := benchTurn(turn)
		c.msgs = append(c.msgs, add...)
		total += counter.Text(add[2]["content"].(string)) + 80
	}
	return c
}

// benchTurn is a turn of a bench conversation: a request, a tool call and its output (some
// 1,100 tokens), an answer.
func benchTurn(turn int) []map[string]any {
	var out strings.Builder
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&out, "pkg/mod%d/file%d.go:%d: func Handler%d(ctx context.Context) error { return nil } // ok\n", turn, i, i*7, i)
	}
	id := fmt.Sprintf("call_%d", turn)
	return []map[string]any{
		{"role": "user", "content": fmt.Sprintf("Step %d: grep the handlers in module %d and tell me which ones return errors.", turn, turn)},
		{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": "grep", "arguments": fmt.Sprintf(`{"pattern":"func Handler","path":"pkg/mod%d"}`, turn)}}}},
		{"role": "tool", "tool_call_id": id, "content": out.String()},
		{"role": "assistant", "content": fmt.Sprintf("Module %d has 30 handlers; none returns an error yet.", turn)},
	}
}

// toolTurnBody is body grown by a whole turn (benchTurn): the request, the tool call and its
// output are sent, the answer is added after.
func (c *benchConversation) toolTurnBody(step int) []byte {
	turn := benchTurn(1000 + step)
	c.msgs = append(c.msgs, turn[:3]...)
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "max_completion_tokens": 4096, "messages": c.msgs,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "grep", "parameters": map[string]any{"type": "object"}}}}})
	c.msgs = append(c.msgs, turn[3])
	return b
}

// anthropicBody is body in Anthropic's format, as Claude Code sends it: the system prompt
// and the newest user message carry cache_control breakpoints (so the newest message's
// breakpoint moves on every request).
func (c *benchConversation) anthropicBody(step int) []byte {
	c.msgs = append(c.msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Now check step %d again.", step)})
	var msgs []map[string]any
	for _, m := range c.msgs[1:] {
		switch {
		case m["role"] == "tool":
			msgs = append(msgs, map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}}})
		case m["tool_calls"] != nil:
			call := m["tool_calls"].([]any)[0].(map[string]any)
			fn := call["function"].(map[string]any)
			msgs = append(msgs, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": call["id"], "name": fn["name"], "input": json.RawMessage(fn["arguments"].(string))}}})
		default:
			msgs = append(msgs, map[string]any{"role": m["role"], "content": m["content"]})
		}
	}
	last := msgs[len(msgs)-1]
	last["content"] = []any{map[string]any{"type": "text", "text": last["content"], "cache_control": map[string]any{"type": "ephemeral"}}}
	b, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 4096,
		"system":   []any{map[string]any{"type": "text", "text": c.msgs[0]["content"], "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": msgs,
		"tools":    []any{map[string]any{"name": "grep", "input_schema": map[string]any{"type": "object"}}}})
	c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": "ok"})
	return b
}

// responsesBody is body in the Responses API's stateless form, as Codex CLI sends it (store
// false, the whole history as input items).
func (c *benchConversation) responsesBody(step int) []byte {
	c.msgs = append(c.msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Now check step %d again.", step)})
	var items []any
	for _, m := range c.msgs[1:] {
		switch {
		case m["role"] == "tool":
			items = append(items, map[string]any{"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
		case m["tool_calls"] != nil:
			call := m["tool_calls"].([]any)[0].(map[string]any)
			fn := call["function"].(map[string]any)
			items = append(items, map[string]any{"type": "function_call", "call_id": call["id"], "name": fn["name"], "arguments": fn["arguments"]})
		case m["role"] == "assistant":
			items = append(items, map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": m["content"]}}})
		default:
			items = append(items, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": m["content"]}}})
		}
	}
	// Codex's field order (its request struct's): the instructions before the input, and
	// after it the tools and a client_metadata that changes on every request.
	input, _ := json.Marshal(items)
	instructions, _ := json.Marshal(c.msgs[0]["content"])
	b := fmt.Appendf(nil, `{"model":"gpt-5","instructions":%s,"input":%s,"tools":[{"type":"function","name":"grep","parameters":{"type":"object"}}],"store":false,"client_metadata":{"turn_id":"turn-%d"}}`, instructions, input, step)
	c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": "ok"})
	return b
}

// next appends a user message and returns the request body (the client's whole history).
// bodyMaker returns the body maker of conversation c in format f.
func bodyMaker(c *benchConversation, f Format) func(step int) []byte {
	switch f {
	case FormatAnthropic:
		return c.anthropicBody
	case FormatResponses:
		return c.responsesBody
	}
	return c.body
}

func (c *benchConversation) body(step int) []byte {
	c.msgs = append(c.msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Now check step %d again.", step)})
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "max_completion_tokens": 4096, "messages": c.msgs,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "grep", "parameters": map[string]any{"type": "object"}}}}})
	c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": "ok"})
	return b
}

func post(b testing.TB, client *http.Client, url, session string, body []byte) time.Duration {
	return postAt(b, client, url, session, body, 0)
}

// postAt is post with the body sent at mbps MB/s (0: at once).
func postAt(b testing.TB, client *http.Client, url, session string, body []byte, mbps int) time.Duration {
	path := "/v1/chat/completions"
	switch {
	case bytes.HasPrefix(body, []byte(`{"max_tokens"`)):
		path = "/v1/messages" // an anthropicBody (json.Marshal sorts the keys)
	case bytes.HasPrefix(body, []byte(`{"model":"gpt-5","instructions"`)):
		path = "/v1/responses" // a responsesBody
	}
	var rd io.Reader = bytes.NewReader(body)
	if mbps > 0 {
		rd = &pacedReader{r: rd, mbps: mbps}
	}
	req, _ := http.NewRequest("POST", url+path, rd)
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	if session != "" {
		req.Header.Set(SessionHeader, session)
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return d
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// warmup is how many requests of a warm-up conversation each latency case sends before the
// clock starts.
const warmup = 300

// BenchmarkProxyOverhead measures the latency the proxy adds (the time through the proxy minus
// the time of the same request sent straight to an upstream that answers at once, paired per
// request) for a session whose history is 10K or 100K tokens, growing by a turn each request
// (an agent's steady state), and the throughput of 50 concurrent sessions of 10K tokens. Each
// figure is measured beside a plain httputil.ReverseProxy on the same requests in the same run
// (the anchor: what any proxy costs), with ctxmgr on SQLite (the default of ctxmgr serve).
//
//	go test -run '^$' -bench ProxyOverhead -benchtime 200x ./proxy
func BenchmarkProxyOverhead(b *testing.B) {
	// As ctxmgr serve runs on SQLite: a request's messages are written while the upstream
	// works. CTXMGR_BENCH_WRITE_FIRST=1 writes them before (Config.SharedStore, as on a
	// PostgreSQL store several instances share), to compare the two in one build.
	// CTXMGR_BENCH_MEM=1 puts the sessions in memory (store.NewMemory) instead, to see what
	// the SQLite write adds.
	shared := os.Getenv("CTXMGR_BENCH_WRITE_FIRST") != ""
	mem := os.Getenv("CTXMGR_BENCH_MEM") != ""
	// The servers run in the benchmark's process. CTXMGR_BENCH_PROCS=1 runs each in a process
	// of its own, as deployed (startBenchServer): each collector is then paced by its own
	// garbage, but every request wakes three processes, so on 2 cores every p50 is higher
	// than in one process (docs/benchmarks.md).
	// Each process's CPU time per request is then reported beside the latencies (cpu-µs for
	// ctxmgr, rp-cpu-µs for the reverse proxy; Linux): on 2 cores the three servers and the
	// client compete for the CPU, and what a proxy adds to the latency follows what it spends.
	procs := os.Getenv("CTXMGR_BENCH_PROCS") != ""
	pids := map[string]int{} // URL -> process, with procs
	// CTXMGR_BENCH_LINK=<MB/s> puts the proxies on a network: the client sends its bodies
	// and the upstreams read theirs at that rate (a proxy shared by several clients, as a
	// PostgreSQL deployment is), where a proxy that reads a body whole before sending it on
	// adds a whole transfer. CTXMGR_BENCH_NO_CUT=1 turns cut-through forwarding off.
	link, _ := strconv.Atoi(os.Getenv("CTXMGR_BENCH_LINK"))
	noCut := os.Getenv("CTXMGR_BENCH_NO_CUT") != ""
	serve := func(b *testing.B, spec benchSpec) string {
		if !procs {
			h, closeFn, err := spec.handler(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(h)
			b.Cleanup(func() { srv.Close(); closeFn() })
			return srv.URL
		}
		url, pid := startBenchServer(b, spec)
		pids[url] = pid
		return url
	}
	newProxy := func(b *testing.B, window int, up string) string {
		return serve(b, benchSpec{Kind: "ctxmgr", Target: up, Window: window, Mem: mem, Shared: shared, NoCut: noCut})
	}
	upURL := serve(b, benchSpec{Kind: "upstream", Link: link})
	slowURL := serve(b, benchSpec{Kind: "upstream", Delay: 2 * time.Millisecond, Link: link})
	rp, slowRP := serve(b, benchSpec{Kind: "reverse", Target: upURL}), serve(b, benchSpec{Kind: "reverse", Target: slowURL})
	bp, slowBP := serve(b, benchSpec{Kind: "buffering", Target: upURL}), serve(b, benchSpec{Kind: "buffering", Target: slowURL})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	cases := []struct {
		name         string
		size, window int
		format       Format
		slow         bool // the upstream takes 2 ms to answer
	}{
		{"latency-10K", 10000, 200000, FormatOpenAI, false},
		{"latency-100K", 100000, 200000, FormatOpenAI, false},
		// A history larger than the window: compacted, so every request is re-encoded with
		// the summary (the steady state of a long session).
		{"latency-100K-compacted", 100000, 64000, FormatOpenAI, false},
		// Claude Code's format, with its moving cache_control breakpoint: left unchanged, so
		// forwarded as the client's bytes.
		{"latency-100K-anthropic", 100000, 200000, FormatAnthropic, false},
		// The same compacted: every request is rewritten (breakpoints placed, encoded), as in
		// a long Claude Code session.
		{"latency-100K-anthropic-compacted", 100000, 64000, FormatAnthropic, false},
		// Codex CLI's: the Responses API, stateless.
		{"latency-100K-responses", 100000, 200000, FormatResponses, false},
		// An upstream that takes 2 ms to answer (a real provider takes hundreds): what the
		// proxy adds when its store write runs beside the upstream call.
		{"latency-100K-upstream-2ms", 100000, 200000, FormatOpenAI, true},
		{"latency-100K-anthropic-upstream-2ms", 100000, 200000, FormatAnthropic, true},
		// From 100K tokens, each request a whole tool turn longer (a call and its output of
		// some 1,100 tokens, as a coding agent's requests grow) instead of two short messages:
		// a body soon outgrows the buffer its predecessors were read into. body-KiB is the
		// last body's size.
		{"latency-100K-tool-turns", 100000, 1000000, FormatOpenAI, false},
	}
	for _, c := range cases {
		size := c.size
		b.Run(c.name, func(b *testing.B) {
			upstream, plainProxy, buffering := upURL, rp, bp
			if c.slow {
				upstream, plainProxy, buffering = slowURL, slowRP, slowBP
			}
			px := newProxy(b, c.window, upstream)
			conv := newBenchConversation(size)
			next := bodyMaker(conv, c.format)
			if strings.HasSuffix(c.name, "tool-turns") {
				next = conv.toolTurnBody
			}
			post(b, client, px, "bench", next(-1)) // the session's first request
			// The bodies are made before the clock starts: marshalling a 400 KB history
			// allocates megabytes, whose collection would otherwise land in the requests
			// measured (in ours more often than in the anchor's, ours being longer).
			bodies := make([][]byte, b.N)
			for i := range bodies {
				bodies[i] = next(i)
			}
			runtime.GC()
			// The process's steady state. With the bodies above held, the heap is far larger
			// than a proxy's own, and the first requests made after them allocate into memory
			// the process has not used yet, and the first case would measure the heap's growth
			// rather than the proxy. So another conversation of the
			// same size (another session, other first bytes) is sent first, unmeasured, and
			// the one measured keeps its stated size.
			warm := newBenchConversation(size)
			warm.msgs[0] = map[string]any{"role": "system", "content": "You are the warm-up agent."}
			wnext := bodyMaker(warm, c.format)
			post(b, client, px, "warm", wnext(-1))
			for i := range warmup {
				body := wnext(i)
				post(b, client, upstream, "", body)
				post(b, client, px, "warm", body)
				post(b, client, plainProxy, "", body)
				post(b, client, buffering, "", body)
			}
			runtime.GC()
			cpuOurs, okOurs := processCPU(pids[px])
			cpuRP, okRP := processCPU(pids[plainProxy])
			added := make([]time.Duration, 0, b.N)
			anchor := make([]time.Duration, 0, b.N)
			floor := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				body := bodies[i]
				direct := postAt(b, client, upstream, "", body, link)
				through := postAt(b, client, px, "bench", body, link)
				plain := postAt(b, client, plainProxy, "", body, link)
				buffered := postAt(b, client, buffering, "", body, link)
				added = append(added, max(0, through-direct))
				anchor = append(anchor, max(0, plain-direct))
				floor = append(floor, max(0, buffered-direct))
			}
			b.StopTimer()
			if procs && okOurs && okRP {
				ours, ok1 := processCPU(pids[px])
				plain, ok2 := processCPU(pids[plainProxy])
				if ok1 && ok2 {
					b.ReportMetric(float64((ours-cpuOurs).Microseconds())/float64(b.N), "cpu-µs")
					b.ReportMetric(float64((plain-cpuRP).Microseconds())/float64(b.N), "rp-cpu-µs")
				}
			}
			b.ReportMetric(float64(percentile(added, 0.50).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(added, 0.99).Microseconds()), "p99-µs")
			b.ReportMetric(float64(percentile(anchor, 0.50).Microseconds()), "rp-p50-µs")
			b.ReportMetric(float64(percentile(anchor, 0.99).Microseconds()), "rp-p99-µs")
			b.ReportMetric(float64(percentile(floor, 0.50).Microseconds()), "buf-p50-µs")
			b.ReportMetric(float64(percentile(floor, 0.99).Microseconds()), "buf-p99-µs")
			b.ReportMetric(float64(len(bodies[len(bodies)-1])/1024), "body-KiB") // the last measured
		})
	}
	b.Run("throughput-50-sessions-10K", func(b *testing.B) {
		px := newProxy(b, 200000, upURL)
		const sessions = 50
		base := newBenchConversation(10000)
		run := func(url string, header bool) float64 {
			convs := make([]*benchConversation, sessions)
			for i := range convs {
				convs[i] = &benchConversation{msgs: slices.Clone(base.msgs)}
				convs[i].msgs[0] = map[string]any{"role": "system", "content": fmt.Sprintf("You are agent %d.", i)}
			}
			per := (b.N + sessions - 1) / sessions
			// Each session's first request (the whole history decoded, stored and counted)
			// is sent before the clock starts, as in the latency cases: what is measured is
			// an agent's steady state, each request a turn longer than the last.
			var wg sync.WaitGroup
			each := func(f func(i int, id string)) {
				for i := 0; i < sessions; i++ {
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						id := ""
						if header {
							id = fmt.Sprintf("s%d", i)
						}
						f(i, id)
					}(i)
				}
				wg.Wait()
			}
			each(func(i int, id string) { post(b, client, url, id, convs[i].body(-1)) })
			t0 := time.Now()
			each(func(i int, id string) {
				for j := 0; j < per; j++ {
					post(b, client, url, id, convs[i].body(j))
				}
			})
			return float64(per*sessions) / time.Since(t0).Seconds()
		}
		b.ResetTimer()
		ours := run(px, true)
		plain := run(rp, false)
		b.StopTimer()
		b.ReportMetric(ours, "req/s")
		b.ReportMetric(plain, "rp-req/s")
	})
}
