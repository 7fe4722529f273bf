// Package wire converts LLM request bodies between their wire formats (OpenAI chat completions,
// Anthropic messages, OpenAI Responses, Gemini generateContent) and the neutral model of package chat.
//
// Conversion is lossless for a round trip through the same format: every field the model does
// not interpret is kept verbatim (chat.Message.Extra, chat.Part.Extra, chat.Request.Extra, or a
// whole block in a chat.PartOther part) and written back, and the shape of content (a string, an
// array, null, absent) is recorded and reproduced. Round trips compare equal as JSON values; key
// order inside objects and insignificant whitespace outside raw values are not preserved.
//
// Two normalizations are documented rather than hidden: Anthropic assistant blocks are written
// with tool_use blocks after the other blocks, and a converted body always carries its system
// prompt first. Cross-format conversion (OpenAI in, Anthropic out) is best effort: extras of the
// other format are dropped because they mean nothing there.
//
// Decoding errors are *chat.Error values wrapping chat.ErrMalformedJSON, chat.ErrUnknownRole,
// chat.ErrInvalidUTF8 and friends, with the index of the wire message and the field.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Format names a wire format.
type Format string

// Wire formats.
const (
	OpenAI    Format = "openai"
	Anthropic Format = "anthropic"
)

// Detect guesses the format of a request body or bare message array: a top-level array is an
// OpenAI message list; an object with "input" and no "messages" is a Responses body; one with
// "contents" and no "messages" a Gemini body; an object with a top-level "system", or with Anthropic-only content
// blocks (tool_use, tool_result, thinking), or "input_schema" tools is Anthropic; anything else
// is OpenAI.
func Detect(body []byte) Format {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] == '[' {
		return OpenAI
	}
	var top struct {
		Input    json.RawMessage   `json:"input"`
		Contents json.RawMessage   `json:"contents"`
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(body, &top) != nil {
		return OpenAI
	}
	if len(top.System) > 0 {
		return Anthropic
	}
	if len(top.Input) > 0 && top.Messages == nil {
		return Responses
	}
	if len(top.Contents) > 0 && top.Messages == nil {
		return Gemini
	}
	for _, t := range top.Tools {
		if bytes.Contains(t, []byte(`"input_schema"`)) {
			return Anthropic
		}
	}
	for _, m := range top.Messages {
		var msg struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m, &msg) != nil {
			continue
		}
		switch msg.Role {
		case "system", "developer", "tool":
			return OpenAI
		}
		var blocks []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(msg.Content, &blocks) == nil {
			for _, b := range blocks {
				switch b.Type {
				case "tool_use", "tool_result", "thinking", "redacted_thinking", "server_tool_use", "document",
					"web_search_tool_result", "mcp_tool_use", "mcp_tool_result", "container_upload", "search_result":
					return Anthropic
				case "image_url", "tool_calls":
					return OpenAI
				}
			}
		}
	}
	return OpenAI
}

// Decode decodes a request body (or, for OpenAI, a bare message array) in format f.
//
// The request shares no memory with body (every decoder here copies what it keeps), so the
// caller may reuse body's buffer once Decode returns; the same holds for DecodeLayout and
// DecodeNext, whose Layout keeps body itself to compare a later body with.
func Decode(f Format, body []byte) (*chat.Request, error) {
	switch f {
	case OpenAI:
		return DecodeOpenAI(body)
	case Anthropic:
		return DecodeAnthropic(body)
	case Responses:
		return DecodeResponses(body)
	case Gemini:
		return DecodeGemini(body)
	}
	return nil, fmt.Errorf("wire: unknown format %q", f)
}

// Encode encodes a request in format f.
func Encode(f Format, r *chat.Request) ([]byte, error) {
	switch f {
	case OpenAI:
		return EncodeOpenAI(r)
	case Anthropic:
		return EncodeAnthropic(r)
	case Responses:
		return EncodeResponses(r)
	case Gemini:
		return EncodeGemini(r)
	}
	return nil, fmt.Errorf("wire: unknown format %q", f)
}

// --- shared helpers ---

type object = map[string]json.RawMessage

func malformed(index int, field string, err error) error {
	d := ""
	if err != nil {
		d = err.Error()
	}
	return &chat.Error{Index: index, Field: field, Err: chat.ErrMalformedJSON, Detail: d}
}

// checkText reports invalid UTF-8 or an invalid \u surrogate escape in a raw JSON value; Go's
// decoder would silently replace both with U+FFFD and lose the original bytes.
func checkText(index int, field string, raw []byte) error {
	if !utf8.Valid(raw) {
		return &chat.Error{Index: index, Field: field, Err: chat.ErrInvalidUTF8}
	}
	if bytes.Contains(raw, []byte(`\u`)) || bytes.Contains(raw, []byte(`\U`)) {
		if !surrogatesOK(raw) {
			return &chat.Error{Index: index, Field: field, Err: chat.ErrInvalidUTF8, Detail: "unpaired UTF-16 surrogate escape"}
		}
	}
	return nil
}

// surrogatesOK checks that every \uD800-\uDFFF escape in raw JSON is a valid high+low pair.
func surrogatesOK(raw []byte) bool {
	for i := 0; i+5 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // skip the escaped character (handles \\u)
			continue
		}
		v, ok := hex4(raw[i+2 : i+6])
		if !ok {
			return false
		}
		switch {
		case v >= 0xD800 && v <= 0xDBFF:
			if i+12 > len(raw) {
				return false
			}
			if raw[i+6] != '\\' || raw[i+7] != 'u' {
				return false
			}
			w, ok := hex4(raw[i+8 : i+12])
			if !ok || w < 0xDC00 || w > 0xDFFF {
				return false
			}
			i += 11
		case v >= 0xDC00 && v <= 0xDFFF:
			return false
		default:
			i += 5
		}
	}
	return true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var v rune
	for _, c := range b[:4] {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			v |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			v |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return v, true
}

