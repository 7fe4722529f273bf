package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Memory is an in-memory Store: everything lives in maps under one mutex and is lost when the
// process ends. It is meant for tests, for short-lived sessions and as the reference behaviour
// of the conformance suite (package storetest).
//
// Messages and summaries are normalized on the way in exactly as a persistent backend
// normalizes them (encoded with encoding/json and decoded again), so that Memory returns what
// the file and database stores return; every value handed out is a deep copy, so callers can
// neither change stored data nor see later changes through it.
//
// "Durable" means "stored in this process" here: a method that returns nil has stored its
// data for every later call on the same Memory.
type Memory struct {
	mu       sync.Mutex
	closed   bool
	sessions map[string]*memSession
	eventID  int64 // the last event id, across sessions (ids only grow)
}

type memSession struct {
	created, updated time.Time
	msgs             []chat.Message
	summaries        []Summary
	archive          map[int]chat.Message
	offloads         map[string]*memOffload
	state            []byte
	events           []Event
	model            string
	config           []byte
}

type memOffload struct {
	info Offloaded
	text string
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{sessions: make(map[string]*memSession)}
}

// begin validates ids and the context and locks m; the caller must unlock m.mu if err is nil.
func (m *Memory) begin(ctx context.Context, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		if err := CheckID(id); err != nil {
			return err
		}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// session returns the session, creating it when create is set (nil otherwise if absent).
func (m *Memory) session(id string, create bool) *memSession {
	s := m.sessions[id]
	if s == nil && create {
		now := time.Now()
		s = &memSession{created: now, updated: now, archive: make(map[int]chat.Message), offloads: make(map[string]*memOffload)}
		m.sessions[id] = s
	}
	return s
}

// Append implements Store. The check of `at` and the append are one atomic step. An empty
// msgs with the right `at` is a no-op that creates nothing. A message that encoding/json
// cannot encode (invalid raw JSON in Raw or Extra) makes the whole call fail, storing nothing.
func (m *Memory) Append(ctx context.Context, session string, at int, msgs []chat.Message) error {
	norm, err := normalizeMessages(msgs)
	if err != nil {
		return err
	}
	if err := m.begin(ctx, session); err != nil {
		return err
	}
	defer m.mu.Unlock()
	n := 0
	if s := m.sessions[session]; s != nil {
		n = len(s.msgs)
	}
	if at != n {
		return fmt.Errorf("%w: append at %d, session %q has %d messages", ErrConflict, at, session, n)
	}
	if len(norm) == 0 {
		return nil
	}
	s := m.session(session, true)
	s.msgs = append(s.msgs, norm...)
	s.updated = time.Now()
	return nil
}

// Messages implements Store. The range is clamped to the history: from < 0 counts as 0, to < 0
// or to > length as the length, and from >= to gives no messages. An unknown session has no
// messages (nil error).
func (m *Memory) Messages(ctx context.Context, session string, from, to int) ([]chat.Message, error) {
	if err := m.begin(ctx, session); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return nil, nil
	}
	from, to = Clamp(from, to, len(s.msgs))
	out := make([]chat.Message, 0, to-from)
	for _, msg := range s.msgs[from:to] {
		out = append(out, cloneMessage(msg))
	}
	return out, nil
}

// Prune implements Pruner: it deletes every session last written before olderThan.
func (m *Memory) Prune(ctx context.Context, olderThan time.Time, dryRun bool) ([]SessionInfo, error) {
	infos, err := m.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := []SessionInfo{}
	for _, info := range infos {
		// Sessions released the lock: judge by the session as it is now.
		s := m.sessions[info.ID]
		if s == nil || !s.updated.Before(olderThan) {
			continue
		}
		out = append(out, info)
		if !dryRun {
			delete(m.sessions, info.ID)
		}
	}
	return out, nil
}

