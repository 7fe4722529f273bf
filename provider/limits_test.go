package provider

import (
	"errors"
	"fmt"
	"testing"
)

// TestOverflowLimits reads the stated limits from the real overflow bodies of the classify
// corpus; bodies that state none give zeros.
func TestOverflowLimits(t *testing.T) {
	want := map[string]Limits{
		"openai/chat context_length_exceeded":                        {Max: 128000, Input: 130412},
		"azure-openai/context_length_exceeded":                       {Max: 8192, Input: 9347},
		"anthropic/input length and max_tokens exceed context limit": {Max: 200000, Input: 188000},
		"deepseek/maximum context length":                            {Max: 65536, Input: 70000},
		"openrouter/endpoint maximum context length":                 {Max: 200000, Input: 240000},
		"xai/maximum prompt length":                                  {Max: 131072, Input: 150000},
		"cohere/too many tokens in prompt":                           {Max: 4081, Input: 5000},
		"vllm/v1 prompt longer than maximum model length":            {Max: 4096, Input: 5016},
		"tgi/inputs plus max_new_tokens":                             {Max: 4096, Input: 4000},
		"together/longer than the model's context length":            {Max: 262144, Input: 516368},
		"groq/reduce the length":                                     {},
		"ollama/input length exceeds context length 500":             {},
	}
	seen := map[string]bool{}
	for _, c := range classifyCases {
		w, ok := want[c.name]
		if !ok {
			continue
		}
		seen[c.name] = true
		if got := overflowLimits([]byte(c.body)); got != w {
			t.Errorf("%s: %+v, want %+v", c.name, got, w)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("case %q not in the corpus", name)
		}
	}
	// Every overflow body of the corpus that names a number of tokens yields a limit or a
	// count, and none yields a count above a million times its limit (a misread number).
	for _, c := range classifyCases {
		if c.want != ClassOverflow {
			continue
		}
		l := overflowLimits([]byte(c.body))
		if l.Max < 0 || l.Input < 0 || l.Max > 0 && l.Input > 1000*l.Max {
			t.Errorf("%s: implausible %+v", c.name, l)
		}
	}
	more := []struct {
		body string
		want Limits
	}{
		{`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"}}`, Limits{Max: 200000, Input: 215000}},
		{`{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`, Limits{Max: 1048576, Input: 1200000}},
		{`{"error":{"code":400,"message":"The input token count exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`, Limits{Max: 1048576}},
		{`{"object":"error","message":"Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"}`, Limits{Max: 32768, Input: 40000}},
		{`{"code":"InvalidParameter","message":"Range of input length should be [1, 30720]"}`, Limits{Max: 30720}},
		{`{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":14429,"n_ctx":8192}}`, Limits{Max: 8192, Input: 14429}},
		{`{"error":{"message":"This model's maximum context length is 4097 tokens, however you requested 4231 tokens (3975 in your prompt; 256 for the completion)."}}`, Limits{Max: 4097, Input: 3975}},
		{`This model's maximum context length is 1,048,576 tokens. However, your messages resulted in 1,100,000 tokens.`, Limits{Max: 1048576, Input: 1100000}},
		{`{"error":"prompt too long; exceeded max context length by 100 tokens"}`, Limits{}},
		{``, Limits{}},
		{`{"error":{"n_ctx":"x"}}`, Limits{}},
	}
	for _, c := range more {
		if got := overflowLimits([]byte(c.body)); got != c.want {
			t.Errorf("%.80s: %+v, want %+v", c.body, got, c.want)
		}
	}
	// Errors: through an HTTPError, or the message of any other error.
	se := &StatusError{Status: 400, Body: []byte(`{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."}}`)}
	if got := ErrorLimits(fmt.Errorf("call: %w", se)); got != (Limits{Max: 8192, Input: 9000}) {
		t.Errorf("ErrorLimits(wrapped StatusError) = %+v", got)
	}
	if got := ErrorLimits(errors.New("prompt is too long: 210000 tokens > 200000 maximum")); got != (Limits{Max: 200000, Input: 210000}) {
		t.Errorf("ErrorLimits(message) = %+v", got)
	}
	if got := ErrorLimits(nil); got != (Limits{}) {
		t.Errorf("ErrorLimits(nil) = %+v", got)
	}
}

func FuzzOverflowLimits(f *testing.F) {
	for _, c := range classifyCases {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if l := overflowLimits(body); l.Max < 0 || l.Input < 0 {
			t.Fatalf("%+v", l)
		}
	})
}
