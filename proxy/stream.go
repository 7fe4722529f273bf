package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
	"github.com/ctxmgr/ctxmgr/wire"
)

// streamFilter sees every upstream event of a streamed answer and says what the client gets.
// Without the ctxmgr_read tool it forwards every event byte for byte and only reads the usage.
// With it, it holds back ctxmgr_read calls: when an answer's only tool calls are ctxmgr_read,
// the end of that answer is held, the proxy answers the calls, and the follow-up answer's
// events continue the same client stream (same message id, block indices continued).
type streamFilter interface {
	event(ev sse.Event) []byte
	// pending returns the assistant message and the ctxmgr_read calls to answer before the
	// stream can end (none: the stream is complete).
	pending() (chat.Message, []readCall)
	// next starts a follow-up round.
	next()
	// abort ends a held stream with a note instead of a follow-up.
	abort(note string) []byte
	// usage returns the usage reported in this round (zero: none).
	usage() wire.Usage
}

func newFilter(f Format, readTool bool) streamFilter {
	switch f {
	case FormatAnthropic:
		return &anthropicFilter{readTool: readTool}
	case FormatResponses:
		return &responsesFilter{readTool: readTool}
	case FormatGemini:
		return &geminiFilter{readTool: readTool}
	}
	return &openaiFilter{readTool: readTool}
}

// relayStream relays a streamed answer event by event, flushing each.
func (x *exchange) relayStream(ctx context.Context, resp *http.Response) {
	copyResponseHeaders(x.w.Header(), resp.Header)
	x.w.WriteHeader(resp.StatusCode)
	flush(x.w)
	if !x.managed && !x.nat.rewritesAnswer() {
		defer resp.Body.Close()
		relayRaw(x.w, resp.Body)
		return
	}
	f := newFilter(x.format, x.readTool)
	body := resp.Body
	for round := 0; ; round++ {
		rd := sse.NewReader(body)
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			if an := x.nat.anthropicSide(); an != nil && an.applied != nil && ev.Name == "message_delta" {
				ev = deltaWithEdits(ev, an.applied)
			}
			out := f.event(ev)
			if an := x.nat.anthropicSide(); an != nil && an.prepend != nil && len(out) > 0 {
				out = prependStream(out, an)
			}
			if len(out) > 0 {
				if _, err := x.w.Write(out); err != nil {
					body.Close()
					return
				}
				flush(x.w)
			}
		}
		body.Close()
		x.observeUsage(f.usage())
		asst, calls := f.pending()
		if len(calls) == 0 {
			return
		}
		if round >= x.s.cfg.MaxReads {
			_, _ = x.w.Write(f.abort("\n[ctxmgr: ctxmgr_read limit reached]"))
			flush(x.w)
			return
		}
		next, err := x.followUp(ctx, asst, calls)
		var r2 *http.Response
		if err == nil {
			r2, err = x.send(ctx, next)
		}
		if err == nil && (r2.StatusCode < 200 || r2.StatusCode > 299 || !strings.HasPrefix(r2.Header.Get("Content-Type"), "text/event-stream")) {
			b, _ := io.ReadAll(io.LimitReader(r2.Body, 4096))
			r2.Body.Close()
			err = &upstreamStatus{status: r2.StatusCode, body: b}
		}
		if err != nil {
			x.log.Warn("proxy: ctxmgr_read follow-up failed", slog.String("error", redact.Text(err.Error())))
			_, _ = x.w.Write(f.abort("\n[ctxmgr: could not read back stored content]"))
			flush(x.w)
			return
		}
		f.next()
		body = r2.Body
	}
}

type upstreamStatus struct {
	status int
	body   []byte
}

