package ctxmgr

import "github.com/ctxmgr/ctxmgr/internal/terms"

// Identifiers in play: the salient terms (paths, symbols, numbers, dotted names) of the
// messages the agent and the user wrote (the task, the assistant's text and its tool calls'
// arguments). When a tool result is cut to a snippet, its lines holding one of them are kept
// beside head, tail and error lines: they are what the conversation is about.

// maxTermsInPlay bounds the terms remembered per session.
const maxTermsInPlay = 1 << 14

// eachIdentifier calls f with every salient term of s (terms.Each) of at most 200 bytes:
// longer runs (hashes, base64) are no identifiers worth remembering.
func eachIdentifier(s string, f func(string)) {
	terms.Each(s, func(t string) {
		if len(t) <= 200 {
			f(t)
		}
	})
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
