package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// OpenAI Responses compaction answered by the proxy (native.go):
//
//   - a /v1/responses request whose input ends in {"type":"compaction_trigger"} (what Codex CLI
//     sends to compact remotely) is answered with exactly one output item {"type":"compaction",
//     "id", "encrypted_content"}, as a response object or its typed event stream: the proxy
//     folds the whole history into its summary (Session.CompactAll, its configured summarizer,
//     validated like every summary) and encrypted_content is its token (native_token.go);
//   - POST /v1/responses/compact is answered {"object":"response.compaction", "output": [the
//     input's user messages..., the compaction item]};
//   - a compaction item whose encrypted_content is a token of the proxy's is replaced, in what
//     is forwarded, by a user message holding the summary it names; any other is forwarded
//     untouched;
//   - "context_management": [{"type":"compaction","compact_threshold":N}] is removed, and N
//     becomes the request's compaction threshold: when the context the proxy would forward
//     reaches N tokens it is compacted first.

// nativeAction is what the proxy does itself for a request's providers' context management.
type nativeAction struct {
	base string // the upstream's base URL
	// compact: answer with a compaction of the whole history, following instruction.
	compact     bool
	instruction string
	// endpoint: the request came to POST /v1/responses/compact; kept are its user message
	// items, returned before the compaction item.
	endpoint bool
	kept     []json.RawMessage
	// threshold: compact the forwarded context when it reaches this many tokens (0: none).
	threshold int
	// anthropic is the Anthropic side's work (native_anthropic.go).
	anthropic *anthropicNative
	// sessions are those of the compaction tokens expanded: ctxmgr_read reads their archives.
	sessions []string
}

// errNativeInput: a providers' context management field the proxy cannot read.
type nativeInputError struct {
	field string
	err   error
}

func (e *nativeInputError) Error() string { return fmt.Sprintf("%s: %v", e.field, e.err) }
func (e *nativeInputError) Unwrap() error { return e.err }

// mentionsNative is the cheap test that rules out almost every body before it is parsed.
func mentionsNative(body []byte) bool {
	return bytes.Contains(body, []byte(`compaction`)) || bytes.Contains(body, []byte(`context_management`))
}

// maybeNative is the cheap test that rules out almost every request before its body is
// parsed: nothing in it names the providers' context management.
func maybeNative(f Format, r *http.Request, body []byte) bool {
	switch f {
	case FormatResponses:
		return strings.HasSuffix(r.URL.Path, "/responses/compact") || mentionsNative(body)
	case FormatAnthropic:
		return mentionsNative(body) || nativeBetas(r.Header) != ""
	}
	return false
}

// nativeRequest rewrites a body whose providers' context management the proxy answers for
// the upstream at base, and says what else to do. It returns body itself, and a nil action,
// when there is nothing to do.
func (s *Server) nativeRequest(ctx context.Context, f Format, r *http.Request, base string, body []byte) ([]byte, *nativeAction, error) {
	switch f {
	case FormatResponses:
		return s.nativeResponses(ctx, base, strings.HasSuffix(r.URL.Path, "/responses/compact"), body)
	case FormatAnthropic:
		return s.nativeAnthropic(ctx, r, base, body)
	}
	return body, nil, nil
}