func (e *upstreamStatus) Error() string {
	return "upstream answered " + http.StatusText(e.status) + ": " + string(e.body)
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func mustMarshal(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// --- OpenAI chat.completion.chunk streams ---

type callBuf struct {
	id, name string
	args     strings.Builder
}

type openaiFilter struct {
	readTool bool
	round    int
	firstID  json.RawMessage
	captured map[int]*callBuf
	order    []int
	other    bool
	text     strings.Builder
	held     bool
	prompt   wire.Usage
}

func (f *openaiFilter) usage() wire.Usage { return f.prompt }

func (f *openaiFilter) sniffUsage(data []byte) {
	if !bytes.Contains(data, []byte(`"prompt_tokens"`)) {
		return
	}
	var v struct {
		Usage json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(data, &v) == nil {
		if u := usageInput(FormatOpenAI, v.Usage); u.Input > 0 {
			f.prompt = u
		}
	}
}

func (f *openaiFilter) event(ev sse.Event) []byte {
	data := bytes.TrimSpace(ev.Data)
	if bytes.Equal(data, []byte("[DONE]")) {
		if f.held {
			return nil
		}
		return ev.Raw
	}
	f.sniffUsage(data)
	if !f.readTool || len(data) == 0 {
		return ev.Raw
	}
	var chunk map[string]json.RawMessage
	if json.Unmarshal(data, &chunk) != nil {
		return ev.Raw
	}
	modified := false
	if f.round == 0 {
		if f.firstID == nil {
			f.firstID = chunk["id"]
		}
	} else if f.firstID != nil {
		chunk["id"] = f.firstID
		modified = true
	}
	var choices []map[string]json.RawMessage
	_ = json.Unmarshal(chunk["choices"], &choices)
	if len(choices) == 0 {
		if f.held {
			return nil // the usage chunk of a held answer
		}
		return f.out(chunk, ev, modified)
	}
	drop := false
	for _, ch := range choices {
		var delta map[string]json.RawMessage
		_ = json.Unmarshal(ch["delta"], &delta)
		var content *string
		if json.Unmarshal(delta["content"], &content) == nil && content != nil {
			f.text.WriteString(*content)
		}
		if raw, ok := delta["tool_calls"]; ok {
			var list []map[string]json.RawMessage
			_ = json.Unmarshal(raw, &list)
			keep := list[:0]
			for _, tc := range list {
				var idx int
				_ = json.Unmarshal(tc["index"], &idx)
				var fn struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				}
				_ = json.Unmarshal(tc["function"], &fn)
				if f.captured == nil {
					f.captured = map[int]*callBuf{}
				}
				if cb := f.captured[idx]; cb != nil {
					cb.args.WriteString(fn.Arguments)
					modified = true
					continue
				}
				if fn.Name == readToolName {
					cb := &callBuf{name: fn.Name}
					_ = json.Unmarshal(tc["id"], &cb.id)
					cb.args.WriteString(fn.Arguments)
					f.captured[idx] = cb
					f.order = append(f.order, idx)
					modified = true
					continue
				}
				f.other = true
				below := 0
				for _, c := range f.order {
					if c < idx {
						below++
					}
				}
				if below > 0 {
					tc["index"] = mustMarshal(idx - below)
					modified = true
				}
				keep = append(keep, tc)
			}
			if len(keep) == 0 {
				delete(delta, "tool_calls")
			} else {
				delta["tool_calls"] = mustMarshal(keep)
			}
			ch["delta"] = mustMarshal(delta)
		}
		if !isNull(ch["finish_reason"]) && len(f.captured) > 0 && !f.other {
			f.held = true
			ch["finish_reason"] = json.RawMessage("null")
			modified = true
			if len(delta) == 0 {
				drop = true
			}
		}
		if modified && len(delta) == 0 && isNull(ch["finish_reason"]) && len(choices) == 1 {
			drop = true
		}
	}
	if drop {
		return nil
	}
	if modified {
		chunk["choices"] = mustMarshal(choices)
	}
	return f.out(chunk, ev, modified)
}

func (f *openaiFilter) out(chunk map[string]json.RawMessage, ev sse.Event, modified bool) []byte {
	if !modified {
		return ev.Raw
	}
	return sse.Format(ev.Name, mustMarshal(chunk))
}

func (f *openaiFilter) pending() (chat.Message, []readCall) {
	if !f.held {
		return chat.Message{}, nil
	}
	m := chat.Message{Role: chat.RoleAssistant, Wire: string(wire.OpenAI)}
	if t := f.text.String(); t != "" {
		m.Content = []chat.Part{{Type: chat.PartText, Text: t}}
	}
	var calls []readCall
	for _, idx := range f.order {
		cb := f.captured[idx]
		m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: cb.id, Name: cb.name, Arguments: cb.args.String()})
		calls = append(calls, readCall{ID: cb.id, Args: cb.args.String()})
	}
	return m, calls
}

