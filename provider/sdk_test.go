package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	openai "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"github.com/ctxmgr/ctxmgr/provider"
)

// The providers' own error bodies.
const (
	openaiOverflow    = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	anthropicOverflow = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210345 tokens > 200000 maximum"},"request_id":"req_011CTest"}`
	openaiRateLimit   = `{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 130512.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	anthropicMaxOut   = `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5"}}`
)

// sdkErrors returns the errors the official SDKs return for an answer of status and body, made
// by the SDKs themselves against a local server: openai-go's (a call and a stream) and
// anthropic-sdk-go's (a call and a stream).
func sdkErrors(t *testing.T, status int, body string) map[string]error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	oc := openai.NewClient(ooption.WithBaseURL(srv.URL+"/v1/"), ooption.WithAPIKey("sk-test"), ooption.WithMaxRetries(0))
	oparams := openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	ac := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0))
	aparams := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}

	errs := map[string]error{}
	_, errs["openai"] = oc.Chat.Completions.New(ctx, oparams)
	os := oc.Chat.Completions.NewStreaming(ctx, oparams)
	for os.Next() {
	}
	errs["openai stream"] = os.Err()
	_, errs["anthropic"] = ac.Messages.New(ctx, aparams)
	as := ac.Messages.NewStreaming(ctx, aparams)
	for as.Next() {
	}
	errs["anthropic stream"] = as.Err()
	for name, err := range errs {
		var oe *openai.Error
		var ae *anthropic.Error
		if !errors.As(err, &oe) && !errors.As(err, &ae) {
			t.Fatalf("%s: not an SDK error: %T %v", name, err, err)
		}
	}
	return errs
}

// TestSDKErrors: the SDKs' own error values are classified by the status and body the
// provider answered, wrapped or not.
func TestSDKErrors(t *testing.T) {
	for _, c := range []struct {
		status   int
		body     string
		overflow bool
		limits   provider.Limits
	}{
		{400, openaiOverflow, true, provider.Limits{Max: 128000, Input: 130512}},
		{400, anthropicOverflow, true, provider.Limits{Max: 200000, Input: 210345}},
		{429, openaiRateLimit, false, provider.Limits{}},
		{400, anthropicMaxOut, false, provider.Limits{}},
		{413, `request too large`, true, provider.Limits{}},
	} {
		for name, err := range sdkErrors(t, c.status, c.body) {
			for _, e := range []error{err, fmt.Errorf("agent step 3: %w", err)} {
				if got := provider.IsOverflowError(e); got != c.overflow {
					t.Errorf("%s %d %.40s: IsOverflowError = %v, want %v (%v)", name, c.status, c.body, got, c.overflow, e)
				}
				if c.overflow {
					if got := provider.ErrorLimits(e); got != c.limits {
						t.Errorf("%s %.40s: ErrorLimits = %+v, want %+v", name, c.body, got, c.limits)
					}
				}
			}
		}
	}
	// An SDK error made by hand carries no response: its text decides, without a panic.
	if provider.IsOverflowError(&openai.Error{StatusCode: 400}) || provider.IsOverflowError(&anthropic.Error{StatusCode: 400}) {
		t.Error("an SDK error without a response was taken for an overflow")
	}
}
