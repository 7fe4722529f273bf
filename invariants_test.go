package ctxmgr

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/provider"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/summarize"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/turns"
	"github.com/ctxmgr/ctxmgr/wire"
)

// fakeSummarizer answers deterministically from its input, or fails as told.
type fakeSummarizer struct {
	fail func(call int) error // nil: never
	call int
}

func (f *fakeSummarizer) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	f.call++
	if f.fail != nil {
		if err := f.fail(f.call); err != nil {
			return summarize.Result{}, err
		}
	}
	var b strings.Builder
	b.WriteString(req.ArchiveGuide)
	for _, h := range summarize.Headings {
		b.WriteString(h + "\n")
	}
	fmt.Fprintf(&b, "covers %d messages from %d; previous %d bytes\n", len(req.Messages), req.First, len(req.Previous))
	for _, m := range req.Messages {
		if m.Role == chat.RoleUser {
			t := m.Text()
			if len(t) > 40 {
				t = t[:40]
			}
			b.WriteString("- user: " + t + "\n")
		}
	}
	return summarize.Result{Text: b.String(), InputTokens: 100, OutputTokens: 50, Summarizer: "fake"}, nil
}

// genHistory builds a random but valid agent history: turns of a user message, assistant
// iterations with (parallel) tool calls and results of random size, and a final reply.
func genHistory(r *rand.Rand, turnsN int) []chat.Message {
	var h []chat.Message
	id := 0
	for t := 0; t < turnsN; t++ {
		h = append(h, chat.TextMessage(chat.RoleUser, fmt.Sprintf("turn %d: please fix src/pkg%d/file_%d.go and run the tests %s", t, r.IntN(9), r.IntN(99), strings.Repeat("detail ", r.IntN(30)))))
		for it := r.IntN(4); it > 0; it-- {
			a := chat.Message{Role: chat.RoleAssistant}
			if r.IntN(3) == 0 {
				a.Content = append(a.Content, chat.Part{Type: chat.PartReasoning, Text: strings.Repeat("thinking about it ", 1+r.IntN(200))})
			}
			if r.IntN(2) == 0 {
				a.Content = append(a.Content, chat.Part{Type: chat.PartText, Text: "I will run a command."})
			}
			n := 1 + r.IntN(3)
			for c := 0; c < n; c++ {
				id++
				a.ToolCalls = append(a.ToolCalls, chat.ToolCall{ID: fmt.Sprintf("call_%d", id), Name: "bash", Arguments: fmt.Sprintf(`{"cmd":"go test ./pkg%d"}`, id)})
			}
			h = append(h, a)
			for _, tc := range a.ToolCalls {
				size := []int{20, 200, 2000, 20000, 120000}[r.IntN(5)]
				var b strings.Builder
				for line := 0; b.Len() < size; line++ {
					fmt.Fprintf(&b, "%s line %d: ok value_%d\n", tc.ID, line, r.IntN(1000))
				}
				h = append(h, chat.ToolResult(tc.ID, tc.Name, b.String(), r.IntN(7) == 0))
			}
		}
		h = append(h, chat.TextMessage(chat.RoleAssistant, fmt.Sprintf("done with turn %d", t)))
	}
	return h
}

type runResult struct {
	requests []chat.Request
	errs     []string
	steps    map[Step]int
}

