package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
	"github.com/ctxmgr/ctxmgr/wire"
)

// The OpenAI Responses API (POST /v1/responses) goes through the same managed path as chat
// completions (handleChat with FormatResponses), to the OpenAI upstream:
//
//   - A request that carries its whole history (store:false, as Codex CLI sends, or store
//     absent/true without previous_response_id) is managed like any other: sessions,
//     compaction, offload, overflow recovery, the ctxmgr_read tool (a function tool with
//     "strict": false) answered by the proxy, /compact and /context answered locally as a
//     response object or a typed event stream ending in response.completed.
//   - A request chained with previous_response_id or conversation keeps its history on the
//     provider: the proxy cannot see nor shorten it, so it forwards the request unchanged and
//     counts it in ctxmgr_unmanaged_requests_total{reason="provider_state"}.
//   - POST /v1/responses/input_tokens (the token counting endpoint) is answered by the proxy
//     when the request extends a session it keeps: input_tokens is the count of the request as
//     the proxy would forward it now (the session's current context, with its summary and
//     offloads, plus the messages the client added since), so a client's own auto-compaction
//     does not fire on a history the proxy already keeps small. Anything else (no session, a
//     branch, provider state, a body the proxy cannot read) is passed through to the upstream.

// providerState returns why a request's history lives on the provider ("" when it does not).
func providerState(f Format, dec *chat.Request) string {
	if f == FormatGemini && dec != nil {
		if raw, ok := dec.Extra["cachedContent"]; ok && !isNull(raw) {
			return "provider_state: cachedContent"
		}
		return ""
	}
	if f != FormatResponses || dec == nil {
		return ""
	}
	for _, k := range []string{"previous_response_id", "conversation"} {
		if raw, ok := dec.Extra[k]; ok && !isNull(raw) {
			return "provider_state: " + k
		}
	}
	return ""
}

// clientCallTypes are the output items that ask the client to run something: an answer with
// one of them besides ctxmgr_read calls goes to the client.
var clientCallTypes = map[string]bool{"function_call": true, "custom_tool_call": true, "local_shell_call": true,
	"computer_call": true, "shell_call": true, "apply_patch_call": true, "mcp_approval_request": true}

type responsesItem struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	CallID    string `json:"call_id"`
	Arguments string `json:"arguments"`
}

// assistantOf decodes output items (as input items) into one assistant message.
func assistantOf(items []json.RawMessage) (chat.Message, bool) {
	body, err := json.Marshal(map[string]any{"input": items})
	if err != nil {
		return chat.Message{}, false
	}
	req, err := wire.DecodeResponses(body)
	if err != nil {
		return chat.Message{}, false
	}
	all := append(append([]chat.Message(nil), req.System...), req.Messages...)
	if len(all) == 0 {
		return chat.Message{}, false
	}
	m := all[0]
	m.Role, m.JoinPrev = chat.RoleAssistant, false
	for _, o := range all[1:] {
		if o.Role != chat.RoleAssistant {
			return chat.Message{}, false
		}
		m.Content = append(m.Content, o.Content...)
		m.ToolCalls = append(m.ToolCalls, o.ToolCalls...)
	}
	return m, true
}

// findReadsResponses looks for ctxmgr_read calls in a response object's output.
func findReadsResponses(data []byte) (chat.Message, []readCall, bool, bool) {
	var v struct {
		Output []json.RawMessage `json:"output"`
	}
	if json.Unmarshal(data, &v) != nil {
		return chat.Message{}, nil, false, false
	}
	var calls []readCall
	other := false
	for _, raw := range v.Output {
		var it responsesItem
		_ = json.Unmarshal(raw, &it)
		switch {
		case it.Type == "function_call" && it.Name == readToolName:
			calls = append(calls, readCall{ID: it.CallID, Args: it.Arguments})
		case clientCallTypes[it.Type]:
			other = true
		}
	}
	if len(calls) == 0 {
		return chat.Message{}, nil, false, true
	}
	m, ok := assistantOf(v.Output)
	if !ok {
		return chat.Message{}, nil, false, false
	}
	return m, calls, other, true
}

