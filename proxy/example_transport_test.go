package proxy_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	openai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/proxy"
)

// An openai-go client whose conversations ctxmgr manages in process: the one line is the
// client's HTTP client. Here the client talks to a local stand-in for the provider.
func ExampleNewTransport_openai() {
	upstream := httptest.NewServer(fakeupstream.New(fakeupstream.Options{}))
	defer upstream.Close()

	t, err := proxy.NewTransport(proxy.Config{
		Logger: slog.New(slog.DiscardHandler), // default: slog.Default(), a line per request
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	client := openai.NewClient(
		option.WithBaseURL(upstream.URL+"/v1/"), // default: the provider's own URL
		option.WithAPIKey("sk-example"),
		option.WithHTTPClient(&http.Client{Transport: t}),
	)

	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a helpful assistant."),
			openai.UserMessage("Say hello."),
			openai.AssistantMessage("Hello."),
			openai.UserMessage("Say it again."),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Choices[0].Message.Role, resp.Choices[0].Message.Content)
	// Output: assistant Echo: Say it again.
}

// An anthropic-sdk-go client whose conversations ctxmgr manages in process.
func ExampleNewTransport_anthropic() {
	upstream := httptest.NewServer(fakeupstream.New(fakeupstream.Options{}))
	defer upstream.Close()

	t, err := proxy.NewTransport(proxy.Config{
		Logger: slog.New(slog.DiscardHandler), // default: slog.Default(), a line per request
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	client := anthropic.NewClient(
		aoption.WithBaseURL(upstream.URL), // default: the provider's own URL
		aoption.WithAPIKey("sk-ant-example"),
		aoption.WithHTTPClient(&http.Client{Transport: t}),
	)

	msg, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		System:    []anthropic.TextBlockParam{{Text: "You are a helpful assistant."}},
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello.")),
			anthropic.NewAssistantMessage(anthropic.NewTextBlock("Hello.")),
			anthropic.NewUserMessage(anthropic.NewTextBlock("Say it again.")),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.Role, msg.Content[0].Type, msg.Content[0].Text)
	// Output: assistant text Echo: Say it again.
}