func (f *openaiFilter) next() {
	f.round++
	f.captured, f.order, f.other, f.held, f.prompt = nil, nil, false, false, wire.Usage{}
	f.text.Reset()
}

func (f *openaiFilter) abort(note string) []byte {
	id := f.firstID
	if id == nil {
		id = mustMarshal(randomID("chatcmpl-ctxmgr-"))
	}
	chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "choices": []any{
		map[string]any{"index": 0, "delta": map[string]any{"content": note}, "finish_reason": "stop"}}}
	out := sse.Format("", mustMarshal(chunk))
	return append(out, "data: [DONE]\n\n"...)
}

// --- Anthropic message streams ---

type anthropicBlock struct {
	typ       string
	start     json.RawMessage // the content_block of content_block_start
	text      strings.Builder
	thinking  strings.Builder
	signature string
	args      strings.Builder
	id, name  string
	read      bool
}

type anthropicFilter struct {
	readTool  bool
	round     int
	offset    int // client-side block index where this round's blocks start
	forwarded int
	idxMap    map[int]int
	blocks    map[int]*anthropicBlock
	order     []int
	reads     int
	other     bool
	held      bool
	prompt    wire.Usage
}

func (f *anthropicFilter) usage() wire.Usage { return f.prompt }

type anthropicEvent struct {
	Type         string          `json:"type"`
	Index        int             `json:"index"`
	ContentBlock json.RawMessage `json:"content_block"`
	Delta        json.RawMessage `json:"delta"`
	Message      *struct {
		Usage json.RawMessage `json:"usage"`
	} `json:"message"`
}

func (f *anthropicFilter) event(ev sse.Event) []byte {
	name := ev.Name
	if !f.readTool {
		if name == "message_start" {
			var e anthropicEvent
			if json.Unmarshal(ev.Data, &e) == nil && e.Message != nil {
				f.prompt = usageInput(FormatAnthropic, e.Message.Usage)
			}
		}
		return ev.Raw
	}
	var e anthropicEvent
	if json.Unmarshal(ev.Data, &e) != nil {
		return ev.Raw
	}
	if name == "" {
		name = e.Type
	}
	if f.blocks == nil {
		f.blocks, f.idxMap = map[int]*anthropicBlock{}, map[int]int{}
	}
	switch name {
	case "message_start":
		if e.Message != nil {
			f.prompt = usageInput(FormatAnthropic, e.Message.Usage)
		}
		if f.round > 0 {
			return nil
		}
		return ev.Raw
	case "content_block_start":
		var cb struct {
			Type string `json:"type"`
			ID   string `json:"id"`
			Name string `json:"name"`
		}
		_ = json.Unmarshal(e.ContentBlock, &cb)
		b := &anthropicBlock{typ: cb.Type, start: e.ContentBlock, id: cb.ID, name: cb.Name}
		f.blocks[e.Index] = b
		f.order = append(f.order, e.Index)
		if cb.Type == "tool_use" && cb.Name == readToolName {
			b.read = true
			f.reads++
			return nil
		}
		if cb.Type == "tool_use" || cb.Type == "server_tool_use" || cb.Type == "mcp_tool_use" {
			f.other = true
		}
		out := f.offset + f.forwarded
		f.forwarded++
		f.idxMap[e.Index] = out
		return f.reindex(ev, e.Index, out)
	case "content_block_delta":
		b := f.blocks[e.Index]
		if b != nil {
			var d struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				Signature   string `json:"signature"`
				PartialJSON string `json:"partial_json"`
			}
			_ = json.Unmarshal(e.Delta, &d)
			switch d.Type {
			case "text_delta":
				b.text.WriteString(d.Text)
			case "thinking_delta":
				b.thinking.WriteString(d.Thinking)
			case "signature_delta":
				b.signature = d.Signature
			case "input_json_delta":
				b.args.WriteString(d.PartialJSON)
			}
			if b.read {
				return nil
			}
		}
		return f.reindex(ev, e.Index, f.idxMap[e.Index])
	case "content_block_stop":
		if b := f.blocks[e.Index]; b != nil && b.read {
			return nil
		}
		return f.reindex(ev, e.Index, f.idxMap[e.Index])
	case "message_delta":
		if f.reads > 0 && !f.other {
			f.held = true
			return nil
		}
		return ev.Raw
	case "message_stop":
		if f.held {
			return nil
		}
		return ev.Raw
	}
	return ev.Raw
}

