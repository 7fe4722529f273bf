package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/sample"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/tokens"
)

var (
	sampleOnce  sync.Once
	sampleTrajs []Trajectory
	sampleErr   error
	counterOnce sync.Once
	exact       tokens.Counter
)

// sampleRuns returns three real trajectories of the embedded sample: the two shortest
// mini-swe-agent runs the tests were written on and the first tau-bench run.
func sampleRuns(tb testing.TB) []Trajectory {
	tb.Helper()
	sampleOnce.Do(func() {
		var ts []Trajectory
		_, sampleErr = LoadEachFS(sample.FS(), []string{
			path.Join(sample.Dir, "mini-swe-agent", "django__django-9296.traj.json"),
			path.Join(sample.Dir, "mini-swe-agent", "django__django-16667.traj.json"),
			path.Join(sample.Dir, "tau-bench", "gpt-4o-airline.json"),
		}, "", func(t Trajectory) error {
			ts = append(ts, t)
			return nil
		})
		if sampleErr == nil {
			sampleTrajs = ts[:3]
		}
	})
	if sampleErr != nil {
		tb.Fatal(sampleErr)
	}
	return sampleTrajs
}

// measuring returns one shared exact counter, so that tests count each message once.
func measuring(tb testing.TB) tokens.Counter {
	counterOnce.Do(func() {
		c, err := tokens.ForEncoding(tokens.O200kBase)
		if err != nil {
			tb.Fatal(err)
		}
		exact = tokens.NewCache(c, 1<<18)
	})
	return exact
}

func byName(ts []Totals) map[string]*Totals {
	m := map[string]*Totals{}
	for i := range ts {
		m[ts[i].Name] = &ts[i]
	}
	return m
}

func TestReplaySample(t *testing.T) {
	all := sampleRuns(t)
	tests := []struct {
		name              string
		trajs             []Trajectory
		window, maxOutput int
		summaries, masks  bool // default must summarize / mask
		rawOverflows      bool
	}{
		// The mini-swe-agent runs are one turn each (one user message, then tool iterations):
		// default summarizes between iterations with the task pinned; the tau-bench run has
		// many turns: default summarizes it too. (At 12K, masking every tool result but the
		// newest is enough: default then needs no summary.)
		{name: "8k", trajs: all, window: 8000, maxOutput: 1024, summaries: true, rawOverflows: true},
		{name: "4.5k tau-bench", trajs: all[2:], window: 4500, maxOutput: 1024, summaries: true, rawOverflows: true},
		{name: "defaults", trajs: all},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			trajs := tc.trajs
			res, err := Run(context.Background(), trajs, Options{Window: tc.window, MaxOutput: tc.maxOutput, Counter: measuring(t), Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			ns := len(Strategies())
			if res.Trajectories != len(trajs) || len(res.Strategies) != ns || len(res.Runs) != len(trajs)*ns {
				t.Fatalf("%d trajectories, %d strategies, %d runs", res.Trajectories, len(res.Strategies), len(res.Runs))
			}
			calls := 0
			for i := range trajs {
				calls += trajs[i].Calls()
			}
			st := byName(res.Strategies)
			raw, def := st[StrategyRaw], st[ctxmgr.PresetDefault]
			if res.Calls != calls || raw.Calls != calls || def.Calls != calls {
				t.Errorf("calls: result %d, raw %d, default %d, want %d", res.Calls, raw.Calls, def.Calls, calls)
			}
			// The raw request holds the whole history: every reference is in it.
			if raw.Compactions != 0 || raw.Recall != 1 || raw.RecalledTerms != raw.ReferenceTerms || raw.ReferenceTerms == 0 {
				t.Errorf("raw: compactions %d, recall %v (%d/%d)", raw.Compactions, raw.Recall, raw.RecalledTerms, raw.ReferenceTerms)
			}
			if raw.Lost != 0 || raw.CostVsRaw != 1 || (raw.Overflows > 0) != tc.rawOverflows {
				t.Errorf("raw: lost %d, cost vs raw %v, overflows %d", raw.Lost, raw.CostVsRaw, raw.Overflows)
			}
			for _, s := range res.Strategies {
				if s.Invalid != 0 {
					t.Errorf("%s: %d invalid requests", s.Name, s.Invalid)
				}
				if s.InputTokens <= 0 || s.CachedTokens > s.InputTokens || s.Recall <= 0 || s.Recall > 1 || s.Cost <= 0 {
					t.Errorf("%s: implausible totals %+v", s.Name, s)
				}
			}
			if def.Lost != 0 || def.Overflows != 0 {
				t.Errorf("default: lost %d messages, %d overflows", def.Lost, def.Overflows)
			}
			if tc.summaries && (def.Compactions == 0 || def.SummaryInputTokens == 0 || def.SummaryOutputTokens == 0 || def.Events["summarize"] == 0) {
				t.Errorf("default should summarize: %+v", def)
			}
			if tc.masks && def.Events["mask"] == 0 {
				t.Errorf("default should mask: %+v", def)
			}
			// At the defaults nothing needs compacting; capping large results must not cost
			// more than sending them.
			if tc.window == 0 && (def.Cost > raw.Cost || def.Compactions != 0) {
				t.Errorf("default at the defaults: cost %v and %d compactions, raw cost %v", def.Cost, def.Compactions, raw.Cost)
			}
			// Per-set totals add up to the whole.
			var setCalls int
			var setInput int64
			for _, s := range res.Sets {
				setCalls += s.Calls
				setInput += byName(s.Strategies)[ctxmgr.PresetDefault].InputTokens
			}
			if setCalls != calls || setInput != def.InputTokens {
				t.Errorf("sets %d: %d calls, %d default input tokens", len(res.Sets), setCalls, setInput)
			}
		})
	}
}

