package provider

import "regexp"

// This file holds every phrase the classifier looks for. All substrings are
// lowercase and are matched against lowercased text. The tables are
// package-level but never written after initialisation.
//
// Each overflow phrase is "strong": it only ever appears in a provider's
// refusal of a request whose prompt (plus requested output) does not fit the
// model's context window. Generic words such as "tokens", "too many tokens" or
// "exceeded" are deliberately absent: they also occur in rate-limit messages
// ("too many tokens, please wait", "tokens per min") and in output-limit
// messages.

// overflowPhrases mean "the request's context is too long for the model".
var overflowPhrases = []string{
	// OpenAI, Azure OpenAI, Groq: error.code.
	"context_length_exceeded",
	"context length exceeded",
	// z.ai / Anthropic stop reason style.
	"context_window_exceeded",
	// OpenAI, Azure OpenAI, DeepSeek, vLLM: "This model's maximum context length is 128000 tokens."
	// OpenRouter: "This endpoint's maximum context length is 200000 tokens."
	// Mistral: "... too large for model with 32768 maximum context length".
	"maximum context length",
	// OpenAI Responses API: "Your input exceeds the context window of this model."
	"exceeds the context window",
	// Anthropic, Bedrock (Claude): "prompt is too long: 215000 tokens > 200000 maximum".
	"prompt is too long",
	// Anthropic: "input length and `max_tokens` exceed context limit: 188000 + 20000 > 200000".
	"exceed context limit",
	// AWS Bedrock: "Input is too long for requested model."
	"input is too long",
	// AWS Bedrock: "too many input tokens".
	"too many input tokens",
	// Mistral: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with ...".
	"too large for model with",
	// DashScope / Qwen: "Range of input length should be [1, 30720]".
	"range of input length should be",
	// xAI Grok: "This model's maximum prompt length is 131072 but the request contains ...".
	"maximum prompt length is",
	// Cohere: "too many tokens: total number of tokens in the prompt cannot exceed 4081".
	"total number of tokens in the prompt cannot exceed",
	// Cohere (older): "total number of tokens (prompt and prediction) cannot exceed 2048".
	"total number of tokens (prompt and prediction) cannot exceed",
	// vLLM V1: "Prompt length of 5016 is longer than the maximum model length of 4096".
	"longer than the maximum model length",
	// vLLM: "The prompt (total length 25938) is too long to fit into the model (context length 4096)".
	"too long to fit into the model",
	// HuggingFace TGI: "`inputs` tokens + `max_new_tokens` must be <= 4096".
	"tokens + `max_new_tokens` must be",
	// HuggingFace TGI: "`inputs` must have less than 4096 tokens".
	"`inputs` must have less than",
	// llama.cpp server: "the request exceeds the available context size, try increasing it".
	"exceeds the available context size",
	// llama.cpp server: error.type.
	"exceed_context_size_error",
	// Ollama: "prompt too long; exceeded max context length by 100 tokens".
	"exceeded max context length",
	// Ollama: "the input length exceeds the context length".
	"input length exceeds the context length",
	// Groq (and old OpenAI): "Please reduce the length of the messages or completion."
	"please reduce the length of the messages",
	// Together AI: "The input (516368 tokens) is longer than the model's context length (262144 tokens)."
	"longer than the model's context length",
	// Moonshot / Kimi: "Your request exceeded model token limit: 262144 (requested: 300000)".
	"exceeded model token limit",
	// GitHub Copilot: code "model_max_prompt_tokens_exceeded", "prompt token count of 5 exceeds the limit of 4".
	"model_max_prompt_tokens_exceeded",
	"prompt token count of",
}

// overflowRegexps cover wordings that need a little more than a substring.
var overflowRegexps = []*regexp.Regexp{
	// Gemini / Vertex AI: "The input token count (1200000) exceeds the maximum
	// number of tokens allowed (1048576)." (the count is sometimes omitted).
	regexp.MustCompile(`input token count(?: \(\d+\))? exceeds the maximum`),
}

// rateLimitPhrases mean "slow down"; the request itself is fine. They are
// checked before the overflow phrases, because rate-limit messages talk about
// tokens and requests being too large for a per-minute budget.
var rateLimitPhrases = []string{
	"rate limit",
	"rate_limit",
	"ratelimit",
	"too many requests",
	"tokens per min",
	"requests per min",
	"per minute",
	"throttl",
	"resource_exhausted",
	"resource has been exhausted",
	"quota",
}

// outputLimitPhrases mean the requested output size (max_tokens and friends)
// exceeds what the model can generate, whatever the prompt length. They are
// checked after the overflow phrases: vLLM's "'max_tokens' is too large ...
// This model's maximum context length is 8192 tokens and your request has 1210
// input tokens" is a genuine overflow.
var outputLimitPhrases = []string{
	// Anthropic: "max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for claude-...".
	"maximum allowed number of output tokens",
	// OpenAI: "This model supports at most 16384 completion tokens, whereas you provided 100000."
	"completion tokens, whereas",
}

// outputLimitRegexps cover "<param> is too large" style messages.
var outputLimitRegexps = []*regexp.Regexp{
	// OpenAI: "max_tokens is too large: 100000."
	// Groq: "`max_completion_tokens` must be less than or equal to `16384`".
	// OpenAI Responses: "Invalid 'max_output_tokens': integer above maximum value."
	// Gemini: "it has a maxOutputTokens value of 100000 but the supported range is ...".
	regexp.MustCompile("(?:max_tokens|max_completion_tokens|max_output_tokens|maxoutputtokens|max_new_tokens)['`\"]?:? (?:is too large|must be less than|integer above maximum|value of \\d+ but the supported range)"),
}

// authPhrases mean the credentials were rejected. Gemini reports a bad key
// with HTTP 400, so the body matters as well as 401/403.
var authPhrases = []string{
	"invalid api key",
	"invalid_api_key",
	"incorrect api key",
	"api key not valid",
	"api_key_invalid",
	"invalid x-api-key",
	"authentication_error",
	"permission_denied",
	"unauthorized",
	"unauthenticated",
}

// serverPhrases identify provider-side failures when no status is known.
var serverPhrases = []string{
	"overloaded",
	"internal server error",
	"internal_server_error",
	"server_error",
	"service unavailable",
	"bad gateway",
	"gateway timeout",
	"api_error",
}

// invalidRequestPhrases identify client errors when no status is known.
var invalidRequestPhrases = []string{
	"invalid_request_error",
	"invalid_argument",
	"validationexception",
	"bad request",
	"invalid request",
}

// textKeys are the JSON object keys whose string values carry the error text
// (or a code / type) in the envelopes providers send. Other keys, such as an
// echoed request "input", are ignored so a user's prompt cannot trigger a
// match. Containers (objects, arrays) are descended into only under these keys
// or at the top level.
var textKeys = map[string]bool{
	"error":         true, // OpenAI/Anthropic/Gemini object; Ollama, xAI string
	"errors":        true, // Gemini details array
	"message":       true,
	"msg":           true, // FastAPI / pydantic detail items
	"detail":        true,
	"details":       true,
	"error_message": true,
	"errormessage":  true,
	"code":          true, // "context_length_exceeded"
	"type":          true, // "exceed_context_size_error", "rate_limit_error"
	"__type":        true, // AWS JSON protocol
	"status":        true, // Gemini "INVALID_ARGUMENT"
	"reason":        true,
	"title":         true,
	"description":   true,
	"metadata":      true, // OpenRouter upstream error wrapper
	"raw":           true, // OpenRouter metadata.raw holds the upstream body
}