// drive appends a history message by message, preparing before every assistant message, and
// checks the invariants at each call.
// drive appends hist, preparing before every assistant message and checking the invariants.
// When realWindow > 0 the provider's window is that much: a prepared request above it (by
// our count) gets an overflow error, alternately stating the limit and the count or nothing,
// and what Recover returns is checked too.
func drive(t *testing.T, cfg Config, system []chat.Message, hist []chat.Message, realWindow int) runResult {
	t.Helper()
	ctx := context.Background()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession("inv", system, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := runResult{steps: map[Step]int{}}
	var prev *Prepared
	for i, msg := range hist {
		if msg.Role == chat.RoleAssistant {
			p, err := s.Prepare(ctx)
			if err != nil {
				var nf *NoFitError
				if errors.As(err, &nf) {
					out.errs = append(out.errs, "nofit")
				} else {
					out.errs = append(out.errs, err.Error())
				}
			} else {
				checkInvariants(t, m, s, system, hist[:i], prev, &p)
				for _, st := range p.Report.Steps {
					out.steps[st.Step]++
				}
				prev = &p
				out.requests = append(out.requests, p.Request)
				for attempt := 0; realWindow > 0 && p.Report.InputAfter+cfg.Budget.MaxOutput > realWindow; attempt++ {
					body := `{"error":{"message":"Please reduce the length of the messages.","code":"context_length_exceeded"}}`
					if attempt%2 == 0 {
						body = fmt.Sprintf(`{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.","code":"context_length_exceeded"}}`,
							realWindow, p.Report.InputAfter)
					}
					rp, err := s.Recover(ctx, &provider.StatusError{Status: 400, Body: []byte(body)})
					if err != nil {
						out.errs = append(out.errs, "recover: "+err.Error())
						break
					}
					checkInvariants(t, m, s, system, hist[:i], prev, &rp)
					for _, st := range rp.Report.Steps {
						out.steps[st.Step]++
					}
					p, prev = rp, &rp
					out.requests = append(out.requests, p.Request)
				}
			}
		}
		// Every third message is appended deferred, as the proxy does (its store write
		// waits for the next write of any kind, or the Flush below).
		appendFn := s.Append
		if i%3 == 1 {
			appendFn = s.AppendDeferred
		}
		if err := appendFn(ctx, msg); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// 3. Nothing lost: the store holds every appended message verbatim.
	stored, err := m.Config().Store.Messages(ctx, s.id, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(stored), normalize(hist)) {
		t.Fatalf("invariant 3: store history differs from appended history (%d vs %d)", len(stored), len(hist))
	}
	return out
}

func checkInvariants(t *testing.T, m *Manager, s *Session, system, hist []chat.Message, prev, p *Prepared) {
	t.Helper()
	ctx := context.Background()
	msgs := p.Request.Messages
	cfg := m.Config()
	// 1. Valid, in OpenAI and Anthropic form.
	if err := turns.Validate(msgs, turns.ValidateOptions{}); err != nil {
		t.Fatalf("invariant 1 (valid): %v", err)
	}
	for _, f := range []wire.Format{wire.OpenAI, wire.Anthropic} {
		body, err := wire.Encode(f, &p.Request)
		if err != nil {
			t.Fatalf("invariant 1 (%s encode): %v", f, err)
		}
		back, err := wire.Decode(f, body)
		if err != nil {
			t.Fatalf("invariant 1 (%s decode): %v", f, err)
		}
		if err := turns.Validate(back.Messages, turns.ValidateOptions{}); err != nil {
			t.Fatalf("invariant 1 (%s form): %v", f, err)
		}
	}
	// 2. Fits, by the counter in use, recounted from scratch.
	total := cfg.Counter.Request(&p.Request).Total
	if total != p.Report.InputAfter {
		t.Fatalf("report says %d input tokens, a recount says %d", p.Report.InputAfter, total)
	}
	w := s.window()
	if total+w.MaxOutput+w.MarginTokens() > w.Window {
		t.Fatalf("invariant 2 (fits): %d + %d + %d > %d", total, w.MaxOutput, w.MarginTokens(), w.Window)
	}
	// 3. Nothing lost: every message is in the store verbatim; evicted ones are archived;
	// replaced views have their full text offloaded.
	s.mu.Lock()
	start, pinned := s.start, s.pinned
	entries := slices_clone(s.entries)
	s.mu.Unlock()
	// Every evicted position is archived verbatim. The pinned message is sent instead; it may
	// also be archived already (by a summary that a concurrent call superseded), never wrongly.
	ranges := [][2]int{{0, start}}
	if pinned >= 0 {
		ranges = [][2]int{{0, pinned}, {pinned + 1, start}}
		one, err := cfg.Store.ReadArchive(ctx, s.id, pinned, pinned+1)
		if err != nil {
			t.Fatal(err)
		}
		if len(one) == 1 && !reflect.DeepEqual(normalize(archivedMessages(one)), normalize(hist[pinned:pinned+1])) {
			t.Fatalf("invariant 3: archive holds another message at the pinned position %d", pinned)
		}
	}
	for _, r := range ranges {
		if r[1] <= r[0] {
			continue
		}
		arch, err := cfg.Store.ReadArchive(ctx, s.id, r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range arch {
			if a.Pos != r[0]+i {
				t.Fatalf("invariant 3: archive of evicted messages %d-%d has position %d at %d", r[0], r[1]-1, a.Pos, i)
			}
		}
		if !reflect.DeepEqual(normalize(archivedMessages(arch)), normalize(hist[r[0]:r[1]])) {
			t.Fatalf("invariant 3: archive of evicted messages %d-%d differs (pinned %d)", r[0], r[1]-1, pinned)
		}
	}
	// Messages deferred by AppendDeferred may not be stored yet, but every evicted one is:
	// the store receives the history before its archive.
	if stored, err := cfg.Store.Messages(ctx, s.id, 0, -1); err != nil || len(stored) < start {
		t.Fatalf("invariant 3: %d messages evicted, %d stored (%v)", start, len(stored), err)
	}
	if pinned >= 0 && !reflect.DeepEqual(msgs[0], hist[pinned]) {
		t.Fatalf("pinned message %d is not sent first", pinned)
	}
	for i := start; i < len(entries); i++ {
		e := entries[i]
		if e.kind == viewOriginal || e.kind == viewNoReasoning {
			continue
		}
		text, _, err := cfg.Store.ReadOffload(ctx, s.id, offloadKey(i, e.orig.ToolCallID), 1, 0)
		if err != nil || text != fullText(&e.orig) {
			t.Fatalf("invariant 3: message %d (%s) not recoverable from the store: %v", i, e.kind, err)
		}
	}
	// 4. Prefix-stable between compaction events.
	if prev != nil && !p.Report.PrefixChanged {
		pm := prev.Request.Messages
		if len(pm) > len(msgs) || !reflect.DeepEqual(pm, msgs[:len(pm)]) {
			t.Fatalf("invariant 4: prefix changed without a compaction event")
		}
	}
	// 6. System prompt and latest user message untouched.
	if !reflect.DeepEqual(p.Request.System, system) {
		t.Fatalf("invariant 6: system prompt altered")
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].Role == chat.RoleUser {
			found := false
			for _, m := range msgs {
				if reflect.DeepEqual(m, hist[i]) {
					found = true
				}
			}
			if !found {
				t.Fatalf("invariant 6: latest user message %d not sent verbatim", i)
			}
			break
		}
	}
}

func slices_clone(e []entry) []entry { return append([]entry(nil), e...) }

// normalize makes nil and empty maps/slices compare equal after a store round trip.
func normalize(ms []chat.Message) []chat.Message {
	out := make([]chat.Message, len(ms))
	for i, m := range ms {
		m = m.Clone()
		if len(m.Meta) == 0 {
			m.Meta = nil
		}
		if len(m.Extra) == 0 {
			m.Extra = nil
		}
		out[i] = m
	}
	return out
}

func randomConfig(r *rand.Rand) Config {
	names := Presets()
	name := names[r.IntN(len(names))]
	window := []int{6000, 12000, 32000, 64000}[r.IntN(4)]
	cfg, err := Preset(name, window, window/8)
	if err != nil {
		panic(err)
	}
	if cfg.Counter == nil {
		// Exact counting is what the default uses; the property test uses a fast stand-in
		// most of the time so that it can run many histories.
		if r.IntN(6) == 0 {
			c, _ := tokens.ForEncoding("o200k_base")
			cfg.Counter = tokens.NewCache(c, 4096)
		} else {
			cfg.Counter = tokens.NewRatio(tokens.RatioOptions{PerToken: 3})
		}
	}
	cfg.Store = store.NewMemory()
	cfg.Logger = discardLogger()
	return cfg
}

func TestInvariantsRandom(t *testing.T) {
	n := 40
	if testing.Short() || raceEnabled {
		n = 8
	}
	seen := map[Step]int{}
	t.Cleanup(func() {
		t.Logf("steps exercised: %v", seen)
		// The property test must really exercise the pipeline, not pass vacuously.
		for _, st := range []Step{StepMask, StepSummarize, StepTruncate, StepRetrunc, StepFallback, StepRecover} {
			if seen[st] == 0 && !t.Failed() {
				t.Errorf("step %s never ran in %d random histories", st, n)
			}
		}
	})
	for seed := 0; seed < n; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 7))
			cfg := randomConfig(r)
			fs := &fakeSummarizer{}
			switch r.IntN(3) {
			case 0:
				fs.fail = func(call int) error {
					if call%3 == 0 {
						return errors.New("summarizer down")
					}
					return nil
				}
			case 1:
				cfg.Summarizer = nil // the extractive default
			}
			if cfg.Summarizer == nil && fs.fail == nil && r.IntN(2) == 0 {
				cfg.Summarizer = fs
			} else if fs.fail != nil {
				cfg.Summarizer = fs
			}
			system := []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a coding agent. Work in /repo.")}
			hist := genHistory(r, 4+r.IntN(14))
			realWindow := 0
			if r.IntN(3) == 0 {
				realWindow = cfg.Budget.Window * (4 + r.IntN(5)) / 10
			}
			res := drive(t, cfg, system, hist, realWindow)
			for k, v := range res.steps {
				seen[k] += v
			}
			// 5. Deterministic: the same history, config and summarizer output give the same
			// requests.
			cfg2 := cfg
			cfg2.Store = store.NewMemory()
			if cfg.Summarizer == fs {
				cfg2.Summarizer = &fakeSummarizer{fail: fs.fail}
			}
			res2 := drive(t, cfg2, system, hist, realWindow)
			if !reflect.DeepEqual(res.requests, res2.requests) || !reflect.DeepEqual(res.errs, res2.errs) {
				t.Fatalf("invariant 5: two runs differ")
			}
		})
	}
}

