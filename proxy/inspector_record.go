package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// RequestEventKind is the kind of the event the proxy records in the Store for each request
// of a session (Store.AppendEvent), beside the Manager's pipeline events: its body is a
// RequestRecord. The inspector's timeline reads them.
const RequestEventKind = "request"

// RequestRecord is what the proxy records of one request of a session. It holds token
// counts, the model and the client's name, never a header value, a key or message text.
type RequestRecord struct {
	// Start is when the request arrived; Millis how long it took to answer.
	Start  time.Time `json:"start"`
	Millis int64     `json:"ms"`
	Model  string    `json:"model"`
	// Client names the client program: the first product of its User-Agent ("claude-cli/2.0.1"),
	// at most 64 characters of letters, digits and "._-/" ("" if none).
	Client string `json:"client,omitempty"`
	Format Format `json:"format"`
	Status int    `json:"status"`
	// Managed: the request was forwarded with its conversation managed; false when the proxy
	// answered it itself (a command such as /compact, or the providers' compaction).
	Managed bool `json:"managed"`
	// Raw is the input tokens of the request as the client sent it (system, tools and its
	// whole history); Sent those of the request forwarded (the last one, after a recovery).
	Raw  int `json:"raw"`
	Sent int `json:"sent"`
	// Window is the window the request was prepared for.
	Window int `json:"window"`
	// Usage is what the upstream reported, summed over the calls the request made (a
	// ctxmgr_read round trip or a recovery is one more call); Calls counts the calls that
	// reported usage.
	Calls      int `json:"calls"`
	Input      int `json:"input"`
	CacheRead  int `json:"cache_read"`
	CacheWrite int `json:"cache_write"`
	Output     int `json:"output"`
	// PrefixChanged: the request did not begin with the previous request's messages (the
	// pipeline rewrote history already sent), so the provider's prompt cache missed from the
	// change on. Kept is the tokens at its start that the previous forwarded request of the
	// session sent identically (system prompt, tools and the messages up to the first that
	// differs): what a prompt cache can serve.
	PrefixChanged bool `json:"prefix_changed,omitempty"`
	Kept          int  `json:"kept"`
	// Reads are the ctxmgr_read round trips answered; Recovered the overflows recovered.
	Reads     int `json:"reads,omitempty"`
	Recovered int `json:"recovered,omitempty"`
	// Prices is the session's price profile (ctxmgr.Config.Prices).
	Prices PriceProfile `json:"prices"`
}

// PriceProfile is ctxmgr.Prices as recorded: relative prices of an input token.
type PriceProfile struct {
	Uncached float64 `json:"uncached"`
	Cached   float64 `json:"cached"`
}

// callUsage is what the recorder keeps of one client request while it runs: the usage the
// upstream reported, summed over its calls; whether the pipeline changed the prefix; the
// request it prepared and the one it prepared for the session's previous request.
type callUsage struct {
	calls     int
	u         wire.Usage
	changed   bool
	cur, prev *chat.Request
}

// prepared notes what the pipeline prepared for a request, as soon as it is prepared: the
// requests of a session are noted in the order their pipeline returned, whatever the order
// in which they end.
func (s *Server) prepared(x *exchange, p *ctxmgr.Prepared) {
	if s.insp == nil || len(p.Request.Messages) == 0 {
		return
	}
	cur := &chat.Request{System: p.Request.System, Tools: p.Request.Tools, Messages: p.Request.Messages}
	x.usage.changed, x.usage.cur = p.Report.PrefixChanged, cur
	x.usage.prev = s.insp.swapLast(x.id, cur)
}

// noteUsage adds an upstream call's reported usage (none: nothing).
func (x *exchange) noteUsage(u wire.Usage) {
	if u == (wire.Usage{}) {
		return
	}
	x.usage.calls++
	x.usage.u.Input += u.Input
	x.usage.u.CacheRead += u.CacheRead
	x.usage.u.CacheWrite += u.CacheWrite
	x.usage.u.Output += u.Output
}

// clientName is the first product token of a User-Agent, restricted to a safe alphabet.
func clientName(ua string) string {
	name, _, _ := strings.Cut(strings.TrimSpace(ua), " ")
	if len(name) > 64 {
		name = name[:64]
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-/", c) >= 0) {
			return ""
		}
	}
	return name
}

