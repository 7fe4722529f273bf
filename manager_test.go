package ctxmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/provider"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/tokens"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testManager(t *testing.T, cfg Config) (*Manager, *Session) {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = store.NewMemory()
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	s, err := m.NewSession("s1", []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// prepareAfterRestart loads session id with a new Manager of cfg (the system prompt "sys", as
// testManager makes it) and returns what its first Prepare returns.
func prepareAfterRestart(t *testing.T, cfg Config, id string) Prepared {
	t.Helper()
	ctx := context.Background()
	cfg.Logger = discardLogger()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.LoadSession(ctx, id, []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func lines(n int, prefix string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s %d\n", prefix, i)
	}
	return b.String()
}

func appendAll(t *testing.T, s *Session, msgs ...chat.Message) {
	t.Helper()
	if err := s.Append(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

func call(id string) chat.Message {
	return chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: `{"cmd":"ls"}`}}}
}

func TestIngestionOffload(t *testing.T) {
	ctx := context.Background()
	m, s := testManager(t, Config{ToolResultCap: 4000})
	big := lines(2000, "output line")
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"), call("c1"), chat.ToolResult("c1", "bash", big, false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := p.Request.Messages[2].Text()
	if len(got) > 4000 || !strings.Contains(got, "output line 1\n") || !strings.Contains(got, "output line 2000") {
		t.Fatalf("snippet (%d bytes) lacks head or tail:\n%s", len(got), got)
	}
	if !strings.Contains(got, "2000 lines") || !strings.Contains(got, "Full text: tool_result/000002-c1 ") {
		t.Fatalf("snippet lacks its reference:\n%s", got)
	}
	full, total, err := m.Config().Store.ReadOffload(ctx, "s1", offloadKey(2, "c1"), 1, 0)
	if err != nil || full != big || total != 2000 {
		t.Fatalf("offloaded text not recoverable: %v total %d", err, total)
	}
	// The history keeps the original.
	if h := s.History(); h[2].Text() != big {
		t.Fatal("history lost the original")
	}
}

func TestMaskingBatchedByMinSaving(t *testing.T) {
	ctx := context.Background()
	counter := tokens.NewRatio(tokens.RatioOptions{PerToken: 4})
	cfg := Config{Counter: counter, DisableOffload: true, MaskKeep: 1, MaskMinSaving: 3000, DisableSummary: true}
	cfg.Budget.Window, cfg.Budget.MaxOutput, cfg.Budget.Threshold = 20000, 1000, 0.5
	_, s := testManager(t, cfg)
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"))
	masked := 0
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("c%d", i)
		appendAll(t, s, call(id), chat.ToolResult(id, "bash", lines(300, "result "+id), false))
		p, err := s.Prepare(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range p.Report.Steps {
			if st.Step == StepMask {
				masked++
				if st.Freed < 3000 {
					t.Fatalf("masking freed %d < minimum 3000", st.Freed)
				}
				if !p.Report.PrefixChanged {
					t.Fatal("masking must report a prefix change")
				}
			}
		}
	}
	if masked == 0 || masked > 3 {
		t.Fatalf("masking ran %d times; want a few batched rewrites", masked)
	}
}

func TestSummarizeArchivesAndKeepsReserve(t *testing.T) {
	ctx := context.Background()
	counter := tokens.NewRatio(tokens.RatioOptions{PerToken: 4})
	cfg := Config{Counter: counter, DisableOffload: true, DisableMasking: true, Summarizer: &fakeSummarizer{}}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 8000, 1000
	m, s := testManager(t, cfg)
	var compactions int
	for turn := 0; turn < 30; turn++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, fmt.Sprintf("request %d %s", turn, strings.Repeat("x ", 600))))
		p, err := s.Prepare(ctx)
		if err != nil {
			t.Fatal(err)
		}
		compactions += p.Report.Compactions
		if last := p.Request.Messages[len(p.Request.Messages)-1]; last.Text() != fmt.Sprintf("request %d %s", turn, strings.Repeat("x ", 600)) {
			t.Fatal("latest user message not last")
		}
		appendAll(t, s, chat.TextMessage(chat.RoleAssistant, "ok"))
	}
	if compactions == 0 {
		t.Fatal("never summarized")
	}
	st := s.Stats()
	if st.SummaryVersion != compactions || st.Evicted == 0 {
		t.Fatalf("stats = %+v, compactions %d", st, compactions)
	}
	arch, err := m.Config().Store.ReadArchive(ctx, "s1", 0, st.Evicted)
	if err != nil || len(arch) != st.Evicted {
		t.Fatalf("archive has %d of %d evicted messages: %v", len(arch), st.Evicted, err)
	}
	sums, _ := m.Config().Store.Summaries(ctx, "s1")
	if len(sums) != compactions {
		t.Fatalf("%d summary versions stored, want %d", len(sums), compactions)
	}
	if !strings.Contains(s.Summary().Text, "archived verbatim") {
		t.Fatal("summary lacks the archive guide")
	}
}

