package summarize

// Bounded text scanning shared by the extractive summarizer and the prompt builder: windows
// of a message's text (never the whole of a 50 MB tool result), entity tokenizing, error lines,
// exit codes, sentences and fenced shell commands. Every function here does work linear in
// its input and allocates at most a copy of it.

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ctxmgr/ctxmgr/chat"
)

// window is a bounded view of a message's text: the whole text when it is short, else its
// first and last bytes. Both pieces are valid UTF-8 (a rune cut by the window is dropped).
type window struct {
	head, tail string // tail is empty unless the text was cut
	total      int    // bytes of the whole text
}

// cut reports whether the window left bytes out.
func (w window) cut() bool { return w.total > len(w.head)+len(w.tail) }

// all returns the window's text, head and tail joined by a newline when cut.
func (w window) all() string {
	if w.tail == "" {
		return w.head
	}
	return w.head + "\n" + w.tail
}

// textWindow returns a window of at most head+tail bytes over the text parts of parts,
// joined by newlines as chat.Message.Text joins them, without building the whole text.
func textWindow(parts []chat.Part, head, tail int) window {
	total, n := 0, 0
	for i := range parts {
		if parts[i].Type == chat.PartText {
			if n > 0 {
				total++
			}
			total += len(parts[i].Text)
			n++
		}
	}
	if head < 0 {
		head = 0
	}
	if tail < 0 {
		tail = 0
	}
	if total <= head+tail {
		var b strings.Builder
		b.Grow(total)
		k := 0
		for i := range parts {
			if parts[i].Type == chat.PartText {
				if k > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(parts[i].Text)
				k++
			}
		}
		return window{head: validUTF8(b.String()), total: total}
	}
	// Head: the first head bytes.
	var hb strings.Builder
	hb.Grow(head)
	k := 0
	for i := range parts {
		if hb.Len() >= head {
			break
		}
		if parts[i].Type != chat.PartText {
			continue
		}
		if k > 0 {
			hb.WriteByte('\n')
		}
		k++
		t := parts[i].Text
		if room := head - hb.Len(); len(t) > room {
			t = t[:max(room, 0)]
		}
		hb.WriteString(t)
	}
	// Tail: the last tail bytes, collected backwards.
	var pieces []string
	got := 0
	first := true
	for i := len(parts) - 1; i >= 0 && got < tail; i-- {
		if parts[i].Type != chat.PartText {
			continue
		}
		if !first {
			pieces = append(pieces, "\n")
			got++
			if got >= tail {
				break
			}
		}
		first = false
		t := parts[i].Text
		if room := tail - got; len(t) > room {
			t = t[len(t)-room:]
		}
		pieces = append(pieces, t)
		got += len(t)
	}
	var tb strings.Builder
	tb.Grow(got)
	for i := len(pieces) - 1; i >= 0; i-- {
		tb.WriteString(pieces[i])
	}
	h := trimRuneEdges(hb.String(), false)
	t := trimRuneEdges(tb.String(), true)
	return window{head: validUTF8(h), tail: validUTF8(t), total: total}
}

// trimRuneEdges drops a rune cut in half at the end (atStart false) or the start (atStart
// true) of s.
func trimRuneEdges(s string, atStart bool) string {
	if atStart {
		for i := 0; i < len(s) && i < utf8.UTFMax; i++ {
			if utf8.RuneStart(s[i]) {
				return s[i:]
			}
		}
		return s
	}
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if utf8.FullRuneInString(s[i:]) {
				return s
			}
			return s[:i]
		}
	}
	return s
}

// validUTF8 replaces invalid UTF-8 with U+FFFD runs collapsed to one.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// clip cuts s to at most n bytes at a rune boundary, marking the cut with an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 3 {
		return ""
	}
	return s[:chat.RuneStart(s, n-3)] + "..."
}

