package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
	"github.com/ctxmgr/ctxmgr/wire"
)

// manage is the manage stage: it finds the request's conversation and syncs it with the
// request's history (openConversation), answers a compaction the client asked for in the
// providers' terms (nativeCompaction) or a command (answerCommand), runs the pipeline
// (prepare) and returns the body to forward (encodePrepared). errAnswered: the request was
// answered here; errRestart: it is to be served anew from x.restart. Any other error leaves
// the request to be forwarded unmanaged (or answered busy: isBusy).
//
// The conversation's lock is taken only inside the sync and a few steps after it, each
// taken and released in one function (see psession): the pipeline, and the summaries it may
// ask for, run without it.
func (s *Server) manage(ctx context.Context, x *exchange) ([]byte, error) {
	msgs, cmd, err := s.openConversation(ctx, x)
	if err != nil {
		return nil, err
	}
	if cmd, err = s.nativeCompaction(ctx, x, cmd); err != nil {
		return nil, err
	}
	if cmd != nil {
		return nil, s.answerCommand(ctx, x, cmd)
	}
	p, err := s.prepare(ctx, x)
	if err != nil {
		return nil, err
	}
	return s.encodePrepared(ctx, x, &p, len(msgs))
}

// openConversation gets the Manager of the request's window, takes the commands out of its
// history, finds the conversation (openSession) and syncs it: x's preparation and
// conversation are set. It returns the history without commands and the command of the
// latest message, if it is one.
func (s *Server) openConversation(ctx context.Context, x *exchange) ([]chat.Message, *command, error) {
	dec := x.dec
	window, defOut := s.cfg.limits(x.model)
	x.maxField, x.asked = askedMaxTokens(dec.Extra)
	mgr, key, err := s.manager(x.format, x.model, window, replyReserve(window, x.asked, defOut))
	if err != nil {
		return nil, nil, err
	}
	x.held = mgr // released when the exchange ends (serveBody)
	x.window, x.maxOut = window, mgr.m.Config().Budget.MaxOutput
	dec.Tools = stripReadTool(dec.Tools)
	msgs, cmd := splitCommandsFrom(dec.Messages, x.di.firstCmd)
	if x.nat != nil && x.nat.compact {
		cmd = &command{name: "compact", arg: x.nat.instruction, native: true}
	}
	if cmd == nil && len(dec.Tools) == 0 && len(msgs) == 1 && msgs[0].Role == chat.RoleUser {
		return nil, nil, &unmanagedError{ReasonSingleMessage, errors.New("one user message and no tools: nothing to manage, not stored")}
	}
	if x.format == FormatAnthropic {
		if len(msgs) == len(dec.Messages) {
			x.bps = x.di.bps // no command taken out: the decoded messages' own
		} else {
			x.bps = messageBreakpoints(msgs, 0, nil)
		}
		x.bpRoom = maxBreakpoints - setupBreakpoints(dec.System, dec.Tools)
	}
	base, src := sessionKey(x.r.Header.Get(SessionHeader), dec, msgs)
	hashes := x.di.hashes[:len(msgs)]
	if len(msgs) > 0 && &msgs[0] != &dec.Messages[0] {
		hashes = hashAll(msgs) // earlier commands and their answers were taken out
	}
	c, branched, err := s.openSession(ctx, base, mgr, key, dec, msgs, hashes)
	if err != nil {
		return nil, nil, err
	}
	x.conversation = c // in use until the exchange ends (serveBody)
	x.attrs = append(x.attrs, slog.String("session", c.id), slog.String("session_source", src))
	x.log = s.log.With(slog.String("session", c.id))
	if branched {
		x.attrs = append(x.attrs, slog.Bool("branched", true))
	}
	if len(x.nat.readFrom()) > 0 {
		// A summary the request's compaction token stands for names its archive.
		if x.readTool, err = s.declareRead(&x.conversation, dec.System, dec.Tools, true); err != nil {
			return nil, nil, err
		}
	}
	return msgs, cmd, nil
}

// nativeCompaction answers the compaction the client asked for in the providers' own terms
// (native.go): Anthropic's compact_20260112 once the client's input reaches its trigger
// (served anew with the summary as its history, errRestart, unless it pauses after the
// compaction), and any compaction cmd says the client asked for (errAnswered). It returns
// cmd when it is no such compaction.
func (s *Server) nativeCompaction(ctx context.Context, x *exchange, cmd *command) (*command, error) {
	if an := x.nat.anthropicSide(); an != nil {
		// The edits' and compaction's triggers count the input the client sent.
		dec := x.dec
		an.clientTokens = x.orig + x.held.m.Config().Counter.Request(&chat.Request{System: dec.System, Tools: dec.Tools}).Total
		an.clientToolUses = countToolUses(x.body)
		if an.compact != nil && an.clientTokens >= an.compact.trigger {
			x.nat.compact, x.nat.instruction = true, an.compact.instructions
			if !an.compact.pause {
				// The model's answer follows the compaction, in the same response.
				err := s.compactThenContinue(ctx, x)
				x.attrs = append(x.attrs, slog.String("command", "native_compaction"))
				return nil, err
			}
			cmd = &command{name: "compact", arg: an.compact.instructions, native: true}
		}
	}
	if cmd != nil && cmd.native {
		err := s.answerCompaction(ctx, x)
		x.attrs = append(x.attrs, slog.String("command", "native_compaction"))
		return nil, err
	}
	return cmd, nil
}

