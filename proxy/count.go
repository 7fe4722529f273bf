package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/wire"
)

// Token counting endpoints (POST /v1/messages/count_tokens, POST /v1/responses/input_tokens,
// POST /v1beta/models/{model}:countTokens).
//
// A client that counts its own history to decide when to compact (Claude Code does) would
// otherwise count what it keeps, not what the proxy sends, and compact a history the proxy
// already keeps small. So when the history belongs to a session the proxy knows (its stored
// history is a prefix of the one to count), the proxy answers itself with the input tokens of
// the request it would forward: the client's system prompt and tools, the session's summary
// and live history as it now sends them, and the new messages counted whole (before any
// ingestion cap, so the figure errs high, never low). The answer carries the session id in
// X-Ctxmgr-Session. A history the proxy does not know, or a body it cannot read, is passed
// through to the provider, counted as unmanaged (reason path).

// handleCountTokens answers a token counting request in format f.
func (s *Server) handleCountTokens(f Format) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := readBody(w, r, s.cfg.MaxBodyBytes, nil, nil)
		if err != nil {
			writeError(w, f, http.StatusRequestEntityTooLarge, "request_too_large", "reading the request body: "+err.Error())
			return
		}
		toCount, model := body, ""
		if f == FormatGemini {
			toCount = geminiCountBody(body)
			model, _ = geminiCall(r)
		}
		dec, err := wire.Decode(f, toCount)
		if err == nil && f != FormatGemini {
			_ = json.Unmarshal(dec.Extra["model"], &model)
		}
		if err == nil && providerState(f, dec) == "" {
			if n, id, ok := s.managedCount(r.Context(), f, model, r.Header.Get(SessionHeader), dec); ok {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set(SessionHeader, id)
				switch f {
				case FormatResponses:
					_, _ = io.WriteString(w, `{"object":"response.input_tokens","input_tokens":`+strconv.Itoa(n)+`}`)
				case FormatGemini:
					_, _ = io.WriteString(w, `{"totalTokens":`+strconv.Itoa(n)+`}`)
				default:
					_, _ = io.WriteString(w, `{"input_tokens":`+strconv.Itoa(n)+`}`)
				}
				s.metrics.requests.WithLabelValues(string(f), "200").Inc()
				s.log.LogAttrs(r.Context(), slog.LevelInfo, "proxy request", slog.String("format", string(f)),
					slog.String("path", r.URL.Path), slog.String("session", id), slog.Bool("managed", true),
					slog.Int("input_tokens", n), slog.Int("status", 200), slog.Duration("duration", time.Since(start)))
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		s.handlePassthrough(w, r)
	}
}

// managedCount returns the input tokens of the request the proxy would forward for req, and
// the session it belongs to, when that session is known: the session's request as it stands
// plus the messages added since, counted whole. It does not run the pipeline, so when those
// messages take the request over the compaction threshold the count is that of the request
// before the compaction the send will make: never below what is sent (an agent that compacts
// on its own count may compact early, never overflow because of it).
func (s *Server) managedCount(ctx context.Context, f Format, model, header string, req *chat.Request) (int, string, bool) {
	window, def := s.cfg.limits(model)
	_, asked := askedMaxTokens(req.Extra)
	m, key, err := s.manager(f, model, window, replyReserve(window, asked, def))
	if err != nil {
		return 0, "", false
	}
	defer s.releaseManager(m)
	req.Tools = stripReadTool(req.Tools)
	msgs, _ := splitCommands(req.Messages)
	if len(msgs) == 0 {
		return 0, "", false
	}
	base, _ := sessionKey(header, req, msgs)
	hashes := hashAll(msgs)
	id := base
	for depth := 0; depth < 6; depth++ {
		n, k, stored, err := s.countStored(ctx, id, m, key, req, msgs, hashes)
		if err != nil {
			return 0, "", false
		}
		if k == stored {
			if k == 0 {
				return 0, "", false // nothing stored: an unknown conversation
			}
			return n, id, true
		}
		if k == 0 {
			next := conversationID(base, hashes[0])
			if next == id {
				return 0, "", false
			}
			id = next
			continue
		}
		id = branchID(id, hashes, k)
	}
	return 0, "", false
}

// countStored compares the history of session id (loaded under m if it is not in memory
// under it) with msgs (hashes): it returns how many messages it stores and how many first
// messages the two share (k). When the stored history is a prefix of msgs (k == stored), n
// is the input tokens of the request the proxy would forward: the session's request as it
// stands (its system and tools are the client's, synced on every request), plus the
// messages added since, counted whole.
func (s *Server) countStored(ctx context.Context, id string, m *managed, key managerKey, req *chat.Request, msgs []chat.Message, hashes []nhash) (n, k, stored int, err error) {
	ps := s.ref(id)
	defer s.unref(ps)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.sess == nil || ps.mgr != m {
		if err := s.load(ctx, ps, m, key, req.System, req.Tools); err != nil {
			return 0, 0, 0, err
		}
	}
	stored = len(ps.views.hashes)
	k = commonPrefix(ps.views.hashes, hashes)
	if k < stored || k == 0 {
		return 0, k, stored, nil
	}
	c := ps.mgr.m.Config().Counter
	n = ps.sess.Stats().Input
	if news := msgs[k:]; len(news) > 0 {
		n += c.Request(&chat.Request{Messages: news}).Total - c.Request(&chat.Request{}).Total
	}
	return n, k, stored, nil
}
