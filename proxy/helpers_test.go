package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	openai "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/wire"
)

// env is a fake upstream and a proxy in front of it.
type env struct {
	t     testing.TB
	fake  *fakeupstream.Server
	up    *httptest.Server
	srv   *Server
	px    *httptest.Server
	store store.Store
	cfg   Config
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newEnv starts a fake upstream with fo and a proxy over it with cfg (upstreams filled in).
func newEnv(t testing.TB, fo fakeupstream.Options, cfg Config) *env {
	t.Helper()
	e := &env{t: t, fake: fakeupstream.New(fo)}
	e.up = httptest.NewServer(e.fake)
	t.Cleanup(e.up.Close)
	if cfg.Store == nil {
		cfg.Store = store.NewMemory()
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	cfg.UpstreamOpenAI, cfg.UpstreamAnthropic = e.up.URL, e.up.URL
	e.store, e.cfg = cfg.Store, cfg
	e.start()
	return e
}

// start (re)starts the proxy over the same store: a restart.
func (e *env) start() {
	e.t.Helper()
	if e.px != nil {
		e.px.Close()
		_ = e.srv.Close()
	}
	srv, err := New(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.srv = srv
	e.px = httptest.NewServer(srv.Handler())
	e.t.Cleanup(func() {
		e.px.Close()
		_ = srv.Close()
	})
}

// smallTune makes offloading and compaction happen in small tests.
func smallTune(c *ctxmgr.Config) {
	c.ToolResultCap = 3000
	noCostMask(c)
}

// noCostMask turns off masking by cost below the threshold: the tests that use it drive a
// conversation whose outputs the agent never quotes (which the default preset masks as soon as
// that pays) to exercise what happens to an unchanged request or at the window's edge.
func noCostMask(c *ctxmgr.Config) { c.CostMaskKeep = 0 }

// agent is a client that keeps its own history, as real agents do, and drives a tool loop.
type agent interface {
	// turn sends a user message and runs the tool loop until a final answer, answering every
	// tool call with output(callIndex). It returns the final text.
	turn(ctx context.Context, text string, stream bool) (string, error)
	// tools returns the names of every tool the model called so far.
	called() []string
	// dropLast removes the last n messages of the history (an edit/rewind).
	dropLast(n int)
}

type toolOutput func(turn, call int) string

func bigOutput(size int) toolOutput {
	return func(turn, call int) string {
		var b strings.Builder
		for i := 0; b.Len() < size; i++ {
			fmt.Fprintf(&b, "turn %d call %d line %d: /src/pkg%d/file%d.go:%d ok value=%x\n", turn, call, i, turn, i%7, i*3, turn*1000+i)
		}
		return b.String()
	}
}

// --- openai-go ---

type openaiAgent struct {
	client openai.Client
	model  string
	msgs   []openai.ChatCompletionMessageParamUnion
	tools  []openai.ChatCompletionToolUnionParam
	out    toolOutput
	turns  int
	calls  []string
	opts   []ooption.RequestOption
	maxOut int64
}

func newOpenAIAgent(url string, out toolOutput, opts ...ooption.RequestOption) *openaiAgent {
	base := []ooption.RequestOption{ooption.WithBaseURL(url + "/v1/"), ooption.WithAPIKey("sk-test-openai"), ooption.WithMaxRetries(0)}
	return &openaiAgent{
		client: openai.NewClient(append(base, opts...)...),
		model:  "gpt-4o",
		msgs:   []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a coding agent under test. Use the tools.")},
		tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "run_command", Description: openai.String("Run a shell command and return its output."),
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}, "required": []string{"cmd"}},
		})},
		out:    out,
		maxOut: 512,
	}
}

func (a *openaiAgent) called() []string { return a.calls }
func (a *openaiAgent) dropLast(n int)   { a.msgs = a.msgs[:len(a.msgs)-n] }

func (a *openaiAgent) complete(ctx context.Context, stream bool) (openai.ChatCompletionMessage, error) {
	params := openai.ChatCompletionNewParams{Model: a.model, Messages: a.msgs, Tools: a.tools, MaxCompletionTokens: openai.Int(a.maxOut)}
	if !stream {
		resp, err := a.client.Chat.Completions.New(ctx, params, a.opts...)
		if err != nil {
			return openai.ChatCompletionMessage{}, err
		}
		if len(resp.Choices) == 0 {
			return openai.ChatCompletionMessage{}, fmt.Errorf("no choices")
		}
		return resp.Choices[0].Message, nil
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := a.client.Chat.Completions.NewStreaming(ctx, params, a.opts...)
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		if !acc.AddChunk(s.Current()) {
			return openai.ChatCompletionMessage{}, fmt.Errorf("accumulator rejected chunk %s", s.Current().RawJSON())
		}
	}
	if err := s.Err(); err != nil {
		return openai.ChatCompletionMessage{}, err
	}
	if len(acc.Choices) == 0 {
		return openai.ChatCompletionMessage{}, fmt.Errorf("stream had no choices")
	}
	return acc.Choices[0].Message, nil
}

