package turns

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/ctxmgr/ctxmgr/chat"
)

// ChangeKind is what Repair did.
type ChangeKind int

// The changes Repair makes. Change.Index is always an index into Repair's input.
const (
	// DropOrphanResult: msgs[Index] is a tool result with no call before it; it is not in the
	// output. Archive it: nothing may be lost.
	DropOrphanResult ChangeKind = iota + 1
	// DropDuplicateResult: msgs[Index] is a further result for a call that already has one; it
	// is not in the output. Archive it.
	DropDuplicateResult
	// MoveResult: msgs[Index] is a result away from its call; it now follows the assistant
	// message that made the call (Detail names it).
	MoveResult
	// InsertMissingResult: a call of the assistant message msgs[Index] had no result; a
	// synthetic error result (see MissingResultText, MetaSynthetic) now follows the message.
	InsertMissingResult
	// RenameCallID: a call of msgs[Index] had an empty id or the id of an earlier call; it was
	// given a fresh id (ToolCallID; Detail has the old one).
	RenameCallID
	// RenameResultID: the result msgs[Index] answers a renamed call; its tool_call_id now is the
	// new id (ToolCallID).
	RenameResultID
	// DropToolCall: msgs[Index] is not an assistant message but carried a tool call; the call
	// (ToolCallID) is removed, the message is kept. Archive msgs[Index] to keep the call.
	DropToolCall
)

var kindNames = [...]string{
	DropOrphanResult:    "drop-orphan-result",
	DropDuplicateResult: "drop-duplicate-result",
	MoveResult:          "move-result",
	InsertMissingResult: "insert-missing-result",
	RenameCallID:        "rename-call-id",
	RenameResultID:      "rename-result-id",
	DropToolCall:        "drop-tool-call",
}

func (k ChangeKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "ChangeKind(" + strconv.Itoa(int(k)) + ")"
}

// Change is one change Repair made.
type Change struct {
	// Index is the index of the message concerned in Repair's input.
	Index int
	Kind  ChangeKind
	// ToolCallID is the call concerned (after renaming, for the rename kinds).
	ToolCallID string
	// Detail says more, for logs.
	Detail string
}

// Dropped reports whether the change removed msgs[Index] from the history.
func (c Change) Dropped() bool { return c.Kind == DropOrphanResult || c.Kind == DropDuplicateResult }

func (c Change) String() string {
	s := fmt.Sprintf("message %d: %s", c.Index, c.Kind)
	if c.ToolCallID != "" {
		s += fmt.Sprintf(" %q", c.ToolCallID)
	}
	if c.Detail != "" {
		s += ": " + c.Detail
	}
	return s
}

// Synthetic tool results inserted by Repair for calls without a result.
const (
	// MissingResultText is their content.
	MissingResultText = "tool result missing"
	// MetaSynthetic is the Meta key that marks them, with value MetaSyntheticMissingResult.
	MetaSynthetic              = "ctxmgr.synthetic"
	MetaSyntheticMissingResult = "missing_tool_result"
)

// Repair returns a copy of msgs that Validate accepts with AllowPendingTail false, and every
// change it made, ordered by Index (input order). The policy:
//
//   - a tool call on a non-assistant message is removed (DropToolCall), the message kept;
//   - a call with an empty id, or with the id of an earlier call, gets a fresh id: the old id
//     (or "call" for an empty one) + "_2", "_3", ..., the first that no message of msgs uses
//     (RenameCallID); a result with the same (empty or reused) id in its run then answers it.
//     Reused ids are common with some model servers ("call_0" every turn);
//   - a tool result answers the earliest unanswered call with its (original) id of the assistant
//     message whose result run it is in; failing that, the most recent unanswered call with its
//     id made earlier, and it is moved right after that call's message (MoveResult). Results that
//     answer a renamed call take the new id (RenameResultID);
//   - a result whose calls are all answered already is dropped (DropDuplicateResult); a result
//     with no call before it is dropped (DropOrphanResult), also when a later message makes the
//     call (a result never moves before its call; that call gets a synthetic result);
//   - a call left without a result gets a synthetic error result right after its message's
//     results: Role tool, the call's id and name, content MissingResultText, IsError, Meta
//     {MetaSynthetic: MetaSyntheticMissingResult} (InsertMissingResult).
//
// After an assistant message come its results in this order: those that were in its run (in
// their order), then moved ones, then synthetic ones, in call order. A moved Anthropic result
// that follows another result gets JoinPrev set, so that it is encoded in the same user message.
//
// Guarantees: the input is never modified (messages are copied; unchanged messages share their
// Content, Meta and Extra with the input, so Clone before mutating them); every input message
// is in the output exactly once unless a Dropped change names it, and it is unchanged except as
// its changes say; Repair of a history that Validate accepts returns an equal copy and no
// changes, hence Repair is idempotent. Cost O(n + calls) (plus k² for k calls sharing one id
// within a single message).
func Repair(msgs []chat.Message) ([]chat.Message, []Change) {
	if msgs == nil {
		return nil, nil
	}
	r := repairer{msgs: msgs, assign: make([]int, len(msgs))}
	r.plan()
	return r.emit(), r.sorted()
}

