package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/encodecache"
)

// Gemini is the Gemini API format (POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent). The model is named in the path, not in the body.
const Gemini Format = "gemini"

// How a Gemini body maps onto the neutral model (DecodeGemini, EncodeGemini):
//
//   - systemInstruction (a content: parts, and an optional role kept verbatim) is the one
//     message of Request.System.
//   - contents are the history. A "model" content is an assistant message: its text parts
//     are text parts, parts with "thought": true are PartReasoning parts whose Raw holds the
//     whole part byte for byte (thoughtSignature included), functionCall parts are its
//     ToolCalls (Arguments the raw args object), and the order of parts and calls is kept.
//   - A "user" content (or one without a role) is split as Anthropic's user messages are:
//     each functionResponse part is a RoleTool message, then the other parts, if any, are one
//     user message with JoinPrev set. Written back, the function responses come first (the one
//     documented normalization).
//   - A functionCall's id is its ToolCall.ID; a call without one gets an id made up here
//     (SyntheticGeminiID, never written back). A functionResponse answers the call of the
//     model content before it with the same id, else the first one not yet answered with the
//     same name (the API pairs by order and name): its ToolCallID is that call's ID.
//   - A functionResponse's response object is the tool message's text: the string when it
//     holds exactly one string field ("output", "error", ...; "error" sets IsError), else the
//     object's JSON text. A text changed by the pipeline is written back under the same field,
//     or as {"output": text}.
//   - thoughtSignature, on any part, is kept byte for byte: in Part.Extra of a text part, in
//     ToolCall.Extra of a functionCall part, in the Raw of a thought part.
//   - inlineData is an image (image/* types) or a file with Data; fileData an image or a
//     file with URL. Any other part (executableCode, codeExecutionResult, ...) is kept
//     verbatim as a PartOther.
//   - Each function declaration of tools[].functionDeclarations is a chat.Tool (parameters
//     or parametersJsonSchema as Parameters); a tools entry of another kind (googleSearch,
//     codeExecution, ...) is kept in Tool.Raw. A declaration that did not come from a Gemini
//     body (the proxy's own tool) joins the function declarations before it, with its schema
//     as parametersJsonSchema.
//   - Every other field (generationConfig, toolConfig, safetySettings, cachedContent, ...)
//     is kept verbatim in Request.Extra.
//
// Markers that let a round trip reproduce the spelling live in Extra maps under keys that end
// in "." (see stripMarks).

// syntheticGeminiID starts the ids DecodeGemini gives calls that carry none.
const syntheticGeminiID = "~gemini:"

// SyntheticGeminiID reports whether id was made up by the Gemini decoder for a functionCall
// that carried no id (such ids are never written to a Gemini body).
func SyntheticGeminiID(id string) bool { return strings.HasPrefix(id, syntheticGeminiID) }

// Gemini markers.
const (
	gmContents = "contents." // in Request.Extra: "absent"
	gmRole     = "role."     // on a message: the wire role when absent ("absent") or "function"
	gmContent  = "content."  // on a message: other fields of its content object
	gmOrder    = "order."    // on an assistant message: its parts (p) and calls (c), in order
	gmCall     = "call."     // on a ToolCall: other fields of the functionCall object
	gmArgs     = "args."     // on a ToolCall: "absent" when the call had no args
	gmResp     = "response." // on a tool message: the field of response that holds its text, or "" (JSON)
	gmFR       = "fr."       // on a tool message: other fields of the functionResponse object
	gmGroup    = "group."    // on a Tool: the index of its tools entry
	gmSchema   = "schema."   // on a Tool: "parametersJsonSchema" when the schema was given so
	gmParts    = "parts."    // on a message: "absent" or "null" when its content had no parts array
	gmStart    = "start."    // on a tool message that began its content
)

// DecodeGemini decodes a Gemini generateContent body. Errors are *chat.Error values; Index is
// the position of the content in contents.
func DecodeGemini(body []byte) (*chat.Request, error) {
	return decodeGemini(body, nil)
}

