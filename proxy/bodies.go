package proxy

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// Bodies in reused buffers. Client bodies are read into reused buffers (readBody, below).
// Forwarded bodies are encoded into reused buffers. A long conversation's body is hundreds of
// KB, and allocating one per request cost more than encoding it, in allocation and garbage
// collection (the in-process handler, 100K-token OpenAI requests: 0.64-0.80 -> 0.48-0.60 ms
// and 696 -> 515 KB allocated a request, three rounds each). A buffer is reused only once
// nothing can read it any more: the exchange that encoded it has finished, and the transport
// has closed every reader it was given (http.RoundTripper closes a request's body when it is
// done with it, possibly after RoundTrip has returned; the readers GetBody makes for a retry
// are closed the same way).

// maxPooledBody: larger buffers are left to the garbage collector rather than kept.
const maxPooledBody = 16 << 20

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

// keepBody records b, encoded into a buffer from bodyBuffer, as a body of this exchange.
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

// readBody reads a request body of at most limit bytes into a buffer from pool (nil: a new
// one) and returns a copy of exactly its size; the buffer goes back to pool at once.
//
// Reading and copying cost less than reading straight into a new buffer of the body's size.
// On the 2-core VM of the proxy benchmark, medians of 600 requests of 400 KB: 1.15-1.3 ms to
// read into a new buffer against 0.5-0.7 ms into the reused one plus 0.05-0.07 ms for the
// copy, and decoding the new body against the cached one took 0.40-0.46 ms against 0.04-0.05
// ms (what the socket's copy writes is slow to read back; what the copy writes is not). The
// copy, not the reused buffer, is what the request keeps: the decode cache holds it, and the
// transport may read it after the exchange is done. Keeping the reused buffer itself, counted
// and given back once the cache dropped it, was tried: as slow as a new buffer (the read and
// the decode as above).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, pool *sync.Pool) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	var buf []byte
	if pool != nil {
		if p, _ := pool.Get().(*[]byte); p != nil {
			buf = (*p)[:0]
		}
	}
	if n := r.ContentLength; n > 0 && n <= limit && int64(cap(buf)) < n+1 {
		// The declared length sizes the buffer once (growing by doubling would allocate
		// and copy twice the bytes); one byte more finds the end without a second read.
		buf = make([]byte, 0, n+1)
	}
	buf, err := readAll(rd, buf)
	if err == nil && r.ContentLength > 0 && int64(len(buf)) < r.ContentLength {
		err = io.ErrUnexpectedEOF // a body cut short is an error, not a shorter body
	}
	out := bytes.Clone(buf)
	if pool != nil && cap(buf) <= maxPooledBody {
		buf = buf[:0]
		pool.Put(&buf)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readAll appends what rd yields to buf until io.EOF, as io.ReadAll does.
func readAll(rd io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
