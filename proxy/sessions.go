package proxy

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ctxmgr/ctxmgr/internal/readtool"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// managerKey identifies one Manager configuration: the window, the reply reserve, the token
// counter (an exact encoding, or a model's calibrated estimate) and the prices of the
// provider's prompt cache (ctxmgr.PricesAnthropic for Anthropic's format, ctxmgr.PricesOpenAI
// for the others: OpenAI's and Gemini's caches charge no write premium).
type managerKey struct {
	window, maxOutput int
	counter           string
	prices            ctxmgr.Prices
}

// managed is a Manager of the proxy. users and elem are guarded by Server.mgrMu.
type managed struct {
	m     *ctxmgr.Manager
	exact bool
	key   managerKey
	// users counts the requests using the Manager (manager, until releaseManager).
	users int
	elem  *list.Element // in Server.mgrLRU
}

// maxManagers bounds the Managers kept: one per (window, reply reserve, counter, prices) in
// use, and a client that varies max_tokens or the model name makes a new key each time. The
// least recently used Manager no request is using is closed past it; its sessions are loaded
// again from the Store by the next request that needs them (sync).
const maxManagers = 64

// pricesFor returns the prices of the prompt cache of the provider of format f.
func pricesFor(f Format) ctxmgr.Prices {
	if f == FormatAnthropic {
		return ctxmgr.PricesAnthropic
	}
	return ctxmgr.PricesOpenAI
}

// manager returns the Manager for a request of format f for model with this window and reply
// size, creating it on first use, and counts the caller as a user: call releaseManager when
// done with it.
func (s *Server) manager(f Format, model string, window, maxOutput int) (*managed, managerKey, error) {
	var key managerKey
	key.window, key.maxOutput, key.prices = window, maxOutput, pricesFor(f)
	enc, exact := tokens.EncodingForModel(model)
	if exact {
		key.counter = enc
	} else {
		key.counter = "cal:" + model
	}
	s.mgrMu.Lock()
	defer s.mgrMu.Unlock()
	if m := s.managers[key]; m != nil {
		m.users++
		s.mgrLRU.MoveToFront(m.elem)
		return m, key, nil
	}
	cfg, err := ctxmgr.Preset(s.cfg.Preset, window, maxOutput)
	if err != nil {
		return nil, key, err
	}
	cfg.Prices = key.prices // Tune may set others
	if cfg.Counter == nil {
		if exact {
			c := s.exact[enc]
			if c == nil {
				base, err := tokens.ForEncoding(enc)
				if err != nil {
					return nil, key, err
				}
				c = tokens.NewCache(base, 1<<16)
				s.exact[enc] = c
			}
			cfg.Counter = c
			cfg.Budget.NoSafetyMargin = true
		} else {
			cfg.Counter = s.cal.Counter(model)
		}
	}
	// The presets' ingestion cap (50000 bytes) suits 200K windows; a tool result of more than
	// about a quarter of a small window is offloaded at once instead of being truncated later.
	if cfg.ToolResultCap > window && window >= 1024 {
		cfg.ToolResultCap = window
	}
	cfg.Store = s.cfg.Store
	cfg.Logger = s.log
	if s.cfg.Summarizer != nil {
		cfg.Summarizer = s.cfg.Summarizer
	}
	cfg.OnEvent = s.metrics.onEvent
	if s.cfg.Tune != nil {
		s.cfg.Tune(&cfg)
	}
	mgr, err := ctxmgr.New(cfg)
	if err != nil {
		return nil, key, err
	}
	m := &managed{m: mgr, exact: exact && cfg.Counter != nil, key: key, users: 1}
	s.managers[key] = m
	m.elem = s.mgrLRU.PushFront(m)
	for e := s.mgrLRU.Back(); e != nil && s.mgrLRU.Len() > s.maxManagers; {
		o := e.Value.(*managed)
		e = e.Prev()
		if o.users == 0 {
			s.mgrLRU.Remove(o.elem)
			delete(s.managers, o.key)
			_ = o.m.Close()
		}
	}
	return m, key, nil
}