func TestHugeTurnTruncatesAndNoFit(t *testing.T) {
	ctx := context.Background()
	counter := tokens.NewRatio(tokens.RatioOptions{PerToken: 4})
	cfg := Config{Counter: counter, DisableOffload: true, DisableMasking: true}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 8000, 1000
	_, s := testManager(t, cfg)
	// One iteration with two parallel calls: no safe cut inside it.
	parallel := chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "c1", Name: "bash", Arguments: "{}"}, {ID: "c2", Name: "bash", Arguments: "{}"}}}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "analyse"), parallel, chat.ToolResult("c1", "bash", lines(3000, "huge"), false),
		chat.ToolResult("c2", "bash", lines(2000, "big"), false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Report.InputAfter+1000 > 8000 {
		t.Fatalf("does not fit: %d", p.Report.InputAfter)
	}
	if p.Request.Messages[0].Text() != "analyse" {
		t.Fatal("latest user message altered")
	}
	truncated := false
	for _, st := range p.Report.Steps {
		truncated = truncated || st.Step == StepTruncate
	}
	if !truncated {
		t.Fatal("no truncation step")
	}
	// A user message that alone exceeds the window: typed error with numbers.
	_, s2 := testManager(t, cfg)
	appendAll(t, s2, chat.TextMessage(chat.RoleUser, strings.Repeat("word ", 9000)))
	_, err = s2.Prepare(ctx)
	var nf *NoFitError
	if !errors.As(err, &nf) || !errors.Is(err, ErrDoesNotFit) || nf.LatestUser < 9000 {
		t.Fatalf("err = %v, want NoFitError with the latest user message's size", err)
	}
}

func TestAppendRejectsInvalid(t *testing.T) {
	_, s := testManager(t, Config{})
	ctx := context.Background()
	err := s.Append(ctx, chat.ToolResult("nope", "bash", "x", false))
	if !errors.Is(err, chat.ErrOrphanToolResult) {
		t.Fatalf("orphan: %v", err)
	}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "u"), call("c1"))
	twice := chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "d", Name: "f"}, {ID: "d", Name: "f"}}}
	if err := s.Append(ctx, chat.ToolResult("c1", "bash", "ok", false), twice); !errors.Is(err, chat.ErrDuplicateToolCallID) {
		t.Fatalf("duplicate: %v", err)
	}
	// Another message while c1 waits for its result: a history no provider accepts.
	if err := s.Append(ctx, call("c2")); !errors.Is(err, chat.ErrMissingToolResult) {
		t.Fatalf("message before the pending result: %v", err)
	}
	if err := s.Append(ctx, chat.TextMessage("robot", "x")); !errors.Is(err, chat.ErrUnknownRole) {
		t.Fatalf("role: %v", err)
	}
	if err := s.Append(ctx, chat.TextMessage(chat.RoleUser, "bad \xff")); !errors.Is(err, chat.ErrInvalidUTF8) {
		t.Fatalf("utf8: %v", err)
	}
	if s.Len() != 2 {
		t.Fatalf("failed appends changed the history: %d", s.Len())
	}
	// Pending calls: Prepare refuses to build a request the provider would reject.
	if _, err := (&Manager{}).prepareFor(s); !errors.Is(err, chat.ErrMissingToolResult) {
		t.Fatalf("pending: %v", err)
	}
}

func (m *Manager) prepareFor(s *Session) (Prepared, error) {
	return s.prepare(context.Background(), false)
}

