package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
)

// Responses is the OpenAI Responses API format (POST /v1/responses).
const Responses Format = "responses"

// How a Responses body maps onto the neutral model (DecodeResponses, EncodeResponses):
//
//   - instructions (a string) is the first message of Request.System; leading system and
//     developer items of input follow it there, in order.
//   - input as a string is one user message; input as items is the history. An item without
//     "type" but with "role" is a message (the SDKs' "easy" message), and is written back
//     without "type".
//   - message items are messages of their role (developer is RoleSystem, WireRole
//     "developer"). Their content parts input_text/output_text are text parts (the type is
//     kept when it is not the usual one for the role: output_text for the assistant,
//     input_text otherwise), input_image an image, input_file a file; any other part
//     (refusal, ...) is kept verbatim as a PartOther.
//   - One assistant turn is one assistant message: a run of consecutive reasoning items, at
//     most one assistant message item, function_call and custom_tool_call items, and other
//     items the model produced, ends at the first item of another kind (a tool output, a user
//     message) or at a second assistant message item (which starts a new assistant message
//     with JoinPrev set). Within a turn, items are written back in their order, except that
//     tool calls come after every other item of the turn: the one documented normalization,
//     as for Anthropic tool_use blocks.
//   - function_call (call_id, name, arguments) and custom_tool_call (call_id, name, input, as
//     free text) are the assistant message's ToolCalls, ToolCall.ID being the call_id; the
//     item's own id and status are kept in ToolCall.Extra.
//   - function_call_output and custom_tool_call_output are RoleTool messages with
//     ToolCallID = call_id; an output given as a string or as content parts keeps its shape.
//   - reasoning items are PartReasoning parts of the assistant message whose Raw holds the
//     whole item byte for byte (encrypted_content included) and whose Text is the text of its
//     summary (what the model's window accounting sees).
//   - Any other item (local_shell_call and its output, web_search_call, item_reference, types
//     that do not exist yet) is kept verbatim as a PartOther of a message, never refused: of
//     the assistant turn when the model produced it, else (a type ending in "_output", or an
//     item with a role other than assistant) of a user message of its own.
//   - tools of type function (name, description, parameters at top level) are chat.Tools;
//     every other tool type (web_search, custom, local_shell, mcp, ...) is kept in Tool.Raw.
//     A function tool that did not come from a Responses body (the proxy's own tool) is
//     written with "strict": false, since the API otherwise holds its schema to strict mode.
//
// Markers that let a round trip reproduce the spelling live in Extra maps under keys that end
// in "." (the API has none); the encoder reads and removes them. Cross-format encoding (a
// Responses body from another format's request) drops reasoning that is not a Responses item
// and writes verbatim blocks of other formats as text, as the other encoders do.

// DecodeResponses decodes an OpenAI Responses request body. Errors are *chat.Error values;
// Index is the position of the item in input.
func DecodeResponses(body []byte) (*chat.Request, error) {
	return decodeResponses(body, nil)
}

// itemsLayout receives, after each input item, how many messages the items so far decoded
// to and whether no assistant turn is open there (a later item cannot join a message
// before it): where DecodeNext may resume decoding.
type itemsLayout struct {
	counts []int
	closed []bool
}

