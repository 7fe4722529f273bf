package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// Anthropic context editing and compaction answered by the proxy (native.go):
//
//   - context_management.edits clear_tool_uses_20250919 and clear_thinking_20251015 are removed
//     from what is forwarded and applied by the proxy to the request it forwards, with the
//     API's defaults (clear_tool_uses: trigger 100,000 input tokens, keep 3 tool uses;
//     clear_thinking: keep 1 thinking turn). Triggers count the input the client sent (its own
//     history), not the smaller context the proxy forwards. A cleared tool result becomes a
//     placeholder naming where its text is stored (the ctxmgr_read tool reads it back), and
//     the answer carries context_management.applied_edits, in the message and in the streamed
//     message_delta.
//   - compact_20260112, once the client's input reaches its trigger (default 150,000): the
//     whole history is folded into the proxy's summary, and the answer starts with a
//     compaction block {content: the summary, encrypted_content: the proxy's token}; the
//     model's answer to the summary follows it (the request is served anew with the summary
//     as its history), with usage.iterations holding the compaction and the message. With
//     pause_after_compaction the answer is the block alone, stop_reason "compaction".
//   - on-demand compaction (top-level "compaction": {"type": "summarize"}) is answered by the
//     block alone, stop_reason "compaction".
//   - a compaction block the client sends back with a token of the proxy's stands for every
//     message before it: those are dropped from what is forwarded and the block becomes a
//     user message holding the summary.
//   - the anthropic-beta values these features need are not forwarded.

// anthropicNative is the Anthropic side of a nativeAction.
type anthropicNative struct {
	// edits are the clear_* edits the proxy applies, in the client's order.
	edits []anthropicEdit
	// compact is the compact_20260112 edit the proxy answers (nil: none).
	compact *compactEdit
	// dropBetas are the anthropic-beta values not forwarded.
	dropBetas map[string]bool
	// clientTokens is the input the client sent (manage counts it).
	clientTokens int
	// clientToolUses is how many tool uses the client's history holds.
	clientToolUses int
	// applied is the response's context_management.applied_edits (nil: no edits).
	applied []map[string]any
	// prepend is the compaction block the answer starts with (compactThenContinue), nil if
	// none; compactedTokens the input it folded.
	prepend         map[string]any
	compactedTokens int
}

// compactEdit is a compact_20260112 edit.
type compactEdit struct {
	trigger      int
	instructions string
	pause        bool // pause_after_compaction
}

// anthropicEdit is a clear_tool_uses_20250919 or clear_thinking_20251015 edit, as the client
// gave it.
type anthropicEdit struct {
	Type    string          `json:"type"`
	Trigger *valueOf        `json:"trigger"`
	Keep    json.RawMessage `json:"keep"`
	// clear_tool_uses only.
	ClearAtLeast    *valueOf        `json:"clear_at_least"`
	ExcludeTools    []string        `json:"exclude_tools"`
	ClearToolInputs json.RawMessage `json:"clear_tool_inputs"`
}

// valueOf is {"type": ..., "value": N}.
type valueOf struct {
	Type  string `json:"type"`
	Value int    `json:"value"`
}

// The features' anthropic-beta values.
var (
	betaFeature = map[string]string{
		"context-management-2025-06-27": FeatureAnthropicEdits,
		"compact-2026-01-12":            FeatureAnthropicCompaction,
		"compact-2026-09-04":            FeatureAnthropicCompaction,
	}
)

const (
	defaultClearTrigger   = 100000
	defaultClearKeep      = 3
	defaultCompactTrigger = 150000
	minCompactTrigger     = 50000
)

// nativeBetas returns the anthropic-beta values that only the providers' context management
// needs ("" when there are none).
func nativeBetas(h http.Header) string {
	var found []string
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); betaFeature[b] != "" {
				found = append(found, b)
			}
		}
	}
	return strings.Join(found, ",")
}

// dropBetas removes the values drop names from h's anthropic-beta headers.
func dropBetas(h http.Header, drop map[string]bool) {
	vs := h.Values("Anthropic-Beta")
	if len(vs) == 0 || len(drop) == 0 {
		return
	}
	var keep []string
	for _, v := range vs {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" && !drop[b] {
				keep = append(keep, b)
			}
		}
	}
	h.Del("Anthropic-Beta")
	if len(keep) > 0 {
		h.Set("Anthropic-Beta", strings.Join(keep, ","))
	}
}

