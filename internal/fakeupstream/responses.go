package fakeupstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/turns"
	"github.com/ctxmgr/ctxmgr/wire"
)

// The OpenAI Responses API (POST /v1/responses), as strict as the real one where the proxy can
// get it wrong:
//
//   - every function_call / custom_tool_call of input has exactly one output item with its
//     call_id and every output has its call (400 "No tool output found for function call
//     call_X." / "No tool call found for function call output with call_id call_X.");
//   - a reasoning item's encrypted_content must be one this fake issued (400
//     invalid_encrypted_content), so reasoning is replayed byte for byte or not at all;
//   - input tokens + max_output_tokens above Options.Window (or input above
//     Options.RejectAbove) is the real 400 context_length_exceeded;
//   - previous_response_id must name a response this fake answered (else 400
//     previous_response_not_found); such a request is answered from its own input.
//
// It answers as the chat fake does (decide), as a response object with output items and usage,
// or as the typed event stream (response.created ... response.completed, each event with its
// sequence_number). With include ["reasoning.encrypted_content"] every answer starts with a
// reasoning item whose encrypted_content the fake remembers.

// responsesState is what the fake remembers between Responses requests.
type responsesState struct {
	mu        sync.Mutex
	encrypted map[string]bool // encrypted_content values issued
	responses map[string]bool // response ids answered
}

// respState returns the Server's Responses state, its maps made.
func (s *Server) respState() *responsesState {
	st := &s.resp
	st.mu.Lock()
	if st.encrypted == nil {
		st.encrypted, st.responses = map[string]bool{}, map[string]bool{}
	}
	st.mu.Unlock()
	return st
}

// OpenAIResponsesOverflow is the real Responses API answer to an input that does not fit.
const OpenAIResponsesOverflow = `{
  "error": {
    "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
    "type": "invalid_request_error",
    "param": "input",
    "code": "context_length_exceeded"
  }
}`

func openAIError(w http.ResponseWriter, status int, msg, param, code string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nilIfEmpty(param), "code": nilIfEmpty(code)}})
	writeRaw(w, status, string(b))
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// checkResponsesInput applies the real API's rules on input items: it returns the error
// message, param and code of the first violation.
func (s *Server) checkResponsesInput(body []byte) (msg, param, code string) {
	var top struct {
		Input json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &top)
	var items []map[string]json.RawMessage
	if json.Unmarshal(top.Input, &items) != nil {
		return "", "", ""
	}
	str := func(raw json.RawMessage) string {
		var v string
		_ = json.Unmarshal(raw, &v)
		return v
	}
	calls, outputs := map[string]bool{}, map[string]bool{}
	var callOrder []string
	st := s.respState()
	for i, it := range items {
		switch typ := str(it["type"]); typ {
		case "function_call", "custom_tool_call":
			id := str(it["call_id"])
			if !calls[id] {
				callOrder = append(callOrder, id)
			}
			calls[id] = true
		case "function_call_output", "custom_tool_call_output":
			id := str(it["call_id"])
			if !calls[id] {
				return fmt.Sprintf("No tool call found for function call output with call_id %s.", id), fmt.Sprintf("input[%d]", i), ""
			}
			outputs[id] = true
		case "reasoning":
			enc, ok := it["encrypted_content"]
			if !ok || string(enc) == "null" {
				continue
			}
			st.mu.Lock()
			known := st.encrypted[str(enc)]
			st.mu.Unlock()
			if !known {
				return fmt.Sprintf("The encrypted content for item %s could not be verified.", str(it["id"])), "", "invalid_encrypted_content"
			}
		}
	}
	for _, id := range callOrder {
		if !outputs[id] {
			return fmt.Sprintf("No tool output found for function call %s.", id), "input", ""
		}
	}
	return "", "", ""
}

