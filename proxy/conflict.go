package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ctxmgr/ctxmgr/store"
)

// Concurrent writers (several instances on one PostgreSQL database) make a session's Append
// fail with store.ErrConflict when another instance appended first. The proxy then re-reads
// the session and applies the request again, up to conflictAttempts times with a growing,
// jittered wait; if the session is still contended it answers 503 (ErrSessionBusy). A store
// conflict never makes a request forwarded unmanaged.

// ErrSessionBusy is returned (wrapped) when a session stayed contended by other writers for
// every retry; the client gets 503 with Retry-After.
var ErrSessionBusy = errors.New("proxy: session busy: other writers kept appending to it")

const (
	conflictAttempts = 10
	conflictBaseWait = 2 * time.Millisecond
	conflictMaxWait  = 250 * time.Millisecond
)

// afterConflict decides what follows a failed store write at the given attempt (0-based): an
// error that is not a conflict is returned as is; a conflict waits a jittered backoff and
// returns nil (the caller re-reads the session and retries), or, after the last attempt,
// returns ErrSessionBusy wrapping it.
func afterConflict(ctx context.Context, err error, attempt int) error {
	if !errors.Is(err, store.ErrConflict) {
		return err
	}
	if attempt+1 >= conflictAttempts {
		return fmt.Errorf("%w after %d attempts: %w", ErrSessionBusy, attempt+1, err)
	}
	wait := min(conflictBaseWait<<attempt, conflictMaxWait)
	wait = wait/2 + rand.N(wait) // x0.5 .. x1.5
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// isBusy reports whether managing a request failed because of concurrent writers.
func isBusy(err error) bool {
	return errors.Is(err, ErrSessionBusy) || errors.Is(err, store.ErrConflict)
}