// decodeGemini is DecodeGemini; lay, when not nil, receives the layout after each content
// (closed: the content is not a model turn whose calls a later content may answer).
func decodeGemini(body []byte, lay *itemsLayout) (*chat.Request, error) {
	top, err := topObject(body)
	if err != nil {
		return nil, err
	}
	r := &chat.Request{Wire: string(Gemini)}
	if raw, ok := top["systemInstruction"]; ok && !isNull(raw) {
		delete(top, "systemInstruction")
		if err := checkText(-1, "systemInstruction", raw); err != nil {
			return nil, err
		}
		m, err := decodeGeminiSystem(raw)
		if err != nil {
			return nil, malformed(-1, "systemInstruction", err)
		}
		r.System = []chat.Message{m}
	}
	var rawTools []json.RawMessage
	if _, err := take(top, "tools", &rawTools); err != nil {
		return nil, malformed(-1, "tools", err)
	}
	for i, t := range rawTools {
		if err := checkText(-1, fmt.Sprintf("tools[%d]", i), t); err != nil {
			return nil, err
		}
		tools, err := decodeGeminiTools(t, i)
		if err != nil {
			return nil, malformed(-1, fmt.Sprintf("tools[%d]", i), err)
		}
		r.Tools = append(r.Tools, tools...)
	}
	raw, ok := top["contents"]
	delete(top, "contents")
	if !ok {
		top[gmContents] = json.RawMessage(`"absent"`)
	} else {
		var contents []json.RawMessage
		if err := unmarshal(raw, &contents); err != nil {
			return nil, malformed(-1, "contents", err)
		}
		if r.Messages, err = decodeGeminiContents(contents, 0, lay); err != nil {
			return nil, err
		}
	}
	if r.Messages == nil {
		r.Messages = []chat.Message{}
	}
	r.Extra = extras(top)
	return r, nil
}

// DecodeGeminiContent decodes one content object (a candidate's content, say) into messages,
// as DecodeGemini decodes an element of contents.
func DecodeGeminiContent(raw json.RawMessage) ([]chat.Message, error) {
	return decodeGeminiContents([]json.RawMessage{raw}, 0, nil)
}

func decodeGeminiSystem(raw json.RawMessage) (chat.Message, error) {
	m := chat.Message{Role: chat.RoleSystem, Wire: string(Gemini), Shape: chat.ShapeParts}
	o, err := splitObject(raw)
	if err != nil {
		return m, err
	}
	var parts []json.RawMessage
	if _, err := take(o, "parts", &parts); err != nil {
		return m, err
	}
	for _, p := range parts {
		part, err := decodeGeminiPart(p)
		if err != nil {
			return m, err
		}
		m.Content = append(m.Content, part)
	}
	m.Extra = extras(o)
	return m, nil
}

// geminiCall is a call of the last model content, for pairing.
type geminiCall struct {
	id, name string
	answered bool
}

