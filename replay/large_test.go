package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

// largeOutputRuns makes coding-agent runs whose tool outputs are large (build logs, test
// output, file dumps of 20-150 kB), the case the shared data lacks: held-out data (never
// tuned on), generated. The assistant refers to what the
// outputs show at their ends (the failing test, the error line), as agents do.
func largeOutputRuns(n int) []Trajectory {
	var out []Trajectory
	for run := 0; run < n; run++ {
		r := rand.New(rand.NewPCG(uint64(run), 99))
		t := Trajectory{Name: fmt.Sprintf("large/run-%d", run), Set: "large-outputs",
			System: []chat.Message{chat.TextMessage(chat.RoleSystem, "You are a coding agent working in /repo.")},
			Tools:  []chat.Tool{{Name: "bash", Description: "run a command", Parameters: []byte(`{"type":"object","properties":{"command":{"type":"string"}}}`)}}}
		t.Messages = append(t.Messages, chat.TextMessage(chat.RoleUser, fmt.Sprintf("Fix the failing build of service_%d.", run)))
		lastErr := ""
		for it := 0; it < 30; it++ {
			id := fmt.Sprintf("call_%d_%d", run, it)
			thought := "Let me look at the output."
			if lastErr != "" {
				thought = fmt.Sprintf("The error is %s; I will inspect it.", lastErr)
			}
			t.Messages = append(t.Messages, chat.Message{Role: chat.RoleAssistant,
				Content:   []chat.Part{{Type: chat.PartText, Text: thought}},
				ToolCalls: []chat.ToolCall{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"command":"go test ./pkg%d/..."}`, it)}}})
			var b strings.Builder
			size := 20000 + r.IntN(130000)
			for line := 0; b.Len() < size; line++ {
				fmt.Fprintf(&b, "=== RUN   TestCase%d_%d\n--- PASS: TestCase%d_%d (0.%02ds)\n", it, line, it, line, line%100)
			}
			lastErr = fmt.Sprintf("pkg%d/handler_%d.go:%d", it, r.IntN(50), r.IntN(900))
			fmt.Fprintf(&b, "--- FAIL: TestHandler%d\n    %s: unexpected status 500\nFAIL\n", it, lastErr)
			t.Messages = append(t.Messages, chat.ToolResult(id, "bash", b.String(), true))
		}
		t.Messages = append(t.Messages, chat.TextMessage(chat.RoleAssistant, "Fixed "+lastErr))
		out = append(out, t)
	}
	return out
}

// At the defaults, where tool outputs are large, default must cost clearly less than sending
// everything, keep the references the agent uses, and lose nothing.
func TestLargeOutputsCostLess(t *testing.T) {
	res, err := Run(context.Background(), largeOutputRuns(2), Options{Strategies: []string{StrategyRaw, "default"}, Counter: measuring(t), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	var raw, def *Totals
	for i := range res.Strategies {
		switch res.Strategies[i].Name {
		case StrategyRaw:
			raw = &res.Strategies[i]
		case "default":
			def = &res.Strategies[i]
		}
	}
	t.Logf("raw: cost %.4f, input %d; default: cost %.4f (%.2fx raw), input %d, recall %.4f",
		raw.Cost, raw.InputTokens, def.Cost, def.Cost/raw.Cost, def.InputTokens, def.Recall)
	if def.Cost > 0.5*raw.Cost {
		t.Errorf("default costs %.2fx raw on large outputs; want clearly less (<= 0.5x)", def.Cost/raw.Cost)
	}
	if def.Recall < 0.98 || def.Lost != 0 || def.Invalid != 0 || def.Overflows != 0 {
		t.Errorf("default: recall %.4f, lost %d, invalid %d, overflows %d", def.Recall, def.Lost, def.Invalid, def.Overflows)
	}
}