// nativeAnthropic is nativeRequest for the Anthropic Messages API.
func (s *Server) nativeAnthropic(ctx context.Context, r *http.Request, base string, body []byte) ([]byte, *nativeAction, error) {
	if !s.nativeLocal(base, FeatureAnthropicEdits) && !s.nativeLocal(base, FeatureAnthropicCompaction) {
		// Forwarded as it is: not parsed (Claude Code sends context_management every time).
		betas := nativeBetas(r.Header)
		if bytes.Contains(body, []byte(`"context_management"`)) || strings.Contains(betas, "context-management") {
			s.countNative(FormatAnthropic, FeatureAnthropicEdits, decisionPassthrough)
		}
		if bytes.Contains(body, []byte(`"compact`)) || strings.Contains(betas, "compact-") {
			s.countNative(FormatAnthropic, FeatureAnthropicCompaction, decisionPassthrough)
		}
		return body, nil, nil
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return body, nil, nil // the decoder gives the error
	}
	an := &anthropicNative{dropBetas: map[string]bool{}}
	local := map[string]bool{}
	decided := map[string]bool{}
	decide := func(feature string) bool {
		if !decided[feature] {
			decided[feature], local[feature] = true, s.nativeLocal(base, feature)
		}
		return local[feature]
	}
	act := &nativeAction{anthropic: an, base: base}
	changed := false

	// context_management.edits
	if raw, ok := top["context_management"]; ok {
		var cm map[string]json.RawMessage
		if err := json.Unmarshal(raw, &cm); err != nil {
			return nil, nil, &nativeInputError{"context_management", err}
		}
		var edits []json.RawMessage
		if err := json.Unmarshal(cm["edits"], &edits); cm["edits"] != nil && err != nil {
			return nil, nil, &nativeInputError{"context_management.edits", err}
		}
		var kept []json.RawMessage
		for i, e := range edits {
			var ed anthropicEdit
			if err := json.Unmarshal(e, &ed); err != nil {
				return nil, nil, &nativeInputError{fmt.Sprintf("context_management.edits.%d", i), err}
			}
			switch ed.Type {
			case "clear_tool_uses_20250919", "clear_thinking_20251015":
				if !decide(FeatureAnthropicEdits) {
					kept = append(kept, e)
					continue
				}
				if ed.Type == "clear_thinking_20251015" && !thinkingOn(top["thinking"]) {
					return nil, nil, &nativeInputError{fmt.Sprintf("context_management.edits.%d", i),
						errors.New("clear_thinking_20251015 requires thinking to be enabled")}
				}
				an.edits = append(an.edits, ed)
			case "compact_20260112":
				if !decide(FeatureAnthropicCompaction) {
					kept = append(kept, e)
					continue
				}
				var c struct {
					Trigger      *valueOf `json:"trigger"`
					Instructions *string  `json:"instructions"`
					Pause        bool     `json:"pause_after_compaction"`
				}
				_ = json.Unmarshal(e, &c)
				ce := &compactEdit{trigger: defaultCompactTrigger, pause: c.Pause}
				if c.Trigger != nil {
					if c.Trigger.Value < minCompactTrigger {
						return nil, nil, &nativeInputError{fmt.Sprintf("context_management.edits.%d.trigger", i),
							fmt.Errorf("value must be at least %d", minCompactTrigger)}
					}
					ce.trigger = c.Trigger.Value
				}
				if c.Instructions != nil {
					ce.instructions = strings.TrimSpace(*c.Instructions)
				}
				an.compact = ce
			default:
				kept = append(kept, e)
			}
		}
		if len(kept) != len(edits) {
			changed = true
			if len(kept) == 0 && len(cm) == 1 {
				delete(top, "context_management")
			} else {
				cm["edits"] = mustMarshal(kept)
				top["context_management"] = mustMarshal(cm)
			}
		}
	}
	if an.edits != nil {
		an.applied = []map[string]any{}
	}

	// On-demand compaction.
	if raw, ok := top["compaction"]; ok && decide(FeatureAnthropicCompaction) {
		var c struct {
			Type         string  `json:"type"`
			Instructions *string `json:"instructions"`
		}
		if err := json.Unmarshal(raw, &c); err != nil || c.Type != "summarize" {
			return nil, nil, &nativeInputError{"compaction", fmt.Errorf("want {\"type\": \"summarize\"}")}
		}
		if endsInToolUse(top["messages"]) {
			return nil, nil, &nativeInputError{"compaction", errors.New("the messages end in a tool_use without its tool_result: nothing to summarize until it is answered")}
		}
		act.compact = true
		if c.Instructions != nil {
			act.instruction = strings.TrimSpace(*c.Instructions)
		}
		delete(top, "compaction")
		changed = true
	}

	// Compaction blocks sent back.
	if raw, ok := top["messages"]; ok && bytes.Contains(raw, []byte(`"compaction"`)) {
		msgs, from, err := s.expandAnthropicCompaction(ctx, raw)
		if err != nil {
			return nil, nil, err
		}
		expanded := from != ""
		if expanded {
			act.sessions = append(act.sessions, from)
		}
		if expanded {
			top["messages"], changed = msgs, true
			decide(FeatureAnthropicCompaction)
		}
	}

	// The betas of the features answered here.
	for _, b := range strings.Split(nativeBetas(r.Header), ",") {
		if f := betaFeature[b]; f != "" && decide(f) {
			an.dropBetas[b] = true
		}
	}
	for f := range decided {
		d := decisionPassthrough
		if local[f] {
			d = decisionLocal
		}
		s.countNative(FormatAnthropic, f, d)
	}
	if !changed && len(an.dropBetas) == 0 {
		return body, nil, nil
	}
	if !changed {
		return body, act, nil
	}
	return mustMarshal(top), act, nil
}

