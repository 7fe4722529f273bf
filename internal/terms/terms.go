// Package terms finds the salient terms of a text: the identifiers, paths, numbers and dotted
// names an agent refers back to. The pipeline keeps the lines holding the terms in play and
// learns reuse from them; replay measures recall by them. One definition serves both.
package terms

// Each calls f with every salient term of s, in order, repeats included: a maximal run of
// [A-Za-z0-9_./:-], trailing '.', ',' and ':' trimmed, at least 4 bytes long, containing '_',
// '/', '.', a digit or a lower-upper case change (camelCase).
func Each(s string, f func(string)) {
	for i := 0; i < len(s); {
		if !termByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && termByte(s[j]) {
			j++
		}
		t := s[i:j]
		i = j
		for len(t) > 0 && (t[len(t)-1] == '.' || t[len(t)-1] == ',' || t[len(t)-1] == ':') {
			t = t[:len(t)-1]
		}
		if len(t) >= 4 && salient(t) {
			f(t)
		}
	}
}

func termByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '/' || c == ':' || c == '-'
}

func salient(t string) bool {
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '_' || c == '/' || c == '.' || c >= '0' && c <= '9':
			return true
		case c >= 'A' && c <= 'Z' && i > 0 && t[i-1] >= 'a' && t[i-1] <= 'z':
			return true
		}
	}
	return false
}