// releaseManager ends a use of m that manager counted.
func (s *Server) releaseManager(m *managed) {
	if m == nil {
		return
	}
	s.mgrMu.Lock()
	m.users--
	s.mgrMu.Unlock()
}

// nhash is the normalized hash of a message: what the conversation means, not how a client
// spelled it. It covers the role, the text of the parts, images and files, other blocks,
// tool calls (id, name, arguments as canonical JSON), tool_call_id and is_error; it ignores
// reasoning parts (clients often drop them), the wire spelling (Shape, Wire, Extra, empty
// text parts) and names, because clients re-serialize the assistant message they received
// slightly differently.
type nhash [16]byte

func normHash(m *chat.Message) nhash {
	h := sha256.New()
	var n [8]byte
	field := func(tag byte, s string) {
		h.Write([]byte{tag})
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		// The hash neither keeps nor changes its input: no copy of a large tool result.
		h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
	}
	field('r', string(m.Role))
	for i := range m.Content {
		p := &m.Content[i]
		switch p.Type {
		case chat.PartText:
			if p.Text != "" {
				field('t', p.Text)
			}
		case chat.PartImage:
			if p.Image != nil {
				field('i', p.Image.URL+"\x00"+p.Image.Data)
			}
		case chat.PartFile:
			if p.File != nil {
				field('f', p.File.ID+"\x00"+p.File.URL+"\x00"+p.File.Data)
			}
		case chat.PartOther:
			field('o', canonicalJSON(string(p.Raw)))
		}
	}
	for _, tc := range m.ToolCalls {
		field('c', tc.ID)
		field('n', tc.Name)
		field('a', canonicalJSON(tc.Arguments))
	}
	if m.ToolCallID != "" {
		field('T', m.ToolCallID)
	}
	if m.IsError {
		field('E', "")
	}
	var out nhash
	copy(out[:], h.Sum(nil))
	return out
}

// canonicalJSON re-encodes a JSON value with sorted keys and no insignificant whitespace;
// text that is not JSON is returned as is.
func canonicalJSON(s string) string {
	t := strings.TrimSpace(s)
	if t == "" {
		return ""
	}
	if t[0] != '{' && t[0] != '[' {
		return s
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return s
	}
	return string(b)
}

func hashAll(msgs []chat.Message) []nhash {
	out := make([]nhash, len(msgs))
	for i := range msgs {
		out[i] = normHash(&msgs[i])
	}
	return out
}

// hashSetup is the hash of a system prompt and tool definitions.
func hashSetup(system []chat.Message, tools []chat.Tool) nhash {
	h := sha256.New()
	for i := range system {
		x := normHash(&system[i])
		h.Write(x[:])
	}
	h.Write([]byte{0})
	for _, t := range tools {
		b, _ := json.Marshal(t)
		h.Write(b)
	}
	var out nhash
	copy(out[:], h.Sum(nil))
	return out
}

// psession is the proxy's side of one conversation: the ctxmgr Session that holds its
// history, and the views of that history the proxy keeps beside it (historyViews).
//
// The lock rule. mu guards sess, mgr, key, created, readTool and the stored views (hashes,
// orig, setup). It is taken and released in one function, and never held across a call that
// may summarize (Session.Prepare, Recover, Compact, CompactAll: an LLM summarizer takes
// seconds) nor across an upstream call:
//   - syncConversation syncs a request's history into the Session (load, SetSystem, Append:
//     store writes, no summary) and copies what the request needs into a conversation (the
//     Session, its Manager, how many messages its history holds after the sync), then
//     unlocks;
//   - the request then prepares, compacts and recovers on that Session without mu: a
//     ctxmgr.Session guards its own state and releases its own lock while a summary is
//     written, so meanwhile another request of the conversation syncs and prepares, and the
//     inspector and /context read the Session's statistics;
//   - every other use takes mu for one step and releases it in the same function:
//     declareRead, holds and drop, which act only if the request's Session is still ps's (a
//     request that reloaded it has replaced it); storedPrefix and countStored, which read
//     the stored views; the inspector's openView.
//
// Requests of one conversation thus sync one at a time, each on the views its predecessor
// left. A Prepare builds the request from the Session as it then is: messages a later
// request appended meanwhile are at its end, and conversation.own cuts them off, so that
// each request sends its own history (the later request sends them with its own).
type psession struct {
	mu       sync.Mutex
	id       string
	key      managerKey
	mgr      *managed
	sess     *ctxmgr.Session
	readTool bool
	// created: the last load found no history (a new session, or a new branch).
	created bool
	// views are the proxy's views of the session's history (history_views.go).
	views historyViews
	// branches are the ids of the branches the last requests that diverged from this
	// session's history after its first message went to (openSession), the most recent
	// first, at most recentBranches; nil if none. Replaced whole, never modified.
	branches atomic.Pointer[[]string]
	elem     *list.Element
	// users counts the requests using the session (ref, until unref); guarded by
	// Server.sessMu. A session in use is never dropped from the cache: a request for it then
	// would load a second copy beside the one in use.
	users int
}