func TestReplayJSON(t *testing.T) {
	trajs := sampleRuns(t)[2:]
	res, err := Run(context.Background(), trajs, Options{Strategies: []string{"raw", "default", "masking"}, Counter: measuring(t), Profile: "openai"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Fatal("more than one JSON value")
	}
	for _, k := range []string{"window", "max_output", "profile", "trajectories", "calls", "strategies"} {
		if _, ok := top[k]; !ok {
			t.Errorf("missing key %q", k)
		}
	}
	var strategies []map[string]json.RawMessage
	if err := json.Unmarshal(top["strategies"], &strategies); err != nil || len(strategies) != 3 {
		t.Fatalf("strategies: %v (%d)", err, len(strategies))
	}
	required := map[string]string{"name": "string", "input_tokens": "int", "cached_tokens": "int", "summary_input_tokens": "int",
		"summary_output_tokens": "int", "cost": "number", "peak_tokens": "int", "overflows": "int", "invalid": "int",
		"lost": "int", "recall": "number", "compactions": "int", "prepare_p50_us": "number", "prepare_p99_us": "number"}
	for _, s := range strategies {
		for k, kind := range required {
			v, ok := s[k]
			if !ok {
				t.Errorf("strategy %s: missing key %q", s["name"], k)
				continue
			}
			var x any
			_ = json.Unmarshal(v, &x)
			switch kind {
			case "string":
				if _, ok := x.(string); !ok {
					t.Errorf("%s: %s = %s, want a string", s["name"], k, v)
				}
			case "int":
				if f, ok := x.(float64); !ok || f != float64(int64(f)) {
					t.Errorf("%s: %s = %s, want an integer", s["name"], k, v)
				}
			case "number":
				if _, ok := x.(float64); !ok {
					t.Errorf("%s: %s = %s, want a number", s["name"], k, v)
				}
			}
		}
	}
	if string(top["profile"]) != `"openai"` || string(top["window"]) != "200000" || string(top["max_output"]) != "32000" {
		t.Errorf("header: profile %s window %s max_output %s", top["profile"], top["window"], top["max_output"])
	}
	// Cost follows the profile: openai bills uncached input at 1.0 and cached at 0.1.
	raw := res.Strategies[0]
	want := (float64(raw.InputTokens-raw.CachedTokens)*1.0 + float64(raw.CachedTokens)*0.1) / 1e6
	if d := raw.Cost - want; d > 1e-9 || d < -1e-9 {
		t.Errorf("raw cost %v, want %v", raw.Cost, want)
	}

	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"strategy", "raw", "default", "masking", "recall", "tau-bench"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text output lacks %q:\n%s", w, text.String())
		}
	}
}

