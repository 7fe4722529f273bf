package proxy

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
)

// Forwarded bodies are encoded into reused buffers. A long conversation's body is hundreds of
// KB, and allocating one per request cost more than encoding it, in allocation and garbage
// collection (the in-process handler, 100K-token OpenAI requests: 0.64-0.80 -> 0.48-0.60 ms
// and 696 -> 515 KB allocated a request, three rounds each). A buffer is reused only once
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
// read into it. At 100K tokens this is most of what a request allocated: its 400 KB body,
// allocated and zeroed, every request.

// maxPooledBody: larger buffers are left to the garbage collector rather than kept.
const maxPooledBody = 16 << 20

// minPooledRead: a smaller body is read into a buffer of its own (allocating it costs little).
const minPooledRead = 32 << 10

// sentBody is one encoded body, counted: one reference for the exchange, one for each reader
// not yet closed.
type sentBody struct {
	buf  []byte
	refs atomic.Int32
	pool *sync.Pool
}

func (b *sentBody) release() {
	if b.refs.Add(-1) == 0 && cap(b.buf) <= maxPooledBody {
		buf := b.buf[:0]
		b.pool.Put(&buf)
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

// bodyBuffer returns an empty buffer to encode a body into.
func (x *exchange) bodyBuffer() []byte {
	if p, _ := x.s.bodyPool.Get().(*[]byte); p != nil {
		return (*p)[:0]
	}
	return nil
}

// readBuffer returns a buffer to read a body of n bytes into: a pooled one of at least n
// and at most 2n bytes (a smaller body must not pin a larger buffer in the decode cache), or
// nil (readBody allocates one).
func (s *Server) readBuffer(n int64) []byte {
	if n < minPooledRead || n > maxPooledBody {
		return nil
	}
	p, _ := s.bodyPool.Get().(*[]byte)
	if p == nil {
		return nil
	}
	if c := int64(cap(*p)); c < n || c > 2*n {
		s.bodyPool.Put(p)
		return nil
	}
	return (*p)[:0]
}

// keepBody records b, a buffer from bodyBuffer or readBuffer (or one allocated in their
// place), as a body of this exchange.
func (x *exchange) keepBody(b []byte) {
	if len(b) > 0 {
		sb := &sentBody{buf: b, pool: &x.s.bodyPool}
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
