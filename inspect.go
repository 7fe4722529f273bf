package ctxmgr

import (
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// Message states as MessageView reports them.
const (
	// StateArchived: evicted into the summary; the original is in the archive.
	StateArchived = "archived"
	// StatePinned: the latest user message shown before the summary after a cut passed it.
	StatePinned = "pinned"
)

// MessageView is one message of a session's history as the next request shows it.
type MessageView struct {
	// Pos is the message's position in the history.
	Pos  int       `json:"pos"`
	Role chat.Role `json:"role"`
	// State is what the next request holds of it: "original" (sent as appended), "offloaded"
	// or "retruncated" (a snippet with the reference of the stored full text), "masked" (a
	// one-line stub), "truncated" (a huge turn cut middle-out), "no-reasoning" (older
	// reasoning dropped), "superseded" (a reference to a later result that shows it again),
	// StatePinned or StateArchived (not sent: folded into the summary).
	State string `json:"state"`
	// Tokens is what the view costs in the next request (0 when archived).
	Tokens int `json:"tokens"`
	// View is the message as sent (the zero Message when archived).
	View chat.Message `json:"view"`
	// Offload is where the full text of an offloaded, masked or truncated tool result is, if
	// it was stored (none for an archived message: the archive holds its original).
	Offload *store.Offloaded `json:"offload,omitempty"`
}

// Views returns every message of the history, evicted ones included, in order, each as the
// next request shows it. It changes nothing (no pipeline step runs): it is what a Prepare
// right now would start from.
func (s *Session) Views() []MessageView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]MessageView, len(s.entries))
	for i := range s.entries {
		e := &s.entries[i]
		v := MessageView{Pos: i, Role: e.orig.Role}
		switch {
		case i == s.pinned:
			v.State, v.Tokens, v.View = StatePinned, e.tokens, e.view.Clone()
		case i < s.start:
			v.State = StateArchived
			out[i] = v
			continue // its original is in the archive
		default:
			v.State, v.Tokens, v.View = e.kind.String(), e.tokens, e.view.Clone()
		}
		if e.off != nil {
			off := *e.off
			v.Offload = &off
		}
		out[i] = v
	}
	return out
}
