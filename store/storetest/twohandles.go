package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// RunTwoHandles checks two Store values over the same storage (a directory, a database file),
// as two processes would have them: their in-memory states are separate, so only the backend's
// locking and re-reading keep them right. Six writers, three on each handle, append to one
// session with compare-and-swap retries, then race to archive the same positions and store the
// same summary versions. Both handles must then see every message exactly once with each
// writer's messages in order, ten archived positions written by one archiver, and versions 1-3.
func RunTwoHandles(t *testing.T, a, b store.Store) {
	t.Helper()
	ctx := context.Background()
	stores := []store.Store{a, b}
	const writers, per = 6, 8
	var wg sync.WaitGroup
	errs := make(chan error, 3*writers)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := stores[g%2]
			known := 0
			for i := 0; i < per; {
				m := chat.TextMessage(chat.RoleUser, fmt.Sprintf("g%d i%d", g, i))
				err := s.Append(ctx, "shared", known, []chat.Message{m})
				switch {
				case err == nil:
					known++
					i++
				case errors.Is(err, store.ErrConflict):
					newer, err := s.Messages(ctx, "shared", known, -1)
					if err != nil {
						errs <- err
						return
					}
					known += len(newer)
				default:
					errs <- err
					return
				}
			}
			if _, err := s.Archive(ctx, "shared", 0, texts(fmt.Sprintf("arch g%d", g), 10)); err != nil {
				errs <- err
			}
			for v := 1; v <= 3; v++ {
				if err := s.PutSummary(ctx, "shared", store.Summary{Version: v, Text: fmt.Sprintf("g%d v%d", g, v)}); err != nil && !errors.Is(err, store.ErrConflict) {
					errs <- err
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k, s := range stores {
		got, err := s.Messages(ctx, "shared", 0, -1)
		if err != nil || len(got) != writers*per {
			t.Fatalf("store %d: %d messages, %v; want %d", k, len(got), err, writers*per)
		}
		next := make([]int, writers)
		for _, m := range got {
			var g, i int
			if _, err := fmt.Sscanf(m.Text(), "g%d i%d", &g, &i); err != nil || i != next[g] {
				t.Fatalf("store %d: unexpected %q (next of writer %d is %d)", k, m.Text(), g, next[g])
			}
			next[g]++
		}
		arch, err := s.ReadArchive(ctx, "shared", 0, -1)
		if err != nil || len(arch) != 10 {
			t.Fatalf("store %d: archive %d, %v; want 10", k, len(arch), err)
		}
		// One archiver wrote all ten positions; every other call found them archived.
		owner := strings.TrimSuffix(arch[0].Message.Text(), " 0")
		for i, a := range arch {
			if a.Pos != i || a.Message.Text() != fmt.Sprintf("%s %d", owner, i) {
				t.Fatalf("store %d: archive %d is %d %q, want %q", k, i, a.Pos, a.Message.Text(), fmt.Sprintf("%s %d", owner, i))
			}
		}
		sums, err := s.Summaries(ctx, "shared")
		if err != nil || len(sums) != 3 {
			t.Fatalf("store %d: %d summaries, %v; want 3", k, len(sums), err)
		}
		for i, sum := range sums {
			if sum.Version != i+1 {
				t.Fatalf("store %d: summary %d has version %d", k, i, sum.Version)
			}
		}
	}
}