// ref returns the session with this id from the cache (a fresh one if absent), counted in
// use: the caller calls unref once done with it. Past Config.MaxSessions the least recently
// used sessions not in use are dropped (the cache holds more while more are in use).
func (s *Server) ref(id string) *psession {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	ps := s.sessions[id]
	if ps == nil {
		ps = &psession{id: id, views: historyViews{blocks: encodecache.New()}}
		s.sessions[id] = ps
		ps.elem = s.lru.PushFront(ps)
		for e := s.lru.Back(); e != nil && s.lru.Len() > s.cfg.MaxSessions; {
			o := e.Value.(*psession)
			e = e.Prev()
			if o.users == 0 {
				s.lru.Remove(o.elem)
				delete(s.sessions, o.id)
			}
		}
	} else {
		s.lru.MoveToFront(ps.elem)
	}
	ps.users++
	return ps
}

// unref ends a use of ps that ref counted (nil: none).
func (s *Server) unref(ps *psession) {
	if ps == nil {
		return
	}
	s.sessMu.Lock()
	ps.users--
	s.sessMu.Unlock()
}

// conversation is what a request holds of its conversation once synced: a copy of its
// psession's state, taken under the lock by syncConversation, which the request uses
// without the lock (see psession).
type conversation struct {
	// ps is the conversation, counted in use (Server.ref) until the exchange ends.
	ps *psession
	id string
	// sess is ps's Session as the sync left it, holding the request's messages; mgr its
	// Manager.
	sess *ctxmgr.Session
	mgr  *managed
	// synced is how many messages sess's history held after the sync: the request's own
	// history (own).
	synced int
	// orig is what those messages count as the client sent them (historyViews.orig).
	orig int
	// readTool: ctxmgr_read is declared in what is sent. Set by the sync, then from the
	// tools of what Prepare (manage) or Recover (recover) returned; cleared by withoutRead.
	readTool bool
}

// syncConversation syncs ps with a request's history (sync) under ps's lock, and returns
// what the request needs of it; branched: ps is a branch of the key's own session (a new one
// is counted). On errBranch it returns how many first messages the stored history shares with
// the request's.
func (s *Server) syncConversation(ctx context.Context, ps *psession, m *managed, key managerKey, req *chat.Request, msgs []chat.Message, hashes []nhash, branched bool) (conversation, int, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := s.sync(ctx, ps, m, key, req.System, req.Tools, msgs, hashes); err != nil {
		shared := 0
		if errors.Is(err, errBranch) {
			shared = commonPrefix(ps.views.hashes, hashes)
		}
		return conversation{}, shared, err
	}
	if branched && ps.created {
		s.metrics.branches.Inc() // a new branch, not a later request of one
	}
	ps.created = false
	return conversation{ps: ps, id: ps.id, sess: ps.sess, mgr: ps.mgr, synced: len(ps.views.hashes),
		orig: ps.views.orig, readTool: ps.readTool}, 0, nil
}

