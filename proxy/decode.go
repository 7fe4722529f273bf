package proxy

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/wire"
)

// Decoding only what is new.
//
// Each request of a conversation repeats the previous one and adds a message or two. The
// proxy keeps the last decoded body of each recent conversation (a wire.Layout) with the
// normalized hashes of its messages, and decodes a new body with wire.DecodeNext against the
// cached body that shares the longest prefix with it: only the new messages are validated,
// decoded and hashed. Conversations are found by a hash of the body's first bytes (model,
// system prompt, first message): among the candidates under one such hash, a few
// conversations of the same agent, those that end as the body does are preferred (the fields
// after the messages, where an Anthropic or Responses body has its system prompt), then the
// one sharing the longest prefix. (A body whose fields after the messages changed, as Codex
// CLI's client_metadata does on every request, is still decoded from where its messages
// differ: wire.DecodeNext decodes those fields anew.)
//
// A body replaces the cached one it continues (see continues): that conversation has moved
// on. A body that shares less (a fork early in the conversation, another session) or that
// was decoded whole is added beside the others: two sessions of one agent in one repository
// often share their first kilobyte and more, and each must keep its own body, or each
// request of one would evict the other's and be decoded whole (milliseconds at 100K tokens,
// against a tenth of one when continued). The cache is bounded by the bytes of the bodies it keeps
// (Config.DecodeCacheBytes), least recently used dropped first.
//
// A body that changes the last message of the one it continues (Claude Code moves its
// cache_control breakpoint off it on every request) overwrites that message in the cached
// array of decoded messages rather than copying the array, once no one else reads it
// (wire.DecodeNextOwned, giveUp): each entry counts the decodes and the request being handled
// that read it. Each entry also records where its body was forwarded as the client's bytes,
// the prediction cut-through forwarding starts from (cutthrough.go).
//
// The comparison itself, a memcmp over the whole history, is made while a large body arrives
// (readChatBody): once its first kilobyte names the candidates, it is compared chunk by chunk
// with the one most recently used (predict, expected), and the decode resumes where that
// comparison stopped (wire.DecodeNextShared) if lookup chose the same body. What is left after
// the last byte is then what is new.

// headLen is how much of a body's start names its candidates.
const headLen = 1024

// maxCandidates bounds the conversations kept under one head.
const maxCandidates = 32

type decoded struct {
	head   [16]byte
	lay    *wire.Layout
	hashes []nhash // of lay.Request().Messages
	// firstCmd is the index of the first of those messages that is a command (-1: none).
	firstCmd int
	// bps are the cache_control breakpoints of those messages (Anthropic bodies only).
	bps []breakpoint
	// src is the counted buffer the body is in (bodies.go), nil if none: the cache holds a
	// reference while the entry is cached, a decode continuing it another while it reads.
	src  *sentBody
	elem *list.Element
	used uint64 // tick of the last lookup or store
	// users counts the decodes reading this entry's request (from lookup until DecodeNext
	// returns) and the exchange that decoded it (until it ends; decodeInfo.done): the
	// request's messages may be overwritten by a later body's decode only when it is the one
	// user left (giveUp).
	users atomic.Int32
	// forwardedTo is the upstream URL this body was forwarded to as the client's own bytes,
	// nil if it was not (or not yet): the prediction of cutthrough.go.
	forwardedTo atomic.Pointer[string]
	// extended: a later body continued every message of this one, and appended its hashes
	// to the array of hashes in place (see wire.Layout; only one continuation may), or
	// this entry was given up to a later body (giveUp), which wrote its hashes over this
	// one's from where the two differ.
	extended atomic.Bool
	// hbase: the first hbase hashes of the array may be read by other entries (this one's
	// ancestors, whose array it extended in place); the rest is this entry's own.
	hbase int
}

type decodeCache struct {
	// whole and continued count the bodies decoded whole and those that continued a cached
	// one (ctxmgr_decodes_total).
	whole, continued atomic.Int64

	mu     sync.Mutex
	limit  int
	size   int
	byHead map[[16]byte][]*decoded
	lru    *list.List // of *decoded, most recent first
	tick   uint64
}

func newDecodeCache(limit int) *decodeCache {
	return &decodeCache{limit: limit, byHead: map[[16]byte][]*decoded{}, lru: list.New()}
}

