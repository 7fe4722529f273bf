package proxy

import "time"

// flushIdle is how long a flush worker waits for its next write before it exits.
const flushIdle = 10 * time.Second

// flushers runs the store writes that go beside upstream calls (exchange.startFlush) on
// goroutines that live from one write to the next. A write goes deep into the store's driver
// (SQLite's is C translated to Go, with a deep stack): on a new goroutine each time, the
// stack would grow from its 8 KiB start by copying, again on every request. A worker keeps its
// grown stack.
//
// Workers are made on demand (a write that finds none idle starts one) and exit after
// flushIdle without work, so a Server needs no Close to stop them and a burst leaves nothing
// behind.
type flushers struct {
	idle chan func() // an idle worker receives here
}

func newFlushers() *flushers { return &flushers{idle: make(chan func())} }

// run runs job on an idle worker, or on a new one.
func (f *flushers) run(job func()) {
	select {
	case f.idle <- job:
	default:
		go f.work(job)
	}
}

func (f *flushers) work(job func()) {
	t := time.NewTimer(flushIdle)
	defer t.Stop()
	for {
		job()
		t.Reset(flushIdle)
		select {
		case job = <-f.idle:
		case <-t.C:
			return
		}
	}
}
