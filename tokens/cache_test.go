package tokens_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// countingCounter counts the Message calls that reach the wrapped counter.
type countingCounter struct {
	tokens.Counter
	messages atomic.Int64
}

func (c *countingCounter) Message(m *chat.Message) int {
	c.messages.Add(1)
	return c.Counter.Message(m)
}

func session(n int) []chat.Message {
	msgs := make([]chat.Message, n)
	for i := range msgs {
		role := chat.RoleUser
		if i%2 == 1 {
			role = chat.RoleAssistant
		}
		msgs[i] = chat.TextMessage(role, fmt.Sprintf("message %d: the quick brown fox jumps over the lazy dog %d times.", i, i*7))
	}
	return msgs
}

// TestCacheCountsOnlyNewMessages: recounting a session with one new message reaches the
// underlying counter once, and every count equals the uncached one.
func TestCacheCountsOnlyNewMessages(t *testing.T) {
	inner := &countingCounter{Counter: tokens.NewHeuristic(tokens.HeuristicOptions{})}
	c := tokens.NewCache(inner, 0)
	if c.Name() != "heuristic" {
		t.Errorf("cache name %q", c.Name())
	}
	msgs := session(2000)
	r := &chat.Request{System: []chat.Message{chat.TextMessage(chat.RoleSystem, "Be terse.")}, Messages: msgs}
	first := c.Request(r)
	if want := inner.Counter.Request(r); fmt.Sprint(first) != fmt.Sprint(want) {
		t.Fatalf("cached breakdown differs from uncached")
	}
	if got := inner.messages.Load(); got != 2001 {
		t.Fatalf("first count reached the counter %d times, want 2001", got)
	}
	r.Messages = append(r.Messages, chat.TextMessage(chat.RoleUser, "one more"))
	second := c.Request(r)
	if got := inner.messages.Load(); got != 2002 {
		t.Errorf("recount with one new message reached the counter %d times in all, want 2002", got)
	}
	if second.Total != first.Total+second.Messages[2000] {
		t.Errorf("totals: %d then %d", first.Total, second.Total)
	}
	// An equal message in another slice hits the same entry.
	clone := msgs[5].Clone()
	if c.Message(&clone) != first.Messages[5] || inner.messages.Load() != 2002 {
		t.Error("a clone of a counted message was counted again")
	}
	// A changed message is a new entry.
	clone.Content[0].Text += "!"
	c.Message(&clone)
	if inner.messages.Load() != 2003 {
		t.Error("a changed message was not recounted")
	}
	hits, misses, entries := c.(*tokens.Cache).Stats()
	if entries != 2003 || misses != 2003 || hits != 2002 {
		t.Errorf("stats: %d hits, %d misses, %d entries", hits, misses, entries)
	}
	// Tools are cached too.
	tools := []chat.Tool{{Name: "bash", Description: "Run a command."}}
	n1, n2 := c.Tools(tools), c.Tools(tools) // the second from the cache
	if n1 != inner.Counter.Tools(tools) || n2 != n1 {
		t.Error("tools count")
	}
	if _, _, e := c.(*tokens.Cache).Stats(); e != 2004 {
		t.Errorf("tools not cached: %d entries", e)
	}
}

func TestCacheLRU(t *testing.T) {
	inner := &countingCounter{Counter: tokens.NewHeuristic(tokens.HeuristicOptions{})}
	c := tokens.NewCache(inner, 10).(*tokens.Cache)
	msgs := session(20)
	for i := range msgs[:10] {
		c.Message(&msgs[i])
	}
	c.Message(&msgs[0]) // msgs[0] is now the most recent
	for i := 10; i < 15; i++ {
		c.Message(&msgs[i]) // evicts msgs[1..5]
	}
	if _, _, e := c.Stats(); e != 10 {
		t.Fatalf("%d entries, want 10", e)
	}
	before := inner.messages.Load()
	c.Message(&msgs[0])
	if inner.messages.Load() != before {
		t.Error("the most recently used entry was evicted")
	}
	c.Message(&msgs[1])
	if inner.messages.Load() != before+1 {
		t.Error("the least recently used entry was not evicted")
	}
}

func TestCacheConcurrent(t *testing.T) {
	t.Parallel()
	c := tokens.NewCache(tokens.NewHeuristic(tokens.HeuristicOptions{}), 64)
	msgs := session(200)
	want := tokens.NewHeuristic(tokens.HeuristicOptions{}).Request(&chat.Request{Messages: msgs}).Total
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				if got := c.Request(&chat.Request{Messages: msgs}).Total; got != want {
					t.Errorf("goroutine %d: %d, want %d", g, got, want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}