// answerCommand runs a conversation command (/compact, /context, /context clear) and
// answers it once the request's messages are stored. It returns errAnswered.
func (s *Server) answerCommand(ctx context.Context, x *exchange, cmd *command) error {
	dec := x.dec
	text := s.runCommand(ctx, &x.conversation, cmd, dec.System, dec.Tools)
	x.startFlush()
	if x.awaitFlush() != nil {
		x.notStored()
		return errAnswered
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	_ = json.Unmarshal(dec.Extra["stream_options"], &so)
	if x.format == FormatGemini {
		writeGeminiLocal(x.w, x.model, x.stream, geminiSSE(x.r), text)
	} else {
		writeLocal(x.w, x.format, x.model, x.stream, so.IncludeUsage, text)
	}
	x.attrs = append(x.attrs, slog.String("command", cmd.name))
	return errAnswered
}

// prepare runs the pipeline on the request's Session: Prepare, a compaction when the request
// reaches the client's own compaction threshold, and Prepare again once the ctxmgr_read tool
// is declared because the pipeline stored content to read back. It runs without the
// conversation's lock (see psession), and what it prepared is cut to the request's own
// history (own). It sets x.readTool and x.before.
func (s *Server) prepare(ctx context.Context, x *exchange) (ctxmgr.Prepared, error) {
	dec, sess := x.dec, x.sess
	p, err := sess.Prepare(ctx)
	if err == nil && x.nat != nil && x.nat.threshold > 0 && p.Report.InputAfter >= x.nat.threshold {
		// The client's compaction threshold, reached by what would be forwarded.
		if _, err = sess.Compact(ctx, ""); err == nil {
			p, err = sess.Prepare(ctx)
		}
	}
	if err == nil && !x.readTool && (len(p.Report.Steps) > 0 || p.Report.Evicted > 0) {
		// Only a step of the pipeline stores content to read back (an ingestion offload is
		// seen when it is appended, in sync).
		var declared bool
		if declared, err = s.declareRead(&x.conversation, dec.System, dec.Tools, false); err == nil && declared {
			x.readTool = true
			p, err = sess.Prepare(ctx)
		}
	}
	if err == nil && !x.own(&p) {
		err = errOvertaken
	}
	if err == nil {
		// What is sent declares the tool when the Session does, whichever request declared it.
		x.readTool = offersRead(p.Request.Tools)
	}
	s.prepared(x, &p) // inspector_record.go
	// The client's request as the session counts it: its system and tools as Prepare found
	// them (priming included), and the original history. Counted region by region, as
	// InputAfter is: the calibrated counter of a model without an exact tokenizer scales
	// each count and rounds it up, so a total counted otherwise differs by a few tokens and
	// an unchanged request would never be seen as one.
	x.before = p.Report.Before.System + p.Report.Before.Tools + x.orig
	return p, err
}

// errOvertaken: a later request of the conversation appended messages that the request
// prepared holds and that cannot be cut off (a summary covers some of them): it is answered
// busy, and the client's retry goes on from the conversation as it now is.
var errOvertaken = fmt.Errorf("%w: a later request of the conversation was prepared with this one", ErrSessionBusy)

// own cuts the request p holds, prepared or recovered from c's Session without the
// conversation's lock, to c's own history: the c.synced messages the Session held after c's
// sync. A later request of the conversation may have appended messages before Prepare built
// the request; they are at its end, after c's own, and are cut off (the request that
// appended them sends them). Their tokens are then not in p.Report.InputAfter, which is
// counted again. It reports false when they cannot be cut off: a summary covers some of
// them.
func (c *conversation) own(p *ctxmgr.Prepared) bool {
	msgs := p.Request.Messages
	// The request is [pinned] [summary] history[Evicted:] (ctxmgr.Report).
	lead := 0
	if p.Report.Pinned >= 0 && len(msgs) > 0 {
		lead++
	}
	if lead < len(msgs) && msgs[lead].Meta["ctxmgr"] == "summary" {
		lead++
	}
	live := len(msgs) - lead
	extra := p.Report.Evicted + live - c.synced
	switch {
	case extra == 0:
		return true
	case extra < 0 || extra > live:
		return false
	}
	n := len(msgs) - extra
	p.Request.Messages = msgs[:n:n]
	p.Report.InputAfter = c.count(p.Request)
	return true
}

// count returns the input tokens of req by the Manager's counter. (req is a copy: the
// counter may keep what it is given, which would move a caller's Prepared to the heap.)
func (c *conversation) count(req chat.Request) int {
	return c.mgr.m.Config().Counter.Request(&req).Total
}

// encodePrepared returns the body to forward for p, the request prepared from n messages of
// the client's: the client's own bytes when nothing was changed, else p's request encoded
// (with the client's breakpoints placed on it).
func (s *Server) encodePrepared(ctx context.Context, x *exchange, p *ctxmgr.Prepared, n int) ([]byte, error) {
	dec, before := x.dec, x.before
	x.window = p.Report.Window // smaller than configured once Recover learned the real window
	s.metrics.tokensBefore.WithLabelValues(string(x.format)).Observe(float64(before))
	s.metrics.tokensAfter.WithLabelValues(string(x.format)).Observe(float64(p.Report.InputAfter))
	if p.Report.PrefixChanged {
		s.metrics.prefixChanged.Inc()
	} else {
		s.metrics.prefixKept.Inc()
	}
	x.attrs = append(x.attrs, slog.Int("tokens_before", before), slog.Int("tokens_after", p.Report.InputAfter),
		slog.Int("compactions", p.Report.Compactions), slog.Bool("prefix_changed", p.Report.PrefixChanged))
	x.managed = true
	if !x.readTool && p.Report.Evicted == 0 && p.Report.SummaryVersion == 0 && n == len(dec.Messages) &&
		len(p.Request.Messages) == n && p.Report.InputAfter == before && x.replyFits(p.Report.InputAfter) {
		// Nothing was changed: forward the client's own bytes.
		x.sent, x.sentN = *dec, p.Report.InputAfter
		x.sent.System, x.sent.Tools, x.sent.Messages = p.Request.System, p.Request.Tools, p.Request.Messages
		x.attrs = append(x.attrs, slog.Bool("verbatim", true))
		s.metrics.verbatim.WithLabelValues(string(x.format)).Inc()
		logDecision(ctx, x.log, &p.Report, true)
		return x.body, nil
	}
	logDecision(ctx, x.log, &p.Report, false)
	// A rewritten request is placed and encoded before it goes: the write overlaps that.
	x.startFlush()
	// Breakpoints are placed on a rewritten request only: the client's own bytes carry its own.
	x.place(p)
	return x.encode(p.Request, p.Report.InputAfter)
}

// encode renders req with every other body field of the client's request kept verbatim, and
// records it as the request sent, with its input tokens n when the pipeline counted them (0:
// unknown).
func (x *exchange) encode(req chat.Request, n int) ([]byte, error) {
	out := *x.dec
	out.System, out.Tools, out.Messages = req.System, req.Tools, req.Messages
	if x.format == FormatAnthropic {
		// The client's own system blocks and tool definitions, with their breakpoints (see
		// breakpoints.go); the session's copies carry what an earlier request had.
		out.System, out.Tools = x.dec.System, x.dec.Tools
		if x.readTool {
			out.Tools = withReadTool(out.Tools)
		}
	}
	counted := n
	if counted == 0 {
		counted = x.mgr.m.Config().Counter.Request(&out).Total
	}
	out.Extra = x.fitReply(out.Extra, counted)
	b, err := x.encodeBody(&out)
	if err != nil {
		return nil, err
	}
	x.sent, x.sentN = out, n
	return b, nil
}

func (x *exchange) encodeBody(out *chat.Request) ([]byte, error) {
	if x.ps == nil {
		return wire.Encode(x.format, out)
	}
	b, err := x.encodeSession(out, x.bodyBuffer())
	if err == nil {
		x.keepBody(b)
	}
	return b, err
}

// encodeSession encodes out into dst with the session's caches.
func (x *exchange) encodeSession(out *chat.Request, dst []byte) ([]byte, error) {
	switch x.format {
	case FormatAnthropic:
		return encodecache.AppendAnthropic(dst, out, x.ps.views.blocks, x.subs)
	case FormatResponses:
		return encodecache.AppendResponses(dst, out, x.ps.views.blocks)
	case FormatGemini:
		return encodecache.AppendGemini(dst, out, x.ps.views.blocks)
	case FormatOpenAI:
		return encodecache.AppendOpenAI(dst, out, x.ps.views.blocks)
	}
	return wire.Encode(x.format, out)
}

// offersRead reports whether tools, a prepared request's, declare the ctxmgr_read tool: the
// last of them, as readtool.With puts it.
func offersRead(tools []chat.Tool) bool {
	return len(tools) > 0 && tools[len(tools)-1].Name == readToolName
}
