// Package ctxmgr keeps an LLM agent's conversation inside the model's context window: cheaply,
// losing nothing, and never sending a request the provider will reject.
//
// Build a Manager from a Config, open a Session per conversation, Append every message the
// agent produces or receives, and call Prepare before every LLM call (each tool-loop iteration
// included). Prepare returns the exact request to send and a report of what it did. The
// pipeline, cheapest step first (what loses least runs first):
//
//  0. count every region, with per-message counts cached;
//  1. cap large tool results when they are appended (offload to the Store, snippet in context);
//  2. send as is while input + max output stays under the compaction threshold;
//  3. mask old tool results, batched, only when that frees enough to be worth a cache miss;
//  4. summarize the oldest turns down to the reserve, incrementally, archiving them first;
//  5. inside one huge turn, truncate its largest tool results middle-out, then older reasoning;
//  6. on a provider's "context too long" (Recover), force 3-5 to a tighter target.
//
// Invariants (tested, fuzzed): every request is valid (no orphan tool call or result), fits the
// window, loses nothing (history and Store hold every message verbatim), keeps its prefix
// between compaction events, is deterministic, and never alters the system prompt or the
// latest user message.
package ctxmgr

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/toolkind"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/summarize"
)

// Manager makes sessions (NewSession, LoadSession) that share one configuration, store and
// background work; the operations on a conversation are methods of its Session. It is safe for
// concurrent use. Calls on one Session are serialized by the session's lock, with one
// exception: a summarizer runs outside it (the cut is planned under the lock, the summarizer
// is called without it, and its result is applied under it only if the history it covered
// is unchanged), so a slow LLM never blocks the session's other calls.
type Manager struct {
	cfg      Config
	log      *slog.Logger
	fallback summarize.Summarizer // extractive, for a summarizer that fails
	// readTools is cfg.ReadTools as the classifier takes them, converted once.
	readTools []toolkind.ReadTool
	ctx       context.Context // parent of background work; canceled by Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	// mu guards closed, and wg.Add against Close's wg.Wait.
	mu     sync.Mutex
	closed bool
}

// New returns a Manager for cfg, with defaults filled in (Config.WithDefaults) and validated.
func New(cfg Config) (*Manager, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fb := summarize.NewExtractive(summarize.ExtractiveOptions{Counter: cfg.Counter})
	m := &Manager{cfg: cfg, log: cfg.Logger, fallback: fb, ctx: ctx, cancel: cancel}
	for _, rt := range cfg.ReadTools {
		m.readTools = append(m.readTools, toolkind.ReadTool(rt))
	}
	return m, nil
}

// Config returns the manager's configuration with defaults filled in.
func (m *Manager) Config() Config { return m.cfg }

// Close stops background summaries and waits for them; none starts after it (sessions then
// summarize in the foreground, when they must). It does not close the Store. Safe to call
// concurrently with any method of the Manager's sessions, and more than once.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return nil
}

// startWork counts a background goroutine about to start, unless the Manager is closed.
func (m *Manager) startWork() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}

// NewSession starts a session with the given system prompt (any number of system messages,
// sent first and never altered) and tool definitions. The id names the session in the Store
// and must pass store.CheckID.
func (m *Manager) NewSession(id string, system []chat.Message, tools []chat.Tool) (*Session, error) {
	if err := store.CheckID(id); err != nil {
		return nil, err
	}
	for i := range system {
		if system[i].Role != chat.RoleSystem {
			return nil, &chat.Error{Index: i, Field: "role", Err: chat.ErrInvalid, Detail: "system prompt messages must have role system"}
		}
	}
	if err := chat.Validate(system); err != nil {
		return nil, err
	}
	s := &Session{m: m, id: id, open: map[string]int{}, pinned: -1, lastUser: -1}
	s.setSystem(system, tools)
	return s, nil
}

// emit queues an event of s; s.mu is held. The method that holds it delivers the event once
// it has released the lock (Session.deliver).
func (m *Manager) emit(s *Session, ev Event) {
	ev.Session = s.id
	if ev.Freed == 0 {
		ev.Freed = ev.Before - ev.After
	}
	s.events = append(s.events, ev)
}

// publish delivers one event: Config.OnEvent, the Store (with ctx, the context of the call that
// raised the event) and the log. No lock is held.
func (m *Manager) publish(ctx context.Context, ev Event) {
	if m.cfg.OnEvent != nil {
		m.cfg.OnEvent(ev)
	}
	if b, err := json.Marshal(ev); err == nil {
		if err := m.cfg.Store.AppendEvent(ctx, ev.Session, string(ev.Step), b); err != nil {
			m.log.Warn("ctxmgr: storing event failed", slog.String("session", ev.Session), slog.String("error", err.Error()))
		}
	}
	attrs := []slog.Attr{slog.String("session", ev.Session), slog.String("reason", ev.Reason),
		slog.Int("before", ev.Before), slog.Int("after", ev.After),
		slog.Int("freed", ev.Freed), slog.Int("messages", ev.Messages)}
	if ev.ExpectedSaving != 0 {
		attrs = append(attrs, slog.Float64("expected_saving", ev.ExpectedSaving))
	}
	m.log.LogAttrs(ctx, slog.LevelInfo, "ctxmgr "+string(ev.Step), attrs...)
}

func (m *Manager) storeErr(op string, err error) error {
	return fmt.Errorf("ctxmgr: store %s: %w", op, err)
}

// deliver delivers the events s raised, in order, with no lock held: each Session method that
// may raise one defers it before it takes s.mu. One call delivers at a time; an event raised
// meanwhile (by another goroutine, or by Config.OnEvent calling the session) is delivered by
// that call's loop, after the events before it.
func (s *Session) deliver(ctx context.Context) {
	s.mu.Lock()
	if s.delivering || len(s.events) == 0 {
		s.mu.Unlock()
		return
	}
	s.delivering = true
	done := false
	defer func() {
		if !done {
			// OnEvent panicked: the events after it wait for the next call.
			s.mu.Lock()
			s.delivering = false
			s.mu.Unlock()
		}
	}()
	for len(s.events) > 0 {
		evs := s.events
		s.events = nil
		s.mu.Unlock()
		for _, ev := range evs {
			s.m.publish(ctx, ev)
		}
		s.mu.Lock()
	}
	s.delivering, done = false, true
	s.mu.Unlock()
}
