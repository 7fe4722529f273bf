package encodecache_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
	"github.com/ctxmgr/ctxmgr/wire" // registers the encoders
)

// Without a cache, and with one, each Append encoder appends to dst the body wire's encoder
// of its format gives; AppendAnthropic encodes its substitutes in place of the messages at
// their positions.
func TestAppendMatchesWire(t *testing.T) {
	r := &chat.Request{
		System:   []chat.Message{chat.TextMessage(chat.RoleSystem, "be brief")},
		Messages: []chat.Message{chat.TextMessage(chat.RoleUser, "hello"), chat.TextMessage(chat.RoleAssistant, "hi"), chat.TextMessage(chat.RoleUser, "bye")},
		Extra:    map[string]json.RawMessage{"model": json.RawMessage(`"m"`), "max_tokens": json.RawMessage(`64`)},
	}
	subs := map[int]chat.Message{1: chat.TextMessage(chat.RoleAssistant, "hello there")}
	sub := *r
	sub.Messages = encodecache.Substituted(r.Messages, subs)
	if sub.Messages[1].Text() != "hello there" || r.Messages[1].Text() != "hi" {
		t.Fatalf("Substituted: %q, original %q", sub.Messages[1].Text(), r.Messages[1].Text())
	}
	if got := encodecache.Substituted(r.Messages, nil); &got[0] != &r.Messages[0] {
		t.Fatal("Substituted without substitutes copied the messages")
	}
	cases := []struct {
		name   string
		append func(dst []byte, c *encodecache.Cache) ([]byte, error)
		want   func() ([]byte, error)
	}{
		{"openai", func(dst []byte, c *encodecache.Cache) ([]byte, error) {
			return encodecache.AppendOpenAI(dst, r, c)
		}, func() ([]byte, error) { return wire.EncodeOpenAI(r) }},
		{"anthropic", func(dst []byte, c *encodecache.Cache) ([]byte, error) {
			return encodecache.AppendAnthropic(dst, r, c, nil)
		}, func() ([]byte, error) { return wire.EncodeAnthropic(r) }},
		{"anthropic substituted", func(dst []byte, c *encodecache.Cache) ([]byte, error) {
			return encodecache.AppendAnthropic(dst, r, c, subs)
		}, func() ([]byte, error) { return wire.EncodeAnthropic(&sub) }},
		{"responses", func(dst []byte, c *encodecache.Cache) ([]byte, error) {
			return encodecache.AppendResponses(dst, r, c)
		}, func() ([]byte, error) { return wire.EncodeResponses(r) }},
		{"gemini", func(dst []byte, c *encodecache.Cache) ([]byte, error) {
			return encodecache.AppendGemini(dst, r, c)
		}, func() ([]byte, error) { return wire.EncodeGemini(r) }},
	}
	for _, tc := range cases {
		want, err := tc.want()
		if err != nil {
			t.Fatal(err)
		}
		c := encodecache.New()
		for _, cache := range []*encodecache.Cache{nil, c, c} {
			got, err := tc.append([]byte("prefix"), cache)
			if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("%s (cache %v): %s, want prefix%s (%v)", tc.name, cache != nil, got, want, err)
			}
		}
		if st := c.Stats(); st.Groups == 0 || st.Encoded != 0 {
			t.Errorf("%s: the second call with the cache rendered %d groups and encoded %d, want some and none", tc.name, st.Groups, st.Encoded)
		}
	}
}
