package ctxmgr

import (
	"cmp"
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
	s.entries = make([]entry, len(msgs))
	s.stored = len(msgs)
	s.start = min(state.Start, len(msgs))
	// The views compaction made replace the ones ingestion makes, position by position.
	// persistState stores them in order of position; a stable sort keeps it for any other.
	slices.SortStableFunc(state.Views, func(a, b viewState) int { return cmp.Compare(a.Index, b.Index) })
	k := 0
	for i := range msgs {
		e := &s.entries[i]
		if err := s.ingest(ctx, i, e, msgs[i], nil, &s.ownTokens); err != nil {
			return nil, err
		}
		for ; k < len(state.Views) && state.Views[k].Index <= i; k++ {
			if v := &state.Views[k]; v.Index == i && i >= s.start {
				e.view, e.kind = v.View, v.Kind
				if v.Off != nil {
					e.off = v.Off
				}
			}
		}
		s.account(i, e)
	}
	s.pinned = -1
	if raw != nil && state.Pinned >= 0 && state.Pinned < s.start {
		s.pinned = state.Pinned
	}
	s.archives = mergeRanges(state.Archives)
	s.readBacks, s.savedReads = state.ReadBacks, len(state.ReadBacks)
	s.windowLimit = state.WindowLimit
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
	// account took every entry in as live: the evicted ones but the pinned message are not.
	s.histTokens = 0
	for i := range s.entries {
		if i >= s.start || i == s.pinned {
			s.histTokens += s.entries[i].tokens
		}
	}
	s.savedEpoch = s.epoch
	return s, nil
}
