package ctxmgr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/budget"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// gatedSummarizer blocks every call until release is closed.
type gatedSummarizer struct {
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (g *gatedSummarizer) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
		return summarize.Result{}, ctx.Err()
	}
	return (&fakeSummarizer{}).Summarize(ctx, req)
}

func bgConfig(sum summarize.Summarizer) Config {
	cfg := Config{Counter: tokens.NewRatio(tokens.RatioOptions{PerToken: 4}), DisableOffload: true, DisableMasking: true,
		Summarizer: sum, Background: true}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 10000, 1000
	cfg.Budget.SoftThreshold, cfg.Budget.Threshold = 0.4, 0.8
	return cfg
}

func turnText(i int) string { return fmt.Sprintf("request %d %s", i, strings.Repeat("x ", 600)) }

// The soft threshold starts a summary in the background; Prepare does not wait for it. At the
// hard threshold its result is applied, and what was appended meanwhile is all there.
func TestBackgroundSummaryApplied(t *testing.T) {
	ctx := context.Background()
	g := &gatedSummarizer{release: make(chan struct{})}
	_, s := testManager(t, bgConfig(g))
	var applied bool
	for i := 0; i < 40 && !applied; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, turnText(i)))
		done := make(chan struct{})
		var p Prepared
		var err error
		go func() { p, err = s.Prepare(ctx); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			close(g.release)
			t.Fatal("Prepare blocked on the background summary under the hard threshold")
		}
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		started := s.bg != nil
		s.mu.Unlock()
		if started && p.Report.Compactions == 0 && !s.plan2().OverThreshold {
			// Running in the background; let it finish before the hard threshold.
			select {
			case <-g.release:
			default:
				close(g.release)
			}
		}
		for _, st := range p.Report.Steps {
			if st.Step == StepSummarize && strings.Contains(st.Reason, "background") {
				applied = true
			}
		}
		if last := p.Request.Messages[len(p.Request.Messages)-1]; last.Text() != turnText(i) {
			t.Fatalf("latest message missing after call %d", i)
		}
		appendAll(t, s, chat.TextMessage(chat.RoleAssistant, "ok"))
	}
	if !applied {
		t.Fatal("the background summary was never applied")
	}
}

func (s *Session) plan2() budget.Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plan()
}

// A background summary whose covered history changed meanwhile (a manual compaction) is
// dropped, never applied over the newer state.
func TestBackgroundSummaryStaleDropped(t *testing.T) {
	ctx := context.Background()
	g := &gatedSummarizer{release: make(chan struct{})}
	_, s := testManager(t, bgConfig(g))
	for i := 0; i < 14; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, turnText(i)), chat.TextMessage(chat.RoleAssistant, "ok"))
	}
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "latest"))
	if _, err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	job := s.bg
	s.mu.Unlock()
	if job == nil {
		t.Fatal("no background summary started over the soft threshold")
	}
	// A manual compaction (its summarizer call is released too) supersedes the job.
	close(g.release)
	if _, err := s.Compact(ctx, ""); err != nil {
		t.Fatal(err)
	}
	<-job.done
	s.mu.Lock()
	rep := &Report{}
	s.bg = job // as if it were still pending
	err := s.applyBackground(ctx, rep)
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 1 || rep.Steps[0].Step != StepSkip || rep.Compactions != 0 {
		t.Fatalf("stale background summary not dropped: %+v", rep.Steps)
	}
}

// Concurrent Append (one agent), Prepare, Stats and background summaries: race-free (go test
// -race) and nothing lost.
func TestConcurrentSession(t *testing.T) {
	ctx := context.Background()
	cfg := bgConfig(summarizerFunc(func(ctx context.Context, req summarize.Request) (summarize.Result, error) {
		time.Sleep(time.Millisecond)
		return (&fakeSummarizer{}).Summarize(ctx, req)
	}))
	m, s := testManager(t, cfg)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Prepare(ctx); err != nil {
					t.Error(err)
					return
				}
				_ = s.Stats()
			}
		}()
	}
	var want []chat.Message
	for i := 0; i < 60; i++ {
		msgs := []chat.Message{chat.TextMessage(chat.RoleUser, turnText(i)), call(fmt.Sprintf("c%d", i)),
			chat.ToolResult(fmt.Sprintf("c%d", i), "bash", lines(20, "out"), false), chat.TextMessage(chat.RoleAssistant, "ok")}
		appendAll(t, s, msgs...)
		want = append(want, msgs...)
	}
	close(stop)
	wg.Wait()
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "end"))
	want = append(want, chat.TextMessage(chat.RoleUser, "end"))
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, m, s, []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, want, nil, &p)
	if got := s.History(); len(got) != len(want) {
		t.Fatalf("history has %d messages, want %d", len(got), len(want))
	}
}

type summarizerFunc func(ctx context.Context, req summarize.Request) (summarize.Result, error)

func (f summarizerFunc) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	return f(ctx, req)
}

// Once the Manager is closed no background summary starts: Close has waited for the work it
// stopped, and a session used after it (or while it runs) summarizes in the foreground.
func TestCloseStopsBackgroundWork(t *testing.T) {
	ctx := context.Background()
	g := &gatedSummarizer{release: make(chan struct{})}
	close(g.release)
	m, s := testManager(t, bgConfig(g))
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	soft := false
	for i := 0; i < 40; i++ {
		appendAll(t, s, chat.TextMessage(chat.RoleUser, turnText(i)))
		if _, err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		started := s.bg != nil
		s.mu.Unlock()
		if started {
			t.Fatalf("turn %d: a background summary started after Close", i)
		}
		soft = soft || s.plan2().OverSoft
	}
	if !soft {
		t.Fatal("the session never crossed the soft threshold: the test proves nothing")
	}

	// Close racing sessions that start background work (go test -race checks the rest).
	for k := 0; k < 20; k++ {
		m, _ := testManager(t, bgConfig(g))
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			s, err := m.NewSession(fmt.Sprintf("r%d", w), []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}, nil)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 12; i++ {
					if err := s.Append(ctx, chat.TextMessage(chat.RoleUser, turnText(i)), chat.TextMessage(chat.RoleAssistant, "ok")); err != nil {
						t.Error(err)
						return
					}
					if _, err := s.Prepare(ctx); err != nil && !errors.Is(err, context.Canceled) {
						t.Error(err)
						return
					}
				}
			}()
		}
		time.Sleep(time.Millisecond)
		_ = m.Close()
		wg.Wait()
	}
}