func decodeResponses(body []byte, lay *itemsLayout) (*chat.Request, error) {
	top, err := topObject(body)
	if err != nil {
		return nil, err
	}
	r := &chat.Request{Wire: string(Responses)}
	if ins, ok := top["instructions"]; ok && isString(ins) {
		if err := checkText(-1, "instructions", ins); err != nil {
			return nil, err
		}
		var s string
		if err := unmarshal(ins, &s); err != nil {
			return nil, malformed(-1, "instructions", err)
		}
		delete(top, "instructions")
		r.System = []chat.Message{{Role: chat.RoleSystem, Wire: string(Responses), Shape: chat.ShapeString,
			Content: []chat.Part{{Type: chat.PartText, Text: s}}, Extra: map[string]json.RawMessage{markInstructions: json.RawMessage("true")}}}
	}
	var rawTools []json.RawMessage
	if _, err := take(top, "tools", &rawTools); err != nil {
		return nil, malformed(-1, "tools", err)
	}
	for i, t := range rawTools {
		if err := checkText(-1, fmt.Sprintf("tools[%d]", i), t); err != nil {
			return nil, err
		}
		tool, err := decodeResponsesTool(t)
		if err != nil {
			return nil, malformed(-1, fmt.Sprintf("tools[%d]", i), err)
		}
		r.Tools = append(r.Tools, tool)
	}
	in, hasInput := top["input"]
	delete(top, "input")
	var msgs []chat.Message
	switch {
	case !hasInput:
		top[markInput] = json.RawMessage(`"absent"`)
	case isString(in):
		if err := checkText(0, "", in); err != nil {
			return nil, err
		}
		var s string
		if err := unmarshal(in, &s); err != nil {
			return nil, malformed(0, "", err)
		}
		top[markInput] = json.RawMessage(`"string"`)
		msgs = []chat.Message{{Role: chat.RoleUser, Wire: string(Responses), Shape: chat.ShapeString, Content: []chat.Part{{Type: chat.PartText, Text: s}}}}
	default:
		var items []json.RawMessage
		if err := unmarshal(in, &items); err != nil {
			return nil, malformed(-1, "input", err)
		}
		if msgs, err = decodeResponsesItems(items, 0, lay); err != nil {
			return nil, err
		}
	}
	n := 0
	for n < len(msgs) && msgs[n].Role == chat.RoleSystem {
		n++
	}
	r.System = append(r.System, msgs[:n]...)
	r.Messages = msgs[n:]
	if r.Messages == nil {
		r.Messages = []chat.Message{}
	}
	r.Extra = extras(top)
	return r, nil
}

// Markers (see the package comment of this file).
const (
	markInstructions = "instructions." // on the System message that was the instructions field
	markInput        = "input."        // in Request.Extra: "string" or "absent"
	markType         = "type."         // "absent": an item written without its type
	markItem         = "item."         // on a PartOther that is a whole item
	markStrict       = "strict."       // on a function tool that had no strict field
)

// stripMarks removes the marker keys of o and returns them (nil when there are none).
func stripMarks(o object) object {
	var marks object
	for k, v := range o {
		if strings.HasSuffix(k, ".") {
			if marks == nil {
				marks = object{}
			}
			marks[k] = v
			delete(o, k)
		}
	}
	return marks
}

func itemType(o object) (string, bool, error) {
	raw, ok := o["type"]
	if !ok {
		return "", false, nil
	}
	var s string
	if err := unmarshal(raw, &s); err != nil || !isString(raw) {
		return "", true, fmt.Errorf("type must be a string")
	}
	return s, true, nil
}

