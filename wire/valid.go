package wire

import "encoding/binary"

// validJSON reports whether b is one JSON value, with optional white space around it: what
// json.Valid reports, byte for byte (FuzzValidJSON compares the two on arbitrary input, and
// the seed corpus runs in every go test). It accepts what encoding/json's scanner accepts:
// bytes that are not UTF-8 inside strings (checkText rejects them where they matter), and at
// most maxDepth nested arrays and objects.
//
// Every request's new messages are validated before they are decoded, and a request that
// starts a session is validated whole. encoding/json's scanner takes a call per byte, some
// 150 MB/s; message content is nearly all string bytes, which this one passes over eight at
// a time (BenchmarkValidJSON). It is on the path between a request's last byte and its
// forwarding.
func validJSON(b []byte) bool {
	// stack holds the open containers, '{' or '['; the first 64 levels need no allocation.
	var buf [64]byte
	stack := buf[:0]
	i := skipSpace(b, 0)
value:
	if i >= len(b) {
		return false
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		if len(stack) == maxDepth {
			return false
		}
		stack = append(stack, c)
		// '}' and ']' are each two bytes after their opening bracket in ASCII.
		if i = skipSpace(b, i+1); i < len(b) && b[i] == c+2 {
			stack = stack[:len(stack)-1]
			i++
			goto after
		}
		if c == '{' {
			goto key
		}
		goto value
	case c == '"':
		var ok bool
		if i, ok = validString(b, i); !ok {
			return false
		}
	case c == '-' || c >= '0' && c <= '9':
		var ok bool
		if i, ok = validNumber(b, i); !ok {
			return false
		}
	case c == 't':
		if !hasLiteral(b, i, "true") {
			return false
		}
		i += 4
	case c == 'f':
		if !hasLiteral(b, i, "false") {
			return false
		}
		i += 5
	case c == 'n':
		if !hasLiteral(b, i, "null") {
			return false
		}
		i += 4
	default:
		return false
	}
after:
	i = skipSpace(b, i)
	if len(stack) == 0 {
		return i == len(b)
	}
	if i >= len(b) {
		return false
	}
	switch top := stack[len(stack)-1]; {
	case b[i] == ',':
		i = skipSpace(b, i+1)
		if top == '{' {
			goto key
		}
		goto value
	case top == '{' && b[i] == '}', top == '[' && b[i] == ']':
		stack = stack[:len(stack)-1]
		i++
		goto after
	}
	return false
key:
	// An object member: a string, a colon, a value.
	if i >= len(b) || b[i] != '"' {
		return false
	}
	var ok bool
	if i, ok = validString(b, i); !ok {
		return false
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return false
	}
	i = skipSpace(b, i+1)
	goto value
}

// maxDepth is encoding/json's limit on nested arrays and objects: one more is an error.
const maxDepth = 10000

func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainBytes reports whether none of the 8 bytes of x is a control character, a quote or a
// backslash: the bytes a string passes over as they are.
func plainBytes(x uint64) bool {
	control := (x - 0x20*ones) & ^x
	quote := x ^ '"'*ones
	backslash := x ^ '\\'*ones
	return (control|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs == 0
}

// validString returns the index just past the string starting at b[i] (a quote), and
// whether it is one: no control characters, and only JSON's escapes.
func validString(b []byte, i int) (int, bool) {
	i++
	for {
		for i+8 <= len(b) && plainBytes(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return 0, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false
				}
				if _, ok := hex4(b[i+2 : i+6]); !ok {
					return 0, false
				}
				i += 6
			default:
				return 0, false
			}
		case c < 0x20:
			return 0, false
		default:
			i++
		}
	}
}

// validNumber returns the index just past the number starting at b[i] ('-' or a digit), and
// whether it is one: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. What follows it is the
// caller's to check ("01" is a number and a stray digit).
func validNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