// decodeGeminiContents decodes contents; base is the index of contents[0] in the body (for
// error positions and made-up ids); lay, when not nil, receives the layout after each content.
func decodeGeminiContents(contents []json.RawMessage, base int, lay *itemsLayout) ([]chat.Message, error) {
	msgs := make([]chat.Message, 0, len(contents))
	var calls []geminiCall // of the last model content
	for j, raw := range contents {
		if lay != nil && j > 0 {
			lay.counts = append(lay.counts, len(msgs))
			lay.closed = append(lay.closed, len(calls) == 0)
		}
		i := base + j
		if err := checkText(i, "", raw); err != nil {
			return nil, err
		}
		o, err := splitObject(raw)
		if err != nil {
			return nil, malformed(i, "", err)
		}
		role, hasRole := o["role"]
		var r string
		if hasRole {
			if err := unmarshal(role, &r); err != nil || !isString(role) {
				return nil, malformed(i, "role", fmt.Errorf("role must be a string"))
			}
		}
		delete(o, "role")
		rawParts, hasParts := o["parts"]
		delete(o, "parts")
		var parts []json.RawMessage
		if hasParts && !isNull(rawParts) {
			if err := unmarshal(rawParts, &parts); err != nil {
				return nil, malformed(i, "parts", err)
			}
		}
		marks := object{}
		if !hasRole {
			marks[gmRole] = json.RawMessage(`"absent"`)
		}
		if !hasParts {
			marks[gmParts] = json.RawMessage(`"absent"`)
		} else if isNull(rawParts) {
			marks[gmParts] = json.RawMessage(`"null"`)
		}
		if len(o) > 0 {
			b, _ := marshalObject(o)
			marks[gmContent] = b
		}
		switch r {
		case "model":
			m := chat.Message{Role: chat.RoleAssistant, Wire: string(Gemini), Shape: chat.ShapeParts, Extra: marks}
			var order []byte
			calls = calls[:0]
			for j, p := range parts {
				po, err := splitObject(p)
				if err != nil {
					return nil, malformed(i, fmt.Sprintf("parts[%d]", j), err)
				}
				if fc, ok := po["functionCall"]; ok {
					tc, err := decodeGeminiCall(po, fc, fmt.Sprintf("%d.%d", i, len(m.ToolCalls)))
					if err != nil {
						return nil, malformed(i, fmt.Sprintf("parts[%d].functionCall", j), err)
					}
					m.ToolCalls = append(m.ToolCalls, tc)
					calls = append(calls, geminiCall{id: tc.ID, name: tc.Name})
					order = append(order, 'c')
					continue
				}
				part, err := decodeGeminiPart(p)
				if err != nil {
					return nil, malformed(i, fmt.Sprintf("parts[%d]", j), err)
				}
				m.Content = append(m.Content, part)
				order = append(order, 'p')
			}
			if len(m.ToolCalls) > 0 && len(m.Content) > 0 {
				m.Extra[gmOrder] = mustJSON(string(order))
			}
			m.Extra = extras(m.Extra)
			msgs = append(msgs, m)
		case "user", "function", "":
			if r == "function" {
				marks[gmRole] = json.RawMessage(`"function"`)
			}
			first := len(msgs)
			user := chat.Message{Role: chat.RoleUser, Wire: string(Gemini), Shape: chat.ShapeParts}
			hasUser := len(parts) == 0
			for j, p := range parts {
				po, err := splitObject(p)
				if err != nil {
					return nil, malformed(i, fmt.Sprintf("parts[%d]", j), err)
				}
				if fr, ok := po["functionResponse"]; ok {
					tm, err := decodeGeminiResponse(po, fr, calls)
					if err != nil {
						return nil, malformed(i, fmt.Sprintf("parts[%d].functionResponse", j), err)
					}
					msgs = append(msgs, tm)
					continue
				}
				part, err := decodeGeminiPart(p)
				if err != nil {
					return nil, malformed(i, fmt.Sprintf("parts[%d]", j), err)
				}
				user.Content = append(user.Content, part)
				hasUser = true
			}
			calls = calls[:0]
			if hasUser {
				user.JoinPrev = len(msgs) > first
				msgs = append(msgs, user)
			}
			// The content's own fields go on its first message.
			fm := &msgs[first]
			if fm.Role == chat.RoleTool {
				marks[gmStart] = json.RawMessage("true")
			}
			for k, v := range marks {
				if fm.Extra == nil {
					fm.Extra = map[string]json.RawMessage{}
				}
				fm.Extra[k] = v
			}
		default:
			return nil, &chat.Error{Index: i, Field: "role", Err: chat.ErrUnknownRole, Detail: fmt.Sprintf("%q", r)}
		}
	}
	if lay != nil && len(contents) > 0 {
		lay.counts = append(lay.counts, len(msgs))
		lay.closed = append(lay.closed, len(calls) == 0)
	}
	return msgs, nil
}

// decodeGeminiCall decodes a functionCall part; a call without an id gets syntheticGeminiID +
// pos (its content's index and its own in the content: the same in every body that holds it).
func decodeGeminiCall(po object, fc json.RawMessage, pos string) (chat.ToolCall, error) {
	var tc chat.ToolCall
	delete(po, "functionCall")
	f, err := splitObject(fc)
	if err != nil {
		return tc, err
	}
	if tc.Name, err = requiredString(f, "name"); err != nil {
		return tc, err
	}
	if raw, ok := f["id"]; ok && isString(raw) {
		var id string
		if unmarshal(raw, &id) == nil && id != "" && !SyntheticGeminiID(id) {
			tc.ID = id
			delete(f, "id")
		}
	}
	if tc.ID == "" {
		tc.ID = syntheticGeminiID + pos
	}
	if args, ok := f["args"]; ok {
		tc.Arguments = string(args)
		delete(f, "args")
	} else {
		po[gmArgs] = json.RawMessage(`"absent"`)
		tc.Arguments = "{}"
	}
	if len(f) > 0 {
		b, _ := marshalObject(f)
		po[gmCall] = b
	}
	tc.Extra = extras(po)
	return tc, nil
}

