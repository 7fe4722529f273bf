package summarize

// TokenCounter counts the tokens of a text. tokens.Counter satisfies it; the package depends
// on this one-method interface only, so it does not import the tokens package.
type TokenCounter interface {
	Text(string) int
}

// ByteCounter is the fallback counter used when none is given: UTF-8 bytes / 4, rounded up
// (QwenPaw's heuristic). It over-counts English prose slightly and under-counts CJK; it is
// only a default.
type ByteCounter struct{}

// Text returns ceil(len(s)/4).
func (ByteCounter) Text(s string) int { return (len(s) + 3) / 4 }

// safeCount calls c.Text and never lets a misbehaving counter break a summary: a panic or a
// negative count falls back to the byte heuristic.
func safeCount(c TokenCounter, s string) (n int) {
	if c == nil {
		return ByteCounter{}.Text(s)
	}
	defer func() {
		if recover() != nil {
			n = ByteCounter{}.Text(s)
		}
	}()
	n = c.Text(s)
	if n < 0 {
		n = ByteCounter{}.Text(s)
	}
	return n
}
