package proxy

import (
	"context"
	"log/slog"
	"net/http"
)

// The store stage: the messages a request adds to its conversation are written to the Store
// while the request goes upstream (Config.SharedStore false: Session.AppendDeferred takes
// them in at the sync, Session.Flush writes them), and nothing of the answer is relayed
// before they are written. A Store shared by several instances (SharedStore) has them
// written at the sync instead.

// startFlush writes the messages the request added to its session (deferred by
// Session.AppendDeferred) while the request goes upstream. The write is not bound to the
// client's connection: messages taken in are stored even if the client goes away.
//
// For a request forwarded as the client's bytes, send starts it once the request is on its
// way: waking the writer costs a system call, which before the last byte is let go is
// latency the client sees, after it is time the upstream takes anyway. For a cut-through
// request that is once the transport has written the last byte (cutThrough.commit): a worker
// woken as the last byte is let go would run before the transport's goroutine (the scheduler
// runs the goroutine readied last first) and delay that byte
// (TestCutThroughCommitStartsThenAfterTheLastByte). A rewritten request starts it before it
// is encoded (manage), and awaitFlush on every other path.
func (x *exchange) startFlush() {
	if start := x.prepareFlush(); start != nil {
		start()
	}
}

// prepareFlush readies startFlush's write and returns what starts it, nil when there is
// nothing to write or the write was readied before. The function returned touches nothing
// of x (only the channel awaitFlush receives from), so that another goroutine may call it:
// a cut-through request's transport does (cutThrough.commit).
func (x *exchange) prepareFlush() func() {
	if x.sess == nil || x.flush != nil {
		return nil
	}
	done := make(chan error, 1)
	x.flush = done
	sess, ctx, workers := x.sess, context.WithoutCancel(x.r.Context()), x.s.flushers
	return func() { workers.run(func() { done <- sess.Flush(ctx) }) }
}

// awaitFlush waits for startFlush's write. It must succeed before anything of the answer is
// relayed: an answered request has its messages stored. On failure the session is dropped
// from memory (the next request reloads it from the Store, without what was not stored,
// and its client sends those messages again).
func (x *exchange) awaitFlush() error {
	x.startFlush()
	if x.flush == nil || x.flushed {
		return x.flushErr
	}
	x.flushErr, x.flushed = <-x.flush, true
	if x.flushErr != nil {
		x.ps.drop(x.sess)
		x.s.metrics.notStored.Inc()
		x.log.Warn("proxy: storing the request's messages failed; the client is asked to retry", slog.String("error", x.flushErr.Error()))
	}
	return x.flushErr
}

// notStored answers a request whose messages could not be stored: 503 with Retry-After, so
// that the client sends the request again (never an answer whose history is not kept).
func (x *exchange) notStored() {
	x.w.Header().Set("Retry-After", "1")
	writeError(x.w, x.format, http.StatusServiceUnavailable, "overloaded_error", "ctxmgr: the conversation's new messages could not be stored; retry")
}
