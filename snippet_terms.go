package ctxmgr

// Identifiers in play: the salient terms (paths, symbols, numbers, dotted names) of the
// messages the agent and the user wrote (the task, the assistant's text and its tool calls'
// arguments). When a tool result is cut to a snippet, its lines holding one of them are kept
// beside head, tail and error lines: they are what the conversation is about.

// maxTermsInPlay bounds the terms remembered per session.
const maxTermsInPlay = 1 << 14

// eachIdentifier calls f with every salient term of s: a maximal run of [A-Za-z0-9_./:-],
// trailing '.', ',' and ':' trimmed, at least 4 bytes long, containing '_', '/', '.', a digit
// or a lower-upper case change (camelCase).
func eachIdentifier(s string, f func(string)) {
	for i := 0; i < len(s); {
		if !identByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && identByte(s[j]) {
			j++
		}
		t := s[i:j]
		i = j
		for len(t) > 0 && (t[len(t)-1] == '.' || t[len(t)-1] == ',' || t[len(t)-1] == ':') {
			t = t[:len(t)-1]
		}
		if len(t) >= 4 && len(t) <= 200 && salientIdent(t) {
			f(t)
		}
	}
}

func identByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '/' || c == ':' || c == '-'
}

func salientIdent(t string) bool {
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

// addTerms remembers the identifiers of text as in play.
func (st *supState) addTerms(text string) {
	if st.terms == nil {
		st.terms = map[string]bool{}
	}
	eachIdentifier(text, func(t string) {
		if len(st.terms) < maxTermsInPlay {
			st.terms[t] = true
		}
	})
}

// inPlay reports whether a line holds an identifier in play.
func (st *supState) inPlay(line string) bool {
	if len(st.terms) == 0 {
		return false
	}
	if len(line) > 4096 {
		line = line[:4096]
	}
	found := false
	eachIdentifier(line, func(t string) {
		found = found || st.terms[t]
	})
	return found
}

// collectNew appends to st.newTerms the identifiers of text not in play yet.
func (st *supState) collectNew(text string) {
	eachIdentifier(text, func(t string) {
		if !st.terms[t] && !st.isNew[t] {
			if st.isNew == nil {
				st.isNew = map[string]bool{}
			}
			st.isNew[t] = true
			st.newTerms = append(st.newTerms, t)
		}
	})
}