// record queues the record of a request that reached a session; the recorder writes it to
// the Store beside the request, so that it costs the request nothing.
func (s *Server) record(x *exchange, status int, start time.Time) {
	if s.insp == nil || x.ps == nil || x.mgr == nil {
		return
	}
	p := x.mgr.m.Config().Prices
	r := RequestRecord{Start: start.UTC(), Millis: time.Since(start).Milliseconds(), Model: x.model,
		Client: clientName(x.r.Header.Get("User-Agent")), Format: x.format, Status: status, Managed: x.managed,
		Raw: x.before, Sent: x.sentN, Window: x.window,
		Calls: x.usage.calls, Input: x.usage.u.Input, CacheRead: x.usage.u.CacheRead, CacheWrite: x.usage.u.CacheWrite,
		Output: x.usage.u.Output, Reads: x.reads, Recovered: x.recovered, PrefixChanged: x.usage.changed,
		Prices: PriceProfile{Uncached: p.Uncached, Cached: p.Cached}}
	it := recItem{id: x.id, r: r}
	if x.managed {
		// Counted by the recorder, beside the requests: what this request shares with the
		// previous one, and its size when the pipeline did not report it.
		it.counter, it.cur, it.prev = x.mgr.m.Config().Counter, x.usage.cur, x.usage.prev
		if r.Sent == 0 {
			it.sent = &chat.Request{System: x.sent.System, Tools: x.sent.Tools, Messages: x.sent.Messages}
		}
	}
	s.insp.rec.put(it)
}

// recorder writes request records to the Store from one goroutine, in order. Records are a
// record, not state: when the queue is full (a store slower than the requests) a record is
// dropped and logged, never waited for.
type recorder struct {
	st   store.Store
	log  *slog.Logger
	ch   chan recItem
	done chan struct{}
	// mu guards closed: put never sends on the closed channel.
	mu     sync.RWMutex
	closed bool
	// rev counts the records written: the inspector's pages poll it to see that something
	// changed.
	rev atomic.Int64
	// onWrite, if set, is called after each record is written (the inspector's list cache).
	onWrite func(id string, r RequestRecord)
}

type recItem struct {
	id string
	r  RequestRecord
	// counter counts, for a managed request: sent, the request forwarded when its size is
	// not known yet; what cur, the request prepared, shares with prev, the session's
	// previously prepared one.
	counter         tokens.Counter
	sent, cur, prev *chat.Request
}

// recorderQueue is how many records wait for the Store at most.
const recorderQueue = 4096

func newRecorder(st store.Store, log *slog.Logger, onWrite func(id string, r RequestRecord)) *recorder {
	rc := &recorder{st: st, log: log, ch: make(chan recItem, recorderQueue), done: make(chan struct{}), onWrite: onWrite}
	go rc.run()
	return rc
}

func (rc *recorder) put(it recItem) {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if rc.closed {
		return
	}
	select {
	case rc.ch <- it:
	default:
		rc.log.Warn("proxy: request record dropped: the store is behind", slog.String("session", it.id))
	}
}

func (rc *recorder) run() {
	defer close(rc.done)
	for it := range rc.ch {
		if it.sent != nil {
			it.r.Sent = it.counter.Request(it.sent).Total
		}
		if it.cur != nil {
			it.r.Kept = keptTokens(it.prev, it.cur, it.counter)
		}
		b, err := json.Marshal(it.r)
		if err == nil {
			err = rc.st.AppendEvent(context.Background(), it.id, RequestEventKind, b)
		}
		if err != nil {
			rc.log.Warn("proxy: storing a request record failed", slog.String("session", it.id), slog.String("error", err.Error()))
			continue
		}
		if rc.onWrite != nil {
			rc.onWrite(it.id, it.r)
		}
		rc.rev.Add(1)
	}
}

// close writes what is queued and stops the recorder.
func (rc *recorder) close() {
	rc.mu.Lock()
	if !rc.closed {
		rc.closed = true
		close(rc.ch)
	}
	rc.mu.Unlock()
	<-rc.done
}

// keptTokens is the tokens at the start of cur that prev sent identically: the system prompt
// and tools when they are the same, then the messages up to the first that differs (the
// prepared requests of a session share the messages they have in common, which
// chat.Message.Shares sees at once; others are compared by their normalized hash). No
// previous request: 0.
func keptTokens(prev, cur *chat.Request, c tokens.Counter) int {
	if prev == nil || hashSetup(prev.System, prev.Tools) != hashSetup(cur.System, cur.Tools) {
		return 0
	}
	n := c.Request(&chat.Request{System: cur.System, Tools: cur.Tools}).Total
	for i := range cur.Messages {
		if i >= len(prev.Messages) {
			break
		}
		m, p := &cur.Messages[i], &prev.Messages[i]
		if !m.Shares(p) && normHash(m) != normHash(p) {
			break
		}
		n += c.Message(m)
	}
	return n
}

// prices returns the profile as ctxmgr.Prices.
func (p PriceProfile) prices() ctxmgr.Prices {
	return ctxmgr.Prices{Uncached: p.Uncached, Cached: p.Cached}
}