func decodeGeminiResponse(po object, fr json.RawMessage, calls []geminiCall) (chat.Message, error) {
	m := chat.Message{Role: chat.RoleTool, Wire: string(Gemini), Shape: chat.ShapeParts}
	delete(po, "functionResponse")
	f, err := splitObject(fr)
	if err != nil {
		return m, err
	}
	if m.Name, err = requiredString(f, "name"); err != nil {
		return m, err
	}
	var id string
	if raw, ok := f["id"]; ok && isString(raw) {
		_ = unmarshal(raw, &id)
	}
	k := -1
	if id != "" {
		for j := range calls {
			if !calls[j].answered && calls[j].id == id {
				k = j
				break
			}
		}
	}
	if k < 0 {
		for j := range calls {
			if !calls[j].answered && calls[j].name == m.Name {
				k = j
				break
			}
		}
	}
	if k >= 0 {
		calls[k].answered = true
		m.ToolCallID = calls[k].id
	} else {
		// Answers no call: an id that pairs with none (the history is refused as invalid).
		m.ToolCallID = syntheticGeminiID + "unpaired:" + m.Name
	}
	if id != "" && id == m.ToolCallID {
		delete(f, "id")
	}
	resp, ok := f["response"]
	if ok {
		delete(f, "response")
		key, text := geminiResponseText(resp)
		m.Content = []chat.Part{{Type: chat.PartText, Text: text}}
		po[gmResp] = mustJSON(key)
		m.IsError = key == "error"
	} else {
		po[gmResp] = json.RawMessage(`null`)
	}
	if len(f) > 0 {
		b, _ := marshalObject(f)
		po[gmFR] = b
	}
	m.Extra = extras(po)
	return m, nil
}

// geminiResponseText returns the text of a functionResponse's response: the one string field
// and its name, or "" and the JSON text of the whole value.
func geminiResponseText(raw json.RawMessage) (string, string) {
	o, err := splitObject(raw)
	if err == nil && len(o) == 1 {
		for k, v := range o {
			var s string
			if k != "" && isString(v) && unmarshal(v, &s) == nil {
				return k, s
			}
		}
	}
	return "", string(bytes.TrimSpace(raw))
}

func decodeGeminiPart(raw json.RawMessage) (chat.Part, error) {
	o, err := splitObject(raw)
	if err != nil {
		return chat.Part{}, err
	}
	other := chat.Part{Type: chat.PartOther, Raw: bytes.Clone(raw)}
	if t, ok := o["text"]; ok {
		if !isString(t) {
			return other, nil
		}
		var s string
		if unmarshal(t, &s) != nil {
			return other, nil
		}
		if th, ok := o["thought"]; ok && string(bytes.TrimSpace(th)) == "true" {
			return chat.Part{Type: chat.PartReasoning, Text: s, Raw: bytes.Clone(raw)}, nil
		}
		delete(o, "text")
		return chat.Part{Type: chat.PartText, Text: s, Extra: extras(o)}, nil
	}
	for _, key := range []string{"inlineData", "fileData"} {
		v, ok := o[key]
		if !ok {
			continue
		}
		d, err := splitObject(v)
		if err != nil {
			return other, nil
		}
		var mt, data string
		dataKey := "data"
		if key == "fileData" {
			dataKey = "fileUri"
		}
		if _, ok := d["mimeType"]; ok && (!isString(d["mimeType"]) || unmarshal(d["mimeType"], &mt) != nil || mt == "") {
			return other, nil
		}
		if !isString(d[dataKey]) || unmarshal(d[dataKey], &data) != nil || data == "" {
			return other, nil
		}
		delete(d, "mimeType")
		delete(d, dataKey)
		if len(d) > 0 || key == "inlineData" && mt == "" {
			return other, nil
		}
		delete(o, key)
		var p chat.Part
		if strings.HasPrefix(mt, "image/") {
			img := &chat.Image{MediaType: mt}
			if key == "inlineData" {
				img.Data = data
				img.Width, img.Height = imageSize(data)
			} else {
				img.URL = data
			}
			p = chat.Part{Type: chat.PartImage, Image: img}
		} else {
			f := &chat.FileRef{MediaType: mt}
			if key == "inlineData" {
				f.Data = data
			} else {
				f.URL = data
			}
			p = chat.Part{Type: chat.PartFile, File: f}
		}
		p.Extra = extras(o)
		return p, nil
	}
	return other, nil
}

