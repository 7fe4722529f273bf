package ctxmgr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/provider"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/wire"
)

// An agent loop that calls its provider with what Prepare returns and, when the provider
// still answers "context too long", retries with what Recover returns; any other error is
// returned as it is. Here the configured window is the default 200,000 tokens but the model
// behind the provider has 16,385: its error says so, and the session keeps the smaller window.
func ExampleSession_Recover() {
	ctx := context.Background()
	cfg := ctxmgr.Config{}
	cfg.Budget.MaxOutput = 1024
	m, _ := ctxmgr.New(cfg)
	defer m.Close()
	s, _ := m.NewSession("recover", nil, nil)
	for i := range 40 {
		_ = s.Append(ctx, chat.TextMessage(chat.RoleUser, fmt.Sprintf("step %d: %s", i, strings.Repeat("context ", 400))))
		_ = s.Append(ctx, chat.TextMessage(chat.RoleAssistant, "done"))
	}
	_ = s.Append(ctx, chat.TextMessage(chat.RoleUser, "and now?"))

	// The provider (exact counts, for the example).
	call := func(p ctxmgr.Prepared) error {
		if n := p.Report.InputAfter; n+1024 > 16385 {
			return &provider.StatusError{Status: 400, Body: fmt.Appendf(nil, `{"error":{"type":"invalid_request_error",`+
				`"code":"context_length_exceeded","message":"This model's maximum context length is 16385 tokens. `+
				`However, your messages resulted in %d tokens."}}`, n)}
		}
		return nil
	}
	p, err := s.Prepare(ctx)
	if err != nil {
		panic(err)
	}
	calls := 1
	for err = call(p); err != nil && provider.IsOverflowError(err); err = call(p) {
		if p, err = s.Recover(ctx, err); err != nil {
			break // recoveries exhausted, or the limit leaves no room: err says why
		}
		calls++
	}
	fmt.Println("error:", err, "calls:", calls)
	fmt.Println("window now below 16385:", s.Stats().Window < 16385)
	fmt.Println("latest user message kept:", p.Request.Messages[len(p.Request.Messages)-1].Text())
	// Output:
	// error: <nil> calls: 2
	// window now below 16385: true
	// latest user message kept: and now?
}

// /compact and /context for a chat front end: compact everything but the recent history now,
// with an instruction for the summary, then show what the session holds.
func ExampleSession_Compact() {
	ctx := context.Background()
	cfg, _ := ctxmgr.Preset(ctxmgr.PresetDefault, 32768, 4096)
	m, _ := ctxmgr.New(cfg)
	defer m.Close()
	s, _ := m.NewSession("compact", []chat.Message{chat.TextMessage(chat.RoleSystem, "You are terse.")}, nil)
	for i := range 60 {
		_ = s.Append(ctx, chat.TextMessage(chat.RoleUser, fmt.Sprintf("Rename handler%d in pkg/api/routes.go. %s", i, strings.Repeat("Details. ", 120))))
		_ = s.Append(ctx, chat.TextMessage(chat.RoleAssistant, fmt.Sprintf("Renamed handler%d.", i)))
	}
	res, err := s.Compact(ctx, "keep every file path")
	if err != nil {
		panic(err)
	}
	st := s.Stats()
	fmt.Println("compacted:", res.Messages > 0, "smaller:", res.TokensAfter < res.TokensBefore)
	fmt.Println("summary version:", res.SummaryVersion, st.SummaryVersion)
	fmt.Println("nothing lost:", st.Total == 120 && st.Evicted == res.Messages)
	fmt.Println("summary keeps the path:", strings.Contains(res.Summary, "pkg/api/routes.go"))
	// Output:
	// compacted: true smaller: true
	// summary version: 1 1
	// nothing lost: true
	// summary keeps the path: true
}

// A session that outlives its process: with a persistent store, LoadSession in a new process
// rebuilds the session, and its next request is the one the old process would have sent.
func ExampleManager_LoadSession() {
	ctx := context.Background()
	st := store.NewMemory() // files.Open, sqlite.Open or postgres.Open in a real program
	system := []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a coding agent.")}

	cfg, _ := ctxmgr.Preset(ctxmgr.PresetDefault, 32768, 4096)
	cfg.Store = st
	first, _ := ctxmgr.New(cfg)
	s, _ := first.NewSession("build-42", system, nil)
	_ = s.Append(ctx, chat.TextMessage(chat.RoleUser, "Fix the build."))
	before, _ := s.Prepare(ctx)
	_ = first.Close()

	// Later, in another process:
	second, _ := ctxmgr.New(cfg)
	defer second.Close()
	s2, err := second.LoadSession(ctx, "build-42", system, nil)
	if err != nil {
		panic(err)
	}
	after, _ := s2.Prepare(ctx)
	a, _ := wire.EncodeOpenAI(&before.Request)
	b, _ := wire.EncodeOpenAI(&after.Request)
	fmt.Println("same request:", string(a) == string(b))
	// Output:
	// same request: true
}

// Managing a request body an OpenAI client built: decode it, manage it, encode it back.
// Every body field ctxmgr does not manage (model, temperature, ...) is kept as it was.
func Example_wire() {
	ctx := context.Background()
	body := []byte(`{"model":"gpt-4o","temperature":0.2,"messages":[
		{"role":"system","content":"You are terse."},
		{"role":"user","content":"Summarize the log."}]}`)
	req, err := wire.DecodeOpenAI(body)
	if err != nil {
		var ce *chat.Error
		fmt.Println("bad request:", errors.As(err, &ce))
		return
	}
	cfg, _ := ctxmgr.Preset(ctxmgr.PresetDefault, 128000, 4096)
	m, _ := ctxmgr.New(cfg)
	defer m.Close()
	s, _ := m.NewSession("wire", req.System, req.Tools)
	_ = s.Append(ctx, req.Messages...)
	p, _ := s.Prepare(ctx)
	out := *req
	out.System, out.Tools, out.Messages = p.Request.System, p.Request.Tools, p.Request.Messages
	b, _ := wire.EncodeOpenAI(&out)
	fmt.Println(string(b))
	// Output:
	// {"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Summarize the log."}],"temperature":0.2}
}

// A server that must answer quickly writes a request's new messages while the LLM call is
// under way: AppendDeferred takes them into the session at once, Flush writes them beside
// the call, and the answer goes out only once Flush has succeeded (ctxmgr serve does this
// with SQLite and file stores). Should Flush fail, the session no longer matches its store:
// load it again.
func ExampleSession_AppendDeferred() {
	ctx := context.Background()
	st := store.NewMemory()
	m, _ := ctxmgr.New(ctxmgr.Config{Store: st})
	defer m.Close()
	s, _ := m.NewSession("deferred", nil, nil)

	_ = s.AppendDeferred(ctx, chat.TextMessage(chat.RoleUser, "what changed in main.go?"))
	p, _ := s.Prepare(ctx)
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx) }()
	// ... the LLM call with p.Request runs here, beside the store write ...
	if err := <-flushed; errors.Is(err, ctxmgr.ErrNotStored) {
		// Answer with an error (the client sends the request again), and go on from what
		// the store holds.
		s, _ = m.LoadSession(ctx, "deferred", nil, nil)
	}
	stored, _ := st.Messages(ctx, "deferred", 0, -1)
	fmt.Println("sent:", len(p.Request.Messages), "stored:", len(stored), "in the session:", s.Len())
	// Output:
	// sent: 1 stored: 1 in the session: 1
}
