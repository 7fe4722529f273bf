package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
)

// DecodeOpenAI decodes an OpenAI chat-completions request body, or a bare JSON array of its
// messages. Leading system and developer messages become Request.System.
func DecodeOpenAI(body []byte) (*chat.Request, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, malformed(-1, "", fmt.Errorf("empty body"))
	}
	if err := valid(body); err != nil {
		return nil, malformed(-1, "", err)
	}
	r := &chat.Request{Wire: string(OpenAI)}
	var rawMsgs []json.RawMessage
	if body[0] == '[' {
		if err := unmarshal(body, &rawMsgs); err != nil {
			return nil, malformed(-1, "", err)
		}
	} else {
		top, err := splitObject(body)
		if err != nil {
			return nil, malformed(-1, "", err)
		}
		if _, err := take(top, "messages", &rawMsgs); err != nil {
			return nil, malformed(-1, "messages", err)
		}
		var rawTools []json.RawMessage
		if _, err := take(top, "tools", &rawTools); err != nil {
			return nil, malformed(-1, "tools", err)
		}
		for i, t := range rawTools {
			tool, err := decodeOpenAITool(t)
			if err != nil {
				return nil, malformed(-1, fmt.Sprintf("tools[%d]", i), err)
			}
			r.Tools = append(r.Tools, tool)
		}
		r.Extra = extras(top)
	}
	msgs := make([]chat.Message, 0, len(rawMsgs))
	for i, raw := range rawMsgs {
		m, err := decodeOpenAIMessage(i, raw)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	n := 0
	for n < len(msgs) && msgs[n].Role == chat.RoleSystem {
		n++
	}
	if n > 0 {
		r.System = msgs[:n:n]
	}
	r.Messages = msgs[n:]
	return r, nil
}