// declareRead declares the ctxmgr_read tool on c's session under its lock (offerReadTool;
// always: even with nothing stored to read), if c's Session is still the conversation's, and
// reports whether the tool is declared on it.
func (s *Server) declareRead(c *conversation, system []chat.Message, tools []chat.Tool, always bool) (bool, error) {
	ps := c.ps
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.sess != c.sess {
		return c.readTool, nil // reloaded meanwhile: c's Session is as it was
	}
	var err error
	if always {
		err = s.offerReadTool(ps, system, tools, true)
	} else {
		err = s.syncReadTool(ps, system, tools)
	}
	return ps.readTool, err
}

// holds reports whether sess is still ps's Session.
func (ps *psession) holds(sess *ctxmgr.Session) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return sess != nil && ps.sess == sess
}

// drop forgets sess, if it is ps's Session: the next request loads the session again.
func (ps *psession) drop(sess *ctxmgr.Session) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.sess == sess {
		ps.sess = nil
	}
}

// load (re)loads ps from the store under manager m. Called with ps.mu held.
func (s *Server) load(ctx context.Context, ps *psession, m *managed, key managerKey, system []chat.Message, tools []chat.Tool) error {
	sess, err := m.m.LoadSession(ctx, ps.id, system, tools)
	if err != nil {
		return err
	}
	ps.sess, ps.mgr, ps.key = sess, m, key
	hist := sess.History()
	ps.created = len(hist) == 0
	c := m.m.Config().Counter
	orig := 0
	for i := range hist {
		orig += s.origTokens(c, &hist[i])
	}
	ps.views.loaded(hashAll(hist), orig, system, tools)
	ps.readTool = false
	s.snapshotConfig(ctx, ps.id, m, key, system, tools)
	return s.syncReadTool(ps, system, tools)
}

// snapshotConfig records the configuration a session is managed with, best effort (it is a
// record for operators; a failure is logged). It includes the system prompt and tools the
// session is given (the ctxmgr_read tool included once injected), so that `ctxmgr sessions
// show` counts the same regions /context does; it is rewritten when they change.
func (s *Server) snapshotConfig(ctx context.Context, id string, m *managed, key managerKey, system []chat.Message, tools []chat.Tool) {
	c := m.m.Config()
	snap, err := json.Marshal(map[string]any{
		"preset": s.cfg.Preset, "window": key.window, "max_output": key.maxOutput, "counter": c.Counter.Name(),
		"threshold": c.Budget.Threshold, "reserve": c.Budget.Reserve, "tool_result_cap": c.ToolResultCap,
		"system": system, "tools": tools,
	})
	if err != nil {
		return
	}
	if err := s.cfg.Store.PutConfig(ctx, id, key.counter, snap); err != nil {
		s.cfg.Logger.Warn("proxy: storing the session's config snapshot failed", slog.String("session", id), slog.String("error", err.Error()))
	}
}

// syncReadTool declares the ctxmgr_read tool in the session's tools when its client declares
// tools of its own (readtool.Declared): from the first request managed, so the tool list
// never changes in the middle of a conversation.
func (s *Server) syncReadTool(ps *psession, system []chat.Message, tools []chat.Tool) error {
	return s.offerReadTool(ps, system, tools, false)
}

// offerReadTool is syncReadTool; with always, the tool is offered even to a conversation
// without tools (its request reads another session's archive: readFrom).
func (s *Server) offerReadTool(ps *psession, system []chat.Message, tools []chat.Tool, always bool) error {
	if s.cfg.DisableReadTool || ps.readTool {
		return nil
	}
	if !always && !readtool.Declared(tools) {
		return nil
	}
	if err := ps.sess.SetSystem(system, withReadTool(tools)); err != nil {
		return err
	}
	ps.readTool = true
	s.snapshotConfig(context.Background(), ps.id, ps.mgr, ps.key, system, withReadTool(tools))
	return nil
}

// errBranch says that the stored history is not a prefix of the incoming one.
var errBranch = errors.New("proxy: history diverged")