func decodeGeminiTools(raw json.RawMessage, index int) ([]chat.Tool, error) {
	o, err := splitObject(raw)
	if err != nil {
		return nil, err
	}
	fds, ok := o["functionDeclarations"]
	if !ok || len(o) != 1 {
		return []chat.Tool{{Raw: bytes.Clone(raw), Name: geminiToolName(o)}}, nil
	}
	var decls []json.RawMessage
	if err := unmarshal(fds, &decls); err != nil {
		return nil, fmt.Errorf("functionDeclarations: %w", err)
	}
	if len(decls) == 0 {
		return []chat.Tool{{Raw: bytes.Clone(raw), Name: "functionDeclarations"}}, nil
	}
	group := mustJSON(index)
	tools := make([]chat.Tool, 0, len(decls))
	for j, d := range decls {
		do, err := splitObject(d)
		if err != nil {
			return nil, fmt.Errorf("functionDeclarations[%d]: %w", j, err)
		}
		var t chat.Tool
		if t.Name, err = requiredString(do, "name"); err != nil {
			return nil, fmt.Errorf("functionDeclarations[%d]: %w", j, err)
		}
		if desc, ok := do["description"]; ok && isString(desc) {
			if t.Description, err = takeString(do, "description"); err != nil {
				return nil, err
			}
			if t.Description == "" {
				do["description"] = json.RawMessage(`""`)
			}
		}
		_, hasP := do["parameters"]
		_, hasJ := do["parametersJsonSchema"]
		switch {
		case hasP && !hasJ:
			t.Parameters = bytes.Clone(do["parameters"])
			delete(do, "parameters")
		case hasJ && !hasP:
			t.Parameters = bytes.Clone(do["parametersJsonSchema"])
			delete(do, "parametersJsonSchema")
			do[gmSchema] = json.RawMessage(`"parametersJsonSchema"`)
		}
		do[gmGroup] = group
		t.Extra = extras(do)
		tools = append(tools, t)
	}
	return tools, nil
}

func geminiToolName(o object) string {
	for k := range o {
		return k
	}
	return ""
}

// EncodeGemini encodes a request as a Gemini generateContent body (see DecodeGemini for the
// mapping).
func EncodeGemini(r *chat.Request) ([]byte, error) {
	return appendGemini(nil, r, nil)
}

// appendGemini is EncodeGemini appending the body to dst, the contents of the messages c
// holds from its last call taken from c (encodecache.AppendGemini).
func appendGemini(dst []byte, r *chat.Request, c *encodecache.Cache) ([]byte, error) {
	memo := c.Begin(string(Gemini))
	defer c.End(memo)
	top, err := withExtras(r.Wire, Gemini, r.Extra)
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	marks := stripMarks(top)
	same := r.Wire == "" || r.Wire == string(Gemini)
	if len(r.System) > 0 {
		b, err := encodeGeminiSystem(r.System)
		if err != nil {
			return nil, fmt.Errorf("wire: system: %w", err)
		}
		top["systemInstruction"] = b
	}
	if len(r.Tools) > 0 {
		b, err := encodeGeminiTools(r.Wire, r.Tools)
		if err != nil {
			return nil, fmt.Errorf("wire: %w", err)
		}
		if b != nil {
			top["tools"] = b
		}
	}
	var absent string
	_ = json.Unmarshal(marks[gmContents], &absent)
	if absent == "absent" && same && len(r.Messages) == 0 {
		return appendWith(dst, top, "", nil, "systemInstruction", "contents")
	}
	contents := make([]json.RawMessage, 0, len(r.Messages))
	for i := 0; i < len(r.Messages); {
		j := geminiGroupEnd(r.Messages, i)
		b, err := memo.Group(r.Messages, i, j, func() ([]byte, error) { return encodeGeminiContent(r.Messages[i:j]) })
		if err != nil {
			return nil, fmt.Errorf("wire: message %d: %w", i, err)
		}
		contents = append(contents, b)
		i = j
	}
	return appendWith(dst, top, "contents", contents, "systemInstruction", "contents")
}