// The same input gives the same result, whatever the number of workers (timings aside).
func TestReplayDeterministic(t *testing.T) {
	trajs := sampleRuns(t)
	strip := func(res *Result) *Result {
		res.ElapsedMS = 0
		for i := range res.Strategies {
			res.Strategies[i].PrepareP50US, res.Strategies[i].PrepareP99US = 0, 0
		}
		for i := range res.Sets {
			for k := range res.Sets[i].Strategies {
				res.Sets[i].Strategies[k].PrepareP50US, res.Sets[i].Strategies[k].PrepareP99US = 0, 0
			}
		}
		for i := range res.Runs {
			for k := range res.Runs[i].Calls {
				res.Runs[i].Calls[k].Prepare = 0
			}
		}
		return res
	}
	opts := Options{Window: 12000, MaxOutput: 1024, Strategies: []string{"default", "picoclaw", "qwenpaw"}, Counter: measuring(t)}
	opts.Workers = 1
	a, err := Run(context.Background(), trajs, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Workers = 3
	b, err := Run(context.Background(), trajs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(strip(a), strip(b)) {
		t.Error("results differ between 1 and 3 workers")
	}
}

// A Prepare that fails counts as an overflow and the unmanaged request is measured.
func TestReplayNoFit(t *testing.T) {
	tr := Trajectory{Name: "s/huge", Set: "s",
		System: []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")},
		Messages: []chat.Message{
			chat.TextMessage(chat.RoleUser, strings.Repeat("word ", 3000)),
			chat.TextMessage(chat.RoleAssistant, "ok"),
		}}
	res, err := Run(context.Background(), []Trajectory{tr}, Options{Window: 2048, MaxOutput: 512, Strategies: []string{"raw", "default"}, Counter: measuring(t)})
	if err != nil {
		t.Fatal(err)
	}
	raw, def := res.Strategies[0], res.Strategies[1]
	if def.Overflows != 1 || def.Errors["no_fit"] != 1 || def.InputTokens != raw.InputTokens || raw.Overflows != 1 {
		t.Errorf("default %+v, raw %+v", def, raw)
	}
	if c := res.Runs[1].Calls[0]; c.Error != "no_fit" || !c.Overflow {
		t.Errorf("call %+v", c)
	}
}

// The lost check finds a message missing from the request and not recoverable.
func TestLostCheck(t *testing.T) {
	tr := sampleRuns(t)[2]
	r := &runner{opts: Options{Window: 200000, MaxOutput: 32000, Counter: measuring(t)}}
	d := analyze(&tr, r.opts.Counter)
	m, s, st, err := r.manager("default", &tr)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	n, asst := 0, 0 // up to the third assistant message: a point where the agent prepares a call
	for n = range tr.Messages {
		if tr.Messages[n].Role == chat.RoleAssistant {
			if asst++; asst == 3 {
				break
			}
		}
	}
	if err := s.Append(context.Background(), tr.Messages[:n]...); err != nil {
		t.Fatal(err)
	}
	p, err := s.Prepare(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lc := newLostCheck(d, m, s, st)
	msgs := p.Request.Messages
	if err := lc.check(context.Background(), msgs, mapView(d, msgs, nil, 0, -1, n), 0, n); err != nil || len(lc.positions()) != 0 {
		t.Fatalf("complete request: lost %v, %v", lc.positions(), err)
	}
	// Message 3 replaced by something else: not verbatim, not archived, not offloaded.
	bad := append([]chat.Message{}, msgs...)
	bad[3] = chat.TextMessage(bad[3].Role, "something else")
	if bad[3].Role == chat.RoleTool {
		bad[3] = chat.ToolResult(msgs[3].ToolCallID, msgs[3].Name, "something else", false)
	}
	if err := lc.check(context.Background(), bad, mapView(d, bad, nil, 0, -1, n), 0, n); err != nil {
		t.Fatal(err)
	}
	if got := lc.positions(); !reflect.DeepEqual(got, []int{3}) {
		t.Errorf("lost = %v, want [3]", got)
	}
	// Claiming messages 0-1 evicted while the archive holds nothing loses them too.
	lc2 := newLostCheck(d, m, s, st)
	if err := lc2.check(context.Background(), msgs[2:], mapView(d, msgs[2:], nil, 2, -1, n), 2, n); err != nil {
		t.Fatal(err)
	}
	if got := lc2.positions(); !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("lost = %v, want [0 1]", got)
	}
}

type fakeSummarizer struct{ fallback bool }

func (f fakeSummarizer) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	return summarize.Result{Text: "## Goal\nx", InputTokens: 7, OutputTokens: 3, Fallback: f.fallback}, nil
}

// Summary calls are billed by the measuring counter, except what an LLM summarizer reported.
func TestBilledSummarizer(t *testing.T) {
	c := measuring(t)
	req := summarize.Request{Messages: []chat.Message{chat.TextMessage(chat.RoleUser, "please fix src/a.py")}, TargetTokens: 500}
	r := &runner{opts: Options{Counter: c}}
	res, err := r.summarizer(nil).Summarize(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.InputTokens < 50 || res.OutputTokens != c.Text(res.Text) {
		t.Errorf("extractive billed %d in, %d out (text %d tokens)", res.InputTokens, res.OutputTokens, c.Text(res.Text))
	}
	ratio, _ := ctxmgr.Preset("qwenpaw", 200000, 32000)
	res2, err := r.summarizer(ratio.Counter).Summarize(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res2.InputTokens != res.InputTokens || res2.OutputTokens != c.Text(res2.Text) {
		t.Errorf("a strategy with its own counter is billed %d/%d, want %d/%d", res2.InputTokens, res2.OutputTokens, res.InputTokens, c.Text(res2.Text))
	}
	r.opts.Summarizer = fakeSummarizer{}
	if res, _ := r.summarizer(nil).Summarize(context.Background(), req); res.InputTokens != 7 || res.OutputTokens != 3 {
		t.Errorf("reported usage replaced: %+v", res)
	}
	r.opts.Summarizer = fakeSummarizer{fallback: true}
	if res, _ := r.summarizer(nil).Summarize(context.Background(), req); res.InputTokens == 7 || res.OutputTokens != c.Text("## Goal\nx") {
		t.Errorf("a fallback is not re-billed: %+v", res)
	}
}

func TestOptions(t *testing.T) {
	tr := sampleRuns(t)[2:]
	for _, o := range []Options{
		{Strategies: []string{"nope"}},
		{Strategies: []string{"raw", "raw"}},
		{Profile: "azure"},
		{Window: 1000, MaxOutput: 1000},
	} {
		if _, err := Run(context.Background(), tr, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, tr, Options{Counter: measuring(t)}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	var progress bytes.Buffer
	if _, err := Run(context.Background(), tr, Options{Strategies: []string{"raw"}, Counter: measuring(t), Progress: &progress}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "1/1 trajectories") {
		t.Errorf("progress = %q", progress.String())
	}
}

func BenchmarkReplayDefault(b *testing.B) {
	trajs := sampleRuns(b)
	calls := 0
	for i := range trajs {
		calls += trajs[i].Calls()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A fresh measuring counter each time: nothing is counted in advance.
		if _, err := Run(context.Background(), trajs, Options{Window: 32768, MaxOutput: 4096, Strategies: []string{"default"}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(calls*b.N)/b.Elapsed().Seconds(), "calls/s")
}

// --summarizer: an LLM summarizer (here a local fake OpenAI server) summarizes for every
// strategy, and its reported usage is what the summary calls bill.
func TestReplayLLMSummarizer(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		summary := strings.Join(summarize.Headings, "\n- the user wants to book flight HAT136\n")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": summary}}},
			"usage":   map[string]any{"prompt_tokens": 1000, "completion_tokens": 50},
		})
	}))
	defer srv.Close()
	llm, err := summarize.NewLLM(summarize.LLMOptions{BaseURL: srv.URL, Model: "fake", MaxAttempts: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), sampleRuns(t)[2:], Options{Window: 4500, MaxOutput: 1024, Strategies: []string{"default"}, Counter: measuring(t), Summarizer: llm})
	if err != nil {
		t.Fatal(err)
	}
	def := res.Strategies[0]
	n := int64(calls.Load())
	if n == 0 || def.Compactions != int(n) || def.SummaryInputTokens != 1000*n || def.SummaryOutputTokens != 50*n || def.Lost != 0 || def.Invalid != 0 {
		t.Errorf("%d LLM calls; default: %+v", n, def)
	}
}

// The floor is every message before the last call sent once, uncached, with the system prompt
// and tools once: raw, which sends everything whole, never costs less, and costs exactly that
// on a trajectory of one call (nothing to cache). On the sample, every strategy that shows
// each message whole at least once stays above it.
func TestFloor(t *testing.T) {
	c := measuring(t)
	one := Trajectory{Name: "s/one", Set: "s",
		System: []chat.Message{chat.TextMessage(chat.RoleSystem, "You are terse.")},
		Messages: []chat.Message{
			chat.TextMessage(chat.RoleUser, "Say hello to the team."),
			chat.TextMessage(chat.RoleAssistant, "Hello, team."),
			chat.TextMessage(chat.RoleUser, "Thanks."), // after the last call: never sent
		}}
	res, err := Run(context.Background(), []Trajectory{one}, Options{Strategies: []string{"raw"}, Counter: c})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(c.Message(&one.System[0]) + c.Message(&one.Messages[0]) + tokens.ReplyPriming)
	if res.Floor.InputTokens != want || res.Sets[0].Floor != res.Floor {
		t.Fatalf("floor %+v, set floor %+v; want %d tokens", res.Floor, res.Sets[0].Floor, want)
	}
	if raw := res.Strategies[0]; raw.InputTokens != want || raw.Cost != res.Floor.Cost || res.Floor.CostVsRaw != 1 {
		t.Errorf("one call: raw %d tokens at %.6f, floor %+v", raw.InputTokens, raw.Cost, res.Floor)
	}

	res, err = Run(context.Background(), sampleRuns(t), Options{Strategies: []string{"raw", "copaw", "cowagent"}, Counter: c})
	if err != nil {
		t.Fatal(err)
	}
	if res.Floor.Cost <= 0 || res.Floor.CostVsRaw <= 0 || res.Floor.CostVsRaw >= 1 {
		t.Fatalf("floor %+v", res.Floor)
	}
	for _, s := range res.Strategies {
		if s.Cost < res.Floor.Cost {
			t.Errorf("%s costs %.4f, under the floor %.4f, though it shows every message whole at a 200K window", s.Name, s.Cost, res.Floor.Cost)
		}
	}
	var text strings.Builder
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^ *floor +%.3f `, res.Floor.Cost)).MatchString(text.String()) {
		t.Errorf("no floor row in the text:\n%s", text.String())
	}
}

// What the agent pays for what it forgot: for each call that reads back, one round trip (the
// call's input again, cached) and the tokens read, uncached; a call that misses nothing it
// could read back adds nothing.
func TestPaidCountsTheReadBackRoundTrip(t *testing.T) {
	tt := make(totals, 1)
	tt.add([]Replay{{Calls: []Call{
		{Input: 10000, Cached: 9000},
		{Input: 20000, Cached: 19000, Recoverable: 2, ReadBack: 3000},
	}}})
	got := tt.finish(Options{}, ProfileAnthropic)[0]
	p := ProfileAnthropic
	cost := (30000-28000)*p.Uncached/1e6 + 28000*p.Cached/1e6
	want := cost + (3000*p.Uncached+20000*p.Cached)/1e6
	if math.Abs(got.Cost-cost) > 1e-12 || math.Abs(got.CostWithReadBack-want) > 1e-12 || got.ReadBackCalls != 1 {
		t.Fatalf("cost %v, paid %v, read-back calls %d; want %v, %v, 1", got.Cost, got.CostWithReadBack, got.ReadBackCalls, cost, want)
	}
}