// oneLine collapses all whitespace runs (newlines included) into single spaces and trims,
// bounding the result to n bytes. The input is scanned only as far as needed.
func oneLine(s string, n int) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if b.Len() > n+8 {
			break
		}
		switch r {
		case ' ', '\t', '\n', '\r', '\v', '\f', 0x85, 0xA0, 0x2028, 0x2029:
			space = b.Len() > 0
			continue
		}
		if r < 0x20 || r == 0x7f {
			continue // control characters never help and can break rendering
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return clip(b.String(), n)
}

// ---- entities --------------------------------------------------------------------------------

// entKind is the category of a critical-context entity.
type entKind uint8

const (
	entFile entKind = iota
	entIdent
	entURL
	entID
	entError
	entOther
	numEntKinds
)

// entLabels are the Critical Context line labels, by kind.
var entLabels = [numEntKinds]string{"Files", "Identifiers", "URLs", "IDs", "Error", ""}

// isDelim reports whether b separates entity tokens.
func isDelim(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', '\v', '\f', '"', '\'', '`', '(', ')', '[', ']', '{', '}', '<', '>',
		',', ';', '|', '*', '!', '$', '^', '\\', '=':
		return true
	}
	return b < 0x20 || b == 0x7f
}

// forEachToken calls fn with each delimiter-separated token of s.
// The closing tag "</output>" yields no "/output" path.
func forEachToken(s string, fn func(string)) {
	start := -1
	emit := func(tok string) {
		if tok[0] == '/' && start > 0 && s[start-1] == '<' {
			return
		}
		fn(tok)
	}
	for i := 0; i < len(s); i++ {
		if isDelim(s[i]) {
			if start >= 0 {
				emit(s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		emit(s[start:])
	}
}

// knownExt are file extensions that make a bare name a file name.
var knownExt = map[string]bool{
	"py": true, "pyi": true, "pyx": true, "go": true, "js": true, "mjs": true, "cjs": true, "ts": true,
	"tsx": true, "jsx": true, "rs": true, "java": true, "kt": true, "scala": true, "c": true, "h": true,
	"cc": true, "cpp": true, "hpp": true, "cxx": true, "rb": true, "php": true, "cs": true, "swift": true,
	"sh": true, "bash": true, "zsh": true, "md": true, "rst": true, "txt": true, "json": true,
	"jsonl": true, "yaml": true, "yml": true, "toml": true, "ini": true, "cfg": true,
	"xml": true, "html": true, "htm": true, "css": true, "scss": true, "sql": true, "proto": true,
	"lock": true, "mod": true, "sum": true, "log": true, "csv": true, "tsv": true, "ipynb": true,
	"lua": true, "pl": true, "vue": true, "svelte": true, "dart": true, "ex": true, "exs": true,
	"erl": true, "hs": true, "ml": true, "tf": true, "gradle": true, "patch": true, "diff": true,
	"dockerfile": true, "mk": true, "cmake": true, "r": true, "jl": true, "zig": true,
	"nim": true, "sol": true, "graphql": true, "tex": true, "svg": true, "png": true, "jpg": true,
	"pdf": true, "sqlite": true, "pem": true, "whl": true, "gz": true,
	"zip": true, "tar": true,
}

// classify sorts a raw token into an entity kind, returning the normalized entity and ok.
// numbers says whether bare long numbers count as ids (true for user and assistant text).
func classify(tok string, numbers bool) (string, entKind, bool) {
	if len(tok) < 3 || len(tok) > 400 {
		return "", 0, false
	}
	if hasPrefixFold(tok, "http://") || hasPrefixFold(tok, "https://") {
		u := strings.TrimRight(tok, ".,:;?!")
		if len(u) < 12 || len(u) > 300 || !utf8.ValidString(u) {
			return "", 0, false
		}
		return u, entURL, true
	}
	// "path/to/file.py:123:" and "file.py:12" -> the path.
	if i := strings.IndexByte(tok, ':'); i >= 0 {
		tok = tok[:i]
	}
	tok = strings.TrimRight(tok, ".,?-")
	tok = strings.TrimLeft(tok, ",?-+")
	if len(tok) < 3 {
		return "", 0, false
	}
	if strings.IndexByte(tok, '/') >= 0 {
		if p, ok := pathEntity(tok); ok {
			return p, entFile, true
		}
		return "", 0, false
	}
	if tok[0] == '#' {
		rest := tok[1:]
		if len(rest) >= 3 && len(rest) <= 20 && isAlnum(rest) && hasDigit(rest) {
			return tok, entID, true
		}
		return "", 0, false
	}
	if strings.IndexByte(tok, '.') >= 0 {
		tok = strings.TrimLeft(tok, ".")
		if len(tok) < 3 {
			return "", 0, false
		}
		if isFileName(tok) {
			return tok, entFile, true
		}
		if isDotted(tok) {
			return tok, entIdent, true
		}
		return "", 0, false
	}
	if isUUID(tok) {
		return tok, entID, true
	}
	if len(tok) > 80 || !isIdentChars(tok) {
		return "", 0, false
	}
	if isIdentifier(tok) {
		return tok, entIdent, true
	}
	if isCodeID(tok) {
		return tok, entID, true
	}
	if numbers && len(tok) >= 5 && len(tok) <= 20 && isDigits(tok) {
		return tok, entID, true
	}
	return "", 0, false
}

func hasPrefixFold(s, p string) bool {
	return len(s) >= len(p) && strings.EqualFold(s[:len(p)], p)
}

// pathEntity accepts file-system paths: absolute or ./ ../ ~/ paths, relative paths whose last
// segment has an extension, and relative paths of three or more segments. "and/or" and other
// two-word slashes are not paths.
func pathEntity(tok string) (string, bool) {
	if len(tok) > 260 || strings.Contains(tok, "//") {
		return "", false
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if !(isAlnumByte(c) || c == '_' || c == '.' || c == '-' || c == '/' || c == '~' || c == '+' || c == '@') {
			return "", false
		}
	}
	tok = strings.TrimRight(tok, ".")
	if first, _, _ := strings.Cut(tok, "/"); isSedCommand(first) {
		return "", false // s/old/new/g
	}
	rooted := strings.HasPrefix(tok, "/") || strings.HasPrefix(tok, "./") || strings.HasPrefix(tok, "../") || strings.HasPrefix(tok, "~/")
	segs := 0
	letter := false
	last := ""
	for _, s := range strings.Split(tok, "/") {
		if s == "" || s == "." || s == ".." || s == "~" {
			continue
		}
		segs++
		last = s
		if !letter && hasLetter(s) {
			letter = true
		}
	}
	if segs == 0 || !letter {
		return "", false
	}
	ext := hasExt(last)
	switch {
	case rooted && (segs >= 2 || ext || len(tok) >= 5):
	case !rooted && (ext || segs >= 3):
	default:
		return "", false
	}
	return tok, true
}

// isSedCommand reports whether s is the command part of a sed expression ("s", "1,10s").
func isSedCommand(s string) bool {
	if s == "" {
		return false
	}
	last := s[len(s)-1]
	if last != 's' && last != 'y' {
		return false
	}
	for i := 0; i < len(s)-1; i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] == ',' || s[i] == '$') {
			return false
		}
	}
	return true
}

