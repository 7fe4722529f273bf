package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// Decoding a body with encoding/json alone validates every byte once per nesting level: each
// json.Unmarshal of a sub-value (a message, its content, a part) checks that sub-value again
// before decoding it. The decoders in this package instead validate their input once, at the
// exported entry point (valid), and then split and unquote the already-valid JSON with the
// plain scanner below (unmarshal).
//
// The scanner trusts that its input is valid JSON: it is only ever given sub-slices of a
// validated body. It never panics on other input, and whatever it does not recognize (a target
// type it does not handle, a value of another type, an escape it does not decode itself) goes
// to json.Unmarshal, so results and errors are those of encoding/json (FuzzUnmarshal checks
// this on arbitrary valid JSON).

// valid returns nil when body is valid JSON and otherwise encoding/json's syntax error.
func valid(body []byte) error {
	if validJSON(body) {
		return nil
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	return errors.New("invalid JSON") // not reached: Valid and Unmarshal agree
}

// unmarshal is json.Unmarshal for raw taken from a validated body, with fast paths for the
// targets the decoders use most: *string, **string, *object and *[]json.RawMessage.
func unmarshal(raw []byte, v any) error {
	raw = trimSpace(raw)
	switch p := v.(type) {
	case *string:
		if isLiteralNull(raw) {
			return nil
		}
		if s, ok := unquote(raw); ok {
			*p = s
			return nil
		}
	case **string:
		if isLiteralNull(raw) {
			*p = nil
			return nil
		}
		if s, ok := unquote(raw); ok {
			*p = &s
			return nil
		}
	case *object:
		if *p != nil {
			break // json.Unmarshal merges into an existing map
		}
		if isLiteralNull(raw) {
			return nil
		}
		if o, ok := scanObject(raw); ok {
			*p = o
			return nil
		}
	case *[]json.RawMessage:
		if *p != nil {
			break // json.Unmarshal reuses an existing slice
		}
		if isLiteralNull(raw) {
			return nil
		}
		if a, ok := scanArray(raw); ok {
			*p = a
			return nil
		}
	}
	return json.Unmarshal(raw, v)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isLiteralNull(raw []byte) bool { return string(raw) == "null" }

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting with the quote at b[i].
func stringEnd(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false
		}
		j += k
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for m := j - 1; m > i && b[m] == '\\'; m-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j, true
		}
	}
}

// valueEnd returns the index just past the value starting at b[i] (not a space).
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, ok := stringEnd(b, j)
				if !ok {
					return 0, false
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default: // number, true, false, null
		j := i
		for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		return j, j > i
	}
}

// scanMembers walks the members of a valid JSON object or array b (open and close are its
// brackets): member is called with the index where a member starts and returns the index just
// past it. It reports whether b was walked up to its closing bracket, which must be its last
// byte.
func scanMembers(b []byte, open, close byte, member func(i int) (int, bool)) bool {
	if len(b) < 2 || b[0] != open {
		return false
	}
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == close {
		return i == len(b)-1
	}
	for i < len(b) {
		e, ok := member(i)
		if !ok {
			return false
		}
		if i = skipSpace(b, e); i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case close:
			return i == len(b)-1
		default:
			return false
		}
	}
	return false
}

// scanObject splits a valid JSON object into its members, values copied (a value must not
// keep the whole request body alive). A repeated key keeps its last value, as in
// encoding/json.
func scanObject(b []byte) (object, bool) {
	o := object{}
	ok := scanMembers(b, '{', '}', func(i int) (int, bool) {
		if b[i] != '"' {
			return 0, false
		}
		ke, ok := stringEnd(b, i)
		if !ok {
			return 0, false
		}
		key, ok := unquote(b[i:ke])
		if !ok {
			return 0, false
		}
		if i = skipSpace(b, ke); i >= len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipSpace(b, i+1)
		ve, ok := valueEnd(b, i)
		if ok {
			o[key] = bytes.Clone(b[i:ve])
		}
		return ve, ok
	})
	if !ok {
		return nil, false
	}
	return o, true
}

// scanArray splits a valid JSON array into its elements, copied.
func scanArray(b []byte) ([]json.RawMessage, bool) {
	a := []json.RawMessage{}
	ok := scanMembers(b, '[', ']', func(i int) (int, bool) {
		ve, ok := valueEnd(b, i)
		if ok {
			a = append(a, bytes.Clone(b[i:ve]))
		}
		return ve, ok
	})
	if !ok {
		return nil, false
	}
	return a, true
}

// unquote decodes a valid JSON string literal. It declines (false) what it does not decode
// exactly as encoding/json does: invalid UTF-8 and surrogate escapes, which encoding/json
// replaces by U+FFFD.
func unquote(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	b = b[1 : len(b)-1]
	esc := bytes.IndexByte(b, '\\')
	if esc < 0 {
		if !utf8.Valid(b) {
			return "", false
		}
		return string(b), true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	out := make([]byte, esc, len(b))
	copy(out, b[:esc])
	for i := esc; i < len(b); {
		c := b[i]
		if c != '\\' {
			j := bytes.IndexByte(b[i:], '\\')
			if j < 0 {
				out = append(out, b[i:]...)
				break
			}
			out = append(out, b[i:i+j]...)
			i += j
			continue
		}
		if i+1 >= len(b) {
			return "", false
		}
		switch b[i+1] {
		case '"', '\\', '/':
			out = append(out, b[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b[i+2:])
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				// Only a high+low pair is decoded here; encoding/json turns anything else
				// into U+FFFD.
				if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
					return "", false
				}
				lo, ok := hex4(b[i+8:])
				if !ok {
					return "", false
				}
				r = utf16.DecodeRune(r, lo)
				if r == utf8.RuneError {
					return "", false
				}
				out = utf8.AppendRune(out, r)
				i += 12
				continue
			}
			out = utf8.AppendRune(out, r)
			i += 6
			continue
		default:
			return "", false
		}
		i += 2
	}
	return string(out), true
}