// decodeResponsesItems decodes the input items into messages, grouping assistant turns. base
// is the index of items[0] in the whole input (for error positions); lay, when not nil,
// receives the layout after each item.
func decodeResponsesItems(items []json.RawMessage, base int, lay *itemsLayout) ([]chat.Message, error) {
	msgs := make([]chat.Message, 0, len(items))
	run := -1 // index in msgs of the open assistant turn, -1: none
	if lay != nil && len(items) > 0 {
		defer func() {
			// Fill in what the loop's continues skipped: each item's layout is recorded at
			// the start of the next one (and for the last one, here).
			lay.counts = append(lay.counts, len(msgs))
			lay.closed = append(lay.closed, run < 0)
		}()
	}
	open := func(joinPrev bool) *chat.Message {
		msgs = append(msgs, chat.Message{Role: chat.RoleAssistant, Wire: string(Responses), Shape: chat.ShapeAbsent, JoinPrev: joinPrev})
		run = len(msgs) - 1
		return &msgs[run]
	}
	turn := func() *chat.Message {
		if run >= 0 {
			return &msgs[run]
		}
		return open(false)
	}
	for j, raw := range items {
		i := base + j
		if lay != nil && j > 0 {
			lay.counts = append(lay.counts, len(msgs))
			lay.closed = append(lay.closed, run < 0)
		}
		if err := checkText(i, "", raw); err != nil {
			return nil, err
		}
		o, err := splitObject(raw)
		if err != nil {
			return nil, malformed(i, "", err)
		}
		typ, hasType, err := itemType(o)
		if err != nil {
			return nil, malformed(i, "type", err)
		}
		_, hasRole := o["role"]
		switch {
		case typ == "message" || !hasType && hasRole:
			m, err := decodeResponsesMessage(i, o, hasType)
			if err != nil {
				return nil, err
			}
			if m.Role != chat.RoleAssistant {
				run = -1
				msgs = append(msgs, m)
				continue
			}
			if run >= 0 && msgs[run].Shape == chat.ShapeAbsent {
				// The turn's message item: its parts follow the reasoning before it.
				t := &msgs[run]
				t.Content = append(t.Content, m.Content...)
				t.Shape, t.Extra, t.WireRole = m.Shape, m.Extra, m.WireRole
				continue
			}
			m.JoinPrev = run >= 0
			msgs = append(msgs, m)
			run = len(msgs) - 1
		case typ == "function_call" || typ == "custom_tool_call":
			tc, err := decodeResponsesCall(o, typ)
			if err != nil {
				return nil, malformed(i, "", err)
			}
			t := turn()
			t.ToolCalls = append(t.ToolCalls, tc)
		case typ == "function_call_output" || typ == "custom_tool_call_output":
			m, err := decodeResponsesOutput(i, o, typ)
			if err != nil {
				return nil, err
			}
			run = -1
			msgs = append(msgs, m)
		case typ == "reasoning":
			t := turn()
			t.Content = append(t.Content, chat.Part{Type: chat.PartReasoning, Text: reasoningSummary(o), Raw: bytes.Clone(raw)})
		case !hasType:
			return nil, malformed(i, "type", fmt.Errorf("an item needs a type or a role"))
		default:
			p := chat.Part{Type: chat.PartOther, Raw: bytes.Clone(raw), Extra: map[string]json.RawMessage{markItem: json.RawMessage("true")}}
			var role string
			_ = unmarshal(o["role"], &role)
			if strings.HasSuffix(typ, "_output") || role != "" && role != "assistant" {
				run = -1
				msgs = append(msgs, chat.Message{Role: chat.RoleUser, Wire: string(Responses), Shape: chat.ShapeAbsent, Content: []chat.Part{p}})
				continue
			}
			t := turn()
			t.Content = append(t.Content, p)
		}
	}
	return msgs, nil
}