// stripReadsResponses removes ctxmgr_read calls from a response object's output; an output
// left without a message or a call gets a message with the note.
func stripReadsResponses(top map[string]json.RawMessage, note string) []byte {
	var output []json.RawMessage
	_ = json.Unmarshal(top["output"], &output)
	keep := output[:0]
	visible := false
	for _, raw := range output {
		var it responsesItem
		_ = json.Unmarshal(raw, &it)
		if it.Type == "function_call" && it.Name == readToolName {
			continue
		}
		if it.Type == "message" || clientCallTypes[it.Type] {
			visible = true
		}
		keep = append(keep, raw)
	}
	if !visible {
		keep = append(keep, noteItem(note))
	}
	top["output"] = mustMarshal(keep)
	return mustMarshal(top)
}

// noteItem is an assistant message item of the proxy's own.
func noteItem(text string) json.RawMessage {
	return mustMarshal(map[string]any{"type": "message", "id": randomID("msg_ctxmgr_"), "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}}})
}

// responseObject is a completed response object of the proxy's own.
func responseObject(id, model string, output []json.RawMessage) map[string]any {
	if output == nil {
		output = []json.RawMessage{}
	}
	return map[string]any{"id": id, "object": "response", "created_at": time.Now().Unix(), "status": "completed",
		"error": nil, "incomplete_details": nil, "instructions": nil, "max_output_tokens": nil, "model": model,
		"output": output, "parallel_tool_calls": true, "previous_response_id": nil, "reasoning": map[string]any{"effort": nil, "summary": nil},
		"store": false, "temperature": 1.0, "text": map[string]any{"format": map[string]any{"type": "text"}}, "tool_choice": "auto",
		"tools": []any{}, "top_p": 1.0, "truncation": "disabled",
		"usage": map[string]any{"input_tokens": 0, "input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens": 0,
			"output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 0},
		"user": nil, "metadata": map[string]any{}}
}

// textItemEvents writes the events of one assistant message item holding text, at output
// index idx, numbering them from *seq.
func textItemEvents(b *bytes.Buffer, seq *int, idx int, item json.RawMessage, text string) {
	var it struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(item, &it)
	send := func(typ string, v map[string]any) { sendEvent(b, seq, typ, v) }
	part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}
	send("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "message", "id": it.ID,
		"status": "in_progress", "role": "assistant", "content": []any{}}})
	send("response.content_part.added", map[string]any{"item_id": it.ID, "output_index": idx, "content_index": 0, "part": part})
	send("response.output_text.delta", map[string]any{"item_id": it.ID, "output_index": idx, "content_index": 0, "delta": text, "logprobs": []any{}})
	send("response.output_text.done", map[string]any{"item_id": it.ID, "output_index": idx, "content_index": 0, "text": text, "logprobs": []any{}})
	done := map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
	send("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": idx, "content_index": 0, "part": done})
	send("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

// writeResponsesLocal answers a request with text as a response object, or as its event
// stream.
func writeResponsesLocal(w http.ResponseWriter, model string, stream bool, text string) {
	item := noteItem(text)
	writeResponsesItems(w, model, stream, []json.RawMessage{item}, map[int]string{0: text})
}

// writeResponsesItems answers a request with output items of the proxy's own, as a response
// object or as its event stream; texts holds the text of the message items by index (their
// text events), other items are streamed whole (added, then done).
func writeResponsesItems(w http.ResponseWriter, model string, stream bool, items []json.RawMessage, texts map[int]string) {
	resp := responseObject(randomID("resp_ctxmgr_"), model, items)
	if !startAnswer(w, stream, resp) {
		return
	}
	var b bytes.Buffer
	seq := 0
	send := func(typ string, v map[string]any) { sendEvent(&b, &seq, typ, v) }
	start := responseObject(resp["id"].(string), model, nil)
	start["status"], start["usage"] = "in_progress", nil
	send("response.created", map[string]any{"response": start})
	send("response.in_progress", map[string]any{"response": start})
	for i, item := range items {
		if text, ok := texts[i]; ok {
			textItemEvents(&b, &seq, i, item, text)
			continue
		}
		send("response.output_item.added", map[string]any{"output_index": i, "item": item})
		send("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	send("response.completed", map[string]any{"response": resp})
	_, _ = w.Write(b.Bytes())
	flush(w)
}

// sendEvent writes one event of the proxy's own: v with its type, and its sequence_number
// when seq is not nil (the Responses API numbers its events).
func sendEvent(w io.Writer, seq *int, typ string, v map[string]any) {
	v["type"] = typ
	if seq != nil {
		v["sequence_number"] = *seq
		*seq++
	}
	_, _ = w.Write(sse.Format(typ, mustMarshal(v)))
}