func bodyHead(body []byte) [16]byte {
	h := sha256.Sum256(body[:min(len(body), headLen)])
	var k [16]byte
	copy(k[:], h[:16])
	return k
}

// decodeInfo is what the proxy derives from a decoded request's messages, kept with the
// cached conversation so that a continuation derives it for its new messages only.
type decodeInfo struct {
	hashes []nhash // normalized hashes of the messages
	// firstCmd is the index of the first message that is a command (-1: none; see
	// splitCommandsFrom).
	firstCmd int
	// bps are the messages' cache_control breakpoints, in order (Anthropic bodies only: the
	// other formats have none).
	bps []breakpoint
	// entry is the cache entry the body was stored as, if it was.
	entry *decoded
}

// continues reports whether lay, decoded from body against prev, continues prev's
// conversation, so that it replaces prev in the cache. A body that ends as prev's does keeps
// all of its messages, all but the last (whose cache_control breakpoint moved on) or at least
// half (an edit of a recent message, whose abandoned branch is seldom continued). One whose
// fields after the messages changed (Codex CLI's client_metadata) must keep every message
// and add some: another session with the same first messages, its own system prompt after
// them, must not take the place of the one it started like.
func continues(prev *decoded, lay *wire.Layout, body []byte, n int) bool {
	if lay.Reused() == 0 {
		return false
	}
	if prev.lay.EndsLike(body) {
		return lay.Dropped() <= 1 || 2*lay.Reused() >= len(prev.hashes)
	}
	return lay.Dropped() == 0 && n > lay.Reused()
}

// size is the memory the entry keeps alive: its body's buffer.
func (d *decoded) size() int {
	if d.src != nil {
		return cap(d.src.buf)
	}
	return d.lay.Size()
}

// decode decodes body in format f, reusing the cached conversation it continues, and returns
// the request with what is derived from its messages. The request and the info share memory
// with the cache: they must not be modified (replace fields of a copy instead). src, if not
// nil, is the counted buffer body is in: the cache takes a reference to keep it. exp, if
// not nil, is what predict expected while the body was read, and compared.
func (c *decodeCache) decode(f Format, body []byte, src *sentBody, exp *expected) (*chat.Request, decodeInfo, error) {
	if c == nil || c.limit <= 0 {
		req, err := wire.Decode(f, body)
		if err != nil {
			return nil, decodeInfo{}, err
		}
		if c != nil {
			c.whole.Add(1)
		}
		info := decodeInfo{hashes: hashAll(req.Messages), firstCmd: firstCommand(req.Messages, 0)}
		if f == FormatAnthropic {
			info.bps = messageBreakpoints(req.Messages, 0, nil)
		}
		return req, info, nil
	}
	head := bodyHead(body)
	prev := c.lookup(head, body, exp)
	if prev != nil && prev.src != nil {
		defer prev.src.release() // the reference lookup took
	}
	var lay *wire.Layout
	var req *chat.Request
	var err error
	gaveUp := false
	if prev != nil {
		shared := 0
		if exp != nil && exp.d == prev {
			shared = exp.shared
		}
		req, lay, err = wire.DecodeNextShared(f, body, prev.lay, shared, func(reused, dropped int) bool {
			gaveUp = c.giveUp(prev, body, reused, dropped)
			return gaveUp
		})
		prev.users.Add(-1)
	} else {
		req, lay, err = wire.DecodeLayout(f, body)
	}
	if err != nil {
		return nil, decodeInfo{}, err
	}
	out := *req // callers replace fields (tools); the cached request stays as decoded
	var hashes []nhash
	hbase := 0
	first := -1
	// The breakpoints of a shared prefix are the previous body's; the messages after it are
	// searched (one that moved its breakpoint is among them: it changed).
	from, known := 0, []breakpoint(nil)
	if prev != nil && lay != nil && lay.Reused() > 0 {
		n := lay.Reused()
		from, known = n, prev.bps
		// The shared prefix is the previous body's: its first command, if there, is this
		// one's; otherwise only the new messages may hold one.
		if prev.firstCmd >= 0 && prev.firstCmd < n {
			first = prev.firstCmd
		} else {
			first = firstCommand(req.Messages, n)
		}
		switch {
		case n == len(prev.hashes) && prev.extended.CompareAndSwap(false, true):
			hashes, hbase = prev.hashes, n // prev reads them on
		case gaveUp && n >= prev.hbase && n < len(prev.hashes) && prev.extended.CompareAndSwap(false, true):
			// No one reads prev any more (giveUp): its hashes from n on are overwritten,
			// those before prev.hbase are its ancestors', never written.
			hashes, hbase = prev.hashes[:n], prev.hbase
		default:
			hashes = make([]nhash, n, len(req.Messages))
			copy(hashes, prev.hashes[:n])
		}
		for i := n; i < len(req.Messages); i++ {
			hashes = append(hashes, normHash(&req.Messages[i]))
		}
	} else {
		hashes = hashAll(req.Messages)
		first = firstCommand(req.Messages, 0)
	}
	var bps []breakpoint
	if f == FormatAnthropic {
		bps = messageBreakpoints(req.Messages, from, known)
	}
	if lay != nil && lay.Reused() > 0 {
		c.continued.Add(1)
	} else {
		c.whole.Add(1)
	}
	var entry *decoded
	if lay != nil {
		var replaced *decoded
		if prev != nil && continues(prev, lay, body, len(req.Messages)) {
			replaced = prev
		}
		entry = &decoded{head: head, lay: lay, hashes: hashes, hbase: hbase, firstCmd: first, bps: bps, src: src}
		entry.users.Store(1) // the exchange's, until it calls done
		c.store(entry, replaced)
	}
	return &out, decodeInfo{hashes: hashes, firstCmd: first, bps: bps, entry: entry}, nil
}