// topObject validates a request body once and splits its top-level object (the decoders'
// common first step); errors are located *chat.Error values.
func topObject(body []byte) (object, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, malformed(-1, "", fmt.Errorf("empty body"))
	}
	if err := valid(body); err != nil {
		return nil, malformed(-1, "", err)
	}
	top, err := splitObject(body)
	if err != nil {
		return nil, malformed(-1, "", err)
	}
	return top, nil
}

func splitObject(raw json.RawMessage) (object, error) {
	var o object
	if err := unmarshal(raw, &o); err != nil {
		return nil, err
	}
	if o == nil {
		return nil, fmt.Errorf("expected an object, got null")
	}
	return o, nil
}

// take removes key from o and decodes it into v; absent keys leave v untouched.
func take(o object, key string, v any) (bool, error) {
	raw, ok := o[key]
	if !ok {
		return false, nil
	}
	delete(o, key)
	if err := unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("%s: %w", key, err)
	}
	return true, nil
}

func takeString(o object, key string) (string, error) {
	var s *string
	if _, err := take(o, key, &s); err != nil {
		return "", err
	}
	if s == nil {
		return "", nil
	}
	return *s, nil
}

func extras(o object) map[string]json.RawMessage {
	if len(o) == 0 {
		return nil
	}
	return o
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func isString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}

// put writes key=value into o as JSON.
func put(o object, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	o[key] = b
	return nil
}

// withExtras copies extras into a fresh object when the message came from format f (or from
// no format), so a value never leaks into a format where it means nothing.
//
// Raw JSON supplied by the caller is checked where it enters an encoder: here for extras,
// checkRaw for tool definitions and verbatim blocks. Everything else an encoder writes is
// produced by encoding/json or by the encoder itself, so marshalObject and joinArray write
// values as they are instead of validating every level of the body again.
func withExtras(origin string, f Format, ex map[string]json.RawMessage) (object, error) {
	o := make(object, len(ex)+4)
	if origin == "" || origin == string(f) {
		for k, v := range ex {
			if !validJSON(v) {
				return nil, fmt.Errorf("extra field %q holds invalid JSON", k)
			}
			o[k] = v
		}
	}
	return o, nil
}

// checkRaw reports raw JSON supplied by the caller (what names it) that is not valid.
func checkRaw(what string, raw json.RawMessage) error {
	if !validJSON(raw) {
		return fmt.Errorf("%s holds invalid JSON", what)
	}
	return nil
}

// joinArray writes valid JSON values (see withExtras) as a JSON array.
func joinArray(elems []json.RawMessage) json.RawMessage {
	n := 2
	for _, e := range elems {
		n += len(e) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, e := range elems {
		if i > 0 {
			out = append(out, ',')
		}
		if len(e) == 0 {
			e = json.RawMessage("null") // as encoding/json writes a nil RawMessage
		}
		out = append(out, e...)
	}
	return append(out, ']')
}

// writeKey writes k as a JSON string; keys are nearly always plain ASCII.
func writeKey(buf *bytes.Buffer, k string) {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			return
		}
	}
	buf.WriteByte('"')
	buf.WriteString(k)
	buf.WriteByte('"')
}

// marshalObject encodes o with sorted keys, except that keys in first come first in that order
// (role before content reads better and some servers sniff the first bytes). Values must be
// valid JSON (see withExtras); they are written as they are.
func marshalObject(o object, first ...string) ([]byte, error) {
	return marshalWith(o, "", nil, first...)
}

// marshalWith is marshalObject with one more field, key (when not ""), whose value is the
// JSON array of elems, written in place: a request body's messages are joined once, into the
// body, not first into an array of their own. The body is allocated once, at its size.
func marshalWith(o object, key string, elems []json.RawMessage, first ...string) ([]byte, error) {
	return appendWith(nil, o, key, elems, first...)
}

// appendWith is marshalWith appending to dst: a caller that sends body after body (a proxy)
// reuses one buffer instead of allocating each.
func appendWith(dst []byte, o object, key string, elems []json.RawMessage, first ...string) ([]byte, error) {
	size := 2
	for k, v := range o {
		size += len(k) + len(v) + 4
	}
	if key != "" {
		size += len(key) + 6
		for _, e := range elems {
			size += max(len(e), 4) + 1
		}
	}
	buf := bytes.NewBuffer(dst)
	buf.Grow(size)
	buf.WriteByte('{')
	n := 0
	write := func(k string, v json.RawMessage) error {
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		writeKey(buf, k)
		buf.WriteByte(':')
		if k == key && key != "" {
			buf.WriteByte('[')
			for i, e := range elems {
				if i > 0 {
					buf.WriteByte(',')
				}
				if len(e) == 0 {
					e = json.RawMessage("null") // as encoding/json writes a nil RawMessage
				}
				buf.Write(e)
			}
			buf.WriteByte(']')
			return nil
		}
		if len(v) == 0 {
			return fmt.Errorf("field %q has no value", k)
		}
		buf.Write(v)
		return nil
	}
	done := make(map[string]bool, len(first))
	for _, k := range first {
		if v, ok := o[k]; ok || (k == key && key != "") {
			if err := write(k, v); err != nil {
				return nil, err
			}
			done[k] = true
		}
	}
	keys := make([]string, 0, len(o)+1)
	for k := range o {
		if !done[k] && k != key {
			keys = append(keys, k)
		}
	}
	if key != "" && !done[key] {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := write(k, o[k]); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
