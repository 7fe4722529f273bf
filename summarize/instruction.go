package summarize

import (
	"strings"
)

// group is one of the six required sections (Headings, in order).
type group int

const (
	gGoal group = iota
	gConstraints
	gProgress
	gDecisions
	gNext
	gContext
	numGroups
)

// groupWords are the words by which an instruction names a section.
var groupWords = [numGroups][]string{
	gGoal:        {"goal", "goals", "task", "tasks", "objective", "objectives", "request", "requests"},
	gConstraints: {"constraint", "constraints", "preference", "preferences", "requirement", "requirements", "rule", "rules"},
	gProgress:    {"progress", "done", "status", "command", "commands", "call", "calls", "blocked", "blockers", "outcome", "outcomes"},
	gDecisions:   {"decision", "decisions", "decided"},
	gNext:        {"next", "todo", "todos", "plan", "plans"},
	gContext:     {"context", "path", "paths", "file", "files", "identifier", "identifiers", "error", "errors", "id", "ids", "url", "urls"},
}

var (
	narrowWords  = map[string]bool{"only": true, "just": true, "exclusively": true, "solely": true}
	negateWords  = map[string]bool{"no": true, "not": true, "without": true, "drop": true, "omit": true, "skip": true, "exclude": true, "remove": true, "ignore": true, "forget": true, "except": true, "discard": true}
	shorterWords = map[string]bool{"short": true, "shorter": true, "brief": true, "briefer": true, "concise": true, "terse": true, "minimal": true, "smaller": true, "tiny": true}
	stopWords    = map[string]bool{
		"keep": true, "only": true, "just": true, "the": true, "and": true, "about": true, "with": true, "that": true,
		"this": true, "these": true, "those": true, "summary": true, "summarize": true, "please": true, "focus": true,
		"more": true, "less": true, "everything": true, "all": true, "details": true, "detail": true, "important": true,
		"from": true, "into": true, "what": true, "which": true, "make": true, "sure": true, "some": true, "any": true,
		"anything": true, "else": true, "compact": true, "section": true, "sections": true, "mention": true, "mentioned": true,
		"include": true, "including": true, "them": true, "their": true, "there": true, "then": true, "than": true,
		"also": true, "other": true, "others": true, "step": true, "steps": true, "under": true, "over": true,
	}
)

// instrSpec is what the summarizers understand of a user instruction.
type instrSpec struct {
	raw string
	// narrowed: keep holds the sections asked for ("keep only decisions"); the extractive
	// summarizer also keeps Critical Context.
	narrowed bool
	keep     [numGroups]bool
	// drop holds sections the instruction excludes ("no next steps").
	drop    [numGroups]bool
	shorter bool
	// terms are words and entities the instruction names; matching items rank higher.
	terms []string
}

// parseInstruction reads the simple instructions the summarizers obey. Anything else is only
// quoted in the summary (and passed to an LLM verbatim).
func parseInstruction(s string) instrSpec {
	sp := instrSpec{raw: oneLine(s, 500)}
	if sp.raw == "" {
		return sp
	}
	low := strings.ToLower(sp.raw)
	words := strings.FieldsFunc(low, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	})
	narrow := false
	mentioned := [numGroups]bool{}
	for i, w := range words {
		if narrowWords[w] || (w == "nothing" && i+1 < len(words) && words[i+1] == "but") {
			narrow = true
		}
		if shorterWords[w] {
			sp.shorter = true
		}
		for g := range numGroups {
			if !containsWord(groupWords[g], w) {
				continue
			}
			neg := false
			for j := max(0, i-3); j < i; j++ {
				if negateWords[words[j]] {
					neg = true
				}
			}
			if neg {
				sp.drop[g] = true
			} else {
				mentioned[g] = true
			}
		}
	}
	if narrow {
		for g := range numGroups {
			if mentioned[g] {
				sp.narrowed = true
				sp.keep[g] = true
			}
		}
	}
	// Terms: entities, and other content words of four letters or more.
	seen := map[string]bool{}
	forEachToken(sp.raw, func(tok string) {
		if name, _, ok := classify(tok, true); ok && !seen[name] {
			seen[name] = true
			sp.terms = append(sp.terms, strings.ToLower(name))
		}
	})
	for _, w := range words {
		if len(w) < 4 || stopWords[w] || narrowWords[w] || negateWords[w] || shorterWords[w] || seen[w] || isGroupWord(w) {
			continue
		}
		seen[w] = true
		sp.terms = append(sp.terms, w)
		if len(sp.terms) >= 12 {
			break
		}
	}
	return sp
}

func containsWord(list []string, w string) bool {
	for _, x := range list {
		if x == w {
			return true
		}
	}
	return false
}

func isGroupWord(w string) bool {
	for g := range numGroups {
		if containsWord(groupWords[g], w) {
			return true
		}
	}
	return false
}

// included reports whether the extractive summarizer fills section g under the instruction.
func (sp *instrSpec) included(g group) bool {
	if sp.drop[g] {
		return false
	}
	if sp.narrowed {
		return sp.keep[g] || g == gContext
	}
	return true
}

// required returns the headings an LLM answer must contain under the instruction: all of
// them, or only those asked for when the instruction narrows or drops sections.
func (sp *instrSpec) required() []string {
	var out []string
	for g := range numGroups {
		if sp.narrowed && !sp.keep[g] {
			continue
		}
		if sp.drop[g] {
			continue
		}
		out = append(out, Headings[g])
	}
	if len(out) == 0 {
		return Headings
	}
	return out
}

// boost reports whether text mentions one of the instruction's terms.
func (sp *instrSpec) boost(text string) bool {
	if len(sp.terms) == 0 {
		return false
	}
	low := strings.ToLower(text)
	for _, t := range sp.terms {
		if strings.Contains(low, t) {
			return true
		}
	}
	return false
}
