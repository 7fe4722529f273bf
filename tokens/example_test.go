package tokens_test

import (
	"fmt"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

func ExampleForModel() {
	c, err := tokens.ForModel("gpt-4o-2024-08-06")
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Name(), c.Text("hello world"))

	// A request: each message costs its text plus 3 tokens of framing plus its role; the reply
	// is primed with 3 more.
	b := c.Request(&chat.Request{
		System:   []chat.Message{chat.TextMessage(chat.RoleSystem, "You are terse.")},
		Messages: []chat.Message{chat.TextMessage(chat.RoleUser, "hello world")},
	})
	fmt.Printf("system %d, messages %v, priming %d, total %d\n", b.System, b.Messages, b.Priming, b.Total)
	// Output:
	// o200k_base 2
	// system 8, messages [6], priming 3, total 17
}

func ExampleCalibrator() {
	// For a model without a public tokenizer: a cached heuristic, calibrated online from the
	// usage the provider reports.
	base := tokens.NewCache(tokens.NewHeuristic(tokens.HeuristicOptions{}), 0)
	cal := tokens.NewCalibrator(base, tokens.CalibratorOptions{}) // 2% safety margin
	req := &chat.Request{Messages: []chat.Message{chat.TextMessage(chat.RoleUser, "Summarize the design document in three bullet points.")}}

	// The provider reported 16 prompt tokens for this request.
	estimate := cal.ObserveRequest("claude-sonnet-4-5", req, 16)
	ratio, samples := cal.Ratio("claude-sonnet-4-5")
	fmt.Printf("heuristic %d, ratio %.2f after %d sample(s), calibrated %d\n",
		estimate, ratio, samples, cal.Counter("claude-sonnet-4-5").Request(req).Total)
	// Output:
	// heuristic 20, ratio 0.80 after 1 sample(s), calibrated 17
}
