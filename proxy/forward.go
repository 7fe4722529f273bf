package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/provider"
)

// send posts body upstream with the client's headers. The first send of the client's own
// bytes to the upstream a cut-through request was started to commits that request; any
// other aborts it first (cutthrough.go).
func (x *exchange) send(ctx context.Context, body []byte) (*http.Response, error) {
	if c := x.cut; c != nil {
		x.cut = nil
		if c.target == x.target && x.isClientBody(body) {
			t0 := time.Now()
			resp, whole, err := c.commit(x.prepareFlush())
			if whole {
				x.s.metrics.cutThrough.WithLabelValues("committed").Inc()
				d := time.Since(t0)
				x.upstreamNS += int64(d)
				x.s.metrics.upstream.WithLabelValues(string(x.format)).Observe(d.Seconds())
				return resp, err
			}
			// It failed before its last byte: the upstream has not acted on it.
			x.log.Debug("proxy: cut-through request failed before its end; sending again", slog.String("error", redact.Text(err.Error())))
			x.s.metrics.cutThrough.WithLabelValues("failed").Inc()
		} else if c.abort() {
			x.s.metrics.cutThrough.WithLabelValues("aborted").Inc()
		}
	}
	var rd io.Reader = bytes.NewReader(body)
	sb := x.bodyOf(body)
	if sb != nil {
		rd = sb.reader() // its buffer is reused once the transport has closed it (bodies.go)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.target, rd)
	if err != nil {
		if sb != nil {
			_ = rd.(io.Closer).Close()
		}
		return nil, err
	}
	if sb != nil {
		req.GetBody = func() (io.ReadCloser, error) { return sb.reader(), nil }
	}
	copyRequestHeaders(req.Header, x.r.Header)
	if an := x.nat.anthropicSide(); an != nil {
		dropBetas(req.Header, an.dropBetas)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.ContentLength = int64(len(body))
	x.startFlush()
	t0 := time.Now()
	resp, err := x.s.cfg.HTTPClient.Do(req)
	d := time.Since(t0)
	x.upstreamNS += int64(d)
	x.s.metrics.upstream.WithLabelValues(string(x.format)).Observe(d.Seconds())
	return resp, err
}

// isClientBody reports whether body is the client's own.
func (x *exchange) isClientBody(body []byte) bool {
	return len(body) == len(x.body) && len(body) > 0 && &body[0] == &x.body[0]
}

// maxErrorBody bounds how much of an upstream error body is read.
const maxErrorBody = 4 << 20

// forward is the forward stage: it sends body upstream and hands the answer to the relay
// stage. An upstream that refuses the providers' context management it was sent has the
// request done again with the proxy answering it (learnNative); an overflow of a managed
// request is recovered from with a tighter one (recover). Nothing of an answer is relayed
// before the request's messages are stored (awaitFlush).
func (x *exchange) forward(ctx context.Context, body []byte) {
	if e := x.di.entry; e != nil {
		// What the next request of the conversation will likely be forwarded as.
		if x.isClientBody(body) {
			e.forwardedTo.Store(&x.target)
		} else {
			e.forwardedTo.Store(nil)
		}
	}
	learned := false
	for {
		resp, err := x.send(ctx, body)
		if ferr := x.awaitFlush(); ferr != nil {
			if err == nil {
				resp.Body.Close()
			}
			x.notStored()
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			msg := redact.Text(err.Error())
			x.log.Warn("proxy: upstream unreachable", slog.String("error", msg))
			writeError(x.w, x.format, http.StatusBadGateway, "api_error", "upstream unreachable: "+msg)
			return
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			errBody, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			if resp.StatusCode == http.StatusBadRequest && !learned {
				learned = true
				next, answered := x.learnNative(ctx, body, errBody)
				if answered {
					return
				}
				if next != nil {
					body = next
					continue
				}
			}
			if x.managed && provider.IsOverflow(resp.StatusCode, errBody) {
				if next, ok := x.recover(ctx, resp.StatusCode, errBody); ok {
					body = next
					continue
				}
			}
			copyResponseHeaders(x.w.Header(), resp.Header)
			x.w.WriteHeader(resp.StatusCode)
			_, _ = x.w.Write(errBody)
			return
		}
		x.relay(ctx, resp)
		return
	}
}

// recover answers an upstream overflow: a tighter request, if the Manager has recoveries left.
// Recover may summarize: it runs without the conversation's lock (see psession), and what it
// prepared is cut to the request's own history (own).
func (x *exchange) recover(ctx context.Context, status int, body []byte) ([]byte, bool) {
	p, err := x.sess.Recover(ctx, &provider.StatusError{Status: status, Body: body})
	if err == nil && !x.own(&p) {
		err = errOvertaken
	}
	if err != nil {
		x.log.Warn("proxy: overflow recovery failed", slog.String("error", err.Error()))
		return nil, false
	}
	x.window, x.readTool = p.Report.Window, offersRead(p.Request.Tools)
	x.place(&p)
	out, err := x.encode(p.Request, p.Report.InputAfter)
	if err != nil {
		return nil, false
	}
	x.recovered++
	x.log.Info("proxy: upstream overflow, retrying with a tighter request",
		slog.Int("status", status), slog.Int("tokens_after", p.Report.InputAfter))
	return out, true
}