// hasExt reports whether a file name ends in a plausible extension.
func hasExt(name string) bool {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return false
	}
	ext := name[i+1:]
	if len(ext) > 8 || !hasLetter(ext) {
		return false
	}
	return isAlnum(ext)
}

// isFileName reports whether a dotted token without a slash is a file name with a known
// extension ("setup.py", "go.mod").
func isFileName(tok string) bool {
	i := strings.LastIndexByte(tok, '.')
	if i <= 0 || i == len(tok)-1 {
		return false
	}
	if !knownExt[strings.ToLower(tok[i+1:])] {
		return false
	}
	for j := 0; j < i; j++ {
		c := tok[j]
		if !(isAlnumByte(c) || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// isDotted accepts dotted names such as models.ManyToManyField or os.path.join: two or more
// identifier segments, one of them at least three bytes long, five bytes in all ("e.g" is not).
func isDotted(tok string) bool {
	if len(tok) < 5 || len(tok) > 120 {
		return false
	}
	segs, long := 0, false
	for _, s := range strings.Split(tok, ".") {
		if s == "" || !isIdentChars(s) || (s[0] >= '0' && s[0] <= '9') {
			return false
		}
		segs++
		if len(s) >= 3 {
			long = true
		}
	}
	return segs >= 2 && long
}

func isIdentChars(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(isAlnumByte(s[i]) || s[i] == '_') {
			return false
		}
	}
	return true
}

// isIdentifier accepts snake_case (an underscore between alphanumerics), dunder names and
// CamelCase / camelCase (a lowercase letter followed by an uppercase one), four bytes or more.
func isIdentifier(s string) bool {
	if len(s) < 4 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	if strings.HasPrefix(s, "__") && strings.HasSuffix(s, "__") && len(s) > 4 {
		return true
	}
	for i := 1; i+1 < len(s); i++ {
		if s[i] == '_' && isAlnumByte(s[i-1]) && isAlnumByte(s[i+1]) {
			return hasLetter(s)
		}
	}
	for i := 0; i+1 < len(s); i++ {
		if isLower(s[i]) && isUpper(s[i+1]) {
			return true
		}
	}
	return false
}

// isCodeID accepts reservation-style ids: 5-12 uppercase letters and digits with both, and
// hexadecimal hashes of 7-40 digits with both letters and digits.
func isCodeID(s string) bool {
	if len(s) >= 5 && len(s) <= 12 {
		up, dig, ok := false, false, true
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case isUpper(c):
				up = true
			case c >= '0' && c <= '9':
				dig = true
			default:
				ok = false
			}
		}
		if ok && up && dig {
			return true
		}
	}
	if len(s) >= 7 && len(s) <= 40 {
		lo, dig := false, false
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c >= 'a' && c <= 'f':
				lo = true
			case c >= '0' && c <= '9':
				dig = true
			default:
				return false
			}
		}
		return lo && dig
	}
	return false
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func isLower(c byte) bool     { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool     { return c >= 'A' && c <= 'Z' }
func isAlnumByte(c byte) bool { return isLower(c) || isUpper(c) || c >= '0' && c <= '9' }

func isAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isAlnumByte(s[i]) {
			return false
		}
	}
	return s != ""
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func hasDigit(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			return true
		}
	}
	return false
}

