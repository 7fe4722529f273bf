package summarize_test

import (
	"context"
	"fmt"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/summarize"
)

func ExampleNewExtractive() {
	s := summarize.NewExtractive(summarize.ExtractiveOptions{}) // bytes/4 counter by default
	call := chat.ToolCall{ID: "call_1", Name: "bash", Arguments: `{"command":"python -m pytest tests/test_parser.py"}`}
	assistant := chat.TextMessage(chat.RoleAssistant, "I will run the parser tests first.")
	assistant.ToolCalls = []chat.ToolCall{call}
	res, err := s.Summarize(context.Background(), summarize.Request{
		Messages: []chat.Message{
			chat.TextMessage(chat.RoleUser, "Fix the date parsing bug in src/parser.py. Don't change the CLI flags."),
			assistant,
			chat.ToolResult("call_1", "bash", "FAILED tests/test_parser.py::test_iso_dates - ValueError: month must be in 1..12\nexit code 1", false),
		},
		TargetTokens: 400,
		ArchiveGuide: "Messages 0-2 are archived in dialog/2025-06-01.jsonl.",
	})
	if err != nil {
		panic(err)
	}
	fmt.Print(res.Text)
	fmt.Println(res.Summarizer, res.OutputTokens <= 400)
	// Output:
	// Messages 0-2 are archived in dialog/2025-06-01.jsonl.
	//
	// # Conversation summary
	// Covers messages 0-2.
	//
	// ## Goal
	// - Fix the date parsing bug in src/parser.py. Don't change the CLI flags.
	//
	// ## Constraints & Preferences
	// - Don't change the CLI flags.
	//
	// ## Progress
	// ### Done
	// ### In Progress
	// - Last step (#1): I will run the parser tests first.
	// ### Blocked
	// - `bash` `python -m pytest tests/test_parser.py` → exit 1: FAILED tests/test_parser.py::test_iso_dates - ValueError: month must be in 1..12 (#1)
	//
	// ## Key Decisions
	// - I will run the parser tests first.
	//
	// ## Next Steps
	//
	// ## Critical Context
	// - Files: `tests/test_parser.py`, `src/parser.py`
	// - Identifiers: `ValueError`
	// - Error: FAILED tests/test_parser.py::test_iso_dates - ValueError: month must be in 1..12
	// extractive true
}
