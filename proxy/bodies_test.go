package proxy

import (
	"io"
	"testing"
)

// TestSentBodyReusedAfterLastReader: a forwarded body's buffer goes back to the pool only when
// the exchange and every reader the transport was given are done with it, once.
func TestSentBodyReusedAfterLastReader(t *testing.T) {
	srv, err := New(Config{UpstreamOpenAI: "http://127.0.0.1:1", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	x := &exchange{s: srv}
	b := append(x.bodyBuffer(), `{"model":"m"}`...)
	x.keepBody(b)
	sb := x.bodyOf(b)
	if sb == nil || x.bodyOf([]byte(`{"model":"m"}`)) != nil {
		t.Fatal("bodyOf does not tell the exchange's body from an equal one")
	}
	r1, r2 := sb.reader(), sb.reader() // the request's body, and one GetBody made for a retry
	x.releaseBodies()
	if got, _ := srv.bodyPool.Get().(*[]byte); got != nil {
		t.Fatal("the buffer was reused while the transport could still read it")
	}
	if got, _ := io.ReadAll(r1); string(got) != `{"model":"m"}` {
		t.Fatalf("read %q", got)
	}
	_ = r1.Close()
	_ = r1.Close() // a second Close releases nothing more
	if got, _ := srv.bodyPool.Get().(*[]byte); got != nil {
		t.Fatal("the buffer was reused while a reader was still open")
	}
	_ = r2.Close()
	if soakRace {
		return // sync.Pool drops a random share of what it is given under the race detector
	}
	got, _ := srv.bodyPool.Get().(*[]byte)
	if got == nil || cap(*got) < len(b) || len(*got) != 0 || &(*got)[:1][0] != &b[0] {
		t.Fatal("the buffer was not reused once every reader was closed")
	}
}