func hasLetter(s string) bool {
	for i := 0; i < len(s); i++ {
		if isLower(s[i]) || isUpper(s[i]) {
			return true
		}
	}
	return false
}

// ---- errors and exit codes -------------------------------------------------------------------

// ErrorSeverity rates how strongly a line of a tool's output reports a problem; it is the
// one heuristic for error lines, used by the summarizer (the most telling error line of a
// result) and by the snippets that replace capped results (the notable lines of what they
// omit):
//
//   - 4: an exception line ("ValueError: x", a dotted name ending in Error or Exception), or
//     a line starting with panic:, fatal:, error:, ERROR, FAILED or FATAL;
//   - 3: a line containing error:, Error:, " FAILED", panic: or fatal:;
//   - 2: a line containing Error or Exception;
//   - 1: a line containing, in any case, one of the notable words: error, fail, exception,
//     traceback, panic, fatal, warning, assert, denied, not found, cannot, undefined (in its
//     first 4 KB);
//   - 0: none of these.
func ErrorSeverity(line string) int {
	if s := errorStrength(line); s > 0 {
		return s + 1
	}
	if len(line) > 4096 {
		line = line[:4096]
	}
	low := strings.ToLower(line)
	for _, k := range notableWords {
		if strings.Contains(low, k) {
			return 1
		}
	}
	return 0
}

