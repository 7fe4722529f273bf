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
	"github.com/ctxmgr/ctxmgr/internal/readtool"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

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

// setupHash is hashSetup(system, tools), remembered for the slices it was last computed on:
// a body decoded from where it differs shares its system and tools with the previous one
// (decode.go), so a steady conversation hashes its tool definitions once, not per request.
func (ps *psession) setupHash(system []chat.Message, tools []chat.Tool) nhash {
	if ps.setupRef.valid && sameSlice(system, ps.setupRef.system) && sameSlice(tools, ps.setupRef.tools) {
		return ps.setupRef.hash
	}
	h := hashSetup(system, tools)
	ps.setupRef.system, ps.setupRef.tools, ps.setupRef.hash, ps.setupRef.valid = system, tools, h, true
	return h
}

// sameSlice reports whether a and b are the same slice (same array, same length).
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// psession is the proxy's side of a session: the ctxmgr Session, the normalized hashes of
// its history and the system/tools it was last given. mu serializes the requests of one
// session while they touch its state (not while the upstream answers).
type psession struct {
	mu       sync.Mutex
	id       string
	key      managerKey
	mgr      *managed
	sess     *ctxmgr.Session
	hashes   []nhash
	orig     int // tokens of the history's original messages, by the manager's counter
	setup    nhash
	readTool bool
	// created: the last load found no history (a new session, or a new branch).
	created bool
	// branches are the ids of the branches the last requests that diverged from this
	// session's history after its first message went to (openSession), the most recent
	// first, at most recentBranches; nil if none. Replaced whole, never modified.
	branches atomic.Pointer[[]string]
	// blocks holds the encodings of the messages of the last body encoded for the session
	// (server.go, encodeSession; encodecache.Cache).
	blocks *encodecache.Cache
	// counted: the last request sent, counted for the calibrator (server.go, observeUsage).
	counted sentCount
	// clean: the prepared messages of the last Anthropic request, when none carried a
	// breakpoint (placeBreakpointsKnown).
	clean atomic.Pointer[[]chat.Message]
	// setupRef remembers the slices setupHash last hashed.
	setupRef struct {
		system []chat.Message
		tools  []chat.Tool
		hash   nhash
		valid  bool
	}
	elem *list.Element
	// users counts the requests using the session (acquire, until release); guarded by
	// Server.sessMu. A session in use is never dropped from the cache: a request for it then
	// would load a second copy beside the one in use.
	users int
}

