package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
)

// DecodeAnthropic decodes an Anthropic messages request body. The top-level system field
// becomes one system message in Request.System. A user message's tool_result blocks become
// RoleTool messages of their own (in order, each marked JoinPrev after the first piece), so that
// the neutral history has one message per tool result whatever the format.
func DecodeAnthropic(body []byte) (*chat.Request, error) {
	return decodeAnthropic(body, nil)
}

// decodeAnthropic decodes a body; counts, when not nil, receives after each wire message the
// number of neutral messages decoded so far (for Layout).
func decodeAnthropic(body []byte, counts *[]int) (*chat.Request, error) {
	top, err := topObject(body)
	if err != nil {
		return nil, err
	}
	r := &chat.Request{Wire: string(Anthropic)}
	if sys, ok := top["system"]; ok {
		delete(top, "system")
		if err := checkText(-1, "system", sys); err != nil {
			return nil, err
		}
		m := chat.Message{Role: chat.RoleSystem, Wire: string(Anthropic)}
		if err := decodeAnthropicContent(&m, sys, -1, "system"); err != nil {
			return nil, err
		}
		r.SystemShape = m.Shape
		r.System = []chat.Message{m}
	}
	var rawTools []json.RawMessage
	if _, err := take(top, "tools", &rawTools); err != nil {
		return nil, malformed(-1, "tools", err)
	}
	for i, t := range rawTools {
		tool, err := decodeAnthropicTool(t)
		if err != nil {
			return nil, malformed(-1, fmt.Sprintf("tools[%d]", i), err)
		}
		r.Tools = append(r.Tools, tool)
	}
	var rawMsgs []json.RawMessage
	if _, err := take(top, "messages", &rawMsgs); err != nil {
		return nil, malformed(-1, "messages", err)
	}
	names := &toolNames{}
	for i, raw := range rawMsgs {
		ms, err := decodeAnthropicMessage(i, raw, names)
		if err != nil {
			return nil, err
		}
		r.Messages = append(r.Messages, ms...)
		if counts != nil {
			*counts = append(*counts, len(r.Messages))
		}
	}
	r.Extra = extras(top)
	return r, nil
}

// toolNames names tool results by their tool_use id, as the body's messages are decoded in
// order: the ids of the tool calls decoded so far (set), then those of prior, messages decoded
// before (a continued conversation's, see DecodeNext), searched from the latest. The latest
// call with an id names its results, as a map filled in order would; searching prior only on
// demand keeps a continued body's decode from indexing the whole history (a result's call is
// almost always in the message just before it).
type toolNames struct {
	prior []chat.Message
	m     map[string]string
}

func (n *toolNames) set(id, name string) {
	if n.m == nil {
		n.m = map[string]string{}
	}
	n.m[id] = name
}

func (n *toolNames) get(id string) string {
	if name, ok := n.m[id]; ok {
		return name
	}
	for i := len(n.prior) - 1; i >= 0; i-- {
		tcs := n.prior[i].ToolCalls
		for j := len(tcs) - 1; j >= 0; j-- {
			if tcs[j].ID == id {
				return tcs[j].Name
			}
		}
	}
	return ""
}