type slot struct {
	msg    int    // input index of the assistant message
	call   int    // index in its ToolCalls
	id     string // final id
	result int    // input index of the result, -1 when none
	inRun  bool   // the result was in msg's run (not moved)
}

type repairer struct {
	msgs    []chat.Message
	slots   []slot           // one per call of an assistant message, in order
	assign  []int            // tool message index -> slot index, or -1 (dropped)
	pending map[string][]int // original call id -> slots made with it (answered ones popped lazily)
	made    map[string]bool  // original call ids made so far
	used    map[string]bool  // every id in msgs plus the fresh ones, built on first rename
	changes []Change
	synth   int // number of synthetic results
}

func (r *repairer) change(i int, k ChangeKind, id, format string, args ...any) {
	r.changes = append(r.changes, Change{Index: i, Kind: k, ToolCallID: id, Detail: fmt.Sprintf(format, args...)})
}

// plan decides every change; emit then builds the output.
func (r *repairer) plan() {
	runOwner := -1 // the assistant message whose result run we are in
	for i := range r.msgs {
		m := &r.msgs[i]
		if m.Role != chat.RoleAssistant {
			for _, tc := range m.ToolCalls {
				r.change(i, DropToolCall, tc.ID, "a %q message cannot make tool calls (call %q)", m.Role, tc.Name)
			}
		}
		switch {
		case m.Role == chat.RoleTool:
			r.assign[i] = r.match(i, m.ToolCallID, runOwner)
		case m.Role == chat.RoleAssistant && len(m.ToolCalls) > 0:
			if r.pending == nil {
				r.pending = make(map[string][]int)
				r.made = make(map[string]bool)
			}
			for j, tc := range m.ToolCalls {
				id := tc.ID
				if id == "" || r.inUse(tc.ID, i) {
					id = r.fresh(tc.ID)
					why := "duplicate id"
					if tc.ID == "" {
						why = "empty id"
					}
					r.change(i, RenameCallID, id, "tool_calls[%d]: %s %q", j, why, tc.ID)
				}
				r.made[tc.ID] = true
				r.slots = append(r.slots, slot{msg: i, call: j, id: id, result: -1})
				r.pending[tc.ID] = append(r.pending[tc.ID], len(r.slots)-1)
			}
			runOwner = i
		default:
			runOwner = -1
		}
	}
	for s := range r.slots {
		if sl := &r.slots[s]; sl.result < 0 {
			r.synth++
			r.change(sl.msg, InsertMissingResult, sl.id, "tool_calls[%d] had no result", sl.call)
		}
	}
}

// match finds the slot that the tool result msgs[i] (with original id) answers, or returns -1
// after recording why it is dropped.
func (r *repairer) match(i int, id string, runOwner int) int {
	st := r.pending[id]
	for len(st) > 0 && r.slots[st[len(st)-1]].result >= 0 {
		st = st[:len(st)-1]
	}
	if r.pending != nil {
		r.pending[id] = st
	}
	if len(st) == 0 {
		if r.made[id] {
			r.change(i, DropDuplicateResult, id, "its call already has a result")
		} else {
			r.change(i, DropOrphanResult, id, "no earlier assistant message made this call")
		}
		return -1
	}
	// The run owner's calls are the newest, on top of the stack: take its earliest unanswered one.
	best := -1
	for k := len(st) - 1; k >= 0 && r.slots[st[k]].msg == runOwner; k-- {
		if r.slots[st[k]].result < 0 {
			best = st[k]
		}
	}
	if best >= 0 {
		r.slots[best].inRun = true
	} else {
		best = st[len(st)-1] // unanswered, made by an earlier message
		r.change(i, MoveResult, r.slots[best].id, "moved to follow message %d, which made the call", r.slots[best].msg)
	}
	r.slots[best].result = i
	if r.slots[best].id != id {
		r.change(i, RenameResultID, r.slots[best].id, "was %q", id)
	}
	return best
}