// acquire returns the session with this id from the cache (a fresh one if absent), locked and
// counted in use: the caller unlocks it and calls release (put does both). Past
// Config.MaxSessions the least recently used sessions not in use are dropped (the cache holds
// more while more are in use).
func (s *Server) acquire(id string) *psession {
	s.sessMu.Lock()
	ps := s.sessions[id]
	if ps == nil {
		ps = &psession{id: id, blocks: encodecache.New()}
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
	s.sessMu.Unlock()
	ps.mu.Lock()
	return ps
}

// release ends a use of ps that acquire counted (nil: none).
func (s *Server) release(ps *psession) {
	if ps == nil {
		return
	}
	s.sessMu.Lock()
	ps.users--
	s.sessMu.Unlock()
}

// put unlocks ps and releases it.
func (s *Server) put(ps *psession) {
	ps.mu.Unlock()
	s.release(ps)
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
	ps.hashes = hashAll(hist)
	ps.orig = 0
	c := m.m.Config().Counter
	for i := range hist {
		ps.orig += s.origTokens(c, &hist[i])
	}
	ps.setup = ps.setupHash(system, tools)
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
	if ps.sess == nil || ps.mgr != m {
		// New, or its Manager is another (another key, or one closed past maxManagers).
		if err := s.load(ctx, ps, m, key, system, tools); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		if len(ps.hashes) > len(hashes) || !slices.Equal(ps.hashes, hashes[:len(ps.hashes)]) {
			return errBranch
		}
		if setup := ps.setupHash(system, tools); setup != ps.setup {
			t := tools
			if ps.readTool {
				t = withReadTool(tools)
			}
			if err := ps.sess.SetSystem(system, t); err != nil {
				return err
			}
			ps.setup = setup
			s.snapshotConfig(ctx, ps.id, m, key, system, t)
		}
		news := msgs[len(ps.hashes):]
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
			ps.hashes = append(ps.hashes, hashes[len(ps.hashes):]...)
			c := ps.mgr.m.Config().Counter
			for i := range news {
				ps.orig += s.origTokens(c, &news[i])
			}
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

// openSession finds the session for the incoming history and syncs it. It returns the
// session locked and in use (acquire): the caller unlocks it, and releases it once done.
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
func (s *Server) openSession(ctx context.Context, base string, m *managed, key managerKey, req *chat.Request, msgs []chat.Message, hashes []nhash) (*psession, bool, error) {
	id := base
	branched := false
	for depth := 0; depth < 6; depth++ {
		ps := s.acquire(id)
		err := s.sync(ctx, ps, m, key, req.System, req.Tools, msgs, hashes)
		if err == nil {
			return s.opened(ps, branched), branched, nil
		}
		k := 0
		if errors.Is(err, errBranch) {
			k = commonPrefix(ps.hashes, hashes)
		}
		s.put(ps)
		if !errors.Is(err, errBranch) {
			return nil, false, err
		}
		if k == 0 && len(hashes) > 0 {
			if next := conversationID(base, hashes[0]); next != id {
				id = next
				continue
			}
		}
		branched = true
		if b, err := s.recentBranch(ctx, ps, id, m, key, req, hashes); err != nil {
			return nil, false, err
		} else if b != "" {
			bp, ok, err := s.continueBranch(ctx, b, m, key, req, msgs, hashes)
			if err != nil {
				return nil, false, err
			}
			if ok {
				ps.branchedTo(b)
				return bp, true, nil
			}
		}
		next := branchID(id, hashes, k)
		ps.branchedTo(next)
		id = next
	}
	return nil, false, fmt.Errorf("proxy: session %q: too many branches", base)
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
		bp := s.acquire(b)
		if bp.sess == nil || bp.mgr != m {
			if err := s.load(ctx, bp, m, key, req.System, req.Tools); err != nil {
				s.put(bp)
				return "", err
			}
		}
		n := len(bp.hashes)
		if n > bestN && n <= len(hashes) && slices.Equal(bp.hashes, hashes[:n]) {
			best, bestN = b, n
		}
		s.put(bp)
	}
	return best, nil
}

// opened returns ps, synced and locked, as the session of the request; branched: it is not
// the key's own.
func (s *Server) opened(ps *psession, branched bool) *psession {
	if branched && ps.created {
		s.metrics.branches.Inc() // a new branch, not a later request of one
	}
	ps.created = false
	return ps
}

// continueBranch syncs the session id, where a recent request that branched off the one
// being opened went, if its history is a prefix of the incoming one, and returns it locked
// (ok). A rewound history that is then sent again as it was (an agent run replayed under
// the same key: every request a prefix of the stored history, each longer than the last) is
// named by a branch id that changes with every request; opening a new branch for each would
// store and count the whole history again on every request, so it goes on in its branch
// instead. The branches are remembered in memory only (the last recentBranches): after a
// restart the first such request opens one by its id. Each one tried that is not in memory is
// loaded from the store.
func (s *Server) continueBranch(ctx context.Context, id string, m *managed, key managerKey, req *chat.Request, msgs []chat.Message, hashes []nhash) (*psession, bool, error) {
	ps := s.acquire(id)
	err := s.sync(ctx, ps, m, key, req.System, req.Tools, msgs, hashes)
	if err == nil {
		return s.opened(ps, true), true, nil
	}
	s.put(ps)
	if errors.Is(err, errBranch) {
		return nil, false, nil
	}
	return nil, false, err
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
