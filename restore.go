package ctxmgr

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// sessionState is what the Store keeps besides history and summaries so that a restarted
// process rebuilds the exact same request: where the evicted part ends, where it is archived,
// and the views that compaction events made (ingestion snippets are not stored: they are
// rebuilt from the config and the offloaded result, which Store.Offload returns again).
type sessionState struct {
	Format   int            `json:"format"`
	Len      int            `json:"len"`
	Start    int            `json:"start"`
	Pinned   int            `json:"pinned"`
	Archives []archiveRange `json:"archives,omitempty"`
	// WindowLimit is the smaller window Recover settled on after provider overflows.
	WindowLimit int         `json:"window_limit,omitempty"`
	Views       []viewState `json:"views,omitempty"`
	// ReadBacks are the stored results the model read back (Session.NoteReadBack).
	ReadBacks []readBack `json:"read_backs,omitempty"`
}

type viewState struct {
	Index int              `json:"index"`
	Kind  viewKind         `json:"kind"`
	View  chat.Message     `json:"view"`
	Off   *store.Offloaded `json:"off,omitempty"`
}

// persistState writes the compaction state when something already sent changed, or the model
// read something back, since the last write. Called with the lock held, before the new request is returned.
func (s *Session) persistState(ctx context.Context) error {
	if s.epoch == s.savedEpoch && len(s.readBacks) == s.savedReads {
		return nil
	}
	if err := s.flushLocked(ctx); err != nil { // the state covers every entry: they go first
		return err
	}
	st := sessionState{Format: 1, Len: len(s.entries), Start: s.start, Pinned: s.pinned, Archives: s.archives, WindowLimit: s.windowLimit, ReadBacks: s.readBacks}
	for i := s.start; i < len(s.entries); i++ {
		e := &s.entries[i]
		switch e.kind {
		case viewMasked, viewRetruncated, viewTruncated, viewNoReasoning, viewSuperseded:
			st.Views = append(st.Views, viewState{Index: i, Kind: e.kind, View: e.view, Off: e.off})
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("ctxmgr: encode session state: %w", err)
	}
	if err := s.m.cfg.Store.PutState(ctx, s.id, b); err != nil {
		return s.m.storeErr("put state", err)
	}
	s.savedEpoch, s.savedReads = s.epoch, len(s.readBacks)
	return nil
}

// LoadSession restores a session from the Store after a restart: the full history, the
// latest summary, what is evicted and every view compaction made, with token counts
// recomputed, so that the next Prepare returns the request it would have returned without the
// restart. The system prompt and tools are the caller's (they are not history). A session the
// store does not know comes back empty.
func (m *Manager) LoadSession(ctx context.Context, id string, system []chat.Message, tools []chat.Tool) (*Session, error) {
	s, err := m.NewSession(id, system, tools)
	if err != nil {
		return nil, err
	}
	st := m.cfg.Store
	msgs, err := st.Messages(ctx, id, 0, -1)
	if err != nil {
		return nil, m.storeErr("messages", err)
	}
	sums, err := st.Summaries(ctx, id)
	if err != nil {
		return nil, m.storeErr("summaries", err)
	}
	raw, err := st.State(ctx, id)
	if err != nil {
		return nil, m.storeErr("state", err)
	}
	var state sessionState
	if raw != nil {
		if err := json.Unmarshal(raw, &state); err != nil {
			return nil, fmt.Errorf("ctxmgr: session %q: corrupt state: %w", id, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg := &m.cfg
	s.entries = make([]entry, len(msgs))
	s.stored = len(msgs)
	for i := range msgs {
		e := &s.entries[i]
		e.orig = msgs[i]
		e.view = e.orig
		if e.orig.Role != chat.RoleTool {
			e.tokens = cfg.Counter.Message(&e.orig) // counted again below only if its view changes
			s.ownTokens += e.tokens
		} else {
			e.size = textBytes(&e.orig)
			e.exempt = slices.Contains(cfg.ExemptTools, e.orig.Name)
			capB := s.ingestCap(e, nil, s.ownTokens)
			s.ownTokens += stubTokens
			if capB > 0 && e.size > capB {
				off, err := s.offload(ctx, i, e)
				if err != nil {
					return nil, err
				}
				e.off = &off
				e.view = snippetView(&e.orig, off, capB)
				e.kind = viewOffloaded
			}
			s.unsettled = append(s.unsettled, len(s.results))
			s.results = append(s.results, i)
			delete(s.open, e.orig.ToolCallID)
		}
		for _, tc := range e.orig.ToolCalls {
			s.open[tc.ID] = i
		}
		if e.orig.Role == chat.RoleUser {
			s.lastUser = i
		}
		if e.orig.Role == chat.RoleAssistant {
			s.assistants++
		}
	}
	s.start = min(state.Start, len(msgs))
	s.pinned = -1
	if raw != nil && state.Pinned >= 0 && state.Pinned < s.start {
		s.pinned = state.Pinned
	}
	s.archives = mergeRanges(state.Archives)
	s.readBacks, s.savedReads = state.ReadBacks, len(state.ReadBacks)
	s.windowLimit = state.WindowLimit
	for _, v := range state.Views {
		if v.Index >= s.start && v.Index < len(s.entries) {
			e := &s.entries[v.Index]
			e.view, e.kind = v.View, v.Kind
			if v.Off != nil {
				e.off = v.Off
			}
		}
	}
	if n := len(sums); n > 0 {
		latest := sums[n-1]
		if latest.To > s.start && latest.To <= len(msgs) {
			// The summary was stored but the process died before the state: the summary
			// is the truth about what is evicted, and the latest user message is pinned
			// if the cut passed it (that is the rule the pipeline follows).
			s.start = latest.To
			if s.lastUser >= 0 && s.lastUser < s.start {
				s.pinned = s.lastUser
			}
		}
		s.summary = &latest
		s.setSummary(&latest)
	}
	for i := range s.entries {
		e := &s.entries[i]
		if e.orig.Role == chat.RoleTool || e.kind != viewOriginal {
			e.tokens = cfg.Counter.Message(&e.view)
		}
		if i >= s.start || i == s.pinned {
			s.histTokens += e.tokens
		}
	}
	s.savedEpoch = s.epoch
	return s, nil
}
