// Package turns knows the structure of a conversation that providers enforce: turns, and the
// pairing of tool calls with their results.
//
// A turn starts at a user message and runs to the next one: user message -> assistant iterations
// (tool calls and their results) -> final reply. Turns are the atomic unit of eviction: a cut
// inside a turn would orphan tool calls or results. Boundaries lists where turns start; SafeCut
// snaps a cut position to a boundary; Validate checks the
// pairing rules of OpenAI and Anthropic; Repair brings any history into a form Validate accepts,
// reporting every change.
//
// All functions are pure, O(n) in the number of messages (plus tool calls), never modify their
// input, and are safe for concurrent use.
package turns

import "github.com/ctxmgr/ctxmgr/chat"

// Boundaries returns the indices where turns start, in increasing order:
//   - every user message (chat.RoleUser) starts a turn;
//   - a leading run of non-user messages (a history that starts with an assistant tool call,
//     say) is a turn of its own starting at 0, so 0 is always a boundary of a non-empty history;
//   - system, assistant and tool messages (and messages with unknown roles) never start a turn:
//     a system message in the middle of the history belongs to the turn it is in.
//
// It returns nil for an empty history. A user message that shared a wire message with the tool
// results before it (JoinPrev) still starts a turn.
func Boundaries(msgs []chat.Message) []int {
	if len(msgs) == 0 {
		return nil
	}
	b := []int{0}
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Role == chat.RoleUser {
			b = append(b, i)
		}
	}
	return b
}

// Search is the direction in which SafeCut looks for a safe boundary from its target.
type Search int

const (
	// Nearest prefers to evict less: the largest safe boundary <= target, or if there is
	// none, the smallest one > target.
	Nearest Search = iota
	// Forward evicts at least up to target: the smallest safe boundary >= target.
	Forward
	// Backward evicts at most up to target: the largest safe boundary <= target.
	Backward
)

// CutOptions say where SafeCut may cut.
type CutOptions struct {
	Search Search
	// Iterations allows, besides turn boundaries, a cut before an assistant message that
	// starts a new tool iteration, where every tool call made before it has its result before
	// it. A long agent run is often one turn (one task message, then many tool iterations);
	// this is how it can still be cut. msgs[cut] may then be an assistant message.
	Iterations bool
}

// SafeCut returns a cut position for target: msgs[:cut] can then be evicted (or summarized)
// and msgs[cut:] kept without separating a tool call from its result. The rules, exactly:
//
//   - target is clamped to [0, len(msgs)];
//   - target 0 gives cut 0 (evict nothing), and target len(msgs) gives cut len(msgs) (evict
//     everything); both are ok;
//   - otherwise the cut is a safe boundary b with 0 < b < len(msgs), chosen by opts.Search; a
//     cut at 0 is never chosen (it evicts nothing) and neither is len(msgs) (target asked to
//     keep something);
//   - when there is no such boundary (one giant turn containing target, say), SafeCut returns
//     0, false.
//
// A boundary b is safe when it starts a turn (see Boundaries), or a tool iteration with
// opts.Iterations, and no tool call before b is answered at or after b. In a history that
// Validate accepts (pending tail allowed or not) every turn boundary is safe; the extra check
// only keeps SafeCut from making an invalid history worse.
//
// Guarantee: when Validate(msgs, opts) == nil and 0 < cut < len(msgs), then
// Validate(msgs[:cut], ValidateOptions{}) == nil (pending calls can only be in the last turn)
// and Validate(msgs[cut:], opts) == nil, and msgs[cut] is a user message (or, with
// Iterations, an assistant message).
func SafeCut(msgs []chat.Message, target int, opts CutOptions) (cut int, ok bool) {
	n := len(msgs)
	target = min(max(target, 0), n)
	if target == 0 || target == n {
		return target, true
	}
	c := newCutter(msgs, opts.Iterations)
	if opts.Search != Forward {
		for b := target; b > 0; b-- {
			if c.safe(b) {
				return b, true
			}
		}
	}
	if opts.Search != Backward {
		from := target
		if opts.Search == Nearest {
			from++ // target itself was tried
		}
		for b := from; b < n; b++ {
			if c.safe(b) {
				return b, true
			}
		}
	}
	return 0, false
}

// cutter answers "is b a safe cut" for 0 < b < len(msgs).
type cutter struct {
	msgs []chat.Message
	// iterations also allows cuts before an assistant message (CutOptions.Iterations).
	iterations bool
	// blocked[b] is true when a tool call made before b is answered at or after b. It is nil
	// when no call/result pair spans a user message (every valid history).
	blocked []bool
}

func newCutter(msgs []chat.Message, iterations bool) cutter {
	c := cutter{msgs: msgs, iterations: iterations}
	c.span()
	return c
}

// span marks the positions that a call/result pair spans. At turn grain only pairs with a
// user message between call and result matter (none in a valid history); at iteration grain
// every pair does.
func (c *cutter) span() {
	var (
		last     map[string]int // call id -> index of the latest message that made it
		diff     []int32
		lastUser = -1
	)
	for i := range c.msgs {
		m := &c.msgs[i]
		switch m.Role {
		case chat.RoleUser:
			lastUser = i
		case chat.RoleTool:
			if call, ok := last[m.ToolCallID]; ok && (c.iterations || lastUser > call) {
				if diff == nil {
					diff = make([]int32, len(c.msgs)+2)
				}
				diff[call+1]++
				diff[i+1]--
			}
		}
		for _, tc := range m.ToolCalls {
			if last == nil {
				last = make(map[string]int)
			}
			last[tc.ID] = i
		}
	}
	if diff != nil {
		c.blocked = make([]bool, len(c.msgs)+1)
		var sum int32
		for b := range c.blocked {
			sum += diff[b]
			c.blocked[b] = sum > 0
		}
	}
}

func (c *cutter) safe(b int) bool {
	r := c.msgs[b].Role
	return (r == chat.RoleUser || c.iterations && r == chat.RoleAssistant) && (c.blocked == nil || !c.blocked[b])
}