func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rec := Record{Format: string(wire.Responses), Path: r.URL.Path, Headers: map[string]string{}}
	for _, h := range recordedHeaders {
		if v := r.Header.Get(h); v != "" {
			rec.Headers[h] = v
		}
	}
	if s.opts.KeepBodies {
		rec.Body = json.RawMessage(body)
	}
	fail := func(status int, msg, param, code string) {
		rec.Status, rec.Reply = status, "error"
		s.record(&rec)
		openAIError(w, status, msg, param, code)
	}
	req, err := wire.DecodeResponses(body)
	if err != nil {
		fail(400, "could not parse the request: "+err.Error(), "", "")
		return
	}
	rec.Extra = map[string]json.RawMessage{}
	for k, v := range req.Extra {
		if !strings.HasSuffix(k, ".") {
			rec.Extra[k] = v
		}
	}
	_ = json.Unmarshal(req.Extra["model"], &rec.Model)
	_ = json.Unmarshal(req.Extra["stream"], &rec.Stream)
	_ = json.Unmarshal(req.Extra["max_output_tokens"], &rec.MaxTokens)
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, t.Name)
	}
	rec.Messages = len(req.Messages)
	rec.Tokens = s.counter.Request(req).Total
	if err := turns.Validate(req.Messages, turns.ValidateOptions{}); err != nil {
		rec.Valid = err.Error()
	}
	compact := false
	switch s.opts.ProviderContext {
	case ProviderContextNonNative:
		if v := nonNativeResponses(body); v != nil {
			s.refuse(w, &rec, v)
			return
		}
	case ProviderContextNative:
		var v *violation
		if compact, v = s.nativeCompaction(body); v != nil {
			s.refuse(w, &rec, v)
			return
		}
	}
	if msg, param, code := s.checkResponsesInput(body); msg != "" {
		if rec.Valid == "" {
			rec.Valid = msg
		}
		fail(400, msg, param, code)
		return
	}
	st := s.respState()
	var prev string
	_ = json.Unmarshal(req.Extra["previous_response_id"], &prev)
	if prev != "" {
		st.mu.Lock()
		ok := st.responses[prev]
		st.mu.Unlock()
		if !ok {
			fail(400, fmt.Sprintf("Previous response with id '%s' not found.", prev), "previous_response_id", "previous_response_not_found")
			return
		}
	}
	switch rec.Model {
	case "error-401":
		rec.Status, rec.Reply = 401, "error"
		s.record(&rec)
		writeRaw(w, 401, OpenAI401)
		return
	case "error-429":
		rec.Status, rec.Reply = 429, "error"
		s.record(&rec)
		w.Header().Set("Retry-After", "20")
		writeRaw(w, 429, OpenAI429)
		return
	}
	if s.opts.Window > 0 && rec.Tokens+rec.MaxTokens > s.opts.Window || s.opts.RejectAbove > 0 && rec.Tokens > s.opts.RejectAbove {
		rec.Status, rec.Reply, rec.Rule = 400, "error", RuleWindow
		s.record(&rec)
		writeRaw(w, 400, OpenAIResponsesOverflow)
		return
	}
	// Outputs carry no tool name in this API: name them after their calls, for decide.
	names := map[string]string{}
	for i := range req.Messages {
		m := &req.Messages[i]
		for _, tc := range m.ToolCalls {
			names[tc.ID] = tc.Name
		}
		if m.Role == chat.RoleTool && m.Name == "" {
			m.Name = names[m.ToolCallID]
		}
	}
	rep := s.decide(req)
	if n := len(req.Messages); n > 0 && strings.Contains(req.Messages[n-1].Text(), "slowly") {
		rep.slow = true
	}
	if compact {
		rep = reply{kind: "compaction"}
	}
	rec.Status, rec.Reply = 200, rep.kind
	s.record(&rec)
	var include []string
	_ = json.Unmarshal(req.Extra["include"], &include)
	reasoning := false
	for _, in := range include {
		reasoning = reasoning || in == "reasoning.encrypted_content"
	}
	resp := s.responseObject(req, rep, rec.Tokens, reasoning && !compact)
	if compact {
		resp["output"] = []any{s.issueCompaction()}
	}
	st.mu.Lock()
	st.responses[resp["id"].(string)] = true
	st.mu.Unlock()
	if rec.Stream {
		s.streamResponses(w, resp, rep.slow)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", s.id("req"))
	_ = json.NewEncoder(w).Encode(resp)
}

