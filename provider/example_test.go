package provider_test

import (
	"fmt"

	"github.com/ctxmgr/ctxmgr/provider"
)

func ExampleIsOverflow() {
	// Anthropic refusing a conversation that outgrew the context window.
	overflow := []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"}}`)
	fmt.Println(provider.IsOverflow(400, overflow))

	// A rate limit that talks about tokens is not an overflow.
	rateLimit := []byte(`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 40,000 input tokens per minute."}}`)
	fmt.Println(provider.IsOverflow(429, rateLimit), provider.Classify(429, rateLimit))

	// Asking for more output than the model can produce is not an overflow either.
	outputLimit := []byte(`{"error":{"message":"max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000.","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}}`)
	fmt.Println(provider.IsOverflow(400, outputLimit), provider.Classify(400, outputLimit))

	// The same check on a Go error.
	err := fmt.Errorf("turn 12: %w", &provider.StatusError{Status: 400, Body: overflow})
	fmt.Println(provider.IsOverflowError(err))

	// Output:
	// true
	// false rate_limit
	// false output_limit
	// true
}