// reasoningSummary returns the text of a reasoning item's summary (and of its content, when
// the item carries the reasoning text itself).
func reasoningSummary(o object) string {
	var b strings.Builder
	for _, key := range []string{"summary", "content"} {
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(o[key], &parts) != nil {
			continue
		}
		for _, p := range parts {
			if p.Text == "" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func decodeResponsesMessage(i int, o object, hasType bool) (chat.Message, error) {
	m := chat.Message{Wire: string(Responses)}
	delete(o, "type")
	role, err := takeString(o, "role")
	if err != nil {
		return m, malformed(i, "role", err)
	}
	switch role {
	case "user", "assistant", "system":
		m.Role = chat.Role(role)
	case "developer":
		m.Role, m.WireRole = chat.RoleSystem, role
	default:
		return m, &chat.Error{Index: i, Field: "role", Err: chat.ErrUnknownRole, Detail: fmt.Sprintf("%q", role)}
	}
	content, ok := o["content"]
	if !ok {
		return m, malformed(i, "content", fmt.Errorf("a message item needs content"))
	}
	delete(o, "content")
	if err := decodeResponsesContent(&m, content, i, "content"); err != nil {
		return m, err
	}
	if !hasType {
		o[markType] = json.RawMessage(`"absent"`)
	}
	m.Extra = extras(o)
	return m, nil
}

// decodeResponsesContent decodes a message's content or an output's output field.
func decodeResponsesContent(m *chat.Message, raw json.RawMessage, i int, field string) error {
	switch {
	case isNull(raw):
		m.Shape = chat.ShapeNull
	case isString(raw):
		var s string
		if err := unmarshal(raw, &s); err != nil {
			return malformed(i, field, err)
		}
		m.Shape = chat.ShapeString
		m.Content = append(m.Content, chat.Part{Type: chat.PartText, Text: s})
	default:
		var parts []json.RawMessage
		if err := unmarshal(raw, &parts); err != nil {
			return malformed(i, field, err)
		}
		m.Shape = chat.ShapeParts
		for j, p := range parts {
			part, err := decodeResponsesPart(p, textType(m.Role))
			if err != nil {
				return malformed(i, fmt.Sprintf("%s[%d]", field, j), err)
			}
			m.Content = append(m.Content, part)
		}
	}
	return nil
}

// textType is the usual type of a text part in a message of role r.
func textType(r chat.Role) string {
	if r == chat.RoleAssistant {
		return "output_text"
	}
	return "input_text"
}

// stringFields reports whether every key of o present in keys holds a string.
func stringFields(o object, keys ...string) bool {
	for _, k := range keys {
		if v, ok := o[k]; ok && !isString(v) {
			return false
		}
	}
	return true
}

func decodeResponsesPart(raw json.RawMessage, defText string) (chat.Part, error) {
	o, err := splitObject(raw)
	if err != nil {
		return chat.Part{}, err
	}
	var typ string
	_ = unmarshal(o["type"], &typ)
	other := chat.Part{Type: chat.PartOther, Raw: bytes.Clone(raw)}
	switch typ {
	case "input_text", "output_text":
		if !isString(o["text"]) {
			return other, nil
		}
		var s string
		if err := unmarshal(o["text"], &s); err != nil {
			return other, nil
		}
		delete(o, "text")
		if typ == defText {
			delete(o, "type")
		}
		return chat.Part{Type: chat.PartText, Text: s, Extra: extras(o)}, nil
	case "input_image":
		_, hasFile := o["file_id"]
		d, hasDetail := o["detail"]
		if hasFile || !isString(o["image_url"]) || hasDetail && !isString(d) {
			return other, nil
		}
		var u, detail string
		if unmarshal(o["image_url"], &u) != nil || hasDetail && (unmarshal(d, &detail) != nil || detail == "") {
			return other, nil
		}
		delete(o, "type")
		delete(o, "image_url")
		delete(o, "detail")
		img := &chat.Image{Detail: detail}
		if mt, data, ok := parseDataURL(u); ok {
			img.MediaType, img.Data = mt, data
			img.Width, img.Height = imageSize(data)
		} else {
			img.URL = u
		}
		return chat.Part{Type: chat.PartImage, Image: img, Extra: extras(o)}, nil
	case "input_file":
		keys := []string{"file_id", "filename", "file_data", "file_url"}
		if !stringFields(o, keys...) {
			return other, nil
		}
		f := &chat.FileRef{}
		for _, k := range keys {
			var s string
			if v, ok := o[k]; ok {
				if unmarshal(v, &s) != nil || s == "" {
					return other, nil // an empty field would not come back
				}
			}
			switch k {
			case "file_id":
				f.ID = s
			case "filename":
				f.Name = s
			case "file_data":
				f.Data = s
			case "file_url":
				f.URL = s
			}
			delete(o, k)
		}
		delete(o, "type")
		return chat.Part{Type: chat.PartFile, File: f, Extra: extras(o)}, nil
	}
	return other, nil
}

func decodeResponsesCall(o object, typ string) (chat.ToolCall, error) {
	var tc chat.ToolCall
	delete(o, "type")
	var err error
	if tc.ID, err = requiredString(o, "call_id"); err != nil {
		return tc, err
	}
	if tc.Name, err = requiredString(o, "name"); err != nil {
		return tc, err
	}
	args := "arguments"
	if typ == "custom_tool_call" {
		args = "input"
		o["type"] = json.RawMessage(`"custom_tool_call"`)
	}
	if tc.Arguments, err = requiredString(o, args); err != nil {
		return tc, err
	}
	tc.Extra = extras(o)
	return tc, nil
}

// requiredString takes a string field that must be present.
func requiredString(o object, key string) (string, error) {
	raw, ok := o[key]
	if !ok || !isString(raw) {
		return "", fmt.Errorf("%s: a string is required", key)
	}
	return takeString(o, key)
}

func decodeResponsesOutput(i int, o object, typ string) (chat.Message, error) {
	m := chat.Message{Role: chat.RoleTool, Wire: string(Responses)}
	delete(o, "type")
	var err error
	if m.ToolCallID, err = requiredString(o, "call_id"); err != nil {
		return m, malformed(i, "call_id", err)
	}
	out, ok := o["output"]
	if !ok || isNull(out) {
		return m, malformed(i, "output", fmt.Errorf("a string or an array of content parts is required"))
	}
	delete(o, "output")
	if err := decodeResponsesContent(&m, out, i, "output"); err != nil {
		return m, err
	}
	if typ != "function_call_output" {
		o["type"], _ = json.Marshal(typ)
	}
	m.Extra = extras(o)
	return m, nil
}

func decodeResponsesTool(raw json.RawMessage) (chat.Tool, error) {
	o, err := splitObject(raw)
	if err != nil {
		return chat.Tool{}, err
	}
	var typ string
	_ = unmarshal(o["type"], &typ)
	name, okName := o["name"]
	desc, hasDesc := o["description"]
	if typ != "function" || !okName || !isString(name) || hasDesc && !isString(desc) {
		return chat.Tool{Raw: bytes.Clone(raw), Name: responsesToolName(o)}, nil
	}
	var t chat.Tool
	delete(o, "type")
	if t.Name, err = takeString(o, "name"); err != nil {
		return t, err
	}
	if hasDesc {
		if t.Description, err = takeString(o, "description"); err != nil {
			return t, err
		}
		if t.Description == "" {
			o["description"] = json.RawMessage(`""`) // written back as it was
		}
	}
	if p, ok := o["parameters"]; ok {
		delete(o, "parameters")
		t.Parameters = bytes.Clone(p)
	}
	if _, ok := o["strict"]; !ok {
		o[markStrict] = json.RawMessage(`"absent"`)
	}
	t.Extra = extras(o)
	return t, nil
}

func responsesToolName(o object) string {
	var s string
	if unmarshal(o["name"], &s) == nil && s != "" {
		return s
	}
	_ = unmarshal(o["type"], &s)
	return s
}

// EncodeResponses encodes a request as an OpenAI Responses body (see DecodeResponses for the
// mapping).
func EncodeResponses(r *chat.Request) ([]byte, error) {
	return appendResponses(nil, r, nil)
}

// appendResponses is EncodeResponses appending the body to dst, the input items of the
// messages c holds from its last call taken from c (encodecache.AppendResponses).
func appendResponses(dst []byte, r *chat.Request, c *encodecache.Cache) ([]byte, error) {
	memo := c.Begin(string(Responses))
	defer c.End(memo)
	top, err := withExtras(r.Wire, Responses, r.Extra)
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	marks := stripMarks(top)
	same := r.Wire == "" || r.Wire == string(Responses)
	sys := r.System
	if len(sys) > 0 && isInstructions(&sys[0]) {
		_ = put(top, "instructions", textOf(sys[0].Content))
		sys = sys[1:]
	}
	var mode string
	_ = json.Unmarshal(marks[markInput], &mode)
	var inputItems []json.RawMessage // written into the body in place (one copy, not two)
	switch {
	case mode == "string" && same && len(sys) == 0 && len(r.Messages) == 1 && isPlainUserText(&r.Messages[0]):
		_ = put(top, "input", r.Messages[0].Content[0].Text)
	case mode == "absent" && same && len(sys) == 0 && len(r.Messages) == 0:
	default:
		items := make([]json.RawMessage, 0, len(sys)+len(r.Messages))
		for i := range sys {
			var err error
			if items, err = appendResponsesItems(items, &sys[i]); err != nil {
				return nil, fmt.Errorf("wire: message %d: %w", i, err)
			}
		}
		for i := range r.Messages {
			// A message's items, joined: one segment of the input array (empty when the
			// message has no item).
			seg, err := memo.Group(r.Messages, i, i+1, func() ([]byte, error) {
				its, err := appendResponsesItems(nil, &r.Messages[i])
				if err != nil {
					return nil, err
				}
				j := joinArray(its)
				return j[1 : len(j)-1], nil
			})
			if err != nil {
				return nil, fmt.Errorf("wire: message %d: %w", i, err)
			}
			if len(seg) > 0 {
				items = append(items, seg)
			}
		}
		inputItems = items
	}
	if len(r.Tools) > 0 {
		tools := make([]json.RawMessage, 0, len(r.Tools))
		for _, t := range r.Tools {
			b, err := encodeResponsesTool(r.Wire, t)
			if err != nil {
				return nil, fmt.Errorf("wire: %w", err)
			}
			if b != nil {
				tools = append(tools, b)
			}
		}
		top["tools"] = joinArray(tools)
	}
	if inputItems != nil {
		return appendWith(dst, top, "input", inputItems, "model", "instructions", "input")
	}
	return appendWith(dst, top, "", nil, "model", "instructions", "input")
}

// isInstructions reports whether a leading system message is written as the instructions
// field: it was one, or it is a plain-text system prompt of another format.
func isInstructions(m *chat.Message) bool {
	if m.Wire == string(Responses) {
		_, ok := m.Extra[markInstructions]
		return ok && allText(m.Content)
	}
	return m.Role == chat.RoleSystem && len(m.ToolCalls) == 0 && allText(m.Content)
}

func isPlainUserText(m *chat.Message) bool {
	return m.Role == chat.RoleUser && (m.Wire == "" || m.Wire == string(Responses)) && len(m.Content) == 1 &&
		m.Content[0].Type == chat.PartText && len(m.Content[0].Extra) == 0 && len(m.Extra) == 0 && len(m.ToolCalls) == 0
}

func textOf(parts []chat.Part) string {
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == chat.PartText {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

func encodeResponsesTool(origin string, t chat.Tool) ([]byte, error) {
	if t.Raw != nil {
		if origin != "" && origin != string(Responses) {
			return nil, nil // a tool of another API means nothing here
		}
		if err := checkRaw("tool "+t.Name, t.Raw); err != nil {
			return nil, err
		}
		return t.Raw, nil
	}
	o, err := withExtras(origin, Responses, t.Extra)
	if err != nil {
		return nil, err
	}
	marks := stripMarks(o)
	o["type"] = json.RawMessage(`"function"`)
	_ = put(o, "name", t.Name)
	if t.Description != "" {
		_ = put(o, "description", t.Description)
	}
	if t.Parameters != nil {
		if err := checkRaw("parameters of tool "+t.Name, t.Parameters); err != nil {
			return nil, err
		}
		o["parameters"] = t.Parameters
	}
	if _, ok := o["strict"]; !ok && marks[markStrict] == nil {
		o["strict"] = json.RawMessage("false")
	}
	return marshalObject(o, "type", "name", "description", "parameters")
}

// isItemPart reports whether a part of a Responses message is a whole item of its own.
func isItemPart(origin string, p *chat.Part) bool {
	if origin != "" && origin != string(Responses) {
		return false
	}
	switch p.Type {
	case chat.PartReasoning:
		return p.Raw != nil
	case chat.PartOther:
		_, ok := p.Extra[markItem]
		return ok
	}
	return false
}

// appendResponsesItems appends the items of one message.
func appendResponsesItems(items []json.RawMessage, m *chat.Message) ([]json.RawMessage, error) {
	same := m.Wire == "" || m.Wire == string(Responses)
	if m.Role == chat.RoleTool {
		b, err := encodeResponsesOutput(m)
		if err != nil {
			return nil, err
		}
		return append(items, b), nil
	}
	var msgParts []chat.Part
	for i := range m.Content {
		p := &m.Content[i]
		if isItemPart(m.Wire, p) {
			continue
		}
		if p.Type == chat.PartReasoning {
			continue // reasoning of another API cannot be sent as a Responses item
		}
		msgParts = append(msgParts, *p)
	}
	needMsg := len(msgParts) > 0 || (same && m.Wire != "" && m.Shape != chat.ShapeAbsent) ||
		(m.Wire != string(Responses) && len(m.ToolCalls) == 0 && !hasItemParts(m))
	written := false
	writeMsg := func() error {
		if written || !needMsg {
			return nil
		}
		written = true
		b, err := encodeResponsesMessageItem(m, msgParts)
		if err != nil {
			return err
		}
		items = append(items, b)
		return nil
	}
	for i := range m.Content {
		p := &m.Content[i]
		if isItemPart(m.Wire, p) {
			if err := checkRaw("item", p.Raw); err != nil {
				return nil, err
			}
			items = append(items, p.Raw)
			continue
		}
		if p.Type != chat.PartReasoning {
			if err := writeMsg(); err != nil {
				return nil, err
			}
		}
	}
	if err := writeMsg(); err != nil {
		return nil, err
	}
	for _, tc := range m.ToolCalls {
		b, err := encodeResponsesCall(m.Wire, tc)
		if err != nil {
			return nil, err
		}
		items = append(items, b)
	}
	return items, nil
}

func hasItemParts(m *chat.Message) bool {
	for i := range m.Content {
		if isItemPart(m.Wire, &m.Content[i]) {
			return true
		}
	}
	return false
}

func encodeResponsesMessageItem(m *chat.Message, parts []chat.Part) ([]byte, error) {
	o, err := withExtras(m.Wire, Responses, m.Extra)
	if err != nil {
		return nil, err
	}
	marks := stripMarks(o)
	var absent string
	_ = json.Unmarshal(marks[markType], &absent)
	if absent != "absent" {
		if _, ok := o["type"]; !ok {
			o["type"] = json.RawMessage(`"message"`)
		}
	}
	role := string(m.Role)
	if m.WireRole != "" && (m.Wire == "" || m.Wire == string(Responses)) {
		role = m.WireRole
	}
	_ = put(o, "role", role)
	shape := m.Shape
	if m.Wire != string(Responses) {
		shape = chat.ShapeAuto
	}
	content, err := encodeResponsesContent(m.Wire, m.Role, parts, shape)
	if err != nil {
		return nil, err
	}
	o["content"] = content
	return marshalObject(o, "type", "role", "content")
}

// encodeResponsesContent writes content parts in the given shape.
func encodeResponsesContent(origin string, role chat.Role, parts []chat.Part, shape chat.Shape) (json.RawMessage, error) {
	switch shape {
	case chat.ShapeAuto:
		if len(parts) == 1 && parts[0].Type == chat.PartText && (len(parts[0].Extra) == 0 || origin != string(Responses)) || len(parts) == 0 {
			shape = chat.ShapeString
		}
	case chat.ShapeNull:
		if len(parts) == 0 {
			return json.RawMessage("null"), nil
		}
	case chat.ShapeString:
		if !allText(parts) {
			shape = chat.ShapeParts
		}
	}
	if shape == chat.ShapeString && allText(parts) {
		return mustJSON(textOf(parts)), nil
	}
	out := make([]json.RawMessage, 0, len(parts))
	for _, p := range parts {
		b, err := encodeResponsesPart(origin, role, p)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return joinArray(out), nil
}

func encodeResponsesPart(origin string, role chat.Role, p chat.Part) ([]byte, error) {
	o, err := withExtras(origin, Responses, p.Extra)
	if err != nil {
		return nil, err
	}
	stripMarks(o)
	switch p.Type {
	case chat.PartText:
		if _, ok := o["type"]; !ok {
			_ = put(o, "type", textType(role))
		}
		_ = put(o, "text", p.Text)
		return marshalObject(o, "type")
	case chat.PartImage:
		if p.Image == nil {
			return nil, fmt.Errorf("image part without image")
		}
		u := p.Image.URL
		if p.Image.Data != "" {
			u = "data:" + p.Image.MediaType + ";base64," + p.Image.Data
		}
		_ = put(o, "type", "input_image")
		_ = put(o, "image_url", u)
		switch {
		case p.Image.Detail != "":
			_ = put(o, "detail", p.Image.Detail)
		case origin != "" && origin != string(Responses):
			_ = put(o, "detail", "auto")
		}
		return marshalObject(o, "type")
	case chat.PartFile:
		if p.File == nil {
			return nil, fmt.Errorf("file part without file")
		}
		_ = put(o, "type", "input_file")
		for k, v := range map[string]string{"file_id": p.File.ID, "filename": p.File.Name, "file_data": p.File.Data, "file_url": p.File.URL} {
			if v != "" {
				_ = put(o, k, v)
			}
		}
		return marshalObject(o, "type")
	case chat.PartOther:
		if origin != "" && origin != string(Responses) {
			return marshalObject(object{"type": mustJSON(textType(role)), "text": mustJSON(string(p.Raw))}, "type")
		}
		if err := checkRaw("content part", p.Raw); err != nil {
			return nil, err
		}
		return p.Raw, nil
	case chat.PartReasoning:
		return marshalObject(object{"type": mustJSON(textType(role)), "text": mustJSON(p.Text)}, "type")
	}
	return nil, fmt.Errorf("unknown part type %q", p.Type)
}

func encodeResponsesCall(origin string, tc chat.ToolCall) ([]byte, error) {
	o, err := withExtras(origin, Responses, tc.Extra)
	if err != nil {
		return nil, err
	}
	stripMarks(o)
	var typ string
	_ = json.Unmarshal(o["type"], &typ)
	if typ == "custom_tool_call" {
		_ = put(o, "input", tc.Arguments)
	} else {
		o["type"] = json.RawMessage(`"function_call"`)
		_ = put(o, "arguments", tc.Arguments)
	}
	_ = put(o, "call_id", tc.ID)
	_ = put(o, "name", tc.Name)
	return marshalObject(o, "type", "call_id", "name")
}

func encodeResponsesOutput(m *chat.Message) ([]byte, error) {
	o, err := withExtras(m.Wire, Responses, m.Extra)
	if err != nil {
		return nil, err
	}
	stripMarks(o)
	if _, ok := o["type"]; !ok {
		o["type"] = json.RawMessage(`"function_call_output"`)
	}
	_ = put(o, "call_id", m.ToolCallID)
	shape := m.Shape
	if m.Wire != string(Responses) {
		shape = chat.ShapeAuto
	}
	parts := make([]chat.Part, 0, len(m.Content))
	for _, p := range m.Content {
		if p.Type != chat.PartReasoning {
			parts = append(parts, p)
		}
	}
	if shape == chat.ShapeAuto && allText(parts) {
		shape = chat.ShapeString // outputs are read best as a plain string
	}
	if shape == chat.ShapeNull && len(parts) == 0 {
		shape = chat.ShapeString // an output cannot be null
	}
	out, err := encodeResponsesContent(m.Wire, chat.RoleTool, parts, shape)
	if err != nil {
		return nil, err
	}
	o["output"] = out
	return marshalObject(o, "type", "call_id", "output")
}