func (f *anthropicFilter) reindex(ev sse.Event, from, to int) []byte {
	if from == to {
		return ev.Raw
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(ev.Data, &m) != nil {
		return ev.Raw
	}
	m["index"] = mustMarshal(to)
	return sse.Format(ev.Name, mustMarshal(m))
}

func (f *anthropicFilter) pending() (chat.Message, []readCall) {
	if !f.held {
		return chat.Message{}, nil
	}
	var content []any
	var calls []readCall
	for _, idx := range slices.Sorted(slices.Values(f.order)) {
		b := f.blocks[idx]
		switch {
		case b.read:
			var input any = map[string]any{}
			if s := strings.TrimSpace(b.args.String()); s != "" {
				_ = json.Unmarshal([]byte(s), &input)
			}
			content = append(content, map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": input})
			calls = append(calls, readCall{ID: b.id, Args: b.args.String()})
		case b.typ == "text":
			if b.text.Len() > 0 {
				content = append(content, map[string]any{"type": "text", "text": b.text.String()})
			}
		case b.typ == "thinking":
			content = append(content, map[string]any{"type": "thinking", "thinking": b.thinking.String(), "signature": b.signature})
		default:
			content = append(content, b.start)
		}
	}
	body := mustMarshal(map[string]any{"messages": []any{map[string]any{"role": "assistant", "content": content}}})
	req, err := wire.DecodeAnthropic(body)
	if err != nil || len(req.Messages) == 0 {
		return chat.Message{}, nil
	}
	return req.Messages[0], calls
}

func (f *anthropicFilter) next() {
	f.round++
	f.offset += f.forwarded
	f.forwarded, f.reads, f.other, f.held, f.prompt = 0, 0, false, false, wire.Usage{}
	f.blocks, f.idxMap, f.order = nil, nil, nil
}

func (f *anthropicFilter) abort(note string) []byte {
	i := f.offset + f.forwarded
	var b bytes.Buffer
	b.Write(sse.Format("content_block_start", mustMarshal(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})))
	b.Write(sse.Format("content_block_delta", mustMarshal(map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": note}})))
	b.Write(sse.Format("content_block_stop", mustMarshal(map[string]any{"type": "content_block_stop", "index": i})))
	b.Write(sse.Format("message_delta", mustMarshal(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 0}})))
	b.Write(sse.Format("message_stop", mustMarshal(map[string]any{"type": "message_stop"})))
	return b.Bytes()
}

// --- non-streamed answers ---

// findReads looks for ctxmgr_read calls in a non-streamed answer. It returns the assistant
// message, the calls, and whether the answer also calls other tools (mixed).
func findReads(f Format, data []byte) (chat.Message, []readCall, bool, bool) {
	if f == FormatResponses {
		return findReadsResponses(data)
	}
	if f == FormatGemini {
		return findReadsGemini(data)
	}
	if f == FormatAnthropic {
		var v struct {
			Content []json.RawMessage `json:"content"`
		}
		if json.Unmarshal(data, &v) != nil {
			return chat.Message{}, nil, false, false
		}
		var calls []readCall
		other := false
		for _, raw := range v.Content {
			var b struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			}
			_ = json.Unmarshal(raw, &b)
			if b.Type == "tool_use" && b.Name == readToolName {
				calls = append(calls, readCall{ID: b.ID, Args: string(b.Input)})
			} else if strings.HasSuffix(b.Type, "tool_use") {
				other = true
			}
		}
		if len(calls) == 0 {
			return chat.Message{}, nil, false, true
		}
		body := mustMarshal(map[string]any{"messages": []any{map[string]any{"role": "assistant", "content": v.Content}}})
		req, err := wire.DecodeAnthropic(body)
		if err != nil || len(req.Messages) == 0 {
			return chat.Message{}, nil, false, false
		}
		return req.Messages[0], calls, other, true
	}
	var v struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &v) != nil || len(v.Choices) == 0 {
		return chat.Message{}, nil, false, false
	}
	m, err := wire.DecodeOpenAIMessage(0, v.Choices[0].Message)
	if err != nil {
		return chat.Message{}, nil, false, false
	}
	var calls []readCall
	other := false
	for _, tc := range m.ToolCalls {
		if tc.Name == readToolName {
			calls = append(calls, readCall{ID: tc.ID, Args: tc.Arguments})
		} else {
			other = true
		}
	}
	return m, calls, other, true
}

