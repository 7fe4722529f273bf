package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/wire"
)

// relay is the relay stage: it relays the upstream's answer to the client, event by event
// when it streams (relayStream, stream.go), whole otherwise (relayJSON). A managed request
// that offers the ctxmgr_read tool has the model's calls of it answered in-process and the
// upstream called again (followUp) before the answer goes on; the usage the upstream reports
// feeds the calibrator and the inspector's record (observeUsage).
func (x *exchange) relay(ctx context.Context, resp *http.Response) {
	if x.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		x.relayStream(ctx, resp)
	} else {
		x.relayJSON(ctx, resp)
	}
}

// relayJSON relays a non-streamed answer, answering ctxmgr_read calls first.
func (x *exchange) relayJSON(ctx context.Context, resp *http.Response) {
	if !x.managed && !x.nat.rewritesAnswer() {
		defer resp.Body.Close()
		copyResponseHeaders(x.w.Header(), resp.Header)
		x.w.WriteHeader(resp.StatusCode)
		relayRaw(x.w, resp.Body)
		return
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		writeError(x.w, x.format, http.StatusBadGateway, "api_error", "reading the upstream answer: "+err.Error())
		return
	}
	answer := data // the upstream's last answer, as it sent it
	for round := 0; x.readTool; round++ {
		asst, calls, mixed, ok := findReads(x.format, data)
		if !ok || len(calls) == 0 {
			break
		}
		if mixed || round >= x.s.cfg.MaxReads {
			data = stripReads(x.format, data)
			break
		}
		x.observeUsage(usageOf(x.format, answer)) // before the follow-up is counted
		answer = nil
		next, err := x.followUp(ctx, asst, calls)
		if err != nil {
			data = stripReads(x.format, data)
			break
		}
		r2, err := x.send(ctx, next)
		if err != nil {
			data = stripReads(x.format, data)
			break
		}
		d2, err := io.ReadAll(r2.Body)
		r2.Body.Close()
		if err != nil || r2.StatusCode < 200 || r2.StatusCode > 299 {
			// The follow-up failed (an error, or an answer cut short): the answer before it.
			if err != nil {
				x.log.Warn("proxy: reading the ctxmgr_read follow-up's answer failed", slog.String("error", redact.Text(err.Error())))
			}
			data = stripReads(x.format, data)
			break
		}
		resp, data, answer = r2, d2, d2
	}
	// The answer's length, and a flush, end the response on the wire: the client has it
	// before the proxy's own work after it (reading the usage, the handler's log line and
	// releases), which otherwise delayed it (net/http ends a response when its handler
	// returns).
	if an := x.nat.anthropicSide(); an != nil && an.applied != nil {
		data = withContextManagement(data, an.applied)
	}
	if an := x.nat.anthropicSide(); an != nil && an.prepend != nil {
		data = withPrepended(data, an)
	}
	copyResponseHeaders(x.w.Header(), resp.Header)
	if resp.StatusCode != http.StatusNoContent {
		x.w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	}
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write(data)
	flush(x.w)
	if answer != nil {
		x.observeUsage(usageOf(x.format, answer))
	}
}

// followUp builds the request that answers ctxmgr_read calls: the request sent, the
// assistant message that made the calls, and the results, within the window. The results may
// take up to half of the reply's reserve besides the window's free room (the follow-up's
// max_tokens is lowered to what is left, fitReply): a request near the compaction threshold
// leaves little else, and a read the model asked for is worth more than reply room it rarely
// fills.
func (x *exchange) followUp(ctx context.Context, asst chat.Message, calls []readCall) ([]byte, error) {
	counter := x.mgr.m.Config().Counter
	req := x.sent
	msgs := make([]chat.Message, 0, len(req.Messages)+1+len(calls))
	msgs = append(msgs, req.Messages...)
	msgs = append(msgs, asst)
	used := counter.Request(&chat.Request{System: req.System, Tools: req.Tools, Messages: msgs}).Total
	per, limit := readRoom(x.window, x.maxOut, used, len(calls))
	if per < 128 { // the result's header and "more" line alone take up to about 70
		return x.withoutRead()
	}
	for _, c := range calls {
		text, isErr := x.s.answerRead(ctx, x.id, x.nat.readFrom(), x.mgr, x.sess, c.Args, per, counter)
		x.reads++
		res := chat.ToolResult(c.ID, readToolName, text, isErr)
		if x.format == FormatResponses {
			res.Name = "" // outputs carry no name there: count what is sent
		}
		msgs = append(msgs, res)
	}
	next := chat.Request{System: req.System, Tools: req.Tools, Messages: msgs}
	if x.window > 0 && counter.Request(&next).Total > limit {
		return x.withoutRead()
	}
	return x.encode(next, 0)
}

// readRoom returns the tokens each of n ctxmgr_read results may take in a follow-up whose
// request, with the assistant message that made the calls, counts used tokens, and the limit
// on the follow-up's input: the window less half the reply's reserve (maxOut; fitReply lowers
// the follow-up's max_tokens to what is left) and the margin of estimated counters (2%), with
// 64 tokens for each result's framing.
func readRoom(window, maxOut, used, n int) (per, limit int) {
	limit = window - (maxOut - maxOut/2) - window/50
	return (limit - used - 64*n) / max(1, n), limit
}

// withoutRead is the follow-up when a ctxmgr_read result has no room in the window: the
// request sent before, which fit, without the read tool, so that the model answers with what
// it has. Adding the call and a "no room" result instead could exceed the window (invariant
// 2), and a placeholder must never become the assistant's reply.
func (x *exchange) withoutRead() ([]byte, error) {
	x.readTool = false
	req := x.sent
	x.log.Debug("proxy: no room for a ctxmgr_read result; asking again without the read tool")
	return x.encode(chat.Request{System: req.System, Tools: stripReadTool(req.Tools), Messages: req.Messages}, 0)
}

// usageOf returns the usage a provider reports in a non-streamed answer (wire.DecodeResponse;
// zero if it reports none).
func usageOf(f Format, data []byte) wire.Usage {
	r, err := wire.DecodeResponse(f, data)
	if err != nil || !r.HasUsage {
		return wire.Usage{}
	}
	return r.Usage
}

// usageInput is the usage object of a streamed event (zero if none).
func usageInput(f Format, raw json.RawMessage) wire.Usage {
	u, _ := wire.DecodeUsage(f, raw)
	return u
}

// observeUsage feeds the provider's reported input tokens to the calibrator, and keeps the
// usage for the inspector's record of the request (inspector_record.go).
func (x *exchange) observeUsage(u wire.Usage) {
	x.noteUsage(u)
	reported := u.Input
	if !x.managed || reported <= 0 || len(x.sent.Messages) == 0 {
		return
	}
	if x.mgr.exact {
		// Prepare's report already holds the exact count of what it returned.
		est := x.sentN
		if est == 0 {
			est = x.mgr.m.Config().Counter.Request(&x.sent).Total
		}
		if est > 0 {
			x.s.metrics.usageRatio.WithLabelValues("exact").Observe(float64(reported) / float64(est))
		}
		return
	}
	var est int
	if x.ps != nil {
		est = x.ps.views.counted.total(x.s.cal.Base(), &x.sent)
		x.s.cal.Observe(x.model, est, reported)
	} else {
		est = x.s.cal.ObserveRequest(x.model, &x.sent, reported)
	}
	if est > 0 {
		x.s.metrics.usageRatio.WithLabelValues("heuristic").Observe(float64(reported) / float64(est))
	}
}
