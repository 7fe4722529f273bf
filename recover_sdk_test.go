package ctxmgr

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	openai "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// TestRecoverSDKErrors: Recover takes the official SDKs' own errors for what the provider
// said. Each SDK calls a local server that answers the provider's overflow error, stating a
// window smaller than the prepared request; Recover returns a request within it.
func TestRecoverSDKErrors(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Counter: tokens.NewRatio(tokens.RatioOptions{PerToken: 4}), Summarizer: &fakeSummarizer{}}
	cfg.Budget.Window, cfg.Budget.MaxOutput = 20000, 1000
	for _, sdk := range []string{"openai", "anthropic"} {
		t.Run(sdk, func(t *testing.T) {
			_, s := testManager(t, cfg)
			for i := 0; i < 300; i++ {
				appendAll(t, s, chat.TextMessage(chat.RoleUser, strings.Repeat("talk ", 38)), chat.TextMessage(chat.RoleAssistant, "ok"))
			}
			appendAll(t, s, chat.TextMessage(chat.RoleUser, "latest"))
			p0, err := s.Prepare(ctx)
			if err != nil {
				t.Fatal(err)
			}
			real := p0.Report.InputAfter * 7 / 10
			body := fmt.Sprintf(`{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, real, p0.Report.InputAfter)
			if sdk == "anthropic" {
				body = fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: %d tokens > %d maximum"}}`, p0.Report.InputAfter, real)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = fmt.Fprint(w, body)
			}))
			defer srv.Close()
			if sdk == "openai" {
				c := openai.NewClient(ooption.WithBaseURL(srv.URL+"/v1/"), ooption.WithAPIKey("sk-test"), ooption.WithMaxRetries(0))
				_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("latest")}})
			} else {
				c := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0))
				_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1000,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("latest"))}})
			}
			if err == nil {
				t.Fatal("the SDK returned no error")
			}
			p, rerr := s.Recover(ctx, err)
			if rerr != nil {
				t.Fatalf("Recover(%T %v) = %v", err, err, rerr)
			}
			if p.Report.Window > real || p.Report.InputAfter+p.Report.MaxOutput > real {
				t.Fatalf("recovered request: window %d, %d tokens + %d reply, provider's window %d", p.Report.Window, p.Report.InputAfter, p.Report.MaxOutput, real)
			}
		})
	}
}