func TestRecover(t *testing.T) {
	ctx := context.Background()
	counter := tokens.NewRatio(tokens.RatioOptions{PerToken: 4})
	cfg := Config{Counter: counter, Summarizer: &fakeSummarizer{}, MaxRecoveries: 2}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 20000, 1000
	// fill appends 300 short turns (15,000 tokens: below the threshold) and a question.
	fill := func(s *Session) {
		for i := 0; i < 300; i++ {
			appendAll(t, s, chat.TextMessage(chat.RoleUser, strings.Repeat("talk ", 38)), chat.TextMessage(chat.RoleAssistant, "ok"))
		}
		appendAll(t, s, chat.TextMessage(chat.RoleUser, "latest"))
	}
	_, s := testManager(t, cfg)
	fill(s)
	p0, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Not an overflow: returned as is.
	other := &provider.StatusError{Status: 429, Body: []byte(`{"error":{"message":"Rate limit reached for gpt-4o on tokens per min (TPM)","code":"rate_limit_exceeded"}}`)}
	if _, err := s.Recover(ctx, other); err != other {
		t.Fatalf("non-overflow error not passed through: %v", err)
	}
	// The provider counts 10% more than we do, and its window is 30% short of what the
	// first request needs by its count.
	const ratio = 1.1
	realWindow := int((float64(p0.Report.InputAfter)*ratio + float64(cfg.Budget.MaxOutput)) * 0.7)
	fits := func(p Prepared) bool {
		return int(float64(p.Report.InputAfter)*ratio)+cfg.Budget.MaxOutput <= realWindow
	}
	overflow := func(p Prepared) error {
		return &provider.StatusError{Status: 400, Body: fmt.Appendf(nil, `{"error":{"message":"This model's maximum context length is %d tokens. `+
			`However, your messages resulted in %d tokens.","code":"context_length_exceeded"}}`, realWindow, int(float64(p.Report.InputAfter)*ratio))}
	}
	if fits(p0) {
		t.Fatalf("the first request (%d tokens) already fits: the test proves nothing", p0.Report.InputAfter)
	}
	p1, err := s.Recover(ctx, overflow(p0))
	if err != nil {
		t.Fatal(err)
	}
	if !fits(p1) {
		t.Fatalf("after one recovery the request has %d tokens (x%.1f + %d output > %d)", p1.Report.InputAfter, ratio, cfg.Budget.MaxOutput, realWindow)
	}
	if p1.Report.Window >= cfg.Budget.Window || s.Stats().Window != p1.Report.Window {
		t.Fatalf("window in force: report %d, stats %d", p1.Report.Window, s.Stats().Window)
	}
	// The smaller window stays for the session.
	appendAll(t, s, chat.TextMessage(chat.RoleAssistant, "ok"), chat.TextMessage(chat.RoleUser, "again"))
	if p, err := s.Prepare(ctx); err != nil || p.Report.Window != p1.Report.Window || !fits(p) {
		t.Fatalf("after a new message: window %d (was %d), %d tokens, %v", p.Report.Window, p1.Report.Window, p.Report.InputAfter, err)
	}

	// A provider that states nothing: each attempt goes below what it refused, until the
	// bound; a new message resets the bound.
	_, sb := testManager(t, cfg)
	fill(sb)
	prev, err := sb.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bare := &provider.StatusError{Status: 400, Body: []byte(`{"error":{"message":"Please reduce the length of the messages.","code":"context_length_exceeded"}}`)}
	for attempt := 1; attempt <= 2; attempt++ {
		p, err := sb.Recover(ctx, bare)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		if p.Report.InputAfter >= prev.Report.InputAfter {
			t.Fatalf("attempt %d did not shrink the request: %d -> %d", attempt, prev.Report.InputAfter, p.Report.InputAfter)
		}
		prev = p
	}
	if _, err := sb.Recover(ctx, bare); !errors.Is(err, ErrRecoveryExhausted) {
		t.Fatalf("third recovery: %v, want ErrRecoveryExhausted", err)
	}
	appendAll(t, sb, chat.TextMessage(chat.RoleAssistant, "ok"), chat.TextMessage(chat.RoleUser, "again"))
	if _, err := sb.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Recover(ctx, overflow(prev)); err != nil {
		t.Fatalf("after a new message: %v", err)
	}
	// A stated maximum below the reply reserve: the reserve shrinks to a quarter of the
	// window in force, and the request fits beside it.
	_, s2 := testManager(t, cfg)
	appendAll(t, s2, chat.TextMessage(chat.RoleUser, "hi"))
	if _, err := s2.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if cfg.Budget.MaxOutput < 800 {
		t.Fatalf("the test needs a reply reserve above 800 tokens, has %d", cfg.Budget.MaxOutput)
	}
	small := &provider.StatusError{Status: 400, Body: []byte(`{"error":{"message":"This model's maximum context length is 800 tokens.","code":"context_length_exceeded"}}`)}
	p2, err := s2.Recover(ctx, small)
	if err != nil || p2.Report.MaxOutput > 200 || p2.Report.InputAfter+p2.Report.MaxOutput > 800 {
		t.Fatalf("recovery under a maximum below max output: %v (input %d, reply %d)", err, p2.Report.InputAfter, p2.Report.MaxOutput)
	}
	// A maximum that leaves no room at all: a typed error that says so.
	_, s3 := testManager(t, cfg)
	appendAll(t, s3, chat.TextMessage(chat.RoleUser, "hi"))
	if _, err := s3.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	tiny := &provider.StatusError{Status: 400, Body: []byte(`{"error":{"message":"This model's maximum context length is 3 tokens.","code":"context_length_exceeded"}}`)}
	if _, err = s3.Recover(ctx, tiny); !errors.Is(err, ErrRecoveryExhausted) && !errors.Is(err, ErrDoesNotFit) || !strings.Contains(err.Error(), "maximum is 3 tokens") && !errors.Is(err, ErrDoesNotFit) {
		t.Fatalf("recovery under a maximum of 3 tokens: %v", err)
	}
}

