package ctxmgr

import (
	"context"
	"fmt"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// Over the threshold, MaskBeforeSummary masks all but the newest results before it would
// summarize: the assistant's messages stay verbatim and no summary is made while masking is
// enough; without it the same history is summarized.
func TestMaskBeforeSummary(t *testing.T) {
	run := func(on bool) (summaries, masks int, p Prepared) {
		ctx := context.Background()
		var events []Event
		cfg := Config{Counter: tokens.NewRatio(tokens.RatioOptions{PerToken: 4}), DisableOffload: true, MaskKeep: 12, MaskBeforeSummary: on,
			RecentToolResults: 2, Summarizer: &fakeSummarizer{}, OnEvent: func(e Event) { events = append(events, e) }}
		cfg.Budget.Window, cfg.Budget.MaxOutput, cfg.Budget.Threshold = 20000, 1000, 0.6
		_, s := testManager(t, cfg)
		appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"))
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("c%d", i)
			appendAll(t, s, chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: fmt.Sprintf("quote_%d noted", i)}},
				ToolCalls: []chat.ToolCall{{ID: id, Name: "Read", Arguments: fmt.Sprintf(`{"file_path":"/d.md","offset":%d,"limit":100}`, i*100+1)}}},
				chat.ToolResult(id, "Read", lines(250, "chunk "+id), false))
			var err error
			if p, err = s.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, e := range events {
			switch e.Step {
			case StepSummarize:
				summaries++
			case StepMask:
				masks++
			}
		}
		return summaries, masks, p
	}
	sOn, mOn, p := run(true)
	sOff, _, _ := run(false)
	if sOff == 0 {
		t.Fatal("without MaskBeforeSummary the history is never summarized: the test proves nothing")
	}
	if sOn != 0 || mOn == 0 {
		t.Fatalf("with MaskBeforeSummary: %d summaries, %d masks; want masks and no summary", sOn, mOn)
	}
	if p.Report.Evicted != 0 || p.Request.Messages[len(p.Request.Messages)-1].Text() != lines(250, "chunk c19") {
		t.Fatal("messages evicted, or the newest result not whole")
	}
}

// When masking all but the RecentToolResults newest is not enough, all but the newest one
// are masked before any summary: a summary would evict what the assistant said and quoted.
func TestMaskBeforeSummaryKeepsOnlyNewest(t *testing.T) {
	ctx := context.Background()
	var events []Event
	cfg := Config{Counter: tokens.NewRatio(tokens.RatioOptions{PerToken: 4}), DisableOffload: true, MaskBeforeSummary: true,
		RecentToolResults: 2, Summarizer: &fakeSummarizer{}, OnEvent: func(e Event) { events = append(events, e) }}
	cfg.Budget.Window, cfg.Budget.MaxOutput, cfg.Budget.Threshold = 20000, 1000, 0.6
	_, s := testManager(t, cfg)
	appendAll(t, s, chat.TextMessage(chat.RoleUser, "go"))
	// Two results of ~5,000 tokens each: together over the ~11,000-token trigger with the
	// messages before them, one alone under it.
	for i := 0; i < 2; i++ {
		id := fmt.Sprintf("c%d", i)
		appendAll(t, s, chat.Message{Role: chat.RoleAssistant, Content: []chat.Part{{Type: chat.PartText, Text: fmt.Sprintf("quote_%d noted", i)}},
			ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"command":"cat part%d"}`, i)}}},
			chat.ToolResult(id, "bash", lines(1300, "output line "+id), false))
	}
	p, err := s.Prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Step == StepSummarize {
			t.Fatalf("summarized: %+v", events)
		}
	}
	if p.Report.Evicted != 0 || p.Request.Messages[len(p.Request.Messages)-1].Text() != lines(1300, "output line c1") {
		t.Fatal("messages evicted, or the newest result not whole")
	}
	if k := viewKindAt(s, 2); k != viewMasked {
		t.Fatalf("second newest result not masked: %v", k)
	}
}