var notableWords = []string{"error", "fail", "exception", "traceback", "panic", "fatal", "warning", "assert", "denied", "not found", "cannot", "undefined"}

// errorStrength is ErrorSeverity above the notable words: 3 for an exception line or a line
// starting with an error marker, 2 for one containing such a marker, 1 for Error or Exception.
func errorStrength(line string) int {
	l := strings.TrimSpace(line)
	if len(l) < 4 {
		return 0
	}
	// pytest prefixes assertion details with "E   ".
	if strings.HasPrefix(l, "E ") {
		l = strings.TrimSpace(l[2:])
	}
	for _, p := range []string{"panic:", "fatal:", "fatal error:", "error:", "Error:", "ERROR:", "ERROR ", "FAILED", "FATAL"} {
		if strings.HasPrefix(l, p) {
			return 3
		}
	}
	if head, _, ok := strings.Cut(l, ":"); ok || len(l) < 80 {
		if isExceptionName(head) {
			return 3
		}
	}
	if strings.Contains(l, "error:") || strings.Contains(l, "Error:") || strings.Contains(l, " FAILED") ||
		strings.Contains(l, "panic:") || strings.Contains(l, "fatal:") {
		return 2
	}
	if strings.Contains(l, "Error") || strings.Contains(l, "Exception") {
		return 1
	}
	return 0
}

// isExceptionName reports whether s is a (dotted) name ending in Error or Exception, as a
// Python traceback's last line starts ("django.core.exceptions.FieldError").
func isExceptionName(s string) bool {
	if len(s) < 5 || len(s) > 120 {
		return false
	}
	if !(strings.HasSuffix(s, "Error") || strings.HasSuffix(s, "Exception") || s == "KeyboardInterrupt" || s == "SystemExit") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(isAlnumByte(s[i]) || s[i] == '_' || s[i] == '.') {
			return false
		}
	}
	return true
}

// bestErrorLine returns the most telling error line of a window: the last line of the highest
// strength (a traceback's final exception line beats the "Error" words above it).
func bestErrorLine(w window) (string, int) {
	best, bestS := "", 0
	scan := func(s string) {
		for len(s) > 0 {
			line := s
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				line, s = s[:i], s[i+1:]
			} else {
				s = ""
			}
			if len(line) > 2000 {
				line = line[:2000]
			}
			if st := errorStrength(line); st > 0 && st >= bestS {
				best, bestS = line, st
			}
		}
	}
	scan(w.head)
	scan(w.tail)
	if bestS == 0 {
		return "", 0
	}
	l := strings.TrimSpace(best)
	if strings.HasPrefix(l, "E ") {
		l = strings.TrimSpace(l[2:])
	}
	return oneLine(l, 200), bestS
}

var (
	returnCodeTag = regexp.MustCompile(`<returncode>\s*(-?\d{1,6})\s*</returncode>`)
	exitCodeText  = regexp.MustCompile(`(?i)\b(?:exit(?:ed)?(?: with)?[ _](?:code|status)|exit status|return[ _]?code|returncode|exitcode)\s*[:=]?\s*(-?\d{1,6})\b`)
)

// exitCode finds a command's exit code: a mini-swe-agent <returncode>N</returncode> tag near
// the start, else the last "exit code N" / "Exit status N" / "returncode: N" in the first or
// last 4 KB.
func exitCode(w window) (int, bool) {
	h := w.head
	if len(h) > 512 {
		h = h[:512]
	}
	if m := returnCodeTag.FindStringSubmatch(h); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return n, true
		}
	}
	for _, s := range []string{lastBytes(w.tail, 4096), lastBytes(w.head, 4096), firstBytes(w.head, 4096)} {
		if s == "" {
			continue
		}
		ms := exitCodeText.FindAllStringSubmatch(s, -1)
		if len(ms) > 0 {
			if n, err := strconv.Atoi(ms[len(ms)-1][1]); err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func firstBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ---- sentences and commands ------------------------------------------------------------------

// stripCode removes fenced code blocks (``` ... ```) from s.
func stripCode(s string) string {
	if !strings.Contains(s, "```") {
		return s
	}
	var b strings.Builder
	in := false
	for len(s) > 0 {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i+1], s[i+1:]
		} else {
			s = ""
		}
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line)
		}
	}
	return b.String()
}