func decodeAnthropicMessage(i int, raw json.RawMessage, names *toolNames) ([]chat.Message, error) {
	if err := checkText(i, "", raw); err != nil {
		return nil, err
	}
	o, err := splitObject(raw)
	if err != nil {
		return nil, malformed(i, "", err)
	}
	role, err := takeString(o, "role")
	if err != nil {
		return nil, malformed(i, "role", err)
	}
	if role != "user" && role != "assistant" && role != "system" {
		return nil, &chat.Error{Index: i, Field: "role", Err: chat.ErrUnknownRole, Detail: fmt.Sprintf("%q (Anthropic messages take user, assistant or system)", role)}
	}
	content, ok := o["content"]
	delete(o, "content")
	base := chat.Message{Role: chat.Role(role), Wire: string(Anthropic), Extra: extras(o)}
	if !ok {
		base.Shape = chat.ShapeAbsent
		return []chat.Message{base}, nil
	}
	if isString(content) || isNull(content) {
		if err := decodeAnthropicContent(&base, content, i, "content"); err != nil {
			return nil, err
		}
		return []chat.Message{base}, nil
	}
	var blocks []json.RawMessage
	if err := unmarshal(content, &blocks); err != nil {
		return nil, malformed(i, "content", err)
	}
	base.Shape = chat.ShapeParts
	var out []chat.Message
	cur := base
	cur.Content = nil
	open := false // cur holds something not yet flushed
	flush := func() {
		if open {
			if len(out) > 0 {
				cur.JoinPrev = true
				cur.Extra = nil // message-level extras live on the first piece
			}
			out = append(out, cur)
		}
		cur = chat.Message{Role: base.Role, Wire: base.Wire, Shape: chat.ShapeParts}
		open = false
	}
	for j, b := range blocks {
		field := fmt.Sprintf("content[%d]", j)
		bo, err := splitObject(b)
		if err != nil {
			return nil, malformed(i, field, err)
		}
		var typ string
		_ = unmarshal(bo["type"], &typ)
		switch {
		case typ == "tool_result" && role == "user":
			flush()
			tm, err := decodeToolResult(bo, names)
			if err != nil {
				return nil, malformed(i, field, err)
			}
			if len(out) > 0 {
				tm.JoinPrev = true
			} else if len(base.Extra) > 0 {
				if tm.Extra == nil {
					tm.Extra = map[string]json.RawMessage{}
				}
				for k, v := range base.Extra {
					tm.Extra[k] = v
				}
			}
			out = append(out, tm)
		case typ == "tool_use" && role == "assistant":
			tc, err := decodeToolUse(bo)
			if err != nil {
				return nil, malformed(i, field, err)
			}
			names.set(tc.ID, tc.Name)
			cur.ToolCalls = append(cur.ToolCalls, tc)
			open = true
		default:
			p, err := decodeAnthropicBlock(b, bo)
			if err != nil {
				return nil, malformed(i, field, err)
			}
			if len(cur.ToolCalls) > 0 {
				// Keep block order: a block after tool_use starts a joined message.
				flush()
			}
			cur.Content = append(cur.Content, p)
			open = true
		}
	}
	if open || len(out) == 0 {
		open = true
		flush()
	}
	return out, nil
}

func decodeAnthropicContent(m *chat.Message, raw json.RawMessage, i int, field string) error {
	switch {
	case isNull(raw):
		m.Shape = chat.ShapeNull
		return nil
	case isString(raw):
		var s string
		if err := unmarshal(raw, &s); err != nil {
			return malformed(i, field, err)
		}
		m.Shape = chat.ShapeString
		m.Content = []chat.Part{{Type: chat.PartText, Text: s}}
		return nil
	}
	var blocks []json.RawMessage
	if err := unmarshal(raw, &blocks); err != nil {
		return malformed(i, field, err)
	}
	m.Shape = chat.ShapeParts
	m.Content = make([]chat.Part, 0, len(blocks))
	for j, b := range blocks {
		bo, err := splitObject(b)
		if err != nil {
			return malformed(i, fmt.Sprintf("%s[%d]", field, j), err)
		}
		p, err := decodeAnthropicBlock(b, bo)
		if err != nil {
			return malformed(i, fmt.Sprintf("%s[%d]", field, j), err)
		}
		m.Content = append(m.Content, p)
	}
	return nil
}

func decodeToolResult(o object, names *toolNames) (chat.Message, error) {
	delete(o, "type")
	m := chat.Message{Role: chat.RoleTool, Wire: string(Anthropic)}
	var err error
	if m.ToolCallID, err = takeString(o, "tool_use_id"); err != nil {
		return m, err
	}
	m.Name = names.get(m.ToolCallID)
	if raw, ok := o["is_error"]; ok {
		var b bool
		if err := unmarshal(raw, &b); err != nil {
			return m, fmt.Errorf("is_error: %w", err)
		}
		if b {
			delete(o, "is_error")
			m.IsError = true
		}
	}
	content, ok := o["content"]
	delete(o, "content")
	if !ok {
		m.Shape = chat.ShapeAbsent
	} else if err := decodeAnthropicContent(&m, content, -1, "content"); err != nil {
		return m, err
	}
	if len(o) > 0 {
		// Block-level fields (cache_control, an explicit is_error:false) ride on the message.
		m.Extra = map[string]json.RawMessage{"block.": mustJSON(o)}
	}
	return m, nil
}