// stripReads removes ctxmgr_read calls from a non-streamed answer; an answer left without
// tool calls ends its turn (with a note when it has no text either).
func stripReads(f Format, data []byte) []byte {
	note := "[ctxmgr: stored content could not be read back]"
	if f == FormatGemini {
		return stripReadsGemini(data, note)
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return data
	}
	if f == FormatResponses {
		return stripReadsResponses(top, note)
	}
	if f == FormatAnthropic {
		var content []json.RawMessage
		_ = json.Unmarshal(top["content"], &content)
		keep := content[:0]
		tools := 0
		for _, raw := range content {
			var b struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			_ = json.Unmarshal(raw, &b)
			if b.Type == "tool_use" && b.Name == readToolName {
				continue
			}
			if strings.HasSuffix(b.Type, "tool_use") {
				tools++
			}
			keep = append(keep, raw)
		}
		if tools == 0 {
			top["stop_reason"] = mustMarshal("end_turn")
		}
		if len(keep) == 0 {
			keep = append(keep, mustMarshal(map[string]any{"type": "text", "text": note}))
		}
		top["content"] = mustMarshal(keep)
		return mustMarshal(top)
	}
	var choices []map[string]json.RawMessage
	if json.Unmarshal(top["choices"], &choices) != nil || len(choices) == 0 {
		return data
	}
	var msg map[string]json.RawMessage
	_ = json.Unmarshal(choices[0]["message"], &msg)
	var tcs []map[string]json.RawMessage
	_ = json.Unmarshal(msg["tool_calls"], &tcs)
	keep := tcs[:0]
	for _, tc := range tcs {
		var fn struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(tc["function"], &fn)
		if fn.Name != readToolName {
			keep = append(keep, tc)
		}
	}
	if len(keep) == 0 {
		delete(msg, "tool_calls")
		choices[0]["finish_reason"] = mustMarshal("stop")
		var content *string
		if json.Unmarshal(msg["content"], &content) != nil || content == nil || *content == "" {
			msg["content"] = mustMarshal(note)
		}
	} else {
		msg["tool_calls"] = mustMarshal(keep)
	}
	choices[0]["message"] = mustMarshal(msg)
	top["choices"] = mustMarshal(choices)
	return mustMarshal(top)
}
