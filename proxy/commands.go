package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
)

// replyPrefix starts every answer the proxy gives itself; an assistant message that starts
// with it and follows a command is the proxy's answer, not history.
const replyPrefix = "[ctxmgr]"

// command is a conversation command: /compact [instruction], /context, /context clear.
type command struct {
	name string // compact, context, clear
	arg  string
	// native: a compaction the client asked for in the providers' own terms (native.go),
	// answered in them.
	native bool
}

func parseCommand(m *chat.Message) (command, bool) {
	if m.Role != chat.RoleUser || len(m.ToolCalls) > 0 || !startsWithSlash(m) {
		return command{}, false
	}
	t := strings.TrimSpace(m.Text())
	switch {
	case t == "/compact":
		return command{name: "compact"}, true
	case strings.HasPrefix(t, "/compact ") || strings.HasPrefix(t, "/compact\n"):
		return command{name: "compact", arg: strings.TrimSpace(t[len("/compact"):])}, true
	case t == "/context":
		return command{name: "context"}, true
	case t == "/context clear":
		return command{name: "clear"}, true
	}
	return command{}, false
}

// startsWithSlash reports whether the message's text starts with "/" (after white space):
// the cheap test that rules out almost every message before its text is joined.
func startsWithSlash(m *chat.Message) bool {
	for _, p := range m.Content {
		if p.Type != chat.PartText {
			continue
		}
		t := strings.TrimLeft(p.Text, " \t\r\n")
		if t != "" {
			return t[0] == '/'
		}
	}
	return false
}

// splitCommands returns the history without earlier command exchanges (a command and the
// proxy's answer that follows it are not conversation) and the command of the latest message,
// if it is one.
func splitCommands(msgs []chat.Message) ([]chat.Message, *command) {
	return splitCommandsFrom(msgs, firstCommand(msgs, 0))
}

// splitCommandsFrom is splitCommands for messages whose first command is at index first (-1:
// none), as the decode cache keeps it: a conversation without earlier commands is not scanned
// again on every request.
func splitCommandsFrom(msgs []chat.Message, first int) ([]chat.Message, *command) {
	var cur *command
	if n := len(msgs); n > 0 {
		if c, ok := parseCommand(&msgs[n-1]); ok {
			cur = &c
			msgs = msgs[:n-1]
		}
	}
	if first < 0 || first >= len(msgs) {
		return msgs, cur
	}
	out := make([]chat.Message, 0, len(msgs))
	for i := 0; i < len(msgs); i++ {
		if _, ok := parseCommand(&msgs[i]); ok {
			if i+1 < len(msgs) && msgs[i+1].Role == chat.RoleAssistant && len(msgs[i+1].ToolCalls) == 0 &&
				strings.HasPrefix(strings.TrimSpace(msgs[i+1].Text()), replyPrefix) {
				i++
			}
			continue
		}
		out = append(out, msgs[i])
	}
	return out, cur
}

// firstCommand returns the index of the first command in msgs[from:], or -1.
func firstCommand(msgs []chat.Message, from int) int {
	for i := from; i < len(msgs); i++ {
		if _, ok := parseCommand(&msgs[i]); ok {
			return i
		}
	}
	return -1
}

// runCommand executes a command on the request's synced conversation and returns the text to
// answer. It runs without the conversation's lock (see psession): /compact summarizes.
func (s *Server) runCommand(ctx context.Context, c *conversation, cmd *command, system []chat.Message, tools []chat.Tool) string {
	s.metrics.commands.WithLabelValues(cmd.name).Inc()
	sess := c.sess
	switch cmd.name {
	case "compact":
		res, err := sess.Compact(ctx, cmd.arg)
		if err != nil {
			return fmt.Sprintf("%s /compact failed: %v", replyPrefix, err)
		}
		_, _ = s.declareRead(c, system, tools, false)
		if res.Messages == 0 {
			return fmt.Sprintf("%s /compact: nothing to compact: the %d tokens of context are all within the reserved recent history (%d messages in the session).",
				replyPrefix, res.TokensBefore, sess.Len())
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s /compact: compacted %d messages into summary v%d; tokens before %d, after %d.\n",
			replyPrefix, res.Messages, res.SummaryVersion, res.TokensBefore, res.TokensAfter)
		if cmd.arg != "" {
			fmt.Fprintf(&b, "Instruction: %s\n", cmd.arg)
		}
		b.WriteString("\nSummary:\n")
		b.WriteString(res.Summary)
		return b.String()
	case "clear":
		before := sess.Stats()
		if err := sess.Clear(ctx); err != nil {
			return fmt.Sprintf("%s /context clear failed: %v", replyPrefix, err)
		}
		_, _ = s.declareRead(c, system, tools, false)
		after := sess.Stats()
		var b strings.Builder
		fmt.Fprintf(&b, "%s /context clear: %d messages archived; the context now holds the system prompt and tools only (input %d -> %d tokens). Nothing was deleted.\n",
			replyPrefix, after.Evicted-before.Evicted, before.Input, after.Input)
		writeArchives(&b, after)
		return b.String()
	default:
		return contextReport(c.id, sess, sess.Stats(), !s.cfg.DisableReadTool, s.cfg.SummarizerName)
	}
}