// FuzzPrepare drives the pipeline with arbitrary histories and configurations and checks the
// invariants at every call.
func FuzzPrepare(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint8(0))
	f.Add(uint64(2), uint8(12), uint8(1))
	f.Add(uint64(3), uint8(20), uint8(2))
	f.Add(uint64(4), uint8(3), uint8(3))
	f.Add(uint64(5), uint8(16), uint8(12)) // a provider window of 40% (mode bit 4)
	f.Fuzz(func(t *testing.T, seed uint64, nTurns uint8, mode uint8) {
		r := rand.New(rand.NewPCG(seed, uint64(mode)))
		cfg := randomConfig(r)
		cfg.Counter = tokens.NewRatio(tokens.RatioOptions{PerToken: 3})
		switch mode % 3 {
		case 1:
			cfg.Summarizer = &fakeSummarizer{fail: func(call int) error {
				if call%2 == 1 {
					return errors.New("boom")
				}
				return nil
			}}
		case 2:
			cfg.Summarizer = &fakeSummarizer{}
		}
		system := []chat.Message{chat.TextMessage(chat.RoleSystem, "sys")}
		realWindow := 0
		if mode&4 != 0 {
			realWindow = cfg.Budget.Window * (3 + int(mode>>3)%6) / 10
		}
		drive(t, cfg, system, genHistory(r, 1+int(nTurns%24)), realWindow)
	})
}

// archivedMessages returns the messages of arch, in its order.
func archivedMessages(arch []store.Archived) []chat.Message {
	out := make([]chat.Message, len(arch))
	for i := range arch {
		out[i] = arch[i].Message
	}
	return out
}