// geminiGroupEnd returns the end of the content that starts with msgs[i]: tool messages
// joined by the tool messages after them and a user message that joins them (JoinPrev).
func geminiGroupEnd(msgs []chat.Message, i int) int {
	j := i + 1
	if msgs[i].Role != chat.RoleTool {
		return j
	}
	for j < len(msgs) && msgs[j].Role == chat.RoleTool && !geminiStartsContent(&msgs[j]) {
		j++
	}
	if j < len(msgs) && msgs[j].Role == chat.RoleUser && msgs[j].JoinPrev {
		j++
	}
	return j
}

// geminiStartsContent reports whether a tool message began a content of its own on the wire.
func geminiStartsContent(m *chat.Message) bool {
	if m.Wire != string(Gemini) {
		return false
	}
	for _, k := range []string{gmStart, gmRole, gmParts, gmContent} {
		if _, ok := m.Extra[k]; ok {
			return true
		}
	}
	return false
}

func encodeGeminiSystem(sys []chat.Message) ([]byte, error) {
	o, err := withExtras(sys[0].Wire, Gemini, sys[0].Extra)
	if err != nil {
		return nil, err
	}
	stripMarks(o)
	var parts []json.RawMessage
	for i := range sys {
		for _, p := range sys[i].Content {
			b, err := encodeGeminiPart(sys[i].Wire, p)
			if err != nil {
				return nil, err
			}
			parts = append(parts, b)
		}
	}
	o["parts"] = joinArray(parts)
	return marshalObject(o, "role", "parts")
}