// Sessions implements Store: every session with any stored data, sorted by id.
func (m *Memory) Sessions(ctx context.Context) ([]SessionInfo, error) {
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([]SessionInfo, 0, len(m.sessions))
	for id, s := range m.sessions {
		info := SessionInfo{ID: id, Created: s.created, Updated: s.updated, Messages: len(s.msgs)}
		if n := len(s.summaries); n > 0 {
			info.Summary = s.summaries[n-1].Version
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// PutSummary implements Store. A zero s.Created is set to the current time.
func (m *Memory) PutSummary(ctx context.Context, session string, s Summary) error {
	if s.Created.IsZero() {
		s.Created = time.Now()
	}
	s, err := s.Normalized()
	if err != nil {
		return err
	}
	if err := m.begin(ctx, session); err != nil {
		return err
	}
	defer m.mu.Unlock()
	latest := 0
	if ss := m.sessions[session]; ss != nil && len(ss.summaries) > 0 {
		latest = ss.summaries[len(ss.summaries)-1].Version
	}
	if s.Version != latest+1 {
		return fmt.Errorf("%w: summary version %d, session %q is at version %d", ErrConflict, s.Version, session, latest)
	}
	ss := m.session(session, true)
	ss.summaries = append(ss.summaries, s)
	ss.updated = time.Now()
	return nil
}

// PutState implements Store.
func (m *Memory) PutState(ctx context.Context, session string, state []byte) error {
	if err := m.begin(ctx, session); err != nil {
		return err
	}
	defer m.mu.Unlock()
	ss := m.session(session, true)
	ss.state = append([]byte(nil), state...)
	ss.updated = time.Now()
	return nil
}

// AppendEvent implements Store.
func (m *Memory) AppendEvent(ctx context.Context, session, kind string, body []byte) error {
	if err := m.begin(ctx, session); err != nil {
		return err
	}
	defer m.mu.Unlock()
	ss := m.session(session, true)
	m.eventID++
	ss.events = append(ss.events, Event{ID: m.eventID, At: time.Now(), Kind: kind, Body: append([]byte(nil), body...)})
	return nil
}

// Events implements Store.
func (m *Memory) Events(ctx context.Context, session string) ([]Event, error) {
	if err := m.begin(ctx, session); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := []Event{}
	if ss := m.sessions[session]; ss != nil {
		for _, e := range ss.events {
			e.Body = append([]byte(nil), e.Body...)
			out = append(out, e)
		}
	}
	return out, nil
}

// PutConfig implements Store.
func (m *Memory) PutConfig(ctx context.Context, session, model string, config []byte) error {
	if err := m.begin(ctx, session); err != nil {
		return err
	}
	defer m.mu.Unlock()
	ss := m.session(session, true)
	ss.model, ss.config = model, append([]byte(nil), config...)
	ss.updated = time.Now()
	return nil
}

// Config implements Store.
func (m *Memory) Config(ctx context.Context, session string) (string, []byte, error) {
	if err := m.begin(ctx, session); err != nil {
		return "", nil, err
	}
	defer m.mu.Unlock()
	ss := m.sessions[session]
	if ss == nil || ss.config == nil && ss.model == "" {
		return "", nil, nil
	}
	return ss.model, append([]byte(nil), ss.config...), nil
}

// State implements Store.
func (m *Memory) State(ctx context.Context, session string) ([]byte, error) {
	if err := m.begin(ctx, session); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if ss := m.sessions[session]; ss != nil && ss.state != nil {
		return append([]byte(nil), ss.state...), nil
	}
	return nil, nil
}

// Summaries implements Store: every version, oldest first; none (nil error) for an unknown
// session.
func (m *Memory) Summaries(ctx context.Context, session string) ([]Summary, error) {
	if err := m.begin(ctx, session); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return nil, nil
	}
	return append([]Summary(nil), s.summaries...), nil
}

// Archive implements Store. Positions already archived are skipped (the first message stored
// at a position stays); first must not be negative. The location is "memory:<session>/dialog".
func (m *Memory) Archive(ctx context.Context, session string, first int, msgs []chat.Message) (Location, error) {
	if first < 0 {
		return "", fmt.Errorf("store: archive at negative position %d", first)
	}
	norm, err := normalizeMessages(msgs)
	if err != nil {
		return "", err
	}
	if err := m.begin(ctx, session); err != nil {
		return "", err
	}
	defer m.mu.Unlock()
	loc := Location("memory:" + session + "/dialog")
	if len(norm) == 0 {
		return loc, nil
	}
	s := m.session(session, true)
	for i, msg := range norm {
		if _, ok := s.archive[first+i]; !ok {
			s.archive[first+i] = msg
		}
	}
	s.updated = time.Now()
	return loc, nil
}

// ReadArchive implements Store: the archived messages with positions in [from, to), in
// position order (positions never archived are simply absent); none (nil error) for an
// unknown session or an empty range.
func (m *Memory) ReadArchive(ctx context.Context, session string, from, to int) ([]Archived, error) {
	if err := m.begin(ctx, session); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil {
		return nil, nil
	}
	idx := make([]int, 0, len(s.archive))
	for i := range s.archive {
		if i >= from && (to < 0 || i < to) {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	out := make([]Archived, 0, len(idx))
	for _, i := range idx {
		out = append(out, Archived{Pos: i, Message: cloneMessage(s.archive[i])})
	}
	return out, nil
}

// Offload implements Store. If key is stored and not expired, the stored result is kept and
// described; an expired key is replaced. The location is "memory:<session>/tool_result/<key>".
func (m *Memory) Offload(ctx context.Context, session, key, text string, expires time.Time) (Offloaded, error) {
	if err := m.begin(ctx, session, key); err != nil {
		return Offloaded{}, err
	}
	defer m.mu.Unlock()
	s := m.session(session, true)
	now := time.Now()
	if o := s.offloads[key]; o != nil && !Expired(o.info.Expires, now) {
		return o.info, nil
	}
	info := Offloaded{
		Key:      key,
		Location: Location("memory:" + session + "/tool_result/" + key),
		Bytes:    len(text),
		Lines:    CountLines(text),
		Expires:  expires.Round(0),
	}
	s.offloads[key] = &memOffload{info: info, text: text}
	s.updated = now
	return info, nil
}

// ReadOffload implements Store. An unknown session or key is ErrNotFound; a result whose
// expiry has passed but that Cleanup has not removed yet is ErrExpired.
func (m *Memory) ReadOffload(ctx context.Context, session, key string, fromLine, maxLines int) (string, int, error) {
	if err := m.begin(ctx, session, key); err != nil {
		return "", 0, err
	}
	defer m.mu.Unlock()
	s := m.sessions[session]
	if s == nil || s.offloads[key] == nil {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q", ErrNotFound, key, session)
	}
	o := s.offloads[key]
	if Expired(o.info.Expires, time.Now()) {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q expired at %s", ErrExpired, key, session, o.info.Expires.Format(time.RFC3339))
	}
	text, total := SplitLines(o.text, fromLine, maxLines)
	return text, total, nil
}

// Cleanup implements Store.
func (m *Memory) Cleanup(ctx context.Context, now time.Time) (int, error) {
	if err := m.begin(ctx); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.sessions {
		for k, o := range s.offloads {
			if Expired(o.info.Expires, now) {
				delete(s.offloads, k)
				n++
			}
		}
	}
	return n, nil
}

// Close implements Store: it drops all data. Calls after Close, Close included, return
// ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.closed = true
	m.sessions = nil
	return nil
}

// normalizeMessages returns msgs as a persistent backend returns them: encoded with
// encoding/json and decoded again.
func normalizeMessages(msgs []chat.Message) ([]chat.Message, error) {
	out := make([]chat.Message, len(msgs))
	for i := range msgs {
		b, err := json.Marshal(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("store: encode message %d: %w", i, err)
		}
		if err := json.Unmarshal(b, &out[i]); err != nil {
			return nil, fmt.Errorf("store: decode message %d: %w", i, err)
		}
	}
	return out, nil
}

// cloneMessage is chat.Message.Clone that also copies raw JSON values, so that nothing a
// caller receives aliases stored memory.
func cloneMessage(m chat.Message) chat.Message {
	c := m.Clone()
	for i := range c.Content {
		c.Content[i].Raw = bytes.Clone(c.Content[i].Raw)
		cloneRawValues(c.Content[i].Extra)
	}
	for i := range c.ToolCalls {
		cloneRawValues(c.ToolCalls[i].Extra)
	}
	cloneRawValues(c.Extra)
	return c
}

func cloneRawValues(m map[string]json.RawMessage) {
	for k, v := range m {
		m[k] = bytes.Clone(v)
	}
}