func decodeToolUse(o object) (chat.ToolCall, error) {
	delete(o, "type")
	var tc chat.ToolCall
	var err error
	if tc.ID, err = takeString(o, "id"); err != nil {
		return tc, err
	}
	if tc.Name, err = takeString(o, "name"); err != nil {
		return tc, err
	}
	if in, ok := o["input"]; ok {
		delete(o, "input")
		tc.Arguments = string(in)
	}
	tc.Extra = extras(o)
	return tc, nil
}

func decodeAnthropicBlock(raw json.RawMessage, o object) (chat.Part, error) {
	var typ string
	_ = unmarshal(o["type"], &typ)
	other := chat.Part{Type: chat.PartOther, Raw: append(json.RawMessage(nil), raw...)}
	switch typ {
	case "text":
		var t *string
		if unmarshal(o["text"], &t) != nil || t == nil {
			return other, nil
		}
		delete(o, "type")
		delete(o, "text")
		return chat.Part{Type: chat.PartText, Text: *t, Extra: extras(o)}, nil
	case "thinking":
		var t struct {
			Thinking  *string `json:"thinking"`
			Signature *string `json:"signature"`
		}
		if unmarshal(raw, &t) != nil || t.Thinking == nil {
			return other, nil
		}
		delete(o, "type")
		delete(o, "thinking")
		p := chat.Part{Type: chat.PartReasoning, Text: *t.Thinking}
		if t.Signature != nil {
			delete(o, "signature")
			p.Signature = *t.Signature
			if p.Signature == "" {
				return other, nil
			}
		}
		p.Extra = extras(o)
		return p, nil
	case "redacted_thinking":
		var t struct {
			Data *string `json:"data"`
		}
		if unmarshal(raw, &t) != nil || t.Data == nil || *t.Data == "" {
			return other, nil
		}
		delete(o, "type")
		delete(o, "data")
		return chat.Part{Type: chat.PartReasoning, Redacted: *t.Data, Extra: extras(o)}, nil
	case "image":
		src, err := splitObject(o["source"])
		if err != nil {
			return other, nil
		}
		var s struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
			URL       string `json:"url"`
		}
		if unmarshal(o["source"], &s) != nil {
			return other, nil
		}
		img := &chat.Image{}
		switch {
		case s.Type == "base64" && len(src) == 3 && s.Data != "" && s.MediaType != "":
			img.MediaType, img.Data = s.MediaType, s.Data
			img.Width, img.Height = imageSize(s.Data)
		case s.Type == "url" && len(src) == 2 && s.URL != "":
			img.URL = s.URL
		default:
			return other, nil
		}
		delete(o, "type")
		delete(o, "source")
		return chat.Part{Type: chat.PartImage, Image: img, Extra: extras(o)}, nil
	}
	return other, nil
}

func decodeAnthropicTool(raw json.RawMessage) (chat.Tool, error) {
	o, err := splitObject(raw)
	if err != nil {
		return chat.Tool{}, err
	}
	var typ string
	_ = unmarshal(o["type"], &typ)
	if (typ != "" && typ != "custom") || o["input_schema"] == nil {
		return chat.Tool{Raw: append(json.RawMessage(nil), raw...), Name: toolRawName(o)}, nil
	}
	var t chat.Tool
	if t.Name, err = takeString(o, "name"); err != nil {
		return t, err
	}
	if _, ok := o["description"]; ok {
		if t.Description, err = takeString(o, "description"); err != nil {
			return t, err
		}
		if t.Description == "" {
			o["description"] = json.RawMessage(`""`)
		}
	}
	t.Parameters = append(json.RawMessage(nil), o["input_schema"]...)
	delete(o, "input_schema")
	t.Extra = extras(o)
	return t, nil
}

// EncodeAnthropic encodes a request as an Anthropic messages body. System messages (leading and
// any later ones) go to the top-level system field; runs of tool results become tool_result
// blocks of one user message.
func EncodeAnthropic(r *chat.Request) ([]byte, error) {
	return appendAnthropic(nil, r, nil, nil)
}