// sync makes the session's history equal the incoming history: appends what is new. It
// returns errBranch (and appends nothing) when the stored history is not a prefix of the
// incoming one. Called with ps.mu held.
func (s *Server) sync(ctx context.Context, ps *psession, m *managed, key managerKey, system []chat.Message, tools []chat.Tool, msgs []chat.Message, hashes []nhash) error {
	if ps.sess == nil || ps.mgr != m || ps.sess.Len() != len(ps.views.hashes) {
		// New, or its Manager is another (another key, or one closed past maxManagers); or
		// its views are not of its history (historyViews), which a reload rebuilds.
		if err := s.load(ctx, ps, m, key, system, tools); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		v := &ps.views
		if len(v.hashes) > len(hashes) || !slices.Equal(v.hashes, hashes[:len(v.hashes)]) {
			return errBranch
		}
		if setup := v.setupHash(system, tools); setup != v.setup {
			t := tools
			if ps.readTool {
				t = withReadTool(tools)
			}
			if err := ps.sess.SetSystem(system, t); err != nil {
				return err
			}
			v.setup = setup
			s.snapshotConfig(ctx, ps.id, m, key, system, t)
		}
		news := msgs[len(v.hashes):]
		if len(news) == 0 {
			break
		}
		var err error
		if s.cfg.SharedStore {
			err = ps.sess.Append(ctx, storedCopies(news)...)
		} else {
			err = ps.sess.AppendDeferred(ctx, storedCopies(news)...) // written by exchange.startFlush
		}
		if err == nil {
			c := ps.mgr.m.Config().Counter
			orig := 0
			for i := range news {
				orig += s.origTokens(c, &news[i])
			}
			v.appended(hashes[len(v.hashes):], orig)
			if !offloadable(news, ps.mgr.m.Config().ToolResultCap) {
				return nil // nothing appended was stored apart: the read tool is as it was
			}
			break
		}
		if err := afterConflict(ctx, err, attempt); err != nil {
			return err
		}
		// Another instance appended to this session: reload it from the store and retry.
		s.metrics.reloads.Inc()
		if err := s.load(ctx, ps, m, key, system, tools); err != nil {
			return err
		}
	}
	return s.syncReadTool(ps, system, tools)
}

// offloadable reports whether an appended message may have been offloaded at ingestion: a
// tool result above the cap.
func offloadable(msgs []chat.Message, limit int) bool {
	for i := range msgs {
		if msgs[i].Role != chat.RoleTool || limit <= 0 {
			continue
		}
		n := 0
		for _, p := range msgs[i].Content {
			n += len(p.Text) + len(p.Raw)
		}
		if n > limit {
			return true
		}
	}
	return false
}