// lookup returns the cached body under head to decode body against: one that ends as body
// does if any (the fields after the messages, where an Anthropic or Responses body has its
// system prompt: most likely the same session), and among those the one that shares the
// longest prefix with body. Prefixes are compared only between two or more such candidates
// (DecodeNext compares the one chosen itself): a 400 KB comparison is a large part of a
// request's time. exp, if not nil, is the body compared with body while it was read: it is
// tried first, with the length the reading found, and the others are then compared only where
// their 64 bytes before it match (mayShare), so that the up to maxCandidates sessions of one
// agent sharing a head (its system prompt) are not each compared through that prompt.
func (c *decodeCache) lookup(head [16]byte, body []byte, exp *expected) *decoded {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *decoded
	bestAlike, bestN := false, -1
	cands := c.byHead[head]
	if exp != nil && slices.Contains(cands, exp.d) {
		// The body compared while read first: its shared length is known, and most
		// candidates are then ruled out by the 64 bytes before it (mayShare).
		best, bestAlike = exp.d, exp.d.lay.EndsLike(body)
	}
	for _, d := range cands {
		if exp != nil && d == exp.d {
			continue
		}
		alike := d.lay.EndsLike(body)
		switch {
		case best == nil || alike && !bestAlike:
			best, bestAlike, bestN = d, alike, -1
			continue
		case bestAlike && !alike:
			continue
		}
		if bestN < 0 {
			bestN = exp.sharedWith(best, body)
		}
		if !mayShare(d.lay.Body(), body, bestN+1) {
			continue
		}
		if n := exp.sharedWith(d, body); n > bestN {
			best, bestN = d, n
		}
	}
	if best != nil {
		if best.src != nil {
			best.src.refs.Add(1) // released by the caller once DecodeNext has read the body
		}
		best.users.Add(1)
		c.lru.MoveToFront(best.elem)
		c.tick++
		best.used = c.tick
	}
	return best
}