// inUse reports whether id names a call made by message msg itself or a call still waiting
// for its result; reusing the id of an answered call is valid (see Validate).
func (r *repairer) inUse(id string, msg int) bool {
	for _, s := range r.pending[id] {
		if r.slots[s].result < 0 || r.slots[s].msg == msg {
			return true
		}
	}
	return false
}

// fresh returns a new call id derived from old that no message uses.
func (r *repairer) fresh(old string) string {
	if r.used == nil {
		r.used = make(map[string]bool)
		for i := range r.msgs {
			m := &r.msgs[i]
			for _, tc := range m.ToolCalls {
				r.used[tc.ID] = true
			}
			if m.Role == chat.RoleTool {
				r.used[m.ToolCallID] = true
			}
		}
	}
	base := old
	if base == "" {
		base = "call"
	}
	for k := 2; ; k++ {
		id := base + "_" + strconv.Itoa(k)
		if !r.used[id] {
			r.used[id] = true
			return id
		}
	}
}

func (r *repairer) emit() []chat.Message {
	n := len(r.msgs)
	dropped := 0
	for _, c := range r.changes {
		if c.Dropped() {
			dropped++
		}
	}
	out := make([]chat.Message, 0, n-dropped+r.synth)
	next := 0 // next slot
	for i := 0; i < n; i++ {
		m := r.msgs[i]
		if m.Role == chat.RoleTool {
			continue // kept results are emitted by the message that made their call
		}
		if m.Role != chat.RoleAssistant {
			if len(m.ToolCalls) > 0 {
				m.ToolCalls = nil
			}
			out = append(out, m)
			continue
		}
		if len(m.ToolCalls) == 0 {
			out = append(out, m)
			continue
		}
		mine := r.slots[next : next+len(m.ToolCalls)]
		next += len(m.ToolCalls)
		for j := range mine {
			if mine[j].id != m.ToolCalls[j].ID {
				m.ToolCalls = slices.Clone(m.ToolCalls)
				for k := range mine {
					m.ToolCalls[k].ID = mine[k].id
				}
				break
			}
		}
		out = append(out, m)
		for j := i + 1; j < n && r.msgs[j].Role == chat.RoleTool; j++ {
			if s := r.assign[j]; s >= 0 && r.slots[s].msg == i && r.slots[s].inRun {
				out = append(out, r.result(j, s))
			}
		}
		for s := range mine {
			sl := &mine[s]
			switch {
			case sl.result < 0:
				out = append(out, synthetic(&m, sl))
			case !sl.inRun:
				res := r.result(sl.result, next-len(mine)+s)
				if res.Wire == "anthropic" && out[len(out)-1].Role == chat.RoleTool {
					res.JoinPrev = true
				}
				out = append(out, res)
			}
		}
	}
	return out
}

// result returns the tool message msgs[j] as it answers slot s.
func (r *repairer) result(j, s int) chat.Message {
	m := r.msgs[j]
	if len(m.ToolCalls) > 0 {
		m.ToolCalls = nil
	}
	m.ToolCallID = r.slots[s].id
	return m
}

func synthetic(call *chat.Message, sl *slot) chat.Message {
	return chat.Message{
		Role:       chat.RoleTool,
		Name:       call.ToolCalls[sl.call].Name,
		ToolCallID: sl.id,
		IsError:    true,
		Content:    []chat.Part{{Type: chat.PartText, Text: MissingResultText}},
		Meta:       map[string]string{MetaSynthetic: MetaSyntheticMissingResult},
	}
}

func (r *repairer) sorted() []Change {
	slices.SortStableFunc(r.changes, func(a, b Change) int { return a.Index - b.Index })
	return r.changes
}