// thinkingOn reports whether an Anthropic thinking field enables thinking.
func thinkingOn(raw json.RawMessage) bool {
	var t struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(raw, &t) == nil && (t.Type == "enabled" || t.Type == "adaptive")
}

// aMessage is an Anthropic message as the edits read it: its content blocks, each kept whole.
type aMessage struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"-"`
	raw     map[string]json.RawMessage
}

// aBlock is what the edits read of a content block.
type aBlock struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	Enc       *string         `json:"encrypted_content"`
	Input     json.RawMessage `json:"input"`
}

// decodeMessages reads messages; a message whose content is a string has no blocks.
func decodeMessages(raw json.RawMessage) ([]aMessage, error) {
	var objs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &objs); err != nil {
		return nil, err
	}
	out := make([]aMessage, len(objs))
	for i, o := range objs {
		m := aMessage{raw: o}
		_ = json.Unmarshal(o["role"], &m.Role)
		if firstByteIs(o["content"], '[') {
			if err := json.Unmarshal(o["content"], &m.Content); err != nil {
				return nil, err
			}
		}
		out[i] = m
	}
	return out, nil
}

// encodeMessages writes messages back, their blocks in place of their content.
func encodeMessages(msgs []aMessage) json.RawMessage {
	objs := make([]map[string]json.RawMessage, len(msgs))
	for i, m := range msgs {
		if m.Content != nil {
			m.raw["content"] = mustMarshal(m.Content)
		}
		objs[i] = m.raw
	}
	return mustMarshal(objs)
}

func blockOf(raw json.RawMessage) aBlock {
	var b aBlock
	_ = json.Unmarshal(raw, &b)
	return b
}

// endsInToolUse reports whether the last message is an assistant message with a tool_use.
func endsInToolUse(raw json.RawMessage) bool {
	msgs, err := decodeMessages(raw)
	if err != nil || len(msgs) == 0 {
		return false
	}
	last := msgs[len(msgs)-1]
	return last.Role == "assistant" && slices.ContainsFunc(last.Content, func(b json.RawMessage) bool { return blockOf(b).Type == "tool_use" })
}

// expandAnthropicCompaction replaces the newest compaction block carrying a token of the
// proxy's: the messages before its message are dropped (the summary stands for them), and the
// block becomes a user message holding the summary, before what is left of its message. It
// returns the session the token names ("" when there was none).
func (s *Server) expandAnthropicCompaction(ctx context.Context, raw json.RawMessage) (json.RawMessage, string, error) {
	msgs, err := decodeMessages(raw)
	if err != nil {
		return raw, "", nil
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		for j, b := range msgs[i].Content {
			blk := blockOf(b)
			if blk.Type != "compaction" || blk.Enc == nil {
				continue
			}
			claim, ok := s.openToken(ctx, *blk.Enc)
			if !ok {
				continue
			}
			text, err := s.expandToken(ctx, claim)
			if err != nil {
				return nil, "", err
			}
			summary := aMessage{Role: "user", raw: map[string]json.RawMessage{"role": mustMarshal("user")},
				Content: []json.RawMessage{mustMarshal(map[string]any{"type": "text", "text": text})}}
			rest := msgs[i]
			rest.Content = slices.Delete(slices.Clone(rest.Content), j, j+1)
			out := []aMessage{summary}
			if len(rest.Content) > 0 {
				out = append(out, rest)
			}
			out = append(out, msgs[i+1:]...)
			return encodeMessages(out), claim.Session, nil
		}
	}
	return raw, "", nil
}

// clearedRef is the ctxmgr_read ref of a cleared tool result, and its Store offload key.
func clearedRef(toolUseID string) string { return "cleared-" + toolUseID }

// applyEdits applies the client's clear_* edits to the Anthropic body forwarded, storing each
// cleared tool result under session id, and records what was done in an.applied.
func (s *Server) applyEdits(ctx context.Context, an *anthropicNative, id string, body []byte, counter tokens.Counter, retention time.Duration) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return body
	}
	msgs, err := decodeMessages(top["messages"])
	if err != nil {
		return body
	}
	changed := false
	for _, ed := range an.edits {
		var applied map[string]any
		if ed.Type == "clear_thinking_20251015" {
			applied = clearThinking(msgs, ed, counter)
		} else {
			applied = s.clearToolUses(ctx, msgs, ed, an, id, counter, retention)
		}
		if applied != nil {
			an.applied = append(an.applied, applied)
			changed = true
		}
	}
	if !changed {
		return body
	}
	top["messages"] = encodeMessages(msgs)
	return mustMarshal(top)
}

// clearThinking removes the thinking blocks of all but the newest keep assistant turns that
// have them (keep: {"type":"thinking_turns","value":N}, "all" or {"type":"all"}; default 1).
func clearThinking(msgs []aMessage, ed anthropicEdit, counter tokens.Counter) map[string]any {
	keep := 1
	if len(ed.Keep) > 0 {
		var k valueOf
		var all string
		switch {
		case json.Unmarshal(ed.Keep, &all) == nil && all == "all":
			return nil
		case json.Unmarshal(ed.Keep, &k) == nil && k.Type == "all":
			return nil
		case json.Unmarshal(ed.Keep, &k) == nil:
			keep = max(0, k.Value)
		}
	}
	isThinking := func(b json.RawMessage) bool {
		t := blockOf(b).Type
		return t == "thinking" || t == "redacted_thinking"
	}
	seen, turns, cleared := 0, 0, 0
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role != "assistant" || !slices.ContainsFunc(m.Content, isThinking) {
			continue
		}
		if seen++; seen <= keep {
			continue
		}
		for _, b := range m.Content {
			if isThinking(b) {
				cleared += counter.Text(string(b))
			}
		}
		m.Content = slices.DeleteFunc(slices.Clone(m.Content), isThinking)
		if len(m.Content) == 0 {
			m.Content = []json.RawMessage{mustMarshal(map[string]any{"type": "text", "text": "[ctxmgr: thinking cleared]"})}
		}
		turns++
	}
	if turns == 0 {
		return nil
	}
	return map[string]any{"type": ed.Type, "cleared_thinking_turns": turns, "cleared_input_tokens": cleared}
}

// clearToolUses clears the results (and, with clear_tool_inputs, the inputs) of all but the
// newest keep tool uses, once the client's input reaches the trigger.
func (s *Server) clearToolUses(ctx context.Context, msgs []aMessage, ed anthropicEdit, an *anthropicNative, id string, counter tokens.Counter, retention time.Duration) map[string]any {
	trigger := valueOf{Type: "input_tokens", Value: defaultClearTrigger}
	if ed.Trigger != nil {
		trigger = *ed.Trigger
	}
	if trigger.Type == "tool_uses" && an.clientToolUses < trigger.Value || trigger.Type != "tool_uses" && an.clientTokens < trigger.Value {
		return nil
	}
	keep := defaultClearKeep
	var k valueOf
	if len(ed.Keep) > 0 && json.Unmarshal(ed.Keep, &k) == nil {
		keep = max(0, k.Value)
	}
	var inputsAll bool
	var inputsOf []string
	if json.Unmarshal(ed.ClearToolInputs, &inputsAll) != nil {
		_ = json.Unmarshal(ed.ClearToolInputs, &inputsOf)
	}
	type use struct {
		msg, blk int
		id, name string
	}
	var uses []use
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		for j, b := range m.Content {
			if blk := blockOf(b); blk.Type == "tool_use" {
				uses = append(uses, use{i, j, blk.ID, blk.Name})
			}
		}
	}
	if len(uses) <= keep {
		return nil
	}
	clear := map[string]use{}
	for _, u := range uses[:len(uses)-keep] {
		if !slices.Contains(ed.ExcludeTools, u.name) {
			clear[u.id] = u
		}
	}
	type edit struct {
		msg, blk int
		to       json.RawMessage
	}
	var edits []edit
	freed, n := 0, 0
	for i, m := range msgs {
		if m.Role != "user" {
			continue
		}
		for j, b := range m.Content {
			blk := blockOf(b)
			u, ok := clear[blk.ToolUseID]
			if blk.Type != "tool_result" || !ok || bytes.Contains(blk.Content, []byte("[ctxmgr: tool result cleared")) {
				continue
			}
			text := resultText(blk.Content)
			note := fmt.Sprintf("[ctxmgr: tool result cleared by context editing (%d tokens)]", counter.Text(text))
			if _, err := s.cfg.Store.Offload(ctx, id, clearedRef(blk.ToolUseID), text, time.Now().Add(retention)); err == nil {
				note = fmt.Sprintf("[ctxmgr: tool result cleared by context editing (%d tokens); the full text: ctxmgr_read ref %q]",
					counter.Text(text), clearedRef(blk.ToolUseID))
			}
			var o map[string]json.RawMessage
			_ = json.Unmarshal(b, &o)
			o["content"] = mustMarshal(note)
			freed += counter.Text(text) - counter.Text(note)
			edits = append(edits, edit{i, j, mustMarshal(o)})
			n++
			if inputsAll || slices.Contains(inputsOf, u.name) {
				var in map[string]json.RawMessage
				_ = json.Unmarshal(msgs[u.msg].Content[u.blk], &in)
				freed += counter.Text(string(in["input"]))
				in["input"] = json.RawMessage("{}")
				edits = append(edits, edit{u.msg, u.blk, mustMarshal(in)})
			}
		}
	}
	if n == 0 || ed.ClearAtLeast != nil && freed < ed.ClearAtLeast.Value {
		return nil
	}
	for _, e := range edits {
		msgs[e.msg].Content = slices.Clone(msgs[e.msg].Content)
		msgs[e.msg].Content[e.blk] = e.to
	}
	return map[string]any{"type": ed.Type, "cleared_tool_uses": n, "cleared_input_tokens": max(0, freed)}
}

// resultText is the text of a tool_result's content (a string or blocks).
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return string(raw)
	}
	var b strings.Builder
	for _, x := range blocks {
		if x.Type == "text" {
			b.WriteString(x.Text)
			b.WriteByte('\n')
		} else {
			fmt.Fprintf(&b, "[%s block]\n", x.Type)
		}
	}
	return b.String()
}

// countToolUses counts the tool_use blocks of an Anthropic body's messages.
func countToolUses(body []byte) int {
	return bytes.Count(body, []byte(`"type":"tool_use"`))
}

// withContextManagement sets a message object's context_management.applied_edits.
func withContextManagement(data []byte, applied []map[string]any) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return data
	}
	top["context_management"] = mustMarshal(map[string]any{"applied_edits": applied})
	return mustMarshal(top)
}

// writeAnthropicCompaction answers an Anthropic compaction with the proxy's summary and token.
func writeAnthropicCompaction(w http.ResponseWriter, act *nativeAction, model string, stream bool, token, summary string) {
	iter := []any{map[string]any{"type": "compaction", "input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
		"cache_read_input_tokens": 0, "cache_creation": nil}}
	var cm any
	if act.anthropic != nil && act.anthropic.applied != nil {
		cm = map[string]any{"applied_edits": act.anthropic.applied}
	}
	block := map[string]any{"type": "compaction", "content": summary, "encrypted_content": token}
	writeAnthropicMessage(w, model, stream, []map[string]any{block}, "compaction", map[string]any{"iterations": iter}, cm)
}

// deltaWithEdits is a streamed message_delta event carrying context_management.applied_edits.
func deltaWithEdits(ev sse.Event, applied []map[string]any) sse.Event {
	data := withContextManagement(ev.Data, applied)
	return sse.Event{Name: ev.Name, Data: data, Raw: sse.Format(ev.Name, data)}
}

// compactThenContinue answers compact_20260112 without pause_after_compaction: the whole
// history of the request's synced conversation is folded into the summary (compactNow), and
// the request is served anew (errRestart) with the summary as its history, as the client's
// next request will send it (the block expanded); the answer starts with the compaction
// block.
func (s *Server) compactThenContinue(ctx context.Context, x *exchange) error {
	an := x.nat.anthropic
	an.compactedTokens = an.clientTokens
	tok, summary, ok := s.compactNow(ctx, x)
	if !ok {
		return errAnswered
	}
	claim, _ := s.openToken(ctx, tok)
	text, err := s.expandToken(ctx, claim)
	var top map[string]json.RawMessage
	if err == nil {
		err = json.Unmarshal(x.body, &top)
	}
	if err != nil {
		writeError(x.w, x.format, http.StatusInternalServerError, "api_error", "ctxmgr: "+redact.Text(err.Error()))
		return errAnswered
	}
	top["messages"] = mustMarshal([]any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text}}}})
	x.restart = mustMarshal(top)
	x.nat.compact, an.compact = false, nil
	x.nat.sessions = append(x.nat.sessions, claim.Session)
	an.prepend = map[string]any{"type": "compaction", "content": summary, "encrypted_content": tok}
	return errRestart
}

// compactionIteration is the usage.iterations entry of a compaction of input tokens.
func compactionIteration(input int) map[string]any {
	return map[string]any{"type": "compaction", "input_tokens": input, "output_tokens": 0, "cache_creation_input_tokens": 0,
		"cache_read_input_tokens": 0, "cache_creation": nil}
}

// withPrepended returns a message object whose content starts with an's compaction block and
// whose usage.iterations holds the compaction and the message.
func withPrepended(data []byte, an *anthropicNative) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return data
	}
	var content []json.RawMessage
	_ = json.Unmarshal(top["content"], &content)
	top["content"] = mustMarshal(append([]json.RawMessage{mustMarshal(an.prepend)}, content...))
	top["usage"] = withIterations(top["usage"], an)
	return mustMarshal(top)
}

// withIterations adds usage.iterations to a usage object: the compaction, then the message
// with the usage's own counts.
func withIterations(raw json.RawMessage, an *anthropicNative) json.RawMessage {
	var u map[string]json.RawMessage
	if json.Unmarshal(raw, &u) != nil || u == nil {
		u = map[string]json.RawMessage{}
	}
	msg := map[string]any{"type": "message", "model": nil, "cache_creation": nil}
	for _, k := range []string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} {
		n := 0
		_ = json.Unmarshal(u[k], &n)
		msg[k] = n
	}
	u["iterations"] = mustMarshal([]any{compactionIteration(an.compactedTokens), msg})
	return mustMarshal(u)
}

// prependStream rewrites the events of a streamed answer (as the stream filter let them out)
// so that it starts with an's compaction block: the block's events follow message_start,
// every other block's index is one more, and message_delta's usage holds the iterations.
func prependStream(out []byte, an *anthropicNative) []byte {
	var b bytes.Buffer
	rd := sse.NewReader(bytes.NewReader(out))
	for {
		ev, err := rd.Next()
		if err != nil {
			return b.Bytes()
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(ev.Data, &top) != nil {
			b.Write(ev.Raw)
			continue
		}
		switch ev.Name {
		case "message_start":
			b.Write(ev.Raw)
			sendEvent(&b, nil, "content_block_start", map[string]any{"index": 0,
				"content_block": map[string]any{"type": "compaction", "content": nil, "encrypted_content": nil}})
			sendEvent(&b, nil, "content_block_delta", map[string]any{"index": 0,
				"delta": map[string]any{"type": "compaction_delta", "content": an.prepend["content"], "encrypted_content": an.prepend["encrypted_content"]}})
			sendEvent(&b, nil, "content_block_stop", map[string]any{"index": 0})
			continue
		case "content_block_start", "content_block_delta", "content_block_stop":
			var i int
			_ = json.Unmarshal(top["index"], &i)
			top["index"] = mustMarshal(i + 1)
		case "message_delta":
			top["usage"] = withIterations(top["usage"], an)
		default:
			b.Write(ev.Raw)
			continue
		}
		b.Write(sse.Format(ev.Name, mustMarshal(top)))
	}
}