// predict returns, for a body of n bytes under head being read, the cached body it is
// expected to continue (the most recently used one under head, not longer than n: a
// conversation grows), nil if none, and where the most recent such body that was forwarded
// as the client's own bytes went ("" if none: the prediction of cutthrough.go). The caller
// releases the expectation once the body is decoded.
func (c *decodeCache) predict(head [16]byte, n int) (*expected, string) {
	if c == nil || c.limit <= 0 {
		return nil, ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var last, fwd *decoded
	var to *string
	for _, d := range c.byHead[head] {
		if len(d.lay.Body()) > n {
			continue
		}
		if last == nil || d.used > last.used {
			last = d
		}
		if t := d.forwardedTo.Load(); t != nil && (fwd == nil || d.used > fwd.used) {
			fwd, to = d, t
		}
	}
	var e *expected
	if last != nil {
		if last.src != nil {
			last.src.refs.Add(1) // its buffer is compared with the body until release
		}
		e = &expected{d: last}
	}
	if to == nil {
		return e, ""
	}
	return e, *to
}

// expected is the cached body a body being read is expected to continue, and how much of the
// two is known to be equal: compared as the body arrives (readChatBody), so that decoding it
// resumes the comparison there (wire.DecodeNextShared) instead of comparing a megabyte of
// history after the last byte.
type expected struct {
	d       *decoded
	shared  int  // the body's first shared bytes equal d's
	differs bool // and the next one differs
}

// compare extends shared over body, the part of the body read so far.
func (e *expected) compare(body []byte) {
	if e == nil || e.differs {
		return
	}
	pb := e.d.lay.Body()
	end := min(len(body), len(pb))
	if e.shared >= end {
		return
	}
	e.shared += wire.SharedPrefix(body[e.shared:end], pb[e.shared:end])
	e.differs = e.shared < end
}

// sharedWith returns how many first bytes of body equal d's body: known without comparing when
// d is the body e compared body with, whole.
func (e *expected) sharedWith(d *decoded, body []byte) int {
	pb := d.lay.Body()
	if e != nil && e.d == d && (e.differs || e.shared == min(len(body), len(pb))) {
		return e.shared
	}
	return wire.SharedPrefix(pb, body)
}

// mayShare reports whether a and b may have their first n bytes equal: false when either is
// shorter, or when the 64 bytes before the n-th differ. The cached bodies under one head are
// often conversations of one agent, the same system prompt and tools and then another task:
// the one that shares most with a body is found without comparing every other one's prompt.
func mayShare(a, b []byte, n int) bool {
	if len(a) < n || len(b) < n {
		return false
	}
	from := max(0, n-64)
	return bytes.Equal(a[from:n], b[from:n])
}

// release gives back the reference predict took.
func (e *expected) release() {
	if e != nil && e.d.src != nil {
		e.d.src.release()
	}
}

// giveUp is asked by DecodeNextOwned whether the body being decoded against prev, which keeps
// reused of its messages and drops dropped of its wire messages, may overwrite prev's
// messages in place. It may when prev would be replaced by the body anyway (continues: one
// wire message dropped at most, the same fields after the messages) and no one but this
// decode uses prev: the exchange that decoded it has ended, and no other decode has looked
// it up. prev then leaves the cache at once, so that none will.
func (c *decodeCache) giveUp(prev *decoded, body []byte, reused, dropped int) bool {
	if reused == 0 || dropped > 1 || !prev.lay.EndsLike(body) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev.elem == nil || prev.users.Load() != 1 {
		return false
	}
	c.remove(prev)
	return true
}

// done is called by the exchange that decoded the request once it has ended: it reads the
// request's messages no more.
func (d *decodeInfo) done() {
	if d.entry != nil {
		d.entry.users.Add(-1)
	}
}

// store adds d, replacing the entry it continues (prev, if any).
func (c *decodeCache) store(d *decoded, prev *decoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev != nil && prev.elem != nil {
		c.remove(prev)
	}
	if d.size() > c.limit {
		return
	}
	if d.src != nil {
		d.src.refs.Add(1)
	}
	list := c.byHead[d.head]
	if len(list) >= maxCandidates {
		oldest := list[0]
		for _, x := range list {
			if x.used < oldest.used {
				oldest = x
			}
		}
		c.remove(oldest)
	}
	c.tick++
	d.used = c.tick
	d.elem = c.lru.PushFront(d)
	c.byHead[d.head] = append(c.byHead[d.head], d)
	c.size += d.size()
	for c.size > c.limit {
		c.remove(c.lru.Back().Value.(*decoded))
	}
}

func (c *decodeCache) remove(d *decoded) {
	if d.elem == nil {
		return
	}
	c.lru.Remove(d.elem)
	d.elem = nil
	c.size -= d.size()
	if d.src != nil {
		d.src.release()
	}
	list := c.byHead[d.head]
	for i, x := range list {
		if x == d {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.byHead, d.head)
	} else {
		c.byHead[d.head] = list
	}
}
