package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// classifyCase is one provider response. Bodies are the envelopes providers
// actually send (collected from public bug reports and SDK tests); numbers vary.
type classifyCase struct {
	name   string
	status int
	body   string
	want   Class
}

var classifyCases = []classifyCase{
	// ---- Overflow: OpenAI and Azure OpenAI ----
	{
		name:   "openai/chat context_length_exceeded",
		status: 400,
		body:   `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		want:   ClassOverflow,
	},
	{
		name:   "openai/legacy completions with prompt and completion",
		status: 400,
		body:   `{"error":{"message":"This model's maximum context length is 4097 tokens, however you requested 4231 tokens (3975 in your prompt; 256 for the completion). Please reduce your prompt; or completion length.","type":"invalid_request_error","param":null,"code":null}}`,
		want:   ClassOverflow,
	},
	{
		name:   "openai/code only",
		status: 400,
		body:   `{"error":{"message":"Invalid request.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		want:   ClassOverflow,
	},
	{
		name:   "azure-openai/context_length_exceeded",
		status: 400,
		body:   `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9347 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded","status":400}}`,
		want:   ClassOverflow,
	},
	{
		name:   "openai-responses/context window",
		status: 400,
		body:   `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`,
		want:   ClassOverflow,
	},
	{
		name:   "openai-responses/streamed error event (nested error.error)",
		status: 400,
		body:   `{"error":{"type":"error","sequence_number":2,"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again.","param":"input"}}}`,
		want:   ClassOverflow,
	},
	{
		name:   "openai-responses/SSE text body",
		status: 400,
		body:   "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"context_length_exceeded\",\"message\":\"Your input exceeds the context window of this model.\"}}}\n\n",
		want:   ClassOverflow,
	},

	// ---- Overflow: Anthropic ----
	{
		name:   "anthropic/prompt is too long",
		status: 400,
		body:   `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"},"request_id":"req_011CVQe1dLrGNMJyE1ghG1av"}`,
		want:   ClassOverflow,
	},
	{
		name:   "anthropic/input length and max_tokens exceed context limit",
		status: 400,
		body:   "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"input length and `max_tokens` exceed context limit: 188000 + 20000 > 200000, decrease input length or `max_tokens` and try again\"}}",
		want:   ClassOverflow,
	},

	// ---- Overflow: Gemini ----
	{
		name:   "gemini/input token count",
		status: 400,
		body:   `{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`,
		want:   ClassOverflow,
	},
	{
		name:   "gemini/array envelope with errors detail",
		status: 400,
		body: `[{
  "error": {
    "code": 400,
    "message": "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
    "errors": [
      {
        "message": "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
        "domain": "global",
        "reason": "badRequest"
      }
    ],
    "status": "INVALID_ARGUMENT"
  }
}]`,
		want: ClassOverflow,
	},
	{
		name:   "gemini/count omitted",
		status: 400,
		body:   `{"error":{"code":400,"message":"The input token count exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: AWS Bedrock ----
	{
		name:   "bedrock/input is too long",
		status: 400,
		body:   `{"message":"Input is too long for requested model."}`,
		want:   ClassOverflow,
	},
	{
		name:   "bedrock/too many input tokens (AWS JSON __type)",
		status: 400,
		body:   `{"__type":"ValidationException","message":"The model returned the following errors: too many input tokens"}`,
		want:   ClassOverflow,
	},
	{
		name:   "bedrock/claude ValidationException prompt is too long",
		status: 400,
		body:   `{"message":"The model returned the following errors: prompt is too long: 200049 tokens > 200000 maximum"}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: Mistral ----
	{
		name:   "mistral/too large for model",
		status: 400,
		body:   `{"object":"error","message":"Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length","type":"invalid_request_message_error","param":null,"code":"3051"}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: DeepSeek ----
	{
		name:   "deepseek/maximum context length",
		status: 400,
		body:   `{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (70000 in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: DashScope / Qwen ----
	{
		name:   "dashscope/native envelope",
		status: 400,
		body:   `{"code":"InvalidParameter","message":"Range of input length should be [1, 30720]","request_id":"b6c2a7c5-3f62-9c3e-a9e0-0a7d2b1e4f11"}`,
		want:   ClassOverflow,
	},
	{
		name:   "dashscope/openai-compatible envelope",
		status: 400,
		body:   `{"error":{"code":"invalid_parameter_error","message":"<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 983616]","param":null,"type":"invalid_request_error"},"request_id":"81a373d6-28bd-9968-8335-e22a2127c41b"}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: OpenRouter ----
	{
		name:   "openrouter/endpoint maximum context length",
		status: 400,
		body:   `{"error":{"message":"This endpoint's maximum context length is 200000 tokens. However, you requested about 250000 tokens (240000 of text input, 10000 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400,"metadata":{"provider_name":null}}}`,
		want:   ClassOverflow,
	},
	{
		name:   "openrouter/upstream anthropic error in metadata.raw",
		status: 400,
		body:   `{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 208656 tokens > 200000 maximum\"}}","provider_name":"Anthropic"}},"user_id":"user_2abc"}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: xAI ----
	{
		name:   "xai/maximum prompt length",
		status: 400,
		body:   `{"code":"Client specified an invalid argument","error":"This model's maximum prompt length is 131072 but the request contains 150000 tokens."}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: Cohere ----
	{
		name:   "cohere/too many tokens in prompt",
		status: 400,
		body:   `{"message":"too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 5000. Try using a shorter prompt, or enabling prompt truncating. See https://docs.cohere.com/reference/generate for more details."}`,
		want:   ClassOverflow,
	},
	{
		name:   "cohere/older prompt and prediction wording",
		status: 400,
		body:   `{"message":"too many tokens: total number of tokens (prompt and prediction) cannot exceed 2048 - received 6354. Try using a shorter prompt or a smaller max_tokens value."}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: vLLM ----
	{
		name:   "vllm/openai-style message",
		status: 400,
		body:   `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`,
		want:   ClassOverflow,
	},
	{
		name:   "vllm/v1 prompt longer than maximum model length",
		status: 400,
		body:   `{"error":{"message":"The decoder prompt (length 5016) is longer than the maximum model length of 4096. Make sure that max_model_len is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}}`,
		want:   ClassOverflow,
	},
	{
		name:   "vllm/max_tokens too large given the prompt",
		status: 400,
		body:   `{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum context length is 8192 tokens and your request has 1210 input tokens (8192 > 8192 - 1210).","type":"BadRequestError","param":null,"code":400}}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: HuggingFace TGI ----
	{
		name:   "tgi/inputs plus max_new_tokens",
		status: 422,
		body:   "{\"error\":\"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 500 `max_new_tokens`\",\"error_type\":\"validation\"}",
		want:   ClassOverflow,
	},

	// ---- Overflow: llama.cpp server ----
	{
		name:   "llamacpp/exceed_context_size_error 400",
		status: 400,
		body:   `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":14429,"n_ctx":8192}}`,
		want:   ClassOverflow,
	},
	{
		name:   "llamacpp/older build reports 500",
		status: 500,
		body:   `{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"exceed_context_size_error","n_prompt_tokens":1407,"n_ctx":256}}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: Ollama ----
	{
		name:   "ollama/prompt too long",
		status: 400,
		body:   `{"error":"prompt too long; exceeded max context length by 100 tokens"}`,
		want:   ClassOverflow,
	},
	{
		name:   "ollama/input length exceeds context length 500",
		status: 500,
		body:   `{"error":"the input length exceeds the context length"}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: Groq ----
	{
		name:   "groq/reduce the length",
		status: 400,
		body:   `{"error":{"message":"Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		want:   ClassOverflow,
	},

	// ---- Overflow: others and HTTP 413 ----
	{
		name:   "together/longer than the model's context length",
		status: 400,
		body:   `{"id":"nqm3","error":{"message":"The input (516368 tokens) is longer than the model's context length (262144 tokens).","type":"invalid_request_error","param":null,"code":null}}`,
		want:   ClassOverflow,
	},
	{
		name:   "http/413 nginx HTML",
		status: 413,
		body:   "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
		want:   ClassOverflow,
	},
	{
		name:   "http/413 empty body",
		status: 413,
		body:   "",
		want:   ClassOverflow,
	},
	{
		name:   "groq/413 request too large for TPM budget",
		status: 413,
		body:   "{\"error\":{\"message\":\"Request too large for model `llama-3.3-70b-versatile` in organization `org_01jp8byq` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 14810, please reduce your message size and try again.\",\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}",
		want:   ClassOverflow,
	},
	{
		name:   "plain text/unknown status",
		status: 0,
		body:   "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
		want:   ClassOverflow,
	},

	// ---- Rate limits (never overflow) ----
	{
		name:   "openai/TPM rate limit",
		status: 429,
		body:   `{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 5000. Please try again in 8s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
		want:   ClassRateLimit,
	},
	{
		name:   "anthropic/rate_limit_error input tokens per minute",
		status: 429,
		body:   `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (1b2c3d4e) of 40,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."}}`,
		want:   ClassRateLimit,
	},
	{
		name:   "429/body mentioning maximum context length",
		status: 429,
		body:   `{"error":{"message":"This model's maximum context length is 128000 tokens.","code":"context_length_exceeded"}}`,
		want:   ClassRateLimit,
	},
	{
		name:   "gemini/RESOURCE_EXHAUSTED quota",
		status: 429,
		body:   `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED"}}`,
		want:   ClassRateLimit,
	},
	{
		name:   "bedrock/ThrottlingException too many tokens (status unknown)",
		status: 0,
		body:   `{"__type":"ThrottlingException","message":"Too many tokens, please wait before trying again."}`,
		want:   ClassRateLimit,
	},

	// ---- Server errors ----
	{
		name:   "anthropic/529 overloaded_error",
		status: 529,
		body:   `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		want:   ClassServer,
	},
	{
		name:   "openai/500 server_error",
		status: 500,
		body:   `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
		want:   ClassServer,
	},
	{
		name:   "cloudflare/502 HTML",
		status: 502,
		body:   "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>",
		want:   ClassServer,
	},
	{
		name:   "anthropic/500 api_error",
		status: 500,
		body:   `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`,
		want:   ClassServer,
	},

	// ---- Output limit (max_tokens too large; not overflow) ----
	{
		name:   "openai/max_tokens too large",
		status: 400,
		body:   `{"error":{"message":"max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000.","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}}`,
		want:   ClassOutputLimit,
	},
	{
		name:   "anthropic/max_tokens above output limit",
		status: 400,
		body:   `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5-20250929"}}`,
		want:   ClassOutputLimit,
	},
	{
		name:   "groq/max_completion_tokens mentions context_window",
		status: 400,
		body:   "{\"error\":{\"message\":\"`max_completion_tokens` must be less than or equal to `16384`, the maximum value for `max_completion_tokens` is less than the `context_window` for this model\",\"type\":\"invalid_request_error\",\"param\":\"max_completion_tokens\"}}",
		want:   ClassOutputLimit,
	},
	{
		name:   "gemini/maxOutputTokens out of range",
		status: 400,
		body:   `{"error":{"code":400,"message":"Unable to submit request because it has a maxOutputTokens value of 100000 but the supported range is from 1 (inclusive) to 65537 (exclusive). Update the value and try again.","status":"INVALID_ARGUMENT"}}`,
		want:   ClassOutputLimit,
	},

	// ---- Auth ----
	{
		name:   "openai/401 invalid api key",
		status: 401,
		body:   `{"error":{"message":"Incorrect API key provided: sk-abc***xyz. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
		want:   ClassAuth,
	},
	{
		name:   "anthropic/401 authentication_error",
		status: 401,
		body:   `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`,
		want:   ClassAuth,
	},
	{
		name:   "gemini/400 API key not valid",
		status: 400,
		body:   `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}`,
		want:   ClassAuth,
	},

	// ---- Invalid requests that are not overflow ----
	{
		name:   "openai/orphaned tool message",
		status: 400,
		body:   `{"error":{"message":"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.","type":"invalid_request_error","param":"messages.[3].role","code":null}}`,
		want:   ClassInvalidRequest,
	},
	{
		name:   "anthropic/tool_use without tool_result",
		status: 400,
		body:   "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01XyZ. Each `tool_use` block must have a corresponding `tool_result` block in the next message.\"}}",
		want:   ClassInvalidRequest,
	},
	{
		name:   "azure-openai/content filter",
		status: 400,
		body:   `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation"}}}`,
		want:   ClassInvalidRequest,
	},
	{
		name:   "openai/404 model not found",
		status: 404,
		body:   "{\"error\":{\"message\":\"The model `gpt-9` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"model_not_found\"}}",
		want:   ClassInvalidRequest,
	},
	{
		name:   "anthropic/404 model not found",
		status: 404,
		body:   `{"type":"error","error":{"type":"not_found_error","message":"model: claude-not-a-real-model"}}`,
		want:   ClassInvalidRequest,
	},
	{
		name:   "anthropic/thinking budget",
		status: 400,
		body:   "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size\"}}",
		want:   ClassInvalidRequest,
	},
	{
		name:   "gemini/thinking budget",
		status: 400,
		body:   `{"error":{"code":400,"message":"The thinking budget 50000 is invalid. Please choose a value between 128 and 32768.","status":"INVALID_ARGUMENT"}}`,
		want:   ClassInvalidRequest,
	},
	{
		name:   "nginx/400 header too large HTML",
		status: 400,
		body:   "<html><head><title>400 Request Header Or Cookie Too Large</title></head><body><center><h1>400 Bad Request</h1></center></body></html>",
		want:   ClassInvalidRequest,
	},
	{
		name:   "generic/400 empty body",
		status: 400,
		body:   "",
		want:   ClassInvalidRequest,
	},
	{
		name:   "vllm/422 echoed request input is ignored",
		status: 422,
		body:   `{"detail":[{"type":"missing","loc":["body","model"],"msg":"Field required","input":{"messages":[{"role":"user","content":"why does my app say maximum context length exceeded?"}]}}]}`,
		want:   ClassInvalidRequest,
	},

	// ---- Non-error statuses ----
	{
		name:   "openai/200 with overflow text in content",
		status: 200,
		body:   `{"choices":[{"message":{"role":"assistant","content":"prompt is too long: reduce the maximum context length"}}]}`,
		want:   ClassOther,
	},
	{
		name:   "unknown/Go context deadline text",
		status: 0,
		body:   "context deadline exceeded",
		want:   ClassOther,
	},
}

func TestClassify(t *testing.T) {
	if len(classifyCases) < 40 {
		t.Fatalf("only %d cases", len(classifyCases))
	}
	seen := map[string]bool{}
	for _, tc := range classifyCases {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.status, []byte(tc.body))
			if got != tc.want {
				t.Errorf("Classify(%d, %q) = %v, want %v", tc.status, tc.body, got, tc.want)
			}
			wantOverflow := tc.want == ClassOverflow
			if IsOverflow(tc.status, []byte(tc.body)) != wantOverflow {
				t.Errorf("IsOverflow(%d, ...) = %v, want %v", tc.status, !wantOverflow, wantOverflow)
			}
			if got := IsOverflowError(&StatusError{Status: tc.status, Body: []byte(tc.body)}); got != wantOverflow {
				t.Errorf("IsOverflowError(&StatusError{...}) = %v, want %v", got, wantOverflow)
			}
		})
	}
}

// TestOverflowMessagesAnyErrorStatus checks that a strong overflow message is
// recognised whatever the 4xx/5xx status, except 429.
func TestOverflowMessagesAnyErrorStatus(t *testing.T) {
	msgs := []string{
		"prompt too long; exceeded max context length by 100 tokens",
		"This model's maximum context length is 4096 tokens.",
		"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
		"the request exceeds the available context size, try increasing it",
	}
	for _, m := range msgs {
		for _, status := range []int{0, 400, 404, 413, 422, 500, 502, 503} {
			if !IsOverflow(status, []byte(m)) {
				t.Errorf("IsOverflow(%d, %q) = false, want true", status, m)
			}
		}
		for _, status := range []int{200, 204, 302, 429, 600} {
			if IsOverflow(status, []byte(m)) {
				t.Errorf("IsOverflow(%d, %q) = true, want false", status, m)
			}
		}
	}
}

func TestCaseInsensitive(t *testing.T) {
	for _, body := range []string{
		"PROMPT IS TOO LONG: 215000 TOKENS > 200000 MAXIMUM",
		`{"ERROR":{"MESSAGE":"Input Is Too Long For Requested Model."}}`,
		`{"Message":"Input is too long for requested model."}`,
	} {
		if !IsOverflow(400, []byte(body)) {
			t.Errorf("IsOverflow(400, %q) = false, want true", body)
		}
	}
}

func TestInvalidJSONFallsBackToRawText(t *testing.T) {
	body := `{"error":{"message":"prompt is too long: 215000 tokens > 200000 maximum"` // truncated
	if !IsOverflow(400, []byte(body)) {
		t.Errorf("truncated JSON body not recognised")
	}
	if !IsOverflow(400, []byte(`"prompt too long; exceeded max context length by 4 tokens"`)) {
		t.Errorf("JSON string body not recognised")
	}
}

// httpErr is a third-party error type implementing HTTPError.
type httpErr struct {
	status int
	body   string
}

func (e httpErr) Error() string        { return fmt.Sprintf("upstream status %d", e.status) }
func (e httpErr) StatusCode() int      { return e.status }
func (e httpErr) ResponseBody() []byte { return []byte(e.body) }

var _ HTTPError = httpErr{}

func TestIsOverflowError(t *testing.T) {
	overflowBody := []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"}}`)
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"context.DeadlineExceeded", context.DeadlineExceeded, false},
		{"context.Canceled", context.Canceled, false},
		{"wrapped DeadlineExceeded", fmt.Errorf("anthropic: send: %w", context.DeadlineExceeded), false},
		{"wrapped Canceled", fmt.Errorf("openai: %w", context.Canceled), false},
		{"canceled joined with overflow StatusError", errors.Join(context.Canceled, &StatusError{Status: 400, Body: overflowBody}), false},
		{"deadline text only", errors.New("Post \"https://api.openai.com/v1/chat/completions\": context deadline exceeded"), false},
		{"canceled text only", errors.New("context canceled"), false},
		{"StatusError overflow", &StatusError{Status: 400, Body: overflowBody}, true},
		{"wrapped StatusError overflow", fmt.Errorf("turn 3: %w", &StatusError{Status: 400, Body: overflowBody}), true},
		{"StatusError 413", &StatusError{Status: 413}, true},
		{"StatusError 429 with overflow text", &StatusError{Status: 429, Body: overflowBody}, false},
		{"StatusError 401", &StatusError{Status: 401, Body: []byte(`{"error":{"code":"invalid_api_key"}}`)}, false},
		{"HTTPError overflow", httpErr{400, `{"error":"prompt too long; exceeded max context length by 12 tokens"}`}, true},
		{"wrapped HTTPError overflow", fmt.Errorf("call: %w", httpErr{500, `{"error":{"type":"exceed_context_size_error","message":"the request exceeds the available context size, try increasing it"}}`}), true},
		{"HTTPError rate limit", httpErr{429, `{"error":{"message":"Rate limit reached for gpt-4o on tokens per min (TPM)"}}`}, false},
		{"plain text anthropic", errors.New(`POST /v1/messages: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`), true},
		{"plain text openai", errors.New("openai: This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens."), true},
		{"plain text gemini", errors.New("googleapi: Error 400: The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)., badRequest"), true},
		{"plain text rate limit", errors.New("openai: 429 Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, Requested 5000."), false},
		{"plain text bedrock throttling", errors.New("ThrottlingException: Too many tokens, please wait before trying again."), false},
		{"plain text output limit", errors.New("max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for claude-opus-4"), false},
		{"plain text thinking budget", errors.New("`max_tokens` must be greater than `thinking.budget_tokens`"), false},
		{"nil StatusError in chain", fmt.Errorf("x: %w", (*StatusError)(nil)), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsOverflowError(tc.err); got != tc.want {
				t.Errorf("IsOverflowError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestStatusError(t *testing.T) {
	e := &StatusError{Status: 400, Body: []byte(`{"error":"bad"}`)}
	if got, want := e.Error(), `provider: HTTP 400: {"error":"bad"}`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if e.StatusCode() != 400 {
		t.Errorf("StatusCode() = %d", e.StatusCode())
	}
	if got, want := (&StatusError{Status: 502}).Error(), "provider: HTTP 502"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}

	long := &StatusError{Status: 400, Body: []byte(strings.Repeat("x", 500))}
	if got, want := long.Error(), "provider: HTTP 400: "+strings.Repeat("x", 200); got != want {
		t.Errorf("long Error() = %q, want %q", got, want)
	}

	// A multi-byte rune cut by the 200-byte limit is dropped, not split.
	cut := &StatusError{Status: 400, Body: []byte(strings.Repeat("x", 199) + "é and more")}
	if got, want := cut.Error(), "provider: HTTP 400: "+strings.Repeat("x", 199); got != want {
		t.Errorf("cut Error() = %q, want %q", got, want)
	}

	var nilErr *StatusError
	if nilErr.Error() == "" || nilErr.StatusCode() != 0 {
		t.Errorf("nil *StatusError misbehaves")
	}
}

func TestClassString(t *testing.T) {
	want := map[Class]string{
		ClassOther:          "other",
		ClassOverflow:       "overflow",
		ClassRateLimit:      "rate_limit",
		ClassAuth:           "auth",
		ClassOutputLimit:    "output_limit",
		ClassInvalidRequest: "invalid_request",
		ClassServer:         "server",
		Class(42):           "Class(42)",
	}
	for c, s := range want {
		if c.String() != s {
			t.Errorf("Class(%d).String() = %q, want %q", int(c), c.String(), s)
		}
	}
}

func TestLargeBody(t *testing.T) {
	// The decisive text near the start of a huge body is still found, and
	// text far beyond the scan limit is not considered.
	head := `{"error":{"message":"prompt is too long: 215000 tokens > 200000 maximum","pad":"` + strings.Repeat("a", 2*maxScan) + `"}}`
	if !IsOverflow(400, []byte(head)) {
		t.Errorf("overflow text at start of large body not found")
	}
	tail := strings.Repeat(" ", 2*maxScan) + "prompt is too long"
	if IsOverflow(400, []byte(tail)) {
		t.Errorf("text beyond the scan limit was matched")
	}
}

func FuzzClassify(f *testing.F) {
	for _, tc := range classifyCases {
		f.Add(tc.status, []byte(tc.body))
	}
	f.Add(0, []byte(nil))
	f.Add(-1, []byte("{"))
	f.Add(1<<30, []byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		c := Classify(status, body)
		if c.String() == "" {
			t.Fatalf("empty String for %d", int(c))
		}
		if c2 := Classify(status, body); c2 != c {
			t.Fatalf("not deterministic: %v then %v", c, c2)
		}
		if IsOverflow(status, body) != (c == ClassOverflow) {
			t.Fatalf("IsOverflow disagrees with Classify (%v)", c)
		}
		if !IsOverflow(413, body) {
			t.Fatalf("IsOverflow(413, %q) = false", body)
		}
		if IsOverflow(429, body) {
			t.Fatalf("IsOverflow(429, %q) = true", body)
		}
		if status >= 200 && status < 300 && c != ClassOther {
			t.Fatalf("Classify(%d, ...) = %v, want other", status, c)
		}
		if IsOverflowError(&StatusError{Status: status, Body: body}) != (c == ClassOverflow) {
			t.Fatalf("IsOverflowError(&StatusError) disagrees with Classify (%v)", c)
		}
		_ = (&StatusError{Status: status, Body: body}).Error()
	})
}