func writeArchives(b *strings.Builder, st ctxmgr.Stats) {
	if len(st.Archives) == 0 {
		return
	}
	b.WriteString("Archives (verbatim, read back with ctxmgr_read ref \"messages A-B\"):\n")
	// Adjacent ranges read as one, wherever the store keeps them: the text names messages
	// by position only, the same under every store.
	type span struct{ from, to int }
	var spans []span
	for _, a := range st.Archives {
		m := archiveLine.FindStringSubmatch(a)
		if m == nil {
			fmt.Fprintf(b, "- %s\n", a)
			continue
		}
		from, _ := strconv.Atoi(m[1])
		to, _ := strconv.Atoi(m[2])
		if n := len(spans); n > 0 && spans[n-1].to+1 == from {
			spans[n-1].to = to
			continue
		}
		spans = append(spans, span{from, to})
	}
	for _, sp := range spans {
		fmt.Fprintf(b, "- messages %d-%d\n", sp.from, sp.to)
	}
}

func contextReport(id string, sess *ctxmgr.Session, st ctxmgr.Stats, readTool bool, summarizer string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s /context: session %s\n", replyPrefix, id)
	roles := make([]string, 0, len(st.Messages))
	for r := range st.Messages {
		roles = append(roles, string(r))
	}
	slices.Sort(roles)
	var parts []string
	for _, r := range roles {
		parts = append(parts, fmt.Sprintf("%s %d", r, st.Messages[chat.Role(r)]))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	fmt.Fprintf(&b, "Messages in context: %s; %d appended in all, %d evicted into the summary.\n", strings.Join(parts, ", "), st.Total, st.Evicted)
	fmt.Fprintf(&b, "Tool results: %d offloaded, %d masked, %d superseded, %d truncated.\n", st.Offloaded, st.Masked, st.Superseded, st.Truncated)
	used := fmt.Sprintf("%.1f%%", st.UsePercent)
	if st.UsePercent > 0 && st.UsePercent < 0.1 {
		used = "under 0.1%"
	}
	fmt.Fprintf(&b, "Tokens: system %d, tools %d, summary %d, history %d; input %d of window %d (%s used), %d more reserved for the reply.\n",
		st.Regions.System, st.Regions.Tools, st.Regions.Summary, st.Regions.History, st.Input, st.Window, used, st.MaxOutput)
	if sum := sess.Summary(); st.SummaryVersion > 0 && sum != nil && sum.Summarizer != "" {
		fmt.Fprintf(&b, "Summary: version %d, written by %s.\n", st.SummaryVersion, sum.Summarizer)
	} else if st.SummaryVersion > 0 {
		fmt.Fprintf(&b, "Summary: version %d.\n", st.SummaryVersion)
	} else {
		b.WriteString("Summary: none yet.\n")
	}
	fmt.Fprintf(&b, "Summarizer: %s.\n", summarizer)
	writeArchives(&b, st)
	if len(st.Offloads) > 0 {
		b.WriteString("Offloaded tool results:\n")
		for i, o := range st.Offloads {
			if i == 20 {
				fmt.Fprintf(&b, "- ... %d more\n", len(st.Offloads)-20)
				break
			}
			fmt.Fprintf(&b, "- %s (%d bytes, %d lines)\n", o.Ref(), o.Bytes, o.Lines)
		}
	}
	if readTool && (len(st.Archives) > 0 || len(st.Offloads) > 0) {
		b.WriteString("The model reads these back with the ctxmgr_read tool, which the proxy answers.\n")
	}
	return b.String()
}

func randomID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// writeLocal answers a request with text, in the client's format, streaming or not.
func writeLocal(w http.ResponseWriter, f Format, model string, stream, includeUsage bool, text string) {
	w.Header().Set("X-Ctxmgr-Local", "1")
	switch f {
	case FormatResponses:
		writeResponsesLocal(w, model, stream, text)
		return
	case FormatGemini:
		writeGeminiLocal(w, model, stream, true, text)
		return
	case FormatAnthropic:
		writeAnthropicMessage(w, model, stream, []map[string]any{{"type": "text", "text": text}}, "end_turn", nil, nil)
		return
	}
	id, created := randomID("chatcmpl-ctxmgr-"), time.Now().Unix()
	completion := map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text, "refusal": nil},
			"logprobs": nil, "finish_reason": "stop"}},
		"usage": map[string]any{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
	if !startAnswer(w, stream, completion) {
		return
	}
	send := func(v any) { _, _ = w.Write(sse.Format("", mustMarshal(v))) }
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	send(chunk(map[string]any{"content": text}, nil))
	send(chunk(map[string]any{}, "stop"))
	if includeUsage {
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []any{},
			"usage": map[string]any{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	flush(w)
}

// writeError answers an error of the proxy's own in the client's format.
func writeError(w http.ResponseWriter, f Format, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Ctxmgr-Local", "1")
	w.WriteHeader(status)
	var v any
	switch f {
	case FormatAnthropic:
		v = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	case FormatGemini:
		v = map[string]any{"error": map[string]any{"code": status, "message": msg, "status": geminiStatus(status)}}
	default:
		v = map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}}
	}
	_ = json.NewEncoder(w).Encode(v)
}