// DecodeOpenAIMessages decodes a bare JSON array of OpenAI messages, system messages included,
// in order.
func DecodeOpenAIMessages(body []byte) ([]chat.Message, error) {
	if err := valid(body); err != nil {
		return nil, malformed(-1, "", err)
	}
	var raws []json.RawMessage
	if err := unmarshal(body, &raws); err != nil {
		return nil, malformed(-1, "", err)
	}
	msgs := make([]chat.Message, 0, len(raws))
	for i, raw := range raws {
		m, err := decodeOpenAIMessage(i, raw)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// DecodeOpenAIMessage decodes one OpenAI message; index is used in errors.
func DecodeOpenAIMessage(index int, raw json.RawMessage) (chat.Message, error) {
	if err := valid(raw); err != nil {
		return chat.Message{}, malformed(index, "", err)
	}
	return decodeOpenAIMessage(index, raw)
}

func decodeOpenAIMessage(i int, raw json.RawMessage) (chat.Message, error) {
	if err := checkText(i, "", raw); err != nil {
		return chat.Message{}, err
	}
	o, err := splitObject(raw)
	if err != nil {
		return chat.Message{}, malformed(i, "", err)
	}
	m := chat.Message{Wire: string(OpenAI)}
	role, err := takeString(o, "role")
	if err != nil {
		return m, malformed(i, "role", err)
	}
	switch role {
	case "system", "user", "assistant", "tool":
		m.Role = chat.Role(role)
	case "developer":
		m.Role, m.WireRole = chat.RoleSystem, role
	case "function":
		// The deprecated answer to an assistant's function_call (kept verbatim in its Extra):
		// it carries no call id to pair, so it is modelled as user input, spelled back as is.
		m.Role, m.WireRole = chat.RoleUser, role
	default:
		return m, &chat.Error{Index: i, Field: "role", Err: chat.ErrUnknownRole, Detail: fmt.Sprintf("%q", role)}
	}
	if m.Name, err = takeString(o, "name"); err != nil {
		return m, malformed(i, "name", err)
	}
	if m.ToolCallID, err = takeString(o, "tool_call_id"); err != nil {
		return m, malformed(i, "tool_call_id", err)
	}
	if rc, ok := o["reasoning_content"]; ok && isString(rc) {
		var s string
		if err := unmarshal(rc, &s); err != nil {
			return m, malformed(i, "reasoning_content", err)
		}
		delete(o, "reasoning_content")
		m.Content = append(m.Content, chat.Part{Type: chat.PartReasoning, Text: s})
	}
	content, hasContent := o["content"]
	delete(o, "content")
	switch {
	case !hasContent:
		m.Shape = chat.ShapeAbsent
	case isNull(content):
		m.Shape = chat.ShapeNull
	case isString(content):
		var s string
		if err := unmarshal(content, &s); err != nil {
			return m, malformed(i, "content", err)
		}
		m.Shape = chat.ShapeString
		m.Content = append(m.Content, chat.Part{Type: chat.PartText, Text: s})
	default:
		var parts []json.RawMessage
		if err := unmarshal(content, &parts); err != nil {
			return m, malformed(i, "content", err)
		}
		m.Shape = chat.ShapeParts
		for j, p := range parts {
			part, err := decodeOpenAIPart(p)
			if err != nil {
				return m, malformed(i, fmt.Sprintf("content[%d]", j), err)
			}
			m.Content = append(m.Content, part)
		}
	}
	if tcs, ok := o["tool_calls"]; ok && !isNull(tcs) {
		delete(o, "tool_calls")
		var raws []json.RawMessage
		if err := unmarshal(tcs, &raws); err != nil {
			return m, malformed(i, "tool_calls", err)
		}
		if raws == nil {
			raws = []json.RawMessage{}
		}
		m.ToolCalls = make([]chat.ToolCall, 0, len(raws))
		for j, tr := range raws {
			tc, err := decodeOpenAIToolCall(tr)
			if err != nil {
				return m, malformed(i, fmt.Sprintf("tool_calls[%d]", j), err)
			}
			m.ToolCalls = append(m.ToolCalls, tc)
		}
	}
	m.Extra = extras(o)
	return m, nil
}

func decodeOpenAIToolCall(raw json.RawMessage) (chat.ToolCall, error) {
	o, err := splitObject(raw)
	if err != nil {
		return chat.ToolCall{}, err
	}
	var tc chat.ToolCall
	if tc.ID, err = takeString(o, "id"); err != nil {
		return tc, err
	}
	typ, err := takeString(o, "type")
	if err != nil {
		return tc, err
	}
	if typ != "" && typ != "function" {
		o["type"], _ = json.Marshal(typ)
	}
	fn, ok := o["function"]
	if ok {
		delete(o, "function")
		fo, err := splitObject(fn)
		if err != nil {
			return tc, fmt.Errorf("function: %w", err)
		}
		if tc.Name, err = takeString(fo, "name"); err != nil {
			return tc, err
		}
		if tc.Arguments, err = takeString(fo, "arguments"); err != nil {
			return tc, err
		}
		if len(fo) > 0 {
			// Unknown keys inside function: keep them under a namespaced extra key.
			b, _ := json.Marshal(fo)
			o["function."] = b
		}
	}
	if typ == "" {
		o["type."] = json.RawMessage(`"absent"`)
	}
	tc.Extra = extras(o)
	return tc, nil
}

func decodeOpenAIPart(raw json.RawMessage) (chat.Part, error) {
	o, err := splitObject(raw)
	if err != nil {
		return chat.Part{}, err
	}
	var typ string
	if err := unmarshal(o["type"], &typ); err != nil && o["type"] != nil {
		return chat.Part{}, fmt.Errorf("type: %w", err)
	}
	other := chat.Part{Type: chat.PartOther, Raw: append(json.RawMessage(nil), raw...)}
	switch typ {
	case "text":
		var t *string
		if err := unmarshal(o["text"], &t); err != nil || t == nil {
			return other, nil
		}
		delete(o, "type")
		delete(o, "text")
		return chat.Part{Type: chat.PartText, Text: *t, Extra: extras(o)}, nil
	case "image_url":
		var iu struct {
			URL    string `json:"url"`
			Detail string `json:"detail,omitempty"`
		}
		io, err := splitObject(o["image_url"])
		if err != nil || len(io) > 2 {
			return other, nil
		}
		for k := range io {
			if k != "url" && k != "detail" {
				return other, nil
			}
		}
		if unmarshal(o["image_url"], &iu) != nil {
			return other, nil
		}
		delete(o, "type")
		delete(o, "image_url")
		img := &chat.Image{Detail: iu.Detail}
		if mt, data, ok := parseDataURL(iu.URL); ok {
			img.MediaType, img.Data = mt, data
			img.Width, img.Height = imageSize(data)
		} else {
			img.URL = iu.URL
		}
		if _, ok := io["detail"]; ok && iu.Detail == "" {
			return other, nil
		}
		return chat.Part{Type: chat.PartImage, Image: img, Extra: extras(o)}, nil
	case "file":
		var f struct {
			FileID   string `json:"file_id,omitempty"`
			Filename string `json:"filename,omitempty"`
			FileData string `json:"file_data,omitempty"`
		}
		fo, err := splitObject(o["file"])
		if err != nil {
			return other, nil
		}
		for k := range fo {
			if k != "file_id" && k != "filename" && k != "file_data" {
				return other, nil
			}
		}
		if unmarshal(o["file"], &f) != nil {
			return other, nil
		}
		delete(o, "type")
		delete(o, "file")
		return chat.Part{Type: chat.PartFile, File: &chat.FileRef{ID: f.FileID, Name: f.Filename, Data: f.FileData}, Extra: extras(o)}, nil
	}
	return other, nil
}

func decodeOpenAITool(raw json.RawMessage) (chat.Tool, error) {
	o, err := splitObject(raw)
	if err != nil {
		return chat.Tool{}, err
	}
	var typ string
	_ = unmarshal(o["type"], &typ)
	fn, ok := o["function"]
	if typ != "function" || !ok || len(o) != 2 {
		return chat.Tool{Raw: append(json.RawMessage(nil), raw...), Name: toolRawName(o)}, nil
	}
	fo, err := splitObject(fn)
	if err != nil {
		return chat.Tool{}, fmt.Errorf("function: %w", err)
	}
	var t chat.Tool
	if t.Name, err = takeString(fo, "name"); err != nil {
		return t, err
	}
	if t.Description, err = takeString(fo, "description"); err != nil {
		return t, err
	}
	if p, ok := fo["parameters"]; ok {
		delete(fo, "parameters")
		t.Parameters = append(json.RawMessage(nil), p...)
	}
	t.Extra = extras(fo)
	return t, nil
}

func toolRawName(o object) string {
	var s string
	if unmarshal(o["name"], &s) == nil && s != "" {
		return s
	}
	if fo, err := splitObject(o["function"]); err == nil {
		_ = unmarshal(fo["name"], &s)
	}
	return s
}

// EncodeOpenAI encodes a request as an OpenAI chat-completions body. System comes first as
// system (or developer) messages; Anthropic-origin tool results become role "tool" messages.
func EncodeOpenAI(r *chat.Request) ([]byte, error) {
	return appendOpenAI(nil, r, nil)
}

// appendOpenAI is EncodeOpenAI appending the body to dst, the messages c holds from its last
// call (the same values, or equal ones) taken from c (encodecache.AppendOpenAI).
func appendOpenAI(dst []byte, r *chat.Request, c *encodecache.Cache) ([]byte, error) {
	memo := c.Begin(string(OpenAI))
	defer c.End(memo)
	top, err := withExtras(r.Wire, OpenAI, r.Extra)
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	msgs := make([]json.RawMessage, 0, len(r.System)+len(r.Messages))
	for i := range r.System {
		b, err := EncodeOpenAIMessage(&r.System[i])
		if err != nil {
			return nil, fmt.Errorf("wire: message %d: %w", len(msgs), err)
		}
		msgs = append(msgs, b)
	}
	for i := range r.Messages {
		b, err := memo.Group(r.Messages, i, i+1, func() ([]byte, error) { return EncodeOpenAIMessage(&r.Messages[i]) })
		if err != nil {
			return nil, fmt.Errorf("wire: message %d: %w", len(msgs), err)
		}
		msgs = append(msgs, b)
	}
	delete(top, "messages")
	if len(r.Tools) > 0 {
		tools := make([]json.RawMessage, 0, len(r.Tools))
		for _, t := range r.Tools {
			b, err := encodeOpenAITool(r.Wire, t)
			if err != nil {
				return nil, err
			}
			if b != nil {
				tools = append(tools, b)
			}
		}
		top["tools"] = joinArray(tools)
	}
	return appendWith(dst, top, "messages", msgs, "model", "messages")
}

// EncodeOpenAIMessages encodes messages as a bare OpenAI message array.
func EncodeOpenAIMessages(msgs []chat.Message) ([]byte, error) {
	out := make([]json.RawMessage, 0, len(msgs))
	for i := range msgs {
		b, err := EncodeOpenAIMessage(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("wire: message %d: %w", i, err)
		}
		out = append(out, b)
	}
	return joinArray(out), nil
}

func encodeOpenAITool(origin string, t chat.Tool) ([]byte, error) {
	if t.Raw != nil {
		if origin != "" && origin != string(OpenAI) {
			return nil, nil // a server tool of another provider means nothing here
		}
		if err := checkRaw("tool "+t.Name, t.Raw); err != nil {
			return nil, err
		}
		return t.Raw, nil
	}
	fo, err := withExtras(origin, OpenAI, t.Extra)
	if err != nil {
		return nil, err
	}
	_ = put(fo, "name", t.Name)
	if t.Description != "" {
		_ = put(fo, "description", t.Description)
	}
	if t.Parameters != nil {
		if err := checkRaw("parameters of tool "+t.Name, t.Parameters); err != nil {
			return nil, err
		}
		fo["parameters"] = t.Parameters
	}
	fb, err := marshalObject(fo, "name", "description", "parameters")
	if err != nil {
		return nil, err
	}
	return marshalObject(object{"type": json.RawMessage(`"function"`), "function": fb}, "type")
}

// EncodeOpenAIMessage encodes one message in OpenAI form.
func EncodeOpenAIMessage(m *chat.Message) ([]byte, error) {
	o, err := withExtras(m.Wire, OpenAI, m.Extra)
	if err != nil {
		return nil, err
	}
	role := string(m.Role)
	if m.WireRole != "" && (m.Wire == "" || m.Wire == string(OpenAI)) {
		role = m.WireRole
	}
	_ = put(o, "role", role)
	if m.Name != "" && (m.Role != chat.RoleTool || m.Wire != string(Anthropic)) {
		_ = put(o, "name", m.Name)
	}
	if m.ToolCallID != "" {
		_ = put(o, "tool_call_id", m.ToolCallID)
	}
	var reasoning []string
	parts := make([]chat.Part, 0, len(m.Content))
	for _, p := range m.Content {
		if p.Type == chat.PartReasoning {
			if p.Text != "" {
				reasoning = append(reasoning, p.Text)
			}
			continue
		}
		parts = append(parts, p)
	}
	if len(reasoning) > 0 {
		_ = put(o, "reasoning_content", strings.Join(reasoning, "\n"))
	}
	if err := encodeOpenAIContent(o, m, parts); err != nil {
		return nil, err
	}
	if m.ToolCalls != nil {
		tcs := make([]json.RawMessage, 0, len(m.ToolCalls))
		for _, tc := range m.ToolCalls {
			b, err := encodeOpenAIToolCall(m.Wire, tc)
			if err != nil {
				return nil, err
			}
			tcs = append(tcs, b)
		}
		o["tool_calls"] = joinArray(tcs)
	}
	return marshalObject(o, "role", "content")
}

func encodeOpenAIContent(o object, m *chat.Message, parts []chat.Part) error {
	shape := m.Shape
	if m.Wire != "" && m.Wire != string(OpenAI) {
		shape = chat.ShapeAuto
	}
	if shape == chat.ShapeAuto {
		switch {
		case len(parts) == 0 && m.Role == chat.RoleAssistant && len(m.ToolCalls) > 0:
			shape = chat.ShapeNull
		case len(parts) == 0:
			shape = chat.ShapeString
		case allText(parts) && (m.Wire != "" || len(parts) == 1):
			// Cross-format: OpenAI tool and assistant messages take plain strings best.
			shape = chat.ShapeString
		default:
			shape = chat.ShapeParts
		}
	}
	switch shape {
	case chat.ShapeAbsent:
		if len(parts) == 0 {
			return nil
		}
		shape = chat.ShapeParts
	case chat.ShapeNull:
		if len(parts) == 0 {
			o["content"] = json.RawMessage("null")
			return nil
		}
		shape = chat.ShapeParts
	case chat.ShapeString:
		if allText(parts) && len(parts) <= 1 || allText(parts) && m.Wire != string(OpenAI) {
			texts := make([]string, len(parts))
			for i, p := range parts {
				texts[i] = p.Text
			}
			return put(o, "content", strings.Join(texts, "\n"))
		}
		shape = chat.ShapeParts
	}
	out := make([]json.RawMessage, 0, len(parts))
	for _, p := range parts {
		b, err := encodeOpenAIPart(m.Wire, p)
		if err != nil {
			return err
		}
		if b != nil {
			out = append(out, b)
		}
	}
	o["content"] = joinArray(out)
	return nil
}

func allText(parts []chat.Part) bool {
	for _, p := range parts {
		if p.Type != chat.PartText {
			return false
		}
	}
	return true
}

func encodeOpenAIPart(origin string, p chat.Part) ([]byte, error) {
	o, err := withExtras(origin, OpenAI, p.Extra)
	if err != nil {
		return nil, err
	}
	switch p.Type {
	case chat.PartText:
		_ = put(o, "type", "text")
		_ = put(o, "text", p.Text)
		return marshalObject(o, "type")
	case chat.PartImage:
		if p.Image == nil {
			return nil, fmt.Errorf("image part without image")
		}
		iu := struct {
			URL    string `json:"url"`
			Detail string `json:"detail,omitempty"`
		}{URL: p.Image.URL, Detail: p.Image.Detail}
		if p.Image.Data != "" {
			iu.URL = "data:" + p.Image.MediaType + ";base64," + p.Image.Data
		}
		_ = put(o, "type", "image_url")
		_ = put(o, "image_url", iu)
		return marshalObject(o, "type")
	case chat.PartFile:
		if p.File == nil {
			return nil, fmt.Errorf("file part without file")
		}
		f := struct {
			FileID   string `json:"file_id,omitempty"`
			Filename string `json:"filename,omitempty"`
			FileData string `json:"file_data,omitempty"`
		}{p.File.ID, p.File.Name, p.File.Data}
		_ = put(o, "type", "file")
		_ = put(o, "file", f)
		return marshalObject(o, "type")
	case chat.PartOther:
		if origin != "" && origin != string(OpenAI) {
			// A block of another format: carry it as text so nothing silently disappears.
			return marshalObject(object{"type": json.RawMessage(`"text"`), "text": mustJSON(string(p.Raw))}, "type")
		}
		if err := checkRaw("content part", p.Raw); err != nil {
			return nil, err
		}
		return p.Raw, nil
	}
	return nil, fmt.Errorf("unknown part type %q", p.Type)
}

func encodeOpenAIToolCall(origin string, tc chat.ToolCall) ([]byte, error) {
	o, err := withExtras(origin, OpenAI, tc.Extra)
	if err != nil {
		return nil, err
	}
	fo := object{}
	if raw, ok := o["function."]; ok {
		delete(o, "function.")
		if err := json.Unmarshal(raw, &fo); err != nil {
			return nil, err
		}
	}
	_ = put(fo, "name", tc.Name)
	_ = put(fo, "arguments", tc.Arguments)
	fb, err := marshalObject(fo, "name", "arguments")
	if err != nil {
		return nil, err
	}
	o["function"] = fb
	_ = put(o, "id", tc.ID)
	if _, ok := o["type"]; !ok {
		o["type"] = json.RawMessage(`"function"`)
	}
	if _, ok := o["type."]; ok {
		delete(o, "type.")
		delete(o, "type")
	}
	return marshalObject(o, "id", "type")
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}
