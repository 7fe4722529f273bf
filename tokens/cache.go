package tokens

import (
	"container/list"
	"sync"

	"github.com/ctxmgr/ctxmgr/chat"
)

// DefaultCacheEntries is the size NewCache uses for a non-positive maxEntries: enough for a
// few long sessions.
const DefaultCacheEntries = 1 << 16

// Cache is a Counter that remembers per-message counts. See NewCache.
type Cache struct {
	c   Counter
	max int

	mu      sync.Mutex
	ll      *list.List // front: most recently used; values are *cacheEntry
	entries map[chat.Hash]*list.Element
	hits    uint64
	misses  uint64
}

type cacheEntry struct {
	key chat.Hash
	n   int
}

// NewCache wraps c with a per-message count cache keyed by chat.Message.Hash (a content hash,
// so equal messages share an entry whatever slice they sit in), bounded to maxEntries entries
// with least-recently-used eviction (DefaultCacheEntries when maxEntries <= 0). Tool
// definition lists are cached too, keyed by the hash of their JSON. Text is not cached.
//
// Recounting a session whose messages were counted before costs one hash per message (a JSON
// encoding and a SHA-256, far cheaper than tokenizing) plus the count of the new messages; a
// caller that already holds the hashes can pass them to MessageHash and skip even that.
//
// The cache is safe for concurrent use; counting happens outside its lock, so two goroutines
// may count the same new message at the same time (both get the same answer). Its Name is
// the wrapped counter's: the counts are the same. The dynamic type is *Cache, for MessageHash
// and Stats.
//
// Wrap the base counter, not a calibrated one: calibrated counts change as the calibration
// learns, cached ones would not.
func NewCache(c Counter, maxEntries int) Counter {
	if maxEntries <= 0 {
		maxEntries = DefaultCacheEntries
	}
	return &Cache{c: c, max: maxEntries, ll: list.New(), entries: make(map[chat.Hash]*list.Element)}
}

// Name returns the wrapped counter's name.
func (c *Cache) Name() string { return c.c.Name() }

// Text counts s with the wrapped counter (uncached).
func (c *Cache) Text(s string) int { return c.c.Text(s) }

// Message returns the cached count of m, counting and remembering it on a miss.
func (c *Cache) Message(m *chat.Message) int {
	if m == nil {
		return 0
	}
	return c.MessageHash(m.Hash(), m)
}

// MessageHash is Message for a caller that already has m's hash (h must be m.Hash()).
func (c *Cache) MessageHash(h chat.Hash, m *chat.Message) int {
	if n, ok := c.get(h); ok {
		return n
	}
	n := c.c.Message(m)
	c.put(h, n)
	return n
}

// Tools returns the cached count of a tool list.
func (c *Cache) Tools(tools []chat.Tool) int {
	if len(tools) == 0 {
		return 0
	}
	// Tool-list hashes start with their own tag ('L'), apart from message hashes.
	h := chat.HashTools(tools)
	if n, ok := c.get(h); ok {
		return n
	}
	n := c.c.Tools(tools)
	c.put(h, n)
	return n
}

// Request counts a request with cached message and tool counts.
func (c *Cache) Request(r *chat.Request) Breakdown { return request(c, r) }

// Stats returns the number of hits and misses so far and the current number of entries.
func (c *Cache) Stats() (hits, misses uint64, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses, c.ll.Len()
}

func (c *Cache) get(h chat.Hash) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[h]; ok {
		c.ll.MoveToFront(e)
		c.hits++
		return e.Value.(*cacheEntry).n, true
	}
	c.misses++
	return 0, false
}

func (c *Cache) put(h chat.Hash, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[h]; ok {
		e.Value.(*cacheEntry).n = n
		c.ll.MoveToFront(e)
		return
	}
	c.entries[h] = c.ll.PushFront(&cacheEntry{key: h, n: n})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.entries, old.Value.(*cacheEntry).key)
	}
}
