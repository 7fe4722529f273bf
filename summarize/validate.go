package summarize

// Validating an LLM's answer before it may become a summary.

import (
	"errors"
	"fmt"
	"strings"
)

// errorPrefixes start answers that are error texts or refusals, never summaries (compared in
// lowercase against the trimmed answer).
var errorPrefixes = []string{
	"error", "an error occurred", "i'm sorry", "i’m sorry", "i am sorry", "sorry", "i cannot", "i can't", "i can’t",
	"i can not", "i'm unable", "i am unable", "unable to", "as an ai", "as a language model", "internal server error",
	"bad gateway", "service unavailable", "gateway timeout", "upstream", "request failed", "failed to",
	"<!doctype", "<html", "{\"error\"", "{\"type\":\"error\"", "exception", "traceback", "rate limit",
	"too many requests", "overloaded", "quota",
}

// errorPhrases mark an error text when they appear before the summary's first heading (a
// summary may well discuss rate limits in its sections; a preamble saying so is an error).
var errorPhrases = []string{
	"rate limit", "rate_limit", "internal server error", "service unavailable", "overloaded", "quota exceeded",
	"insufficient_quota", "too many requests", "bad gateway", "gateway timeout", "context length", "context_length",
	"as an ai", "i cannot", "i can't", "i'm sorry", "i am sorry", "i'm unable", "i am unable",
}

// greetingPrefixes and greetingPhrases mark a chat greeting instead of a summary.
var (
	greetingPrefixes = []string{"hello", "hi!", "hi,", "hi ", "hi.", "hey", "greetings", "good morning", "good afternoon", "good evening", "welcome"}
	greetingPhrases  = []string{"how can i help", "how can i assist", "how may i help", "how may i assist", "what can i do for you", "what can i help"}
)

// validateAnswer checks a normalized LLM answer: not empty, not an error text, not a
// greeting, with the required headings, within 1.5x the target (when there is one).
func validateAnswer(text string, sp *instrSpec, target int, c TokenCounter) error {
	t := strings.TrimSpace(text)
	if t == "" {
		return errors.New("empty answer")
	}
	low := strings.ToLower(firstBytes(t, 4096))
	for _, p := range errorPrefixes {
		if strings.HasPrefix(low, p) {
			return fmt.Errorf("error text: %q", oneLine(firstBytes(t, 120), 80))
		}
	}
	for _, p := range greetingPrefixes {
		if strings.HasPrefix(low, p) {
			return fmt.Errorf("greeting: %q", oneLine(firstBytes(t, 120), 80))
		}
	}
	pre := strings.ToLower(preamble(t))
	for _, p := range errorPhrases {
		if strings.Contains(pre, p) {
			return fmt.Errorf("error text: %q", oneLine(firstBytes(t, 120), 80))
		}
	}
	for _, p := range greetingPhrases {
		if strings.Contains(pre, p) {
			return fmt.Errorf("greeting: %q", oneLine(firstBytes(t, 120), 80))
		}
	}
	if err := checkSections(t); err != nil {
		return err
	}
	var missing []string
	for _, h := range sp.required() {
		if !hasHeading(t, h) {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("answer without headings %s", strings.Join(missing, ", "))
	}
	if target > 0 {
		if n := safeCount(c, t); n*2 > target*3 {
			return fmt.Errorf("oversize answer: %d tokens > 1.5 x target %d", n, target)
		}
	}
	return nil
}

// itemRefusals start a section item that is the model refusing or apologizing, never a fact
// of the conversation (compared in lowercase against the item without its bullet).
var itemRefusals = []string{
	"i'm sorry", "i’m sorry", "i am sorry", "sorry, i", "sorry, but", "i apologize", "my apologies", "i cannot", "i can't", "i can’t",
	"i can not", "i'm unable", "i’m unable", "i am unable", "i won't", "i will not", "i'm not able", "i am not able",
	"as an ai", "as a language model", "as an assistant", "unfortunately, i", "i'm afraid i", "i am afraid i",
	"i don't have access", "i do not have access", "i'm not comfortable", "i must decline", "i have to decline",
}

// itemErrors start a section item that is an error text standing in for content (an API or
// gateway error body, an HTML error page), never a summary item: a summary quotes the
// conversation's errors after a label ("- Error: ...", "`cmd` → exit 1: ...").
var itemErrors = []string{
	"<!doctype", "<html", "{\"error\"", "{\"type\":\"error\"", "internal server error", "bad gateway", "service unavailable",
	"gateway timeout", "an error occurred", "error occurred while", "request failed", "upstream connect error",
	"upstream request timeout", "the server had an error", "the model is overloaded", "rate limit exceeded",
	"rate limit reached", "too many requests", "content filter", "content_filter", "content management policy",
}

// checkSections rejects an answer with the right headings whose sections hold a refusal or
// an error text instead of content: "I'm sorry, I can't help with that." as an item.
func checkSections(t string) error {
	seen := false
	for line := range strings.Lines(t) {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "#") {
			seen = true
			continue
		}
		if !seen || l == "" {
			continue
		}
		item := strings.ToLower(strings.TrimSpace(strings.Trim(trimBullet(l), "*_>\"“ ")))
		for _, p := range itemRefusals {
			if strings.HasPrefix(item, p) {
				return fmt.Errorf("refusal inside a section: %q", oneLine(firstBytes(l, 120), 80))
			}
		}
		for _, p := range itemErrors {
			if strings.HasPrefix(item, p) {
				return fmt.Errorf("error text inside a section: %q", oneLine(firstBytes(l, 120), 80))
			}
		}
		for _, p := range greetingPhrases {
			if strings.Contains(item, p) {
				return fmt.Errorf("greeting inside a section: %q", oneLine(firstBytes(l, 120), 80))
			}
		}
	}
	return nil
}

