package provider

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

// Limits is what a context-overflow error says about the limit the request hit. Most
// providers name their maximum, and many their count of the request, which is what a client
// needs to know how far to shrink: a window far smaller than configured (a local model
// served with a short context) or a tokenizer that counts more than the client's estimate.
type Limits struct {
	// Max is the provider's maximum in tokens: its context window or, for providers that
	// state only that, its input maximum. 0: not stated.
	Max int
	// Input is the provider's count of the request's input tokens. 0: not stated.
	Input int
}

// limitPatterns match the lowercased error text (see extractText). Groups named max and
// input capture numbers, commas allowed.
var limitPatterns = func() []*regexp.Regexp {
	const (
		maxN   = `(?P<max>\d[\d,]*)`
		inputN = `(?P<input>\d[\d,]*)`
		num    = `\d[\d,]*`
	)
	pats := []string{
		// OpenAI, Azure, DeepSeek, vLLM, OpenRouter, most OpenAI-compatible servers.
		`maximum context length is ` + maxN + ` tokens`,
		`resulted in ` + inputN + ` tokens`,
		`requested (?:about )?` + num + ` tokens \(` + inputN + ` (?:in the messages|in your prompt|of text input)`,
		`your request has ` + inputN + ` input tokens`,
		// Anthropic (and Bedrock, OpenRouter relaying it).
		`prompt is too long: ` + inputN + ` tokens > ` + maxN + ` maximum`,
		`exceed context limit: ` + inputN + ` \+ ` + num + ` > ` + maxN,
		// Gemini.
		`input token count \(` + inputN + `\)`,
		`maximum number of tokens allowed \(` + maxN + `\)`,
		// Mistral.
		`prompt contains ` + inputN + ` tokens.*? ` + maxN + ` maximum context length`,
		// DashScope / Qwen.
		`range of input length should be \[1, ` + maxN + `\]`,
		// xAI.
		`maximum prompt length is ` + maxN + ` but the request contains ` + inputN + ` tokens`,
		// Cohere.
		`cannot exceed ` + maxN + ` - received ` + inputN,
		// vLLM v1.
		`prompt \(length ` + inputN + `\) is longer than the maximum model length of ` + maxN,
		// TGI.
		`must be <= ` + maxN + `\. given: ` + inputN + ` .inputs. tokens`,
		// Together.
		`the input \(` + inputN + ` tokens\) is longer than the model's context length \(` + maxN + ` tokens\)`,
	}
	out := make([]*regexp.Regexp, len(pats))
	for i, p := range pats {
		out[i] = regexp.MustCompile(p)
	}
	return out
}()

// overflowLimits reads the Limits stated in a provider's overflow error body (JSON or
// text, including the numeric n_ctx and n_prompt_tokens fields of llama.cpp's server).
// Numbers it cannot find are 0; it never fails.
func overflowLimits(body []byte) Limits {
	var l Limits
	if len(body) > maxScan {
		body = body[:maxScan]
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		var v struct {
			Error struct {
				NCtx    int `json:"n_ctx"`
				NPrompt int `json:"n_prompt_tokens"`
			} `json:"error"`
		}
		if json.Unmarshal(t, &v) == nil {
			l.Max, l.Input = v.Error.NCtx, v.Error.NPrompt
		}
	}
	text := extractText(body)
	for _, re := range limitPatterns {
		m := re.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		for i, name := range re.SubexpNames() {
			v := number(m[i])
			switch {
			case v <= 0:
			case name == "max" && l.Max == 0:
				l.Max = v
			case name == "input" && l.Input == 0:
				l.Input = v
			}
		}
	}
	return l
}

// ErrorLimits reads the Limits an overflow error states (see overflowLimits): the body of the
// HTTPError or the response of the ResponseDumper it wraps (see IsOverflowError), or else its
// message.
func ErrorLimits(err error) Limits {
	if err == nil {
		return Limits{}
	}
	if _, body, ok := httpParts(err); ok {
		return overflowLimits(body)
	}
	return overflowLimits([]byte(err.Error()))
}

func number(s string) int {
	v, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil {
		return 0
	}
	return v
}
