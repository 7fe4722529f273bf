package proxy

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
)

// Forwarded bodies are encoded into reused buffers. A long conversation's body is hundreds of
// KB, and allocating one per request costs more than encoding it, in allocation and garbage
// collection. A buffer is reused only once
// nothing can read it any more: the exchange that encoded it has finished, and the transport
// has closed every reader it was given (http.RoundTripper closes a request's body when it is
// done with it, possibly after RoundTrip has returned; the readers GetBody makes for a retry
// are closed the same way).

//
// The client's body is read into such a buffer too, and counted the same way, with one more
// holder: the decode cache keeps the last body of each conversation (decode.go), and a decode
// that continues it holds it while comparing. Nothing decoded from a body refers to it (the
// wire decoders copy what they keep: wire's tests scribble over the body after decoding), so
// once the exchange, the transport and the cache have let go, the next request's body is
// read into it. At 100K tokens a body is 400 KB: allocated and zeroed on every request, it
// would be most of what a request allocates.

// Buffers are kept by size class (bufferPool): a class holds buffers of at least its
// capacity, and a body takes a buffer from the smallest class that holds it. One pool of
// mixed sizes, taking a buffer only if it fitted, would fail on what a proxy sees most: a
// conversation grows by each turn, so its bodies soon outgrow the buffers pooled, which would
// be taken, found too small, and put back, while a new buffer is allocated
// (TestBufferPoolGrowingConversation).

// maxPooledBody: larger buffers are left to the garbage collector rather than kept.
const maxPooledBody = 16 << 20

// minPooledRead: a smaller body is read into a buffer of its own (allocating it costs little).
const minPooledRead = 32 << 10

// classSteps is the number of size classes per doubling: a body's buffer is at most 25%
// larger than the body.
const classSteps = 4

// numClasses covers minPooledRead to maxPooledBody.
const numClasses = 9*classSteps + 1 // 32 KiB << 9 = 16 MiB

// classCap is the capacity of the buffers class k makes: minPooledRead·2^(k/classSteps),
// plus a quarter of that per step.
func classCap(k int) int {
	base := minPooledRead << (k / classSteps)
	return base + base/classSteps*(k%classSteps)
}

// bufferPool keeps body buffers by size class. Its zero value is ready to use.
type bufferPool struct {
	classes [numClasses]sync.Pool
}

// get returns an empty buffer of capacity at least n: a kept one, or a new one of the
// capacity of the smallest class that holds n. A body outside the pooled sizes gets a
// buffer of exactly n.
func (p *bufferPool) get(n int) []byte {
	if n < minPooledRead || n > maxPooledBody {
		return make([]byte, 0, n)
	}
	k := 0
	for classCap(k) < n {
		k++
	}
	if b, _ := p.classes[k].Get().(*[]byte); b != nil {
		return (*b)[:0]
	}
	return make([]byte, 0, classCap(k))
}

// put keeps b for a later body, in the largest class its capacity holds.
func (p *bufferPool) put(b []byte) {
	c := cap(b)
	if c < minPooledRead || c > maxPooledBody {
		return
	}
	k := numClasses - 1
	for classCap(k) > c {
		k--
	}
	b = b[:0]
	p.classes[k].Put(&b)
}

// sentBody is one encoded body, counted: one reference for the exchange, one for each reader
// not yet closed.
type sentBody struct {
	buf  []byte
	refs atomic.Int32
	pool *bufferPool
}

func (b *sentBody) release() {
	if b.refs.Add(-1) == 0 {
		b.pool.put(b.buf)
	}
}

// reader returns a new reader of the body, released when closed.
func (b *sentBody) reader() io.ReadCloser {
	b.refs.Add(1)
	return &bodyReader{Reader: bytes.NewReader(b.buf), b: b}
}

type bodyReader struct {
	*bytes.Reader
	b    *sentBody
	once sync.Once
}

func (r *bodyReader) Close() error {
	r.once.Do(r.b.release)
	return nil
}

// bodyBuffer returns an empty buffer to encode a body into, sized for the client's body
// (what is sent is rarely larger; append grows it if it is).
func (x *exchange) bodyBuffer() []byte {
	return x.s.bodies.get(len(x.body))
}

// keepBody records b, a buffer from the pool (or one append grew from it), as a body of this
// exchange.
func (x *exchange) keepBody(b []byte) {
	if len(b) > 0 {
		sb := &sentBody{buf: b, pool: &x.s.bodies}
		sb.refs.Store(1)
		x.bodies = append(x.bodies, sb)
	}
}

// bodyOf returns the recorded body b is, if any.
func (x *exchange) bodyOf(b []byte) *sentBody {
	if len(b) == 0 {
		return nil
	}
	for _, sb := range x.bodies {
		if &sb.buf[0] == &b[0] && len(sb.buf) == len(b) {
			return sb
		}
	}
	return nil
}

// releaseBodies gives up the exchange's references: each buffer is reused once its readers
// are closed too.
func (x *exchange) releaseBodies() {
	for _, sb := range x.bodies {
		sb.release()
	}
	x.bodies = nil
}
