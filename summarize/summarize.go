// Package summarize turns evicted conversation turns into the compact summary that replaces
// them: a dialog path guide plus structured sections (Goal, Constraints & Preferences,
// Progress, Key Decisions, Next Steps, Critical Context).
package summarize

import (
	"context"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Request is what a summarizer summarizes.
type Request struct {
	// Previous is the current summary ("" if none); the new summary updates it incrementally
	// and must keep what still matters from it.
	Previous string
	// Messages are the evicted messages, verbatim (original tool results, not masked views).
	Messages []chat.Message
	// First is the history position of Messages[0], for the dialog path guide.
	First int
	// Instruction is an optional user instruction ("/compact keep only decisions").
	Instruction string
	// TargetTokens is the size the summary should stay within.
	TargetTokens int
	// ArchiveGuide says where the raw evicted messages can be read back; summarizers include it
	// verbatim at the top of the summary.
	ArchiveGuide string
}

// Result is a summary and what it cost.
type Result struct {
	Text string
	// InputTokens and OutputTokens are what an LLM call billed (or, for the extractive
	// summarizer, would have billed: the prompt with the messages, and the summary).
	InputTokens  int
	OutputTokens int
	// Summarizer names what produced Text ("extractive", "llm:<model>"; a summarizer standing
	// in for a failed one is named by FallbackName: "extractive (fallback)").
	Summarizer string
	// Fallback is set when an LLM summarizer failed and the extractive one stood in;
	// FallbackReason says why (timeout, HTTP 529, answer without headings, ...).
	Fallback       bool
	FallbackReason string
	// Attempts counts LLM calls made.
	Attempts int
}

// FallbackName is the name recorded for a summary made by a fallback summarizer named name
// ("extractive" gives "extractive (fallback)", as store.Summary documents).
func FallbackName(name string) string {
	if strings.HasSuffix(name, fallbackSuffix) {
		return name
	}
	return name + fallbackSuffix
}

const fallbackSuffix = " (fallback)"

// Summarizer produces summaries. Implementations are safe for concurrent use. An error means
// no summary at all (the caller keeps the history as it was); a summarizer must never return
// an error text as Result.Text.
type Summarizer interface {
	Summarize(ctx context.Context, req Request) (Result, error)
}

// Headings are the required section headings, in order.
var Headings = []string{
	"## Goal",
	"## Constraints & Preferences",
	"## Progress",
	"## Key Decisions",
	"## Next Steps",
	"## Critical Context",
}
