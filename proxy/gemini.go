package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
	"github.com/ctxmgr/ctxmgr/wire"
)

// The Gemini API (POST /v1beta/models/{model}:generateContent and :streamGenerateContent,
// what Gemini CLI and the @google/genai SDK speak) goes through the same managed path as the
// other formats (handleChat with FormatGemini), to Config.UpstreamGemini:
//
//   - The model and streaming are named by the path, not the body. A streamed request with
//     ?alt=sse is relayed event by event; one without (the JSON array form) is relayed whole
//     once answered when the proxy reads the answer (a managed request), as it is otherwise.
//   - The API key (x-goog-api-key or ?key=) is passed through untouched; logs carry the path
//     without its query, and upstream errors are redacted (internal/redact).
//   - A request naming cachedContent keeps part of its history on the provider: it is
//     forwarded unchanged and counted in ctxmgr_unmanaged_requests_total{reason="provider_state"}.
//   - The ctxmgr_read tool is a function declaration; its calls (with or without an id) are
//     answered by the proxy and the model's part that made them, thoughtSignature included, is
//     sent back in the follow-up byte for byte.
//   - :countTokens ({contents} or {generateContentRequest}) is answered {"totalTokens": N}
//     for a history the proxy keeps, as for the other formats' counting endpoints.
//   - generationConfig.maxOutputTokens is the reply reserve (lowered when it does not fit).
//   - Gemini's tokenizer is not public: requests are counted by the calibrated heuristic,
//     which learns the ratio from each answer's usageMetadata.promptTokenCount.

// geminiCall returns the model and method of a Gemini path ("/v1beta/models/m:method").
func geminiCall(r *http.Request) (model, method string) {
	seg := r.PathValue("action")
	if seg == "" {
		seg = r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	}
	i := strings.LastIndexByte(seg, ':')
	if i < 0 {
		return seg, ""
	}
	return seg[:i], seg[i+1:]
}

// geminiSSE reports whether a streamed Gemini request asked for server-sent events.
func geminiSSE(r *http.Request) bool { return r.URL.Query().Get("alt") == "sse" }

// handleGemini dispatches a POST under /v1beta/models/ (and /v1/models/) by its method.
func (s *Server) handleGemini(w http.ResponseWriter, r *http.Request) {
	switch _, method := geminiCall(r); method {
	case "generateContent", "streamGenerateContent":
		s.handleChat(w, r, FormatGemini)
	case "countTokens":
		s.handleCountTokens(FormatGemini)(w, r)
	default:
		s.handlePassthrough(w, r)
	}
}

// geminiStatus is the status name the Gemini API gives an HTTP status.
func geminiStatus(code int) string {
	switch code {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return "UNAVAILABLE"
	}
	return "INTERNAL"
}