// appendAnthropic is EncodeAnthropic appending the body to dst, for r with the message at
// each position that is a key of subs encoded as its value instead, the messages c holds from
// its last call taken from c (encodecache.AppendAnthropic).
func appendAnthropic(dst []byte, r *chat.Request, c *encodecache.Cache, subs map[int]chat.Message) ([]byte, error) {
	memo := c.Begin(string(Anthropic))
	if memo != nil {
		memo.SetSubs(subs)
	} else if len(subs) > 0 {
		// No cache, or another call holds it: encode a substituted copy without it.
		rr := *r
		rr.Messages = encodecache.Substituted(r.Messages, subs)
		r = &rr
	}
	defer c.End(memo)
	top, err := withExtras(r.Wire, Anthropic, r.Extra)
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	var sys []chat.Part
	for _, m := range r.System {
		sys = append(sys, m.Content...)
	}
	if len(r.System) > 0 {
		shape := r.SystemShape
		if r.Wire != string(Anthropic) {
			shape = chat.ShapeAuto
		}
		b, err := encodeAnthropicContent(r.Wire, sys, shape)
		if err != nil {
			return nil, fmt.Errorf("wire: system: %w", err)
		}
		top["system"] = b
	}
	msgs, err := anthropicMessages(r.Messages, memo)
	if err != nil {
		return nil, err
	}
	if len(r.Tools) > 0 {
		tools := make([]json.RawMessage, 0, len(r.Tools))
		for _, t := range r.Tools {
			if t.Raw != nil {
				if r.Wire == "" || r.Wire == string(Anthropic) {
					if err := checkRaw("tool "+t.Name, t.Raw); err != nil {
						return nil, fmt.Errorf("wire: %w", err)
					}
					tools = append(tools, t.Raw)
				}
				continue
			}
			o, err := withExtras(r.Wire, Anthropic, t.Extra)
			if err != nil {
				return nil, fmt.Errorf("wire: %w", err)
			}
			_ = put(o, "name", t.Name)
			if t.Description != "" {
				_ = put(o, "description", t.Description)
			}
			params := t.Parameters
			if params == nil {
				params = json.RawMessage(`{"type":"object","properties":{}}`)
			} else if err := checkRaw("parameters of tool "+t.Name, params); err != nil {
				return nil, fmt.Errorf("wire: %w", err)
			}
			o["input_schema"] = params
			b, err := marshalObject(o, "name", "description")
			if err != nil {
				return nil, err
			}
			tools = append(tools, b)
		}
		top["tools"] = joinArray(tools)
	}
	// The messages are written into the body in place: one copy of a long history, not two.
	return appendWith(dst, top, "messages", msgs, "model", "max_tokens", "system", "messages")
}

// EncodeAnthropicMessages encodes messages as an Anthropic messages array. System messages in
// the middle of a history become user text (Anthropic has no such role there), marked so.
func EncodeAnthropicMessages(msgs []chat.Message) (json.RawMessage, error) {
	return encodeAnthropicMessages(msgs, nil)
}

func encodeAnthropicMessages(msgs []chat.Message, memo *encodecache.Memo) (json.RawMessage, error) {
	out, err := anthropicMessages(msgs, memo)
	if err != nil {
		return nil, err
	}
	return joinArray(out), nil
}

// anthropicMessages encodes msgs as the elements of an Anthropic messages array.
func anthropicMessages(msgs []chat.Message, memo *encodecache.Memo) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(msgs))
	for i := 0; i < len(msgs); {
		j := memo.GroupEnd(msgs, i, anthropicGroupEndOf)
		b, err := memo.Group(msgs, i, j, func() ([]byte, error) { return encodeAnthropicGroup(memo.Effective(msgs, i, j), i) })
		if err != nil {
			return nil, err
		}
		out = append(out, b)
		i = j
	}
	return out, nil
}

// anthropicGroupEndOf returns the end of the Anthropic message that begins with message i of
// n, message k being at(k): the neutral messages after it that join it.
func anthropicGroupEndOf(n int, at func(int) *chat.Message, i int) int {
	role := anthropicRole(at(i))
	j := i + 1
	for ; j < n; j++ {
		m := at(j)
		join := m.JoinPrev && m.Wire == string(Anthropic)
		// Cross-format: consecutive tool results share one user message.
		if !join && m.Wire != string(Anthropic) && m.Role == chat.RoleTool && at(j-1).Role == chat.RoleTool {
			join = true
		}
		if !join || anthropicRole(m) != role {
			break
		}
	}
	return j
}