func (a *openaiAgent) turn(ctx context.Context, text string, stream bool) (string, error) {
	a.msgs = append(a.msgs, openai.UserMessage(text))
	for iter := 0; iter < 6; iter++ {
		msg, err := a.complete(ctx, stream)
		if err != nil {
			return "", err
		}
		a.msgs = append(a.msgs, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			a.turns++
			return msg.Content, nil
		}
		for i, tc := range msg.ToolCalls {
			a.calls = append(a.calls, tc.Function.Name)
			a.msgs = append(a.msgs, openai.ToolMessage(a.out(a.turns, i), tc.ID))
		}
	}
	return "", fmt.Errorf("tool loop did not end")
}

// --- anthropic-sdk-go ---

type anthropicAgent struct {
	client anthropic.Client
	model  string
	msgs   []anthropic.MessageParam
	tools  []anthropic.ToolUnionParam
	out    toolOutput
	turns  int
	calls  []string
	opts   []aoption.RequestOption
	maxOut int64
	meta   string
}

func newAnthropicAgent(url string, out toolOutput, opts ...aoption.RequestOption) *anthropicAgent {
	base := []aoption.RequestOption{aoption.WithBaseURL(url), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0)}
	return &anthropicAgent{
		client: anthropic.NewClient(append(base, opts...)...),
		model:  "claude-sonnet-4-5",
		tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name: "run_command", Description: anthropic.String("Run a shell command and return its output."),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"cmd": map[string]any{"type": "string"}}, Required: []string{"cmd"}},
		}}},
		out:    out,
		maxOut: 512,
	}
}

func (a *anthropicAgent) called() []string { return a.calls }
func (a *anthropicAgent) dropLast(n int)   { a.msgs = a.msgs[:len(a.msgs)-n] }

func (a *anthropicAgent) params() anthropic.MessageNewParams {
	p := anthropic.MessageNewParams{Model: anthropic.Model(a.model), MaxTokens: a.maxOut, Messages: a.msgs, Tools: a.tools,
		System: []anthropic.TextBlockParam{{Text: "You are a coding agent under test. Use the tools."}}}
	if a.meta != "" {
		p.Metadata = anthropic.MetadataParam{UserID: anthropic.String(a.meta)}
	}
	return p
}

func (a *anthropicAgent) complete(ctx context.Context, stream bool) (*anthropic.Message, error) {
	if !stream {
		return a.client.Messages.New(ctx, a.params(), a.opts...)
	}
	s := a.client.Messages.NewStreaming(ctx, a.params(), a.opts...)
	msg := &anthropic.Message{}
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			return nil, err
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return msg, nil
}

func (a *anthropicAgent) turn(ctx context.Context, text string, stream bool) (string, error) {
	a.msgs = append(a.msgs, anthropic.NewUserMessage(anthropic.NewTextBlock(text)))
	for iter := 0; iter < 6; iter++ {
		msg, err := a.complete(ctx, stream)
		if err != nil {
			return "", err
		}
		a.msgs = append(a.msgs, msg.ToParam())
		var results []anthropic.ContentBlockParamUnion
		var final strings.Builder
		for _, b := range msg.Content {
			switch b.Type {
			case "tool_use":
				a.calls = append(a.calls, b.Name)
				results = append(results, anthropic.NewToolResultBlock(b.ID, a.out(a.turns, len(results)), false))
			case "text":
				final.WriteString(b.Text)
			}
		}
		if len(results) == 0 {
			a.turns++
			return final.String(), nil
		}
		a.msgs = append(a.msgs, anthropic.NewUserMessage(results...))
	}
	return "", fmt.Errorf("tool loop did not end")
}

// get fetches a proxy URL and returns the status and body.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkRecords asserts that every request the upstream answered fits the window and pairs
// its tool calls.
func checkRecords(t testing.TB, recs []fakeupstream.Record, window int) {
	t.Helper()
	if len(recs) == 0 {
		t.Fatal("the upstream received no request")
	}
	for _, r := range recs {
		if r.Status == 200 && r.Tokens+r.MaxTokens > window {
			t.Errorf("request %d (%s) does not fit: %d tokens + %d max output > window %d", r.Seq, r.Format, r.Tokens, r.MaxTokens, window)
		}
		if r.Valid != "" {
			t.Errorf("request %d (%s) is invalid: %s", r.Seq, r.Format, r.Valid)
		}
	}
}