// encodeGeminiContent writes the content of a group of messages (geminiGroupEnd).
func encodeGeminiContent(msgs []chat.Message) ([]byte, error) {
	first := &msgs[0]
	o := object{}
	role := "user"
	if first.Role == chat.RoleAssistant {
		role = "model"
	}
	var marks object
	if first.Wire == string(Gemini) {
		marks = object{}
		for k, v := range first.Extra {
			if strings.HasSuffix(k, ".") {
				marks[k] = v
			}
		}
		if c, ok := marks[gmContent]; ok {
			co, err := splitObject(c)
			if err != nil {
				return nil, fmt.Errorf("content fields: %w", err)
			}
			for k, v := range co {
				o[k] = v
			}
		}
	}
	var rm string
	_ = json.Unmarshal(marks[gmRole], &rm)
	switch rm {
	case "absent":
	case "function":
		_ = put(o, "role", "function")
	default:
		_ = put(o, "role", role)
	}
	var parts []json.RawMessage
	for k := range msgs {
		m := &msgs[k]
		var err error
		switch m.Role {
		case chat.RoleAssistant:
			parts, err = appendGeminiModelParts(parts, m)
		case chat.RoleTool:
			var b []byte
			b, err = encodeGeminiResponse(m)
			parts = append(parts, b)
		default:
			for _, p := range m.Content {
				var b []byte
				if b, err = encodeGeminiPart(m.Wire, p); err != nil {
					break
				}
				parts = append(parts, b)
			}
			for _, tc := range m.ToolCalls { // a user message has none; best effort
				var b []byte
				if b, err = encodeGeminiCall(m.Wire, tc); err != nil {
					break
				}
				parts = append(parts, b)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	var pm string
	_ = json.Unmarshal(marks[gmParts], &pm)
	switch {
	case pm == "absent" && len(parts) == 0:
	case pm == "null" && len(parts) == 0:
		o["parts"] = json.RawMessage("null")
	default:
		o["parts"] = joinArray(parts)
	}
	return marshalObject(o, "role", "parts")
}

func appendGeminiModelParts(parts []json.RawMessage, m *chat.Message) ([]json.RawMessage, error) {
	var order string
	if m.Wire == string(Gemini) {
		_ = json.Unmarshal(m.Extra[gmOrder], &order)
	}
	if strings.Count(order, "p") != len(m.Content) || strings.Count(order, "c") != len(m.ToolCalls) {
		order = strings.Repeat("p", len(m.Content)) + strings.Repeat("c", len(m.ToolCalls))
	}
	pi, ci := 0, 0
	for _, k := range []byte(order) {
		var b []byte
		var err error
		if k == 'p' {
			b, err = encodeGeminiPart(m.Wire, m.Content[pi])
			pi++
		} else {
			b, err = encodeGeminiCall(m.Wire, m.ToolCalls[ci])
			ci++
		}
		if err != nil {
			return nil, err
		}
		if b != nil {
			parts = append(parts, b)
		}
	}
	return parts, nil
}

func encodeGeminiPart(origin string, p chat.Part) ([]byte, error) {
	same := origin == "" || origin == string(Gemini)
	o, err := withExtras(origin, Gemini, p.Extra)
	if err != nil {
		return nil, err
	}
	stripMarks(o)
	switch p.Type {
	case chat.PartText:
		_ = put(o, "text", p.Text)
		return marshalObject(o, "text")
	case chat.PartReasoning:
		if same && p.Raw != nil {
			if err := checkRaw("thought part", p.Raw); err != nil {
				return nil, err
			}
			return p.Raw, nil
		}
		return marshalObject(object{"text": mustJSON(p.Text), "thought": json.RawMessage("true")}, "text")
	case chat.PartImage:
		if p.Image == nil {
			return nil, fmt.Errorf("image part without image")
		}
		img := p.Image
		data, mt := img.Data, img.MediaType
		if data == "" {
			if m, d, ok := parseDataURL(img.URL); ok {
				data, mt = d, m
			}
		}
		if data != "" {
			if mt == "" {
				mt = "image/png"
			}
			_ = put(o, "inlineData", map[string]string{"mimeType": mt, "data": data})
		} else {
			fd := map[string]string{"fileUri": img.URL}
			if mt != "" {
				fd["mimeType"] = mt
			}
			_ = put(o, "fileData", fd)
		}
		return marshalObject(o)
	case chat.PartFile:
		if p.File == nil {
			return nil, fmt.Errorf("file part without file")
		}
		f := p.File
		switch {
		case f.Data != "":
			mt := f.MediaType
			if mt == "" {
				mt = "application/octet-stream"
			}
			_ = put(o, "inlineData", map[string]string{"mimeType": mt, "data": f.Data})
		case f.URL != "" || f.ID != "":
			u := f.URL
			if u == "" {
				u = f.ID
			}
			fd := map[string]string{"fileUri": u}
			if f.MediaType != "" {
				fd["mimeType"] = f.MediaType
			}
			_ = put(o, "fileData", fd)
		default:
			_ = put(o, "text", "[file "+f.Name+"]")
		}
		return marshalObject(o)
	case chat.PartOther:
		if !same {
			return marshalObject(object{"text": mustJSON(string(p.Raw))}, "text")
		}
		if err := checkRaw("part", p.Raw); err != nil {
			return nil, err
		}
		return p.Raw, nil
	}
	return nil, fmt.Errorf("unknown part type %q", p.Type)
}

func encodeGeminiCall(origin string, tc chat.ToolCall) ([]byte, error) {
	o, err := withExtras(origin, Gemini, tc.Extra)
	if err != nil {
		return nil, err
	}
	marks := stripMarks(o)
	fc := object{}
	if c, ok := marks[gmCall]; ok {
		if fc, err = splitObject(c); err != nil {
			return nil, fmt.Errorf("functionCall fields: %w", err)
		}
	}
	_ = put(fc, "name", tc.Name)
	if !SyntheticGeminiID(tc.ID) && tc.ID != "" {
		if _, ok := fc["id"]; !ok {
			_ = put(fc, "id", tc.ID)
		}
	}
	var absent string
	_ = json.Unmarshal(marks[gmArgs], &absent)
	if absent != "absent" || tc.Arguments != "{}" {
		args := []byte(tc.Arguments)
		if t := bytes.TrimSpace(args); len(t) == 0 || t[0] != '{' || !validJSON(t) {
			args = mustJSON(map[string]string{"input": tc.Arguments})
		}
		fc["args"] = args
	}
	b, err := marshalObject(fc, "id", "name", "args")
	if err != nil {
		return nil, err
	}
	o["functionCall"] = b
	return marshalObject(o, "functionCall")
}

func encodeGeminiResponse(m *chat.Message) ([]byte, error) {
	o, err := withExtras(m.Wire, Gemini, m.Extra)
	if err != nil {
		return nil, err
	}
	marks := stripMarks(o)
	// The content's marks were read by encodeGeminiContent.
	fr := object{}
	if c, ok := marks[gmFR]; ok {
		if fr, err = splitObject(c); err != nil {
			return nil, fmt.Errorf("functionResponse fields: %w", err)
		}
	}
	name := m.Name
	if name == "" {
		name = "tool"
	}
	_ = put(fr, "name", name)
	if !SyntheticGeminiID(m.ToolCallID) && m.ToolCallID != "" {
		if _, ok := fr["id"]; !ok {
			_ = put(fr, "id", m.ToolCallID)
		}
	}
	text := textOf(m.Content)
	key, hasKey := "", false
	if r, ok := marks[gmResp]; ok {
		if isNull(r) {
			hasKey = len(m.Content) > 0
			key = "output"
		} else {
			_ = json.Unmarshal(r, &key)
			hasKey = true
		}
	} else {
		hasKey, key = true, "output"
		if m.IsError {
			key = "error"
		}
	}
	if hasKey {
		if key == "" {
			if t := bytes.TrimSpace([]byte(text)); len(t) > 0 && t[0] == '{' && validJSON(t) {
				fr["response"] = json.RawMessage(text)
			} else {
				key = "output"
			}
		}
		if key != "" {
			_ = put(fr, "response", map[string]string{key: text})
		}
	}
	b, err := marshalObject(fr, "id", "name", "response")
	if err != nil {
		return nil, err
	}
	o["functionResponse"] = b
	return marshalObject(o, "functionResponse")
}

func encodeGeminiTools(origin string, tools []chat.Tool) (json.RawMessage, error) {
	same := origin == "" || origin == string(Gemini)
	type entry struct {
		raw   json.RawMessage
		decls []json.RawMessage
	}
	var entries []entry
	lastDecls := -1 // the entry of the last function declaration
	group := ""
	for _, t := range tools {
		if t.Raw != nil {
			if !same {
				continue // a tool of another API means nothing here
			}
			if err := checkRaw("tool "+t.Name, t.Raw); err != nil {
				return nil, err
			}
			entries = append(entries, entry{raw: t.Raw})
			group = ""
			continue
		}
		o, err := withExtras(origin, Gemini, t.Extra)
		if err != nil {
			return nil, err
		}
		marks := stripMarks(o)
		g, grouped := marks[gmGroup]
		switch {
		case grouped && (string(g) != group || lastDecls < 0 || lastDecls != len(entries)-1):
			entries = append(entries, entry{})
			lastDecls, group = len(entries)-1, string(g)
		case !grouped && lastDecls < 0:
			entries = append(entries, entry{})
			lastDecls = len(entries) - 1
		}
		_ = put(o, "name", t.Name)
		if t.Description != "" {
			_ = put(o, "description", t.Description)
		}
		if t.Parameters != nil {
			if err := checkRaw("parameters of tool "+t.Name, t.Parameters); err != nil {
				return nil, err
			}
			key := "parametersJsonSchema"
			if grouped {
				var s string
				_ = json.Unmarshal(marks[gmSchema], &s)
				if s == "" {
					key = "parameters"
				}
			}
			o[key] = t.Parameters
		}
		b, err := marshalObject(o, "name", "description")
		if err != nil {
			return nil, err
		}
		entries[lastDecls].decls = append(entries[lastDecls].decls, b)
	}
	if len(entries) == 0 {
		return nil, nil
	}
	out := make([]json.RawMessage, len(entries))
	for i, e := range entries {
		if e.raw != nil {
			out[i] = e.raw
			continue
		}
		b, err := marshalObject(object{"functionDeclarations": joinArray(e.decls)})
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return joinArray(out), nil
}