// geminiAnswer is a GenerateContentResponse of the proxy's own holding parts.
func geminiAnswer(model string, parts []json.RawMessage, finish string) map[string]any {
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
	if finish != "" {
		cand["finishReason"] = finish
	}
	return map[string]any{"candidates": []any{cand},
		"usageMetadata": map[string]any{"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0},
		"modelVersion":  model}
}

// writeGeminiLocal answers with text as a response, an event stream (alt=sse) or the JSON
// array a stream without alt=sse is.
func writeGeminiLocal(w http.ResponseWriter, model string, stream, sseMode bool, text string) {
	v := geminiAnswer(model, []json.RawMessage{mustMarshal(map[string]string{"text": text})}, "STOP")
	switch {
	case !stream:
		startAnswer(w, false, v)
	case sseMode:
		startAnswer(w, true, nil)
		_, _ = w.Write(geminiEvent(mustMarshal(v)))
		flush(w)
	default:
		startAnswer(w, false, []any{v})
	}
}

// geminiEvent frames a chunk as the Gemini API does.
func geminiEvent(data []byte) []byte {
	out := make([]byte, 0, len(data)+10)
	out = append(out, "data: "...)
	out = append(out, data...)
	return append(out, "\r\n\r\n"...)
}

// geminiMerged reads a non-streamed answer, or the JSON array of a stream without alt=sse,
// as one response: the last chunk with the parts of every chunk's first candidate.
func geminiMerged(data []byte) (top map[string]json.RawMessage, parts []json.RawMessage, array, ok bool) {
	t := bytes.TrimSpace(data)
	var chunks []map[string]json.RawMessage
	if len(t) > 0 && t[0] == '[' {
		if json.Unmarshal(t, &chunks) != nil || len(chunks) == 0 {
			return nil, nil, true, false
		}
		array = true
	} else {
		var c map[string]json.RawMessage
		if json.Unmarshal(t, &c) != nil || c == nil {
			return nil, nil, false, false
		}
		chunks = []map[string]json.RawMessage{c}
	}
	for _, c := range chunks {
		p, _ := geminiParts(c)
		parts = append(parts, p...)
	}
	return chunks[len(chunks)-1], parts, array, true
}

// geminiParts returns the parts of a chunk's first candidate.
func geminiParts(chunk map[string]json.RawMessage) ([]json.RawMessage, bool) {
	var cands []struct {
		Content struct {
			Parts []json.RawMessage `json:"parts"`
		} `json:"content"`
	}
	if json.Unmarshal(chunk["candidates"], &cands) != nil || len(cands) == 0 {
		return nil, false
	}
	return cands[0].Content.Parts, true
}

// withGeminiParts returns chunk with its first candidate's parts (and finish reason, when
// finish is not nil: "" removes it) replaced.
func withGeminiParts(chunk map[string]json.RawMessage, parts []json.RawMessage, finish *string) map[string]json.RawMessage {
	var cands []map[string]json.RawMessage
	if json.Unmarshal(chunk["candidates"], &cands) != nil || len(cands) == 0 {
		return chunk
	}
	var content map[string]json.RawMessage
	_ = json.Unmarshal(cands[0]["content"], &content)
	if content == nil {
		content = map[string]json.RawMessage{"role": mustMarshal("model")}
	}
	if parts == nil {
		parts = []json.RawMessage{}
	}
	content["parts"] = mustMarshal(parts)
	cands[0]["content"] = mustMarshal(content)
	if finish != nil {
		if *finish == "" {
			delete(cands[0], "finishReason")
		} else {
			cands[0]["finishReason"] = mustMarshal(*finish)
		}
	}
	out := make(map[string]json.RawMessage, len(chunk))
	for k, v := range chunk {
		out[k] = v
	}
	out["candidates"] = mustMarshal(cands)
	return out
}

// geminiCallName returns the name of a part's functionCall ("" when it is not one).
func geminiCallName(part json.RawMessage) (string, bool) {
	var v struct {
		FunctionCall *struct {
			Name string `json:"name"`
		} `json:"functionCall"`
	}
	if json.Unmarshal(part, &v) != nil || v.FunctionCall == nil {
		return "", false
	}
	return v.FunctionCall.Name, true
}

// geminiAssistant decodes the parts a model answered into one assistant message, and its
// ctxmgr_read calls.
func geminiAssistant(parts []json.RawMessage) (chat.Message, []readCall, bool) {
	msgs, err := wire.DecodeGeminiContent(mustMarshal(map[string]any{"role": "model", "parts": parts}))
	if err != nil || len(msgs) != 1 {
		return chat.Message{}, nil, false
	}
	var calls []readCall
	for _, tc := range msgs[0].ToolCalls {
		if tc.Name == readToolName {
			calls = append(calls, readCall{ID: tc.ID, Args: tc.Arguments})
		}
	}
	return msgs[0], calls, true
}

// findReadsGemini is findReads for a Gemini answer.
func findReadsGemini(data []byte) (chat.Message, []readCall, bool, bool) {
	_, parts, _, ok := geminiMerged(data)
	if !ok {
		return chat.Message{}, nil, false, false
	}
	other := false
	for _, p := range parts {
		if name, ok := geminiCallName(p); ok && name != readToolName {
			other = true
		}
	}
	m, calls, ok := geminiAssistant(parts)
	if !ok || len(calls) == 0 {
		return chat.Message{}, nil, false, ok
	}
	return m, calls, other, true
}

// stripReadsGemini is stripReads for a Gemini answer (a JSON array stays one, of one chunk).
func stripReadsGemini(data []byte, note string) []byte {
	top, parts, array, ok := geminiMerged(data)
	if !ok {
		return data
	}
	keep := make([]json.RawMessage, 0, len(parts))
	calls := 0
	for _, p := range parts {
		name, isCall := geminiCallName(p)
		if isCall && name == readToolName {
			continue
		}
		if isCall {
			calls++
		}
		keep = append(keep, p)
	}
	var finish *string
	if calls == 0 {
		stop := "STOP"
		finish = &stop
	}
	if len(keep) == 0 {
		keep = append(keep, mustMarshal(map[string]string{"text": note}))
	}
	out := mustMarshal(withGeminiParts(top, keep, finish))
	if array {
		return append(append([]byte{'['}, out...), ']')
	}
	return out
}

// geminiFilter is the streamFilter of Gemini's event stream (alt=sse): every event is a whole
// GenerateContentResponse chunk. ctxmgr_read calls are taken out of the chunks; when an
// answer's only calls are ctxmgr_read, its finish reason is held back, the proxy answers the
// calls, and the follow-up's chunks continue the stream.
type geminiFilter struct {
	readTool bool
	prompt   wire.Usage
	parts    []json.RawMessage // every part of the round, as the model sent them
	reads    int
	other    bool
	held     bool
}

func (f *geminiFilter) usage() wire.Usage { return f.prompt }

func (f *geminiFilter) event(ev sse.Event) []byte {
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 {
		if f.held {
			return nil
		}
		return ev.Raw
	}
	var chunk map[string]json.RawMessage
	if json.Unmarshal(data, &chunk) != nil {
		return ev.Raw
	}
	if u := usageInput(FormatGemini, chunk["usageMetadata"]); u.Input > 0 {
		f.prompt = u
	}
	if !f.readTool {
		return ev.Raw
	}
	if f.held {
		return nil
	}
	parts, ok := geminiParts(chunk)
	var finish struct {
		Candidates []struct {
			FinishReason string `json:"finishReason"`
		} `json:"candidates"`
	}
	_ = json.Unmarshal(data, &finish)
	if !ok && (len(finish.Candidates) == 0 || finish.Candidates[0].FinishReason == "") {
		return ev.Raw
	}
	keep := make([]json.RawMessage, 0, len(parts))
	modified := false
	for _, p := range parts {
		f.parts = append(f.parts, p)
		name, isCall := geminiCallName(p)
		switch {
		case isCall && name == readToolName:
			f.reads++
			modified = true
			continue
		case isCall:
			f.other = true
		}
		keep = append(keep, p)
	}
	var fin *string
	if len(finish.Candidates) > 0 && finish.Candidates[0].FinishReason != "" && f.reads > 0 && !f.other {
		f.held = true
		none := ""
		fin = &none
		modified = true
	}
	if !modified {
		return ev.Raw
	}
	if len(keep) == 0 && fin != nil {
		return nil // nothing left of the held chunk but its end
	}
	if len(keep) == 0 {
		if _, hasUsage := chunk["usageMetadata"]; !hasUsage {
			return nil
		}
	}
	return geminiEvent(mustMarshal(withGeminiParts(chunk, keep, fin)))
}

func (f *geminiFilter) pending() (chat.Message, []readCall) {
	if !f.held {
		return chat.Message{}, nil
	}
	m, calls, ok := geminiAssistant(f.parts)
	if !ok {
		return chat.Message{}, nil
	}
	return m, calls
}

func (f *geminiFilter) next() {
	f.parts, f.reads, f.other, f.held, f.prompt = nil, 0, false, false, wire.Usage{}
}

func (f *geminiFilter) abort(note string) []byte {
	return geminiEvent(mustMarshal(geminiAnswer("", []json.RawMessage{mustMarshal(map[string]string{"text": note})}, "STOP")))
}

// geminiCountBody returns the request a countTokens body counts: its contents, or its
// generateContentRequest.
func geminiCountBody(body []byte) []byte {
	var v struct {
		GenerateContentRequest json.RawMessage `json:"generateContentRequest"`
	}
	if json.Unmarshal(body, &v) == nil && len(v.GenerateContentRequest) > 0 && !isNull(v.GenerateContentRequest) {
		return v.GenerateContentRequest
	}
	return body
}