// writeAnthropicMessage answers with a message of the proxy's own holding blocks (text or
// compaction), as a message object or its event stream; usage fields are added to the zero
// usage, and contextManagement, if not nil, is the message's context_management.
func writeAnthropicMessage(w http.ResponseWriter, model string, stream bool, blocks []map[string]any, stop string, usage map[string]any, contextManagement any) {
	u := map[string]any{"input_tokens": 0, "output_tokens": 0}
	for k, v := range usage {
		u[k] = v
	}
	msg := map[string]any{"id": randomID("msg_ctxmgr_"), "type": "message", "role": "assistant", "model": model,
		"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": u}
	if contextManagement != nil {
		msg["context_management"] = contextManagement
	}
	if !startAnswer(w, stream, msg) {
		return
	}
	send := func(event string, v map[string]any) { sendEvent(w, nil, event, v) }
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"], start["usage"] = []any{}, nil, map[string]any{"input_tokens": 0, "output_tokens": 0}
	delete(start, "context_management")
	send("message_start", map[string]any{"message": start})
	for i, b := range blocks {
		var first, delta map[string]any
		switch b["type"] {
		case "compaction":
			first = map[string]any{"type": "compaction", "content": nil, "encrypted_content": nil}
			delta = map[string]any{"type": "compaction_delta", "content": b["content"], "encrypted_content": b["encrypted_content"]}
		default:
			first = map[string]any{"type": "text", "text": ""}
			delta = map[string]any{"type": "text_delta", "text": b["text"]}
		}
		send("content_block_start", map[string]any{"index": i, "content_block": first})
		send("content_block_delta", map[string]any{"index": i, "delta": delta})
		send("content_block_stop", map[string]any{"index": i})
	}
	du := map[string]any{"output_tokens": 0}
	for k, v := range usage {
		du[k] = v
	}
	md := map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": du}
	if contextManagement != nil {
		md["context_management"] = contextManagement
	}
	send("message_delta", md)
	send("message_stop", map[string]any{})
	flush(w)
}

// startAnswer begins an answer of the proxy's own: v as a JSON object when it is not streamed
// (it returns false: the answer is complete), else the event stream's headers (true: the
// caller writes the events).
func startAnswer(w http.ResponseWriter, stream bool, v any) bool {
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
		return false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return true
}