// storedCopies returns the messages as the session stores them: without cache breakpoints,
// which belong to the one request that carried them (see breakpoints.go).
func storedCopies(msgs []chat.Message) []chat.Message {
	var out []chat.Message
	for i := range msgs {
		m := stripBreakpoints(msgs[i])
		if out == nil && breakpointOf(&msgs[i]) != nil {
			out = slices.Clone(msgs[:i:i])
		}
		if out != nil {
			out = append(out, m)
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

// branchID names the branch of session id that a history diverging at message k starts: a
// hash of the incoming history up to and including its first differing message, so that
// the branch is found again when the client goes on with the edited history.
func branchID(id string, hashes []nhash, k int) string {
	h := sha256.New()
	for _, x := range hashes[:min(k+1, len(hashes))] {
		h.Write(x[:])
	}
	if k >= len(hashes) {
		h.Write([]byte("rewind"))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:8]
	if len(id)+9 > store.MaxIDLen-20 {
		hh := sha256.Sum256([]byte(id))
		id = "b-" + hex.EncodeToString(hh[:8])
	}
	return id + "+" + sum
}

func commonPrefix(a, b []nhash) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// sanitizeID turns a client-given session name into a store-safe id.
func sanitizeID(prefix, s string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:@=", c) >= 0 {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 120 || out != prefix+s {
		h := sha256.Sum256([]byte(s))
		cut := min(len(out), 80)
		out = out[:cut] + "-" + hex.EncodeToString(h[:8])
	}
	if out == "" || out[0] == '.' {
		out = "s" + out
	}
	return out
}

// sessionKey picks the session of a request: the X-Ctxmgr-Session header, else the Anthropic
// metadata.user_id, else the OpenAI prompt_cache_key, else a hash of the system prompt and the
// first user message.
func sessionKey(header string, req *chat.Request, msgs []chat.Message) (id, source string) {
	if header != "" {
		id := sanitizeID("", header)
		if id == keySession {
			// The store's own key lives under that name: a client never reaches it.
			id = "client-" + id
		}
		return id, "header"
	}
	if raw, ok := req.Extra["metadata"]; ok {
		var md struct {
			UserID string `json:"user_id"`
		}
		if json.Unmarshal(raw, &md) == nil && md.UserID != "" {
			return sanitizeID("user-", md.UserID), "metadata.user_id"
		}
	}
	// OpenAI's prompt_cache_key: Codex CLI sends its conversation id there.
	var pck string
	if json.Unmarshal(req.Extra["prompt_cache_key"], &pck) == nil && pck != "" {
		return sanitizeID("pck-", pck), "prompt_cache_key"
	}
	h := sha256.New()
	if req.Wire != string(FormatGemini) {
		// A Gemini countTokens body cannot carry the system instruction (the SDKs refuse
		// it): Gemini conversations are known by their first user message alone.
		for i := range req.System {
			x := normHash(&req.System[i])
			h.Write(x[:])
		}
	}
	h.Write([]byte{0})
	for i := range msgs {
		if msgs[i].Role == chat.RoleUser {
			x := normHash(&msgs[i])
			h.Write(x[:])
			break
		}
	}
	return "h-" + hex.EncodeToString(h.Sum(nil))[:16], "hash"
}

// openSession finds the session for the incoming history and syncs it (syncConversation).
// The session returned is in use (ref): the caller unrefs it once done; its lock is not held.
//
// The sessions of one key (a header, a metadata.user_id, a hash) form a family, and every id
// in it is derived from the history, so that the family is found again after a restart
// without an index:
//   - the key's own session, while its stored history is a prefix of the incoming one;
//   - a history that shares no first message with it is another conversation under the same
//     key (a side request a client makes for itself, a new chat): it gets a session of its own,
//     conversationID, and is not counted as a branch, so the main conversation stays whole;
//   - a history that shares a prefix but then differs is an edit or a rewind: a branch,
//     branchID, counted in ctxmgr_branches_total. The branch the last such request went to
//     is tried first (continueBranch): a replayed history names a new branch with every
//     request.
func (s *Server) openSession(ctx context.Context, base string, m *managed, key managerKey, req *chat.Request, msgs []chat.Message, hashes []nhash) (conversation, bool, error) {
	id := base
	branched := false
	for depth := 0; depth < 6; depth++ {
		ps := s.ref(id)
		c, k, err := s.syncConversation(ctx, ps, m, key, req, msgs, hashes, branched)
		if err == nil {
			return c, branched, nil
		}
		s.unref(ps)
		if !errors.Is(err, errBranch) {
			return conversation{}, false, err
		}
		if k == 0 && len(hashes) > 0 {
			if next := conversationID(base, hashes[0]); next != id {
				id = next
				continue
			}
		}
		branched = true
		if b, err := s.recentBranch(ctx, ps, id, m, key, req, hashes); err != nil {
			return conversation{}, false, err
		} else if b != "" {
			bc, ok, err := s.continueBranch(ctx, b, m, key, req, msgs, hashes)
			if err != nil {
				return conversation{}, false, err
			}
			if ok {
				ps.branchedTo(b)
				return bc, true, nil
			}
		}
		next := branchID(id, hashes, k)
		ps.branchedTo(next)
		id = next
	}
	return conversation{}, false, fmt.Errorf("proxy: session %q: too many branches", base)
}

// recentBranches bounds the branches a request that branches tries before it opens one: two
// or three replays of a run interleaved, each going on in a branch another left behind.
const recentBranches = 4

// branchedTo records that a request diverging from ps's history went to the branch id.
func (ps *psession) branchedTo(id string) {
	for {
		old := ps.branches.Load()
		next := make([]string, 1, recentBranches)
		next[0] = id
		if old != nil {
			for _, b := range *old {
				if b != id && len(next) < recentBranches {
					next = append(next, b)
				}
			}
		}
		if ps.branches.CompareAndSwap(old, &next) {
			return
		}
	}
}

// recentBranch returns the one of the branches recently taken off ps (other than id) whose
// history the incoming one begins with, the longest if several ("" if none): the one that
// costs the least to continue, and the one a replay running behind another has not left
// behind. A single one is returned untried (continueBranch tries it).
func (s *Server) recentBranch(ctx context.Context, ps *psession, id string, m *managed, key managerKey, req *chat.Request, hashes []nhash) (string, error) {
	recent := ps.branches.Load()
	if recent == nil {
		return "", nil
	}
	var ids []string
	for _, b := range *recent {
		if b != id {
			ids = append(ids, b)
		}
	}
	switch len(ids) {
	case 0:
		return "", nil
	case 1:
		return ids[0], nil
	}
	best, bestN := "", -1
	for _, b := range ids {
		n, err := s.storedPrefix(ctx, b, m, key, req, hashes)
		if err != nil {
			return "", err
		}
		if n > bestN {
			best, bestN = b, n
		}
	}
	return best, nil
}

// storedPrefix returns how many messages the stored history of session id holds when it is a
// prefix of the incoming history (hashes), else -1; the session is loaded under m if it is
// not in memory under it.
func (s *Server) storedPrefix(ctx context.Context, id string, m *managed, key managerKey, req *chat.Request, hashes []nhash) (int, error) {
	ps := s.ref(id)
	defer s.unref(ps)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.sess == nil || ps.mgr != m {
		if err := s.load(ctx, ps, m, key, req.System, req.Tools); err != nil {
			return -1, err
		}
	}
	n := len(ps.views.hashes)
	if n > len(hashes) || !slices.Equal(ps.views.hashes, hashes[:n]) {
		return -1, nil
	}
	return n, nil
}

// continueBranch syncs the session id, where a recent request that branched off the one
// being opened went, if its history is a prefix of the incoming one, and returns it in use
// (ok). A rewound history that is then sent again as it was (an agent run replayed under
// the same key: every request a prefix of the stored history, each longer than the last) is
// named by a branch id that changes with every request; opening a new branch for each would
// store and count the whole history again on every request, so it goes on in its branch
// instead. The branches are remembered in memory only (the last recentBranches): after a
// restart the first such request opens one by its id. Each one tried that is not in memory is
// loaded from the store.
func (s *Server) continueBranch(ctx context.Context, id string, m *managed, key managerKey, req *chat.Request, msgs []chat.Message, hashes []nhash) (conversation, bool, error) {
	ps := s.ref(id)
	c, _, err := s.syncConversation(ctx, ps, m, key, req, msgs, hashes, true)
	if err == nil {
		return c, true, nil
	}
	s.unref(ps)
	if errors.Is(err, errBranch) {
		return conversation{}, false, nil
	}
	return conversation{}, false, err
}

// conversationID names the session of a conversation under key base whose first message is
// not the one of the key's own session: base=<hash of that first message>.
func conversationID(base string, first nhash) string {
	if len(base)+10 > store.MaxIDLen-20 {
		hh := sha256.Sum256([]byte(base))
		base = "c-" + hex.EncodeToString(hh[:8])
	}
	return base + "=" + hex.EncodeToString(first[:4])
}

// origExactBytes: a message with more text than this is counted for the tokens_before metric
// by the heuristic counter. An exact BPE count runs at a few MB/s, so a 50 MB tool output
// would take seconds, and the figure is only reported (the pipeline never counts the
// original of a capped result).
const origExactBytes = 1 << 20

// origTokens counts an original message for the tokens_before metric.
func (s *Server) origTokens(c tokens.Counter, m *chat.Message) int {
	n := 0
	for i := range m.Content {
		n += len(m.Content[i].Text)
	}
	if n > origExactBytes {
		return s.heur.Message(m)
	}
	return c.Message(m)
}
