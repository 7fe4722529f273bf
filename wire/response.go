package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Reading what a provider answers. Requests are read and written losslessly (Decode,
// Encode); of a response, ctxmgr needs only what it says: the assistant's text and tool
// calls, why it stopped, and what it billed. DecodeResponse reads that from a complete
// (non-streamed) body of any of the formats, and DecodeUsage the usage object alone, as
// streamed events carry it. DecodeAnswer reads the answer whole instead, as the history holds
// it, for callers that keep their own history. They are the one reading of responses for the summarizer and
// the proxy.

// ErrMalformedResponse is wrapped by the error of a body that is not a response of its format
// (not JSON, no choices, an unknown type).
var ErrMalformedResponse = errors.New("wire: malformed response")

// ErrErrorResponse is wrapped by the error of a body that is an error object (OpenAI's
// {"error": ...}, Anthropic's "type": "error", a Responses object with an error): the
// provider's own error, to be read from the body (provider.IsOverflow and friends).
var ErrErrorResponse = errors.New("wire: the response is an error")

// Usage is what a provider reports it billed for one completion, in tokens.
type Usage struct {
	// Input is every input token, whether read from the prompt cache, written to it or
	// neither: OpenAI's prompt_tokens, Anthropic's input_tokens + cache_creation_input_tokens
	// + cache_read_input_tokens, the Responses API's input_tokens.
	Input int
	// CacheRead and CacheWrite are the parts of Input read from and written to the prompt
	// cache (OpenAI and Responses: cached_tokens of the input details; Anthropic:
	// cache_read_input_tokens and cache_creation_input_tokens).
	CacheRead, CacheWrite int
	// Output is the tokens generated.
	Output int
}

// Response is what a completed response says.
type Response struct {
	// Text is the assistant's text: its text blocks (parts, output_text items) joined.
	Text string
	// ToolCalls are the tool calls it makes, arguments as JSON text.
	ToolCalls []chat.ToolCall
	// Refusal is an OpenAI refusal, if any.
	Refusal string
	// Stop is the provider's own stop reason as written: finish_reason (OpenAI), stop_reason
	// (Anthropic), or the status with its incomplete reason (Responses: "completed",
	// "incomplete: max_output_tokens").
	Stop string
	// Truncated reports that the answer was cut by the output limit (length, max_tokens,
	// max_output_tokens).
	Truncated bool
	// Usage is the billed usage; HasUsage reports whether the body had one.
	Usage    Usage
	HasUsage bool
}

// DecodeResponse reads a complete response body of format f. A body that is an error object
// returns an error wrapping ErrErrorResponse; one that is not a response of the format, an
// error wrapping ErrMalformedResponse.
func DecodeResponse(f Format, body []byte) (*Response, error) {
	switch f {
	case OpenAI:
		return decodeOpenAIResponse(body)
	case Anthropic:
		return decodeAnthropicResponse(body)
	case Responses:
		return decodeResponsesResponse(body)
	case Gemini:
		return decodeGeminiAnswer(body)
	}
	return nil, fmt.Errorf("wire: unknown format %q", f)
}

func malformedResponse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformedResponse, fmt.Sprintf(format, args...))
}

