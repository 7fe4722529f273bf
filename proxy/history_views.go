package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// historyViews are the proxy's views of one conversation's history, kept beside the Session
// that holds the history itself, so that a request costs what its new messages cost rather
// than what its whole history does. There are two kinds.
//
// The stored view, guarded by psession.mu, is of the Session's history:
//   - hashes holds the normalized hash (normHash) of each of its messages, in order: sync
//     compares the request's hashes with it to find what is new, or that the history
//     branched;
//   - orig is what those messages count as the client sent them (origTokens), before any
//     ingestion cap: the tokens_before figure;
//   - setup is the hash of the system prompt and tools the Session was last given, and
//     setupRef the slices setupHash last hashed.
//
// A (re)load of the Session rebuilds them (loaded) and each append extends them (appended);
// nothing else changes them. Invariant: len(hashes) is the Session's Len, checked by each sync,
// which reloads the Session when it does not hold.
//
// The sent view is of the last request sent for the conversation; each part is safe for
// concurrent use and is used without psession.mu:
//   - blocks holds the encodings of the messages of the last body encoded
//     (encodecache.Cache);
//   - counted holds their token counts by the calibrator's base counter (sentCount);
//   - clean holds the prepared messages of the last Anthropic request when none carried a
//     breakpoint (placeBreakpointsKnown).
//
// Each is keyed on the identity of the messages it was computed from (the same slice, or
// chat.Message.Shares: a prepared request's messages are never modified), so that an entry
// computed for other messages is never used, only not reused: nothing invalidates them, and
// each use replaces them with the request's.
//
// A history has one more view, the decode cache's (decode.go): the hashes of the messages of
// the client's last body, from which the request's hashes are taken. The Server keeps it for
// every recent conversation, keyed on the body's bytes, because a body is decoded before its
// conversation is known.
type historyViews struct {
	hashes   []nhash
	orig     int
	setup    nhash
	setupRef struct {
		system []chat.Message
		tools  []chat.Tool
		hash   nhash
		valid  bool
	}

	blocks  *encodecache.Cache
	counted sentCount
	clean   atomic.Pointer[[]chat.Message]
}

// loaded sets the stored view to that of a history loaded whole: its messages' hashes, their
// tokens orig, and the system prompt and tools the Session was given.
func (v *historyViews) loaded(hashes []nhash, orig int, system []chat.Message, tools []chat.Tool) {
	v.hashes, v.orig = hashes, orig
	v.setup = v.setupHash(system, tools)
}

// appended extends the stored view with messages appended to the history: their hashes and
// their tokens orig.
func (v *historyViews) appended(hashes []nhash, orig int) {
	v.hashes = append(v.hashes, hashes...)
	v.orig += orig
}

// setupHash is hashSetup(system, tools), remembered for the slices it was last computed on:
// a body decoded from where it differs shares its system and tools with the previous one
// (decode.go), so a steady conversation hashes its tool definitions once, not per request.
func (v *historyViews) setupHash(system []chat.Message, tools []chat.Tool) nhash {
	r := &v.setupRef
	if r.valid && sameSlice(system, r.system) && sameSlice(tools, r.tools) {
		return r.hash
	}
	h := hashSetup(system, tools)
	r.system, r.tools, r.hash, r.valid = system, tools, h, true
	return h
}

// sameSlice reports whether a and b are the same slice (same array, same length).
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// sentCount counts the requests sent for one session with the calibrator's base counter
// (what the calibrator compares with the provider's reported usage, on every answer): the
// count of each message the previous request held at the same position, the same value
// (chat.Message.Shares), is taken from that request, so that counting costs what the new
// messages cost rather than a hash of the whole history. The total is the base counter's
// Request total.
type sentCount struct {
	mu     sync.Mutex
	msgs   []chat.Message // the previous request's (kept alive: see chat.Message.Shares)
	n      []int          // the count of each of msgs
	sum    int            // of n
	sys    []chat.Message
	sysN   int
	tools  []chat.Tool
	toolsN int
}

func (c *sentCount) total(base tokens.Counter, r *chat.Request) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !sharesAll(r.System, c.sys) {
		c.sys, c.sysN = r.System, 0
		for i := range r.System {
			c.sysN += base.Message(&r.System[i])
		}
	}
	if len(r.Tools) != len(c.tools) || len(r.Tools) > 0 && &r.Tools[0] != &c.tools[0] {
		c.tools, c.toolsN = r.Tools, base.Tools(r.Tools)
	}
	msgs := r.Messages
	if len(c.msgs) > 0 && len(msgs) >= len(c.msgs) && &msgs[0] == &c.msgs[0] {
		// The same slice, extended (Prepare extends its slice while nothing already sent
		// changes, and never modifies what it returned): only the new messages are counted.
		for i := len(c.msgs); i < len(msgs); i++ {
			k := base.Message(&msgs[i])
			c.n, c.sum = append(c.n, k), c.sum+k
		}
	} else {
		n, sum := make([]int, len(msgs)), 0
		for i := range msgs {
			if i < len(c.msgs) && msgs[i].Shares(&c.msgs[i]) {
				n[i] = c.n[i]
			} else {
				n[i] = base.Message(&msgs[i])
			}
			sum += n[i]
		}
		c.n, c.sum = n, sum
	}
	c.msgs = msgs
	return c.sysN + c.toolsN + tokens.ReplyPriming + c.sum
}

// sharesAll reports whether a and b hold the same messages (chat.Message.Shares).
func sharesAll(a, b []chat.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Shares(&b[i]) {
			return false
		}
	}
	return true
}