// encodeAnthropicGroup encodes group, the messages of one Anthropic message, the first at
// position i of the request.
func encodeAnthropicGroup(group []chat.Message, i int) ([]byte, error) {
	m := &group[0]
	o, err := withExtras(m.Wire, Anthropic, m.Extra)
	if err != nil {
		return nil, fmt.Errorf("wire: message %d: %w", i, err)
	}
	delete(o, "block.")
	single := len(group) == 1 && m.Role != chat.RoleTool && len(m.ToolCalls) == 0
	if single && m.Wire == string(Anthropic) && (m.Shape == chat.ShapeString || m.Shape == chat.ShapeNull || m.Shape == chat.ShapeAbsent) ||
		single && m.Wire != string(Anthropic) && len(m.Content) <= 1 && allText(m.Content) && m.Role != chat.RoleSystem {
		b, err := encodeAnthropicContent(m.Wire, m.Content, m.Shape)
		if err != nil {
			return nil, fmt.Errorf("wire: message %d: %w", i, err)
		}
		if b != nil {
			o["content"] = b
		}
	} else {
		blocks := []json.RawMessage{}
		for k := range group {
			bs, err := anthropicBlocks(&group[k])
			if err != nil {
				return nil, fmt.Errorf("wire: message %d: %w", i+k, err)
			}
			blocks = append(blocks, bs...)
		}
		o["content"] = joinArray(blocks)
	}
	_ = put(o, "role", anthropicRole(m))
	b, err := marshalObject(o, "role", "content")
	if err != nil {
		return nil, fmt.Errorf("wire: message %d: %w", i, err)
	}
	return b, nil
}

// anthropicRole is the wire role of a message: system messages inside the history keep the
// role "system" when they came from an Anthropic body (the mid-conversation system beta that
// Claude Code uses); from another format they become user text, since the plain API has no
// such role there.
func anthropicRole(m *chat.Message) string {
	switch {
	case m.Role == chat.RoleAssistant:
		return "assistant"
	case m.Role == chat.RoleSystem && m.Wire == string(Anthropic):
		return "system"
	}
	return "user"
}