// TestRecoverSmallRealWindow: the configured window is the default 200,000 tokens but the
// model behind the provider has 16,385; the provider says so, and one recovery fits it.
func TestRecoverSmallRealWindow(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Summarizer: &fakeSummarizer{}}
	cfg.Budget.MaxOutput = 1024
	_, s := testManager(t, cfg)
	for i := 0; i < 40; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, fmt.Sprintf("step %d: %s", i, strings.Repeat("context ", 400))),
			chat.TextMessage(chat.RoleAssistant, "done"))
	}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "and now?"))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = &provider.StatusError{Status: 400, Body: fmt.Appendf(nil, `{"error":{"message":"This model's maximum context length is 16385 tokens. `+
		`However, your messages resulted in %d tokens.","code":"context_length_exceeded"}}`, p.Report.InputAfter)}
	p, err = s.Recover(ctx, err)
	if err != nil {
		t.Fatal(err)
	}
	if p.Report.InputAfter+1024 > 16385 {
		t.Fatalf("after recovery: %d input tokens + 1024 > 16385", p.Report.InputAfter)
	}
	if last := p.Request.Messages[len(p.Request.Messages)-1].Text(); last != "and now?" {
		t.Fatalf("latest user message: %q", last)
	}
}

func TestCompactClearStats(t *testing.T) {
	ctx := context.Background()
	m, s := testManager(t, Config{})
	for i := 0; i < 10; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, fmt.Sprintf("question %d about /src/main.go", i)), chat.TextMessage(chat.RoleAssistant, "answer"))
	}
	res, err := s.CompactAll(ctx, "keep only decisions")
	if err != nil {
		t.Fatal(err)
	}
	// Everything but the latest user message, which stays pinned before the summary.
	if res.Messages != 19 || res.TokensAfter >= res.TokensBefore || res.Summary == "" {
		t.Fatalf("compact = %+v", res)
	}
	st := s.Stats()
	if st.Evicted != 20 || st.SummaryVersion != 1 || len(st.Archives) != 2 {
		t.Fatalf("stats = %+v", st)
	}
	p0, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(p0.Request.Messages) != 2 || p0.Request.Messages[0].Text() != "question 9 about /src/main.go" {
		t.Fatalf("after compact all: %d messages, first %q", len(p0.Request.Messages), p0.Request.Messages[0].Text())
	}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "more"))
	if err := s.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Request.Messages) != 0 {
		t.Fatalf("after clear: %d messages", len(p.Request.Messages))
	}
	arch, _ := m.Config().Store.ReadArchive(ctx, "s1", 0, -1)
	if len(arch) != 21 {
		t.Fatalf("clear archived %d of 21", len(arch))
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{ToolResultCap: 10},
		{MaskKeep: -5},
		{MaskMinSaving: -1},
		{MaxRecoveries: 50},
		{PagedPastCap: -1},
		{PagedPastCap: 100},
	}
	for i, c := range bad {
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%d: err = %v", i, err)
		}
	}
	c := Config{}
	c.Budget.Window, c.Budget.MaxOutput = 1000, 2000
	if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("window < max output accepted: %v", err)
	}
}