// trimBullet drops a list marker ("- ", "* ", "+ ", "1. ", "1) ") from a line.
func trimBullet(l string) string {
	for _, m := range []string{"- ", "* ", "+ ", "• "} {
		if strings.HasPrefix(l, m) {
			return strings.TrimSpace(l[len(m):])
		}
	}
	i := 0
	for i < len(l) && l[i] >= '0' && l[i] <= '9' {
		i++
	}
	if i > 0 && i+1 < len(l) && (l[i] == '.' || l[i] == ')') && l[i+1] == ' ' {
		return strings.TrimSpace(l[i+2:])
	}
	return l
}

// preamble returns the text before the first heading line (all of it, bounded, if none).
func preamble(t string) string {
	rest := t
	off := 0
	for len(rest) > 0 && off < 1<<16 {
		line := rest
		next := len(rest)
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			line, next = rest[:i], i+1
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			return t[:off]
		}
		off += next
		rest = rest[next:]
	}
	return firstBytes(t, 1<<16)
}

// hasHeading reports whether t has a line that is heading h (case-insensitive, with optional
// trailing colon or bold markers).
func hasHeading(t, h string) bool {
	want := strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
	for line := range strings.Lines(t) {
		l := strings.TrimSpace(line)
		if !strings.HasPrefix(l, "##") || strings.HasPrefix(l, "###") {
			continue
		}
		l = strings.TrimSpace(strings.Trim(strings.TrimSpace(strings.TrimLeft(l, "#")), "*:"))
		if strings.ToLower(strings.TrimSpace(l)) == want {
			return true
		}
	}
	return false
}

// normalizeAnswer strips what models wrap around a summary: a <think> block, a code fence,
// and any preamble before the title or the first heading ("Here is the summary:").
func normalizeAnswer(s string) string {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "<think>") {
		if i := strings.Index(t, "</think>"); i >= 0 {
			t = strings.TrimSpace(t[i+len("</think>"):])
		}
	}
	if strings.HasPrefix(t, "```") {
		if nl := strings.IndexByte(t, '\n'); nl >= 0 {
			body := strings.TrimSpace(t[nl+1:])
			if strings.HasSuffix(body, "```") {
				t = strings.TrimSpace(strings.TrimSuffix(body, "```"))
			}
		}
	}
	return t
}

// stripPreamble drops the text before the title (or the first "## " heading when there is no
// title); the caller has already rejected preambles that are error texts or greetings.
func stripPreamble(t string) string {
	if i := lineIndex(t, Title); i >= 0 {
		return t[i:]
	}
	if i := strings.Index(t, "\n## "); i >= 0 && !strings.HasPrefix(t, "## ") {
		return t[i+1:]
	}
	return t
}

// lineIndex returns the offset of the first line of t equal to line (trimmed), or -1.
func lineIndex(t, line string) int {
	off := 0
	for off < len(t) {
		end := strings.IndexByte(t[off:], '\n')
		if end < 0 {
			end = len(t) - off
		}
		if strings.TrimSpace(t[off:off+end]) == line {
			return off
		}
		off += end + 1
	}
	return -1
}

// finishAnswer validates an answer and assembles the stored summary: the archive guide
// verbatim at the top (prepended even when the model omitted it, and not repeated when it
// copied it), then the title and the model's sections.
func finishAnswer(a answer, req Request, sp *instrSpec, c TokenCounter) (string, error) {
	t := normalizeAnswer(a.text)
	if err := validateAnswer(t, sp, req.TargetTokens, c); err != nil {
		return "", err
	}
	if a.truncated {
		return "", errors.New("answer cut at the output token limit")
	}
	guide := strings.TrimSpace(req.ArchiveGuide)
	if guide != "" {
		if i := strings.Index(t, guide); i >= 0 {
			t = strings.TrimSpace(t[:i] + t[i+len(guide):])
		}
	}
	t = stripPreamble(t)
	if lineIndex(t, Title) < 0 {
		t = Title + "\n" + t
	}
	t = strings.TrimSpace(t) + "\n"
	if req.ArchiveGuide != "" && guide != "" {
		t = strings.TrimRight(validUTF8(req.ArchiveGuide), "\n") + "\n\n" + t
	}
	return t, nil
}
