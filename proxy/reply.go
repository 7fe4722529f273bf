package proxy

import (
	"encoding/json"
	"log/slog"
	"maps"
	"strconv"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
)

// The reply reserve.
//
// Clients ask for large replies whatever the window: Claude Code and @ai-sdk/anthropic send
// max_tokens 64000, and an OpenAI request often has none, which the provider reads as "up to
// the model's maximum". The proxy budgets the reply with
//
//	reserve = min(max_tokens (else Config.MaxOutput, else 32000), ReplyCap(window))
//
// so that no max_tokens makes a request unmanageable, and when the client's max_tokens does
// not fit beside the prepared input in the window in force (the configured window, or the
// smaller one learned from an overflow), it lowers max_tokens in the forwarded body to what
// fits. It says so in the response header X-Ctxmgr-Max-Tokens, the metric
// ctxmgr_max_tokens_lowered_total and a log line. A request without max_tokens is left
// without one: the providers then check the input alone.

// MaxTokensHeader is the response header that carries the max_tokens the proxy forwarded
// when it had to lower the client's.
const MaxTokensHeader = "X-Ctxmgr-Max-Tokens"

// ReplyCap is the largest reply reserve for a window: a quarter of it, at most 32000 tokens.
func ReplyCap(window int) int {
	return max(1, min(32000, window/4))
}

// replyReserve is the reply size the pipeline budgets for: the client's max_tokens (asked),
// else the configured default, capped by ReplyCap.
func replyReserve(window, asked, def int) int {
	r := asked
	if r <= 0 {
		r = def
	}
	c := ReplyCap(window)
	if r <= 0 || r > c {
		r = c
	}
	return r
}

// maxTokenFields are the body fields that hold the reply size, by preference.
var maxTokenFields = []string{"max_completion_tokens", "max_tokens", "max_output_tokens"}

// geminiMaxField names Gemini's reply size, generationConfig.maxOutputTokens.
const geminiMaxField = "generationConfig.maxOutputTokens"

// askedMaxTokens returns the field holding the client's reply size and its value (0: none).
func askedMaxTokens(extra map[string]json.RawMessage) (field string, n int) {
	for _, k := range maxTokenFields {
		var v int
		if raw, ok := extra[k]; ok && json.Unmarshal(raw, &v) == nil && v > 0 {
			return k, v
		}
	}
	if raw, ok := extra["generationConfig"]; ok {
		var gc struct {
			MaxOutputTokens int `json:"maxOutputTokens"`
		}
		if json.Unmarshal(raw, &gc) == nil && gc.MaxOutputTokens > 0 {
			return geminiMaxField, gc.MaxOutputTokens
		}
	}
	return "", 0
}

// replyMargin is what an estimated count may be short by.
func (x *exchange) replyMargin() int {
	if x.mgr != nil && x.mgr.exact {
		return 0
	}
	return x.window / 50
}

// replyFits reports whether the client's max_tokens fits beside input tokens in the window
// in force.
func (x *exchange) replyFits(input int) bool {
	return x.asked == 0 || input+x.asked+x.replyMargin() <= x.window
}

// fitReply returns the body fields to forward for a request of input tokens: the client's,
// with max_tokens lowered to what fits in the window in force when it does not.
func (x *exchange) fitReply(extra map[string]json.RawMessage, input int) map[string]json.RawMessage {
	if x.replyFits(input) {
		return extra
	}
	n := max(1, x.window-input-x.replyMargin())
	out := maps.Clone(extra)
	if x.maxField == geminiMaxField {
		var gc map[string]json.RawMessage
		_ = json.Unmarshal(extra["generationConfig"], &gc)
		gc["maxOutputTokens"] = json.RawMessage(strconv.Itoa(n))
		out["generationConfig"] = mustMarshal(gc)
	} else {
		out[x.maxField] = json.RawMessage(strconv.Itoa(n))
	}
	x.w.Header().Set(MaxTokensHeader, strconv.Itoa(n))
	x.s.metrics.lowered.Inc()
	x.log.Info("proxy: max_tokens lowered to fit the window", slog.Int("asked", x.asked), slog.Int("forwarded", n),
		slog.Int("window", x.window), slog.Int("input", input))
	return out
}

// place puts the client's cache breakpoints on a prepared request (Anthropic only).
func (x *exchange) place(p *ctxmgr.Prepared) {
	if x.format != FormatAnthropic {
		return
	}
	if x.ps == nil {
		p.Request.Messages = placeBreakpoints(p.Request.Messages, p.Report, x.bps, x.bpRoom)
		return
	}
	var clean []chat.Message
	if c := x.ps.views.clean.Load(); c != nil {
		clean = *c
	}
	// The prepared messages stay as they are (the next request's continue their slice), and
	// the messages that change are encoded in their place (encodeSession).
	subs, next := placeBreakpointsKnown(p.Request.Messages, p.Report, x.bps, x.bpRoom, clean)
	x.ps.views.clean.Store(&next)
	x.subs = subs
}