// anthropicBlocks renders one neutral message as content blocks.
func anthropicBlocks(m *chat.Message) ([]json.RawMessage, error) {
	var out []json.RawMessage
	if m.Role == chat.RoleTool {
		o := object{}
		if m.Wire == string(Anthropic) {
			if raw, ok := m.Extra["block."]; ok {
				if err := json.Unmarshal(raw, &o); err != nil {
					return nil, err
				}
			}
		}
		_ = put(o, "type", "tool_result")
		_ = put(o, "tool_use_id", m.ToolCallID)
		if m.IsError {
			o["is_error"] = json.RawMessage("true")
		}
		shape := m.Shape
		if m.Wire != string(Anthropic) {
			shape = chat.ShapeAuto
		}
		if shape != chat.ShapeAbsent || len(m.Content) > 0 {
			c, err := encodeAnthropicContent(m.Wire, m.Content, shape)
			if err != nil {
				return nil, err
			}
			if c != nil {
				o["content"] = c
			}
		}
		b, err := marshalObject(o, "type", "tool_use_id")
		if err != nil {
			return nil, err
		}
		return append(out, b), nil
	}
	if m.Role == chat.RoleSystem && m.Wire != string(Anthropic) {
		// A system message inside the history: Anthropic has no such role there.
		b, _ := marshalObject(object{"type": json.RawMessage(`"text"`), "text": mustJSON("[system] " + m.Text())}, "type")
		return append(out, b), nil
	}
	for _, p := range m.Content {
		b, err := encodeAnthropicBlock(m.Wire, p)
		if err != nil {
			return nil, err
		}
		if b != nil {
			out = append(out, b)
		}
	}
	for _, tc := range m.ToolCalls {
		o, err := withExtras(m.Wire, Anthropic, tc.Extra)
		if err != nil {
			return nil, err
		}
		_ = put(o, "type", "tool_use")
		_ = put(o, "id", tc.ID)
		_ = put(o, "name", tc.Name)
		o["input"] = anthropicInput(tc.Arguments)
		b, err := marshalObject(o, "type", "id", "name")
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// anthropicInput turns raw argument text into a tool_use input object. Empty arguments are {};
// text that is not a JSON object is carried as {"_raw_arguments": text} rather than dropped.
func anthropicInput(args string) json.RawMessage {
	trimmed := bytes.TrimSpace([]byte(args))
	if len(trimmed) == 0 {
		return json.RawMessage("{}")
	}
	if trimmed[0] == '{' && validJSON(trimmed) {
		return json.RawMessage(args)
	}
	return mustJSON(map[string]string{"_raw_arguments": args})
}

func encodeAnthropicContent(origin string, parts []chat.Part, shape chat.Shape) (json.RawMessage, error) {
	if shape == chat.ShapeAuto {
		if len(parts) == 1 && parts[0].Type == chat.PartText && len(parts[0].Extra) == 0 {
			shape = chat.ShapeString
		} else {
			shape = chat.ShapeParts
		}
	}
	switch shape {
	case chat.ShapeAbsent:
		if len(parts) == 0 {
			return nil, nil
		}
	case chat.ShapeNull:
		if len(parts) == 0 {
			return json.RawMessage("null"), nil
		}
	case chat.ShapeString:
		if allText(parts) {
			s := ""
			for i, p := range parts {
				if i > 0 {
					s += "\n"
				}
				s += p.Text
			}
			return mustJSON(s), nil
		}
	}
	blocks := make([]json.RawMessage, 0, len(parts))
	for _, p := range parts {
		b, err := encodeAnthropicBlock(origin, p)
		if err != nil {
			return nil, err
		}
		if b != nil {
			blocks = append(blocks, b)
		}
	}
	return joinArray(blocks), nil
}

func encodeAnthropicBlock(origin string, p chat.Part) (json.RawMessage, error) {
	o, err := withExtras(origin, Anthropic, p.Extra)
	if err != nil {
		return nil, err
	}
	switch p.Type {
	case chat.PartText:
		_ = put(o, "type", "text")
		_ = put(o, "text", p.Text)
		return marshalObject(o, "type")
	case chat.PartReasoning:
		if p.Redacted != "" {
			_ = put(o, "type", "redacted_thinking")
			_ = put(o, "data", p.Redacted)
			return marshalObject(o, "type")
		}
		if p.Signature == "" && origin != string(Anthropic) && origin != "" {
			// Unsigned reasoning from another provider cannot be sent back as a thinking block.
			return nil, nil
		}
		_ = put(o, "type", "thinking")
		_ = put(o, "thinking", p.Text)
		if p.Signature != "" {
			_ = put(o, "signature", p.Signature)
		}
		return marshalObject(o, "type")
	case chat.PartImage:
		if p.Image == nil {
			return nil, fmt.Errorf("image part without image")
		}
		var src any
		if p.Image.Data != "" {
			src = struct {
				Type      string `json:"type"`
				MediaType string `json:"media_type"`
				Data      string `json:"data"`
			}{"base64", p.Image.MediaType, p.Image.Data}
		} else {
			src = struct {
				Type string `json:"type"`
				URL  string `json:"url"`
			}{"url", p.Image.URL}
		}
		_ = put(o, "type", "image")
		_ = put(o, "source", src)
		return marshalObject(o, "type")
	case chat.PartFile:
		if p.File == nil {
			return nil, fmt.Errorf("file part without file")
		}
		text := "[file " + p.File.Name + " " + p.File.ID + "]"
		return marshalObject(object{"type": json.RawMessage(`"text"`), "text": mustJSON(text)}, "type")
	case chat.PartOther:
		if origin != "" && origin != string(Anthropic) {
			return marshalObject(object{"type": json.RawMessage(`"text"`), "text": mustJSON(string(p.Raw))}, "type")
		}
		if err := checkRaw("content block", p.Raw); err != nil {
			return nil, err
		}
		return p.Raw, nil
	}
	return nil, fmt.Errorf("unknown part type %q", p.Type)
}