// A coding agent's whole run is one turn: one task message, then tool iterations. Compaction
// cuts between complete iterations and keeps the task pinned before the summary.
func TestSingleTurnRunSummarizes(t *testing.T) {
	ctx := context.Background()
	counter := tokens.NewRatio(tokens.RatioOptions{PerToken: 4})
	cfg := Config{Counter: counter, DisableOffload: true, DisableMasking: true}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 8000, 1000
	_, s := testManager(t, cfg)
	task := chat.TextMessage(chat.RoleUser, "Fix the failing test in pkg/handler.go")
	appendAll(t, s, task)
	compactions := 0
	for i := 0; i < 60; i++ {
		p, err := s.Prepare(ctx)
		if err != nil {
			t.Fatal(err)
		}
		compactions += p.Report.Compactions
		if p.Request.Messages[0].Text() != task.Text() {
			t.Fatalf("iteration %d: the task is not the first message", i)
		}
		id := fmt.Sprintf("c%d", i)
		appendAll(t, s, call(id), chat.ToolResult(id, "bash", lines(40, "step output "+id), false))
	}
	if compactions == 0 {
		t.Fatal("a single-turn run was never summarized")
	}
	if st := s.Stats(); st.Evicted == 0 || st.Truncated != 0 {
		t.Fatalf("stats %+v: want summaries, not truncation", st)
	}
}

// Results of exempt tools are never offloaded, masked or truncated by the optional steps.
func TestExemptTools(t *testing.T) {
	ctx := context.Background()
	_, s := testManager(t, Config{ToolResultCap: 1000, ExemptTools: []string{"read_file"}})
	big := lines(300, "source line")
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"),
		chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "r1", Name: "read_file", Arguments: "{}"}, {ID: "b1", Name: "bash", Arguments: "{}"}}},
		chat.ToolResult("r1", "read_file", big, false), chat.ToolResult("b1", "bash", big, false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Request.Messages[2].Text() != big {
		t.Fatal("exempt tool's result was changed")
	}
	if p.Request.Messages[3].Text() == big {
		t.Fatal("non-exempt result above the cap was not offloaded")
	}
}

// A 50 MB tool output is offloaded whole at ingestion; the request fits and nothing is lost.
func TestFiftyMegabyteToolOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB")
	}
	ctx := context.Background()
	m, s := testManager(t, Config{})
	huge := strings.Repeat("0123456789 abcdefghij klmnopqrstuvwxyz ABCDEFGHIJ error? no, fine\n", 50<<20/68)
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "dump it"), call("c1"), chat.ToolResult("c1", "bash", huge, false))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Report.InputAfter+m.Config().Budget.MaxOutput > m.Config().Budget.Window {
		t.Fatalf("does not fit: %d", p.Report.InputAfter)
	}
	if n := len(p.Request.Messages[2].Text()); n > m.Config().ToolResultCap {
		t.Fatalf("snippet of %d bytes above the cap", n)
	}
	full, _, err := m.Config().Store.ReadOffload(ctx, "s1", offloadKey(2, "c1"), 1, 0)
	if err != nil || len(full) != len(huge) {
		t.Fatalf("offloaded %d of %d bytes: %v", len(full), len(huge), err)
	}
}

// TestSessionUsesItsOwnManager: the operations are methods of the session, so a session made
// by one Manager compacts into that Manager's store, whatever other Managers exist.
func TestSessionUsesItsOwnManager(t *testing.T) {
	ctx := context.Background()
	stA, stB := store.NewMemory(), store.NewMemory()
	newM := func(st store.Store) *Manager {
		cfg := Config{Store: st, Summarizer: &fakeSummarizer{}}
		cfg.Budget.Window, cfg.Budget.MaxOutput = 20000, 1000
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	_, b := newM(stA), newM(stB)
	s, err := b.NewSession("own", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "one"), chat.TextMessage(chat.RoleAssistant, "two"),
		chat.TextMessage(chat.RoleUser, "three"))
	if err := s.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	inB, _ := stB.Summaries(ctx, "own")
	inA, _ := stA.Summaries(ctx, "own")
	if len(inB) == 0 || len(inA) != 0 {
		t.Fatalf("summaries: %d in the session's store, %d in the other's", len(inB), len(inA))
	}
}