func isError(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

func decodeOpenAIResponse(body []byte) (*Response, error) {
	var r struct {
		Choices []struct {
			Message struct {
				Content   json.RawMessage `json:"content"`
				Refusal   *string         `json:"refusal"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, malformedResponse("%v", err)
	}
	if isError(r.Error) {
		return nil, ErrErrorResponse
	}
	if len(r.Choices) == 0 {
		return nil, malformedResponse("no choices")
	}
	ch := r.Choices[0]
	out := &Response{Stop: ch.FinishReason, Truncated: ch.FinishReason == "length"}
	if ch.Message.Refusal != nil {
		out.Refusal = *ch.Message.Refusal
	}
	text, err := openAIContentText(ch.Message.Content)
	if err != nil {
		return nil, malformedResponse("content: %v", err)
	}
	out.Text = text
	for _, tc := range ch.Message.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	out.Usage, out.HasUsage = DecodeUsage(OpenAI, r.Usage)
	return out, nil
}

// openAIContentText reads an OpenAI message content: a string, null, or an array of parts
// whose text parts are joined.
func openAIContentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "output_text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

func decodeAnthropicResponse(body []byte) (*Response, error) {
	var r struct {
		Type    string `json:"type"`
		Content []struct {
			Type  string          `json:"type"`
			Text  string          `json:"text"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"content"`
		StopReason string          `json:"stop_reason"`
		Usage      json.RawMessage `json:"usage"`
		Error      json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, malformedResponse("%v", err)
	}
	if r.Type == "error" || isError(r.Error) {
		return nil, ErrErrorResponse
	}
	if r.Type != "" && r.Type != "message" {
		return nil, malformedResponse("type %.40q", r.Type)
	}
	out := &Response{Stop: r.StopReason, Truncated: r.StopReason == "max_tokens"}
	var b strings.Builder
	for _, c := range r.Content {
		switch c.Type {
		case "text":
			b.WriteString(c.Text)
		case "tool_use":
			args := string(c.Input)
			if args == "" {
				args = "{}"
			}
			out.ToolCalls = append(out.ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
		}
	}
	out.Text = b.String()
	out.Usage, out.HasUsage = DecodeUsage(Anthropic, r.Usage)
	return out, nil
}

func decodeResponsesResponse(body []byte) (*Response, error) {
	var r struct {
		Object            string          `json:"object"`
		Status            string          `json:"status"`
		Error             json.RawMessage `json:"error"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
		Output []struct {
			Type      string `json:"type"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Content   []struct {
				Type    string `json:"type"`
				Text    string `json:"text"`
				Refusal string `json:"refusal"`
			} `json:"content"`
		} `json:"output"`
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, malformedResponse("%v", err)
	}
	if isError(r.Error) || r.Status == "failed" {
		return nil, ErrErrorResponse
	}
	if r.Object != "" && r.Object != "response" {
		return nil, malformedResponse("object %.40q", r.Object)
	}
	out := &Response{Stop: r.Status}
	if r.IncompleteDetails != nil && r.IncompleteDetails.Reason != "" {
		out.Stop += ": " + r.IncompleteDetails.Reason
		out.Truncated = r.IncompleteDetails.Reason == "max_output_tokens"
	}
	var b strings.Builder
	for _, it := range r.Output {
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				switch c.Type {
				case "output_text":
					b.WriteString(c.Text)
				case "refusal":
					out.Refusal += c.Refusal
				}
			}
		case "function_call":
			out.ToolCalls = append(out.ToolCalls, chat.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
		}
	}
	out.Text = b.String()
	out.Usage, out.HasUsage = DecodeUsage(Responses, r.Usage)
	return out, nil
}

// DecodeUsage reads a usage object of format f: the "usage" member of a response, or of a
// streamed event that carries one (OpenAI's last chunk, Anthropic's message_start and
// message_delta, the Responses API's response.completed; Gemini's usageMetadata, whose Input is
// promptTokenCount with toolUsePromptTokenCount and whose Output counts thoughts). It reports false when raw is absent,
// null or not such an object.
func DecodeUsage(f Format, raw json.RawMessage) (Usage, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return Usage{}, false
	}
	var u struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		InputTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		// Gemini's usageMetadata.
		PromptTokenCount        *int `json:"promptTokenCount"`
		CandidatesTokenCount    int  `json:"candidatesTokenCount"`
		ThoughtsTokenCount      int  `json:"thoughtsTokenCount"`
		CachedContentTokenCount int  `json:"cachedContentTokenCount"`
		ToolUsePromptTokenCount int  `json:"toolUsePromptTokenCount"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return Usage{}, false
	}
	var out Usage
	switch f {
	case OpenAI:
		out = Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
		if u.PromptTokensDetails != nil {
			out.CacheRead = u.PromptTokensDetails.CachedTokens
		}
	case Anthropic:
		out = Usage{Input: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, Output: u.OutputTokens,
			CacheRead: u.CacheReadInputTokens, CacheWrite: u.CacheCreationInputTokens}
	case Responses:
		out = Usage{Input: u.InputTokens, Output: u.OutputTokens}
		if u.InputTokensDetails != nil {
			out.CacheRead = u.InputTokensDetails.CachedTokens
		}
	case Gemini:
		if u.PromptTokenCount == nil {
			return Usage{}, false
		}
		out = Usage{Input: *u.PromptTokenCount + u.ToolUsePromptTokenCount, Output: u.CandidatesTokenCount + u.ThoughtsTokenCount,
			CacheRead: u.CachedContentTokenCount}
	default:
		return Usage{}, false
	}
	return out, true
}

// decodeGeminiAnswer reads a GenerateContentResponse, or the JSON array of them a streamed
// answer without alt=sse is (their parts joined; the last finish reason and usage).
func decodeGeminiAnswer(body []byte) (*Response, error) {
	type chunk struct {
		Candidates []struct {
			Content struct {
				Parts []struct {
					Text         *string `json:"text"`
					Thought      bool    `json:"thought"`
					FunctionCall *struct {
						ID   string          `json:"id"`
						Name string          `json:"name"`
						Args json.RawMessage `json:"args"`
					} `json:"functionCall"`
				} `json:"parts"`
			} `json:"content"`
			FinishReason string `json:"finishReason"`
		} `json:"candidates"`
		PromptFeedback *struct {
			BlockReason string `json:"blockReason"`
		} `json:"promptFeedback"`
		UsageMetadata json.RawMessage `json:"usageMetadata"`
		Error         json.RawMessage `json:"error"`
	}
	chunks, err := geminiChunks[chunk](body)
	if err != nil {
		return nil, err
	}
	out := &Response{}
	var b strings.Builder
	seen := false
	n := 0
	for _, c := range chunks {
		if isError(c.Error) {
			return nil, ErrErrorResponse
		}
		if len(c.Candidates) == 0 && c.PromptFeedback == nil && len(c.UsageMetadata) == 0 {
			continue
		}
		seen = true
		if c.PromptFeedback != nil && c.PromptFeedback.BlockReason != "" {
			out.Stop = c.PromptFeedback.BlockReason
		}
		if len(c.Candidates) > 0 {
			cand := c.Candidates[0]
			for _, p := range cand.Content.Parts {
				switch {
				case p.FunctionCall != nil:
					args := string(p.FunctionCall.Args)
					if args == "" {
						args = "{}"
					}
					id := p.FunctionCall.ID
					if id == "" {
						id = syntheticGeminiID + strconv.Itoa(n)
					}
					n++
					out.ToolCalls = append(out.ToolCalls, chat.ToolCall{ID: id, Name: p.FunctionCall.Name, Arguments: args})
				case p.Text != nil && !p.Thought:
					b.WriteString(*p.Text)
				}
			}
			if cand.FinishReason != "" {
				out.Stop = cand.FinishReason
				out.Truncated = cand.FinishReason == "MAX_TOKENS"
			}
		}
		if u, ok := DecodeUsage(Gemini, c.UsageMetadata); ok {
			out.Usage, out.HasUsage = u, true
		}
	}
	if !seen {
		return nil, malformedResponse("no candidates")
	}
	out.Text = b.String()
	return out, nil
}

// geminiChunks reads a Gemini answer: one response object, or the JSON array of a stream's
// chunks (a stream without alt=sse), as chunks of type T.
func geminiChunks[T any](body []byte) ([]T, error) {
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' {
		var chunks []T
		if err := json.Unmarshal(t, &chunks); err != nil {
			return nil, malformedResponse("%v", err)
		}
		return chunks, nil
	}
	var c T
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, malformedResponse("%v", err)
	}
	return []T{c}, nil
}