// responseObject builds the completed response object of an answer.
func (s *Server) responseObject(req *chat.Request, rep reply, prompt int, reasoning bool) map[string]any {
	var output []any
	if reasoning {
		enc := "gAAAAB" + s.id("enc")
		st := s.respState()
		st.mu.Lock()
		st.encrypted[enc] = true
		st.mu.Unlock()
		output = append(output, map[string]any{"type": "reasoning", "id": s.id("rs"), "summary": []any{
			map[string]any{"type": "summary_text", "text": "**Deciding** what to do next"}}, "encrypted_content": enc})
	}
	if rep.text != "" {
		output = append(output, map[string]any{"type": "message", "id": s.id("msg"), "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": rep.text, "annotations": []any{}, "logprobs": []any{}}}})
	}
	for _, c := range rep.calls {
		output = append(output, map[string]any{"type": "function_call", "id": s.id("fc"), "call_id": c.id, "name": c.name,
			"arguments": c.args, "status": "completed"})
	}
	if output == nil {
		output = []any{}
	}
	pick := func(k string, def any) any {
		var v any
		if raw, ok := req.Extra[k]; ok && json.Unmarshal(raw, &v) == nil {
			return v
		}
		return def
	}
	var instructions any
	if len(req.System) > 0 {
		instructions = req.System[0].Text()
	}
	tools := []any{}
	for _, t := range req.Tools {
		if t.Raw != nil {
			var v any
			_ = json.Unmarshal(t.Raw, &v)
			tools = append(tools, v)
			continue
		}
		tools = append(tools, map[string]any{"type": "function", "name": t.Name, "description": t.Description,
			"parameters": json.RawMessage(orEmpty(t.Parameters)), "strict": false})
	}
	return map[string]any{
		"id": s.id("resp"), "object": "response", "created_at": time.Now().Unix(), "status": "completed", "background": false,
		"error": nil, "incomplete_details": nil, "instructions": instructions, "max_output_tokens": pick("max_output_tokens", nil),
		"model": pick("model", ""), "output": output, "parallel_tool_calls": pick("parallel_tool_calls", true),
		"previous_response_id": pick("previous_response_id", nil), "reasoning": map[string]any{"effort": nil, "summary": nil},
		"store": pick("store", true), "temperature": 1.0, "text": map[string]any{"format": map[string]any{"type": "text"}, "verbosity": "medium"},
		"tool_choice": pick("tool_choice", "auto"), "tools": tools, "top_p": 1.0, "truncation": "disabled",
		"usage": map[string]any{"input_tokens": prompt, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": 12, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": prompt + 12},
		"user": nil, "metadata": pick("metadata", map[string]any{}),
	}
}

func orEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

// streamResponses writes resp as the typed event stream of the Responses API.
func (s *Server) streamResponses(w http.ResponseWriter, resp map[string]any, slow bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Request-Id", s.id("req"))
	w.WriteHeader(200)
	seq := 0
	send := func(typ string, v map[string]any) {
		v["type"] = typ
		v["sequence_number"] = seq
		seq++
		s.send(w, typ, v, slow)
	}
	start := map[string]any{}
	for k, v := range resp {
		start[k] = v
	}
	start["status"], start["output"], start["usage"] = "in_progress", []any{}, nil
	send("response.created", map[string]any{"response": start})
	send("response.in_progress", map[string]any{"response": start})
	for i, it := range resp["output"].([]any) {
		item := it.(map[string]any)
		id := item["id"]
		switch item["type"] {
		case "message":
			added := map[string]any{"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []any{}}
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			part := item["content"].([]any)[0].(map[string]any)
			text := part["text"].(string)
			send("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}})
			for _, p := range pieces(text, 3) {
				send("response.output_text.delta", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "delta": p, "logprobs": []any{}})
			}
			send("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
			send("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": part})
		case "function_call":
			added := map[string]any{}
			for k, v := range item {
				added[k] = v
			}
			added["arguments"], added["status"] = "", "in_progress"
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			args := item["arguments"].(string)
			for _, p := range pieces(args, 3) {
				send("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": p})
			}
			send("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "arguments": args})
		case "compaction":
			send("response.output_item.added", map[string]any{"output_index": i, "item": item})
		default: // reasoning
			added := map[string]any{}
			for k, v := range item {
				added[k] = v
			}
			added["summary"] = []any{}
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	send("response.completed", map[string]any{"response": resp})
}

// serveInputTokens answers POST /v1/responses/input_tokens with the exact count of the
// request's input, as {"object":"response.input_tokens","input_tokens":N}. It is recorded
// with Reply "input_tokens".
func (s *Server) serveInputTokens(w http.ResponseWriter, r *http.Request) {
	if _, rec, ok := s.countedResponses(w, r, "input_tokens", nil); ok {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "response.input_tokens", "input_tokens": rec.Tokens})
	}
}

// countedResponses reads a Responses body of a side endpoint, refuses it with refusal if that
// is not nil, else records it, counted, with reply. ok is false when it was answered (refused,
// or not a body the fake can read).
func (s *Server) countedResponses(w http.ResponseWriter, r *http.Request, reply string, refusal *violation) ([]byte, Record, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, Record{}, false
	}
	rec := Record{Format: string(wire.Responses), Path: r.URL.Path, Headers: map[string]string{}}
	if refusal != nil {
		s.refuse(w, &rec, refusal)
		return nil, rec, false
	}
	req, err := wire.DecodeResponses(body)
	if err != nil {
		rec.Status, rec.Reply = 400, "error"
		s.record(&rec)
		openAIError(w, 400, "could not parse the request: "+err.Error(), "", "")
		return nil, rec, false
	}
	_ = json.Unmarshal(req.Extra["model"], &rec.Model)
	rec.Messages = len(req.Messages)
	rec.Tokens = s.counter.Request(req).Total
	rec.Status, rec.Reply = 200, reply
	s.record(&rec)
	return body, rec, true
}