// sentences splits prose into sentences: at line breaks and after ., ! or ? followed by a
// space. Code blocks, list markers and a "THOUGHT:" prefix are removed; each sentence is one
// line of at most maxLen bytes. At most limit sentences are returned.
func sentences(s string, maxLen, limit int) []string {
	s = stripCode(s)
	var out []string
	for len(s) > 0 && len(out) < limit {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		line = strings.TrimSpace(line)
		line = strings.TrimPrefix(line, "THOUGHT:")
		line = trimListMarker(strings.TrimSpace(line))
		for line != "" && len(out) < limit {
			end := sentenceEnd(line)
			sent := strings.TrimSpace(line[:end])
			line = strings.TrimSpace(line[end:])
			if len(sent) >= 8 {
				out = append(out, oneLine(sent, maxLen))
			}
		}
	}
	return out
}

// sentenceEnd returns the index just after the first sentence of line.
func sentenceEnd(line string) int {
	for i := 0; i+1 < len(line); i++ {
		switch line[i] {
		case '.', '!', '?':
			if line[i+1] == ' ' && i >= 3 {
				// "e.g. x", "i.e. y": not an end.
				if line[i] == '.' && (strings.HasSuffix(line[:i], "e.g") || strings.HasSuffix(line[:i], "i.e") || strings.HasSuffix(line[:i], "etc") || strings.HasSuffix(line[:i], "vs")) {
					continue
				}
				return i + 1
			}
		}
	}
	return len(line)
}

// trimListMarker removes a leading "- ", "* ", "1. " or "1) " from line.
func trimListMarker(line string) string {
	if strings.HasPrefix(line, "- ") || strings.HasPrefix(line, "* ") || strings.HasPrefix(line, "+ ") {
		return strings.TrimSpace(line[2:])
	}
	i := 0
	for i < len(line) && i < 3 && line[i] >= '0' && line[i] <= '9' {
		i++
	}
	if i > 0 && i+1 < len(line) && (line[i] == '.' || line[i] == ')') && line[i+1] == ' ' {
		return strings.TrimSpace(line[i+2:])
	}
	return line
}

// shellBlocks returns the commands of the fenced shell blocks in an assistant text
// (```bash, ```sh, ```shell, ```console): how text-only agents such as mini-swe-agent act.
func shellBlocks(s string, limit int) []string {
	var out []string
	for len(out) < limit {
		i := strings.Index(s, "```")
		if i < 0 {
			break
		}
		rest := s[i+3:]
		nl := strings.IndexByte(rest, '\n')
		if nl < 0 {
			break
		}
		lang := strings.ToLower(strings.TrimSpace(rest[:nl]))
		body := rest[nl+1:]
		end := strings.Index(body, "```")
		if end < 0 {
			end = len(body)
		}
		switch lang {
		case "bash", "sh", "shell", "console", "zsh":
			if cmd := strings.TrimSpace(body[:end]); cmd != "" {
				out = append(out, cmd)
			}
		}
		if end+3 > len(body) {
			break
		}
		s = body[end+3:]
	}
	return out
}

// middleOut cuts s to at most n bytes by keeping its head and tail around a marker that says
// how much was left out.
func middleOut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	h := n / 2
	t := n - h
	head := trimRuneEdges(s[:h], false)
	tail := trimRuneEdges(s[len(s)-t:], true)
	return head + "\n[... " + strconv.Itoa(len(s)-len(head)-len(tail)) + " bytes omitted ...]\n" + tail
}