func decodeOpenAIMessage(b []byte) (chat.Message, error) { return wire.DecodeOpenAIMessage(0, b) }

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// histogram returns the sample count and sum of an observer made by a HistogramVec.
func histogram(o prometheus.Observer) (uint64, float64) {
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		return 0, -1
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// longConversation drives the long-conversation scenario through turn (a client's turn, its
// tool loop included): 24 turns of tool calls (parallel ones every fourth turn) whose outputs
// far exceed window, then a read back the proxy answers through ctxmgr_read. It checks what
// every format's long conversation must show: each turn answered after its tool results, the
// read back answered without the client seeing the call (called lists the tools the client
// saw called), every upstream request fit and well formed and answered as format, one session,
// management and offload. It returns the records, the session's stats and the history's size.
func longConversation(t *testing.T, e *env, window int, format string, turn func(ctx context.Context, text string) (string, error), called func() []string) ([]fakeupstream.Record, ctxmgr.Stats, int) {
	t.Helper()
	ctx := ctxT(t)
	for i := 0; i < 24; i++ {
		msg := fmt.Sprintf("turn %d: run the tests", i)
		if i%4 == 0 {
			msg += " in parallel"
		}
		text, err := turn(ctx, msg)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if !strings.HasPrefix(text, "Done: ") {
			t.Fatalf("turn %d: answer %q", i, text)
		}
	}
	n := len(e.fake.Records())
	out, err := turn(ctx, "now read back the full output")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "Read back: [ctxmgr_read") {
		t.Fatalf("answer %q", out)
	}
	for _, name := range called() {
		if name == readToolName {
			t.Fatalf("the client saw a ctxmgr_read call")
		}
	}
	recs := e.fake.Records()
	if tail := recs[n:]; len(tail) != 2 || tail[0].Reply != "ctxmgr_read" || !contains(tail[0].Tools, readToolName) {
		t.Fatalf("want a ctxmgr_read call and its follow-up, got %+v", tail)
	}
	checkRecords(t, recs, window)
	for _, r := range recs {
		if r.Status != 200 || r.Format != format {
			t.Errorf("request %d: %s answered %d (%s)", r.Seq, r.Format, r.Status, r.Rule)
		}
	}
	// One session, found again on every request.
	e.srv.sessMu.Lock()
	if len(e.srv.sessions) != 1 {
		t.Errorf("%d sessions", len(e.srv.sessions))
	}
	var ps *psession
	for _, p := range e.srv.sessions {
		ps = p
	}
	e.srv.sessMu.Unlock()
	st := ps.sess.Stats()
	// Management: a summary, or old results masked (the default preset masks before it
	// summarizes), with their full text in the store.
	if st.Evicted == 0 && st.Masked == 0 || len(st.Offloads) == 0 {
		t.Errorf("no compaction or offload: %+v", st)
	}
	raw := 0
	for _, m := range ps.sess.History() {
		raw += e.fake.Count(&chat.Request{Messages: []chat.Message{m}})
	}
	if raw < 5*window {
		t.Fatalf("history of %d tokens does not far exceed the window %d", raw, window)
	}
	return recs, st, raw
}

// checkRecovered asserts that the upstream refused at least one request for its window (else
// the test proves nothing) and that each refused request was followed by a smaller retry; it
// returns the refusals.
func checkRecovered(t testing.TB, recs []fakeupstream.Record) int {
	t.Helper()
	rejected := 0
	for i, r := range recs {
		if r.Status == 400 {
			rejected++
			if r.Rule != fakeupstream.RuleWindow || i+1 >= len(recs) || recs[i+1].Tokens >= r.Tokens {
				t.Errorf("request %d rejected (%s) at %d tokens; the retry is not smaller", r.Seq, r.Rule, r.Tokens)
			}
		}
	}
	if rejected == 0 {
		t.Fatalf("the upstream never overflowed (largest request %d tokens): the test proves nothing", maxTokens(recs))
	}
	return rejected
}

// checkRecoveredCounted is checkRecovered on an env's upstream, and the proxy counted a
// recovery for each refusal.
func checkRecoveredCounted(t testing.TB, e *env) {
	t.Helper()
	rejected := checkRecovered(t, e.fake.Records())
	if got := counterValue(e.srv.metrics.recoveries); got < float64(rejected) {
		t.Errorf("recoveries %v, rejections %d", got, rejected)
	}
}
