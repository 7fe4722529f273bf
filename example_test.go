package ctxmgr_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
)

// The main flow: append what the agent produces and receives, Prepare before every LLM call,
// send Prepared.Request.
func Example() {
	ctx := context.Background()
	cfg, _ := ctxmgr.Preset(ctxmgr.PresetDefault, 32768, 4096)
	m, err := ctxmgr.New(cfg)
	if err != nil {
		panic(err)
	}
	defer m.Close()
	s, _ := m.NewSession("demo", []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a coding agent.")}, nil)

	_ = s.Append(ctx, chat.TextMessage(chat.RoleUser, "Why does the build fail?"))
	_ = s.Append(ctx, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "bash", Arguments: `{"cmd":"go build ./..."}`}}})
	// A 200 kB build log: offloaded to the store when appended, a snippet stays in context.
	log := strings.Repeat("pkg/x.go:12: undefined: y\n", 8000)
	_ = s.Append(ctx, chat.ToolResult("call_1", "bash", log, true))

	p, err := s.Prepare(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("messages:", len(p.Request.Messages))
	fmt.Println("fits:", p.Report.InputAfter+4096 <= 32768)
	fmt.Println("offloaded:", strings.Contains(p.Request.Messages[2].Text(), "tool result offloaded"))
	// Output:
	// messages: 3
	// fits: true
	// offloaded: true
}
