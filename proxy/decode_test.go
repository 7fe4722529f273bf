package proxy

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/ctxmgr/ctxmgr/wire"
)

// The decode cache overwrites a conversation's decoded messages in place (Claude Code's
// moving breakpoint changes the previous last message on every request) only once no one
// reads them: a request still being handled keeps its messages as decoded, whatever later
// bodies of its conversation do. held is how many requests are still being handled when the
// next one is decoded.
func TestDecodeCacheOverwritesOnlyWhatNoOneReads(t *testing.T) {
	conv := newBenchConversation(3000)
	var bodies [][]byte
	for i := range 30 {
		if i%3 == 2 {
			// The previous request's last message edited (not only its breakpoint moved):
			// its hash changes too.
			for j := len(conv.msgs) - 1; j >= 0; j-- {
				if conv.msgs[j]["role"] == "user" {
					conv.msgs[j] = map[string]any{"role": "user", "content": fmt.Sprintf("%v (edited)", conv.msgs[j]["content"])}
					break
				}
			}
		}
		bodies = append(bodies, conv.anthropicBody(i))
		conv.msgs = append(conv.msgs, map[string]any{"role": "assistant", "content": "ok"})
	}
	type exchange struct {
		i    int
		info decodeInfo
		msgs any
	}
	check := func(t *testing.T, i int, got any, hashes []nhash) {
		t.Helper()
		want, err := wire.Decode(FormatAnthropic, bodies[i])
		if err != nil || !reflect.DeepEqual(want.Messages, got) {
			t.Errorf("request %d: its messages changed while it was handled (%v)", i, err)
		}
		if err == nil && !slices.Equal(hashAll(want.Messages), hashes) {
			t.Errorf("request %d: its messages' hashes changed while it was handled", i)
		}
	}
	for _, held := range []int{0, 1, 2} {
		t.Run(map[int]string{0: "none held", 1: "one held", 2: "two held"}[held], func(t *testing.T) {
			c := newDecodeCache(64 << 20)
			var inFlight []exchange
			inPlace, hashesInPlace := 0, 0
			var prevFirst any
			var prevHashes []nhash
			for i, b := range bodies {
				req, info, err := c.decode(FormatAnthropic, b, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if i > 0 && any(&req.Messages[0]) == prevFirst {
					inPlace++
				}
				prevFirst = any(&req.Messages[0])
				if i > 0 && &info.hashes[0] == &prevHashes[0] {
					hashesInPlace++
				}
				prevHashes = info.hashes
				inFlight = append(inFlight, exchange{i: i, info: info, msgs: req.Messages})
				for len(inFlight) > held {
					x := inFlight[0]
					inFlight = inFlight[1:]
					check(t, x.i, x.msgs, x.info.hashes)
					x.info.done()
				}
			}
			for _, x := range inFlight {
				check(t, x.i, x.msgs, x.info.hashes)
			}
			if held == 0 && (inPlace < len(bodies)/2 || hashesInPlace < len(bodies)/2) {
				t.Errorf("%d of %d requests decoded in place, %d hashed in place: want most, no one reading the previous", inPlace, len(bodies)-1, hashesInPlace)
			}
		})
	}
	// Sessions decoded concurrently (-race), each request handled while others decode.
	t.Run("concurrent", func(t *testing.T) {
		c := newDecodeCache(64 << 20)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var held []exchange
				for i, b := range bodies {
					req, info, err := c.decode(FormatAnthropic, b, nil, nil)
					if err != nil {
						t.Error(err)
						return
					}
					held = append(held, exchange{i: i, info: info, msgs: req.Messages})
					if len(held) > g%3 {
						x := held[0]
						held = held[1:]
						check(t, x.i, x.msgs, x.info.hashes)
						x.info.done()
					}
				}
			}()
		}
		wg.Wait()
	})
}