// nativeResponses is nativeRequest for the Responses API.
func (s *Server) nativeResponses(ctx context.Context, base string, endpoint bool, body []byte) ([]byte, *nativeAction, error) {
	feature := FeatureResponsesCompaction
	if !s.nativeLocal(base, feature) {
		// Forwarded as it is, not parsed.
		if endpoint || bytes.Contains(body, []byte(`"compaction_trigger"`)) || bytes.Contains(body, []byte(`"context_management"`)) ||
			bytes.Contains(body, []byte(`"type":"compaction"`)) {
			s.countNative(FormatResponses, feature, decisionPassthrough)
		}
		return body, nil, nil
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return body, nil, nil // the decoder gives the error
	}
	var items []json.RawMessage
	if raw, ok := top["input"]; ok && firstByteIs(raw, '[') {
		if err := json.Unmarshal(raw, &items); err != nil {
			return body, nil, nil
		}
	}
	_, hasCM := top["context_management"]
	trigger := len(items) > 0 && itemTypeOf(items[len(items)-1]) == "compaction_trigger"
	if !endpoint && !hasCM && !trigger && !hasItemType(items, "compaction") {
		return body, nil, nil
	}
	act := &nativeAction{base: base, compact: trigger || endpoint, endpoint: endpoint}
	if hasCM {
		n, err := compactThreshold(top["context_management"])
		if err != nil {
			return nil, nil, &nativeInputError{"context_management", err}
		}
		act.threshold = n
		delete(top, "context_management")
	}
	if trigger {
		items = items[:len(items)-1]
	}
	out := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		switch itemTypeOf(it) {
		case "compaction", "compaction_summary":
			var c struct {
				EncryptedContent string `json:"encrypted_content"`
			}
			_ = json.Unmarshal(it, &c)
			if claim, ok := s.openToken(ctx, c.EncryptedContent); ok {
				text, err := s.expandToken(ctx, claim)
				if err != nil {
					return nil, nil, err
				}
				it = userTextItem(text)
				act.sessions = append(act.sessions, claim.Session)
			}
		case "message":
			if act.endpoint && roleOf(it) == "user" {
				act.kept = append(act.kept, it)
			}
		}
		out = append(out, it)
	}
	if items != nil {
		top["input"] = mustMarshal(out)
	}
	if act.compact {
		// The answer is the proxy's own: never a stream of the upstream's.
		delete(top, "previous_response_id")
	}
	s.countNative(FormatResponses, feature, decisionLocal)
	return mustMarshal(top), act, nil
}

// compactThreshold reads a Responses context_management list: the compact_threshold of its
// compaction entry (0: none given).
func compactThreshold(raw json.RawMessage) (int, error) {
	var entries []struct {
		Type      string `json:"type"`
		Threshold *int   `json:"compact_threshold"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return 0, fmt.Errorf("want a list of {type, compact_threshold}: %w", err)
	}
	for _, e := range entries {
		if e.Type != "compaction" {
			return 0, fmt.Errorf("unknown entry type %q", e.Type)
		}
		if e.Threshold != nil {
			if *e.Threshold <= 0 {
				return 0, errors.New("compact_threshold must be positive")
			}
			return *e.Threshold, nil
		}
	}
	return 0, nil
}

func firstByteIs(raw json.RawMessage, c byte) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == c
}

func itemTypeOf(item json.RawMessage) string {
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(item, &v)
	return v.Type
}

func roleOf(item json.RawMessage) string {
	var v struct {
		Role string `json:"role"`
	}
	_ = json.Unmarshal(item, &v)
	return v.Role
}

func hasItemType(items []json.RawMessage, typ string) bool {
	for _, it := range items {
		if bytes.Contains(it, []byte(typ)) && itemTypeOf(it) == typ {
			return true
		}
	}
	return false
}

// userTextItem is a user message input item holding text.
func userTextItem(text string) json.RawMessage {
	return mustMarshal(map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": text}}})
}

// compactionItem is the output item of a compaction the proxy made.
func compactionItem(token string) json.RawMessage {
	return mustMarshal(map[string]any{"type": "compaction", "id": randomID("cmp_ctxmgr_"), "encrypted_content": token})
}

// writeResponsesCompaction answers a Responses compaction with the proxy's token.
func writeResponsesCompaction(w http.ResponseWriter, act *nativeAction, model string, stream bool, token string) {
	item := compactionItem(token)
	if !act.endpoint {
		writeResponsesItems(w, model, stream, []json.RawMessage{item}, nil)
		return
	}
	output := append(append([]json.RawMessage{}, act.kept...), item)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": randomID("resp_ctxmgr_"), "object": "response.compaction",
		"created_at": time.Now().Unix(), "output": output,
		"usage": map[string]any{"input_tokens": 0, "input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens": 0,
			"output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 0}})
}
